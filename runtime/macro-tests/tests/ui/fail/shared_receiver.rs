use lazarus::{messages, Actor};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Reader;

#[messages]
impl Reader {
    #[message]
    fn read(&self) -> u64 {
        1
    }
}

fn main() {}
