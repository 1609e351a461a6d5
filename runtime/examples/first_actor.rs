//! A first actor: a counter on one node, told and asked, and a second actor whose async
//! handler awaits the counter's replies. The README shows this file; `cargo run --example
//! first_actor` runs it, and `cargo test` runs it too.

use lazarus::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Actor, Serialize, Deserialize, Default)] // state goes into checkpoints
struct Counter {
    total: u64,
}

#[messages]
impl Counter {
    /// `Add { amount }` is generated from this method; its reply is the return type.
    #[message]
    fn add(&mut self, amount: u64) -> u64 {
        self.total += amount;
        self.total
    }

    /// A handler can keep its reply slot and answer later.
    #[message]
    fn later(&mut self, reply: ReplyTo<u64>) {
        reply.send(self.total);
    }
}

#[derive(Actor, Serialize, Deserialize)]
struct Teller {
    counter: ActorRef<Counter>,
}

#[messages]
impl Teller {
    /// An async handler awaits other actors' replies; its actor takes no other message
    /// until it returns, while the core runs other actors. With recovery on, one that a
    /// failure interrupts is re-executed from the checkpoint, and sends nothing twice.
    #[message]
    async fn add_twice(&mut self, amount: u64, ctx: &mut Context<Self>) -> u64 {
        let first = ctx.ask(&self.counter, Add { amount }).await.unwrap_or(0);
        ctx.ask(&self.counter, Add { amount: first })
            .await
            .unwrap_or(0)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::builder().build()?; // one pinned executor per core
    let c = node.spawn(Counter::default())?; // or spawn_on(CoreId(k), ..)
    c.tell(Add { amount: 2 })?; // fire and forget
    let total = node.block_on(c.ask(Add { amount: 3 }))?; // request/reply, with timeout
    assert_eq!(total, 5);
    let later = node.block_on(c.ask(Later {}))?; // answered through the kept slot
    assert_eq!(later, 5);
    let t = node.spawn(Teller { counter: c.clone() })?;
    let twice = node.block_on(t.ask(AddTwice { amount: 1 }))?; // 5+1 = 6, then 6+6
    assert_eq!(twice, 12);
    println!("the counter holds {twice}");
    node.shutdown(); // drains mailboxes, stops actors
    Ok(())
}

#[test]
fn the_first_actor_counts() {
    main().expect("the example runs");
}
