use lazarus::{messages, Actor, ReplyTo};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Later;

#[messages]
impl Later {
    #[message]
    fn answer(&mut self, reply: ReplyTo<u64>) -> u64 {
        reply.send(1);
        2
    }
}

fn main() {}
