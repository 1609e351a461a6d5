use lazarus::{messages, Actor};

#[derive(Actor)]
struct Plain {
    n: u64,
}

#[messages]
impl Plain {
    #[message]
    fn get(&mut self) -> u64 {
        self.n
    }
}

fn main() {}
