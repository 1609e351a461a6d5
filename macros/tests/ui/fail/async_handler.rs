use lazarus::{messages, Actor};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Waiter;

#[messages]
impl Waiter {
    #[message]
    async fn wait(&mut self) {}
}

fn main() {}
