use lazarus::{messages, Actor, ActorRef, Context};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Squarer;

#[messages]
impl Squarer {
    #[message]
    fn square(&mut self, x: u64) -> u64 {
        x * x
    }
}

#[derive(Actor, Serialize, Deserialize)]
struct Asker {
    squarer: ActorRef<Squarer>,
}

#[messages]
impl Asker {
    #[message]
    fn go(&mut self, ctx: &mut Context<Self>) {
        // Two arguments: not a message that can carry a reply.
        let _ = ctx.ask(&self.squarer, Square { x: 3 }).reply_as::<Pair>();
        // One argument, of another type than the reply.
        let _ = ctx.ask(&self.squarer, Square { x: 3 }).reply_as::<Text>();
    }

    #[message]
    fn pair(&mut self, _a: u64, _b: u64) {}

    #[message]
    fn text(&mut self, _t: String) {}
}

fn main() {}
