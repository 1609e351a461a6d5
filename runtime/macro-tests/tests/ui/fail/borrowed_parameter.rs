use lazarus::{messages, Actor};
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize)]
struct Borrower;

#[messages]
impl Borrower {
    #[message]
    fn look(&mut self, name: &str) -> usize {
        name.len()
    }
}

fn main() {}
