use lazarus::{messages, Actor, ReplyTo};
use serde::{Deserialize, Serialize};

/// An actor whose state is an enum: a skipped slot in a variant is refused too.
#[derive(Actor, Serialize, Deserialize)]
enum Gate {
    Open,
    Waiting {
        #[serde(skip)]
        slot: ReplyTo<u64>,
    },
}

#[messages]
impl Gate {
    #[message]
    fn wait(&mut self, reply: ReplyTo<u64>) {
        *self = Gate::Waiting { slot: reply };
    }
}

fn main() {}
