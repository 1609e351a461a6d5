//! Every supported handler shape compiles, and the macros generate a message type for each.
//! (An ordinary test: trybuild then only type-checks the rejected shapes, which is much
//! cheaper than building and running a binary against the whole runtime.)
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

#[test]
fn every_supported_handler_shape_compiles() {
    let _ = Tick;
    let AddTwo { a, b } = AddTwo { a: 1, b: 2 };
    assert_eq!((a, b), (1, 2));
    let _ = Later;
    assert_eq!(Everything::default().helper(), 0);
}
