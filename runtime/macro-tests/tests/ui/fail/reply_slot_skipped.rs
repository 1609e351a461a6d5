use lazarus::{messages, Actor, ReplyTo};
use serde::{Deserialize, Serialize};

/// Keeps an ask's reply slot to answer later, but would not checkpoint it.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Barrier {
    #[serde(skip)]
    waiting: Option<ReplyTo<u64>>,
}

#[messages]
impl Barrier {
    #[message]
    fn wait(&mut self, reply: ReplyTo<u64>) {
        self.waiting = Some(reply);
    }
}

fn main() {}
