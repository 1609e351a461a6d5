//! Every supported handler shape compiles.
use lazarus::{messages, Actor, Context, ReplyTo};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize, Default)]
#[actor(name = "Everything", on_start = hello, on_stop = bye)]
pub struct Everything {
    n: u64,
    pending: ReplyTo<String>,
}

impl Everything {
    fn hello(&mut self, _ctx: &mut Context<Self>) {}
    fn bye(&mut self, _ctx: &mut Context<Self>) {}
}

#[messages]
impl Everything {
    /// No fields, no reply.
    #[message]
    pub fn tick(&mut self) {
        self.n += 1;
    }

    /// Several fields and a reply.
    #[message]
    pub fn add_two(&mut self, a: u64, b: u64) -> u64 {
        a + b + self.n
    }

    /// Context and a deferred reply.
    #[message(name = Later)]
    pub fn later(&mut self, ctx: &mut Context<Self>, reply: ReplyTo<String>) {
        let _ = ctx.id();
        self.pending = reply;
    }

    /// Not a message: a plain helper in the same block.
    fn helper(&self) -> u64 {
        self.n
    }
}

fn main() {
    let _ = Tick;
    let _ = AddTwo { a: 1, b: 2 };
    let _ = Later;
    let _ = Everything::default().helper();
}
