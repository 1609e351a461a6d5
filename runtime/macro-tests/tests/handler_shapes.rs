//! Every supported handler shape compiles, and the macros generate a message type for each.
//! (An ordinary test: trybuild then only type-checks the rejected shapes, which is much
//! cheaper than building and running a binary against the whole runtime.)
use lazarus::{messages, Actor, ActorRef, Context, Handlers, Message, ReplyTo};
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

    /// An async handler: awaits an ask, replies with what it got.
    #[message]
    pub async fn relay(&mut self, to: ActorRef<Everything>, ctx: &mut Context<Self>) -> u64 {
        let got = ctx.ask(&to, AddTwo { a: 1, b: 2 }).await.unwrap_or(0);
        self.n += got;
        got
    }

    /// An async handler with a deferred reply.
    #[message]
    pub async fn relay_later(&mut self, reply: ReplyTo<u64>) {
        reply.send(self.n);
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
    // Async handlers go to `handle_async`, the others to `handle`.
    let tick = Tick.into_set(ReplyTo::none());
    let later = RelayLater.into_set(ReplyTo::none());
    assert!(!Everything::is_async(&tick));
    assert!(Everything::is_async(&later));
}
