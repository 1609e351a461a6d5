use lazarus::{messages, Actor};
use serde::{Deserialize, Serialize};

struct Opaque;

#[derive(Actor, Serialize, Deserialize)]
struct Holder;

#[messages]
impl Holder {
    #[message]
    fn put(&mut self, value: Opaque) {
        let _ = value;
    }
}

fn main() {}
