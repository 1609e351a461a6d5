//! Specification of `async fn` handlers (docs/semantics.md, "Async handlers"): a handler
//! awaits `ctx.ask(&to, msg)`, alone or several joined, and gets each reply or the
//! reason there is none; while it is suspended its actor takes no other message (they
//! are handled afterwards, in order), and the core runs other actors meanwhile. The
//! asked actor may be on the asker's node or another, answer at once or from a later
//! handler.

mod support;

use futures::future::join_all;
use lazarus::{messages, Actor, ActorRef, AskError, Context, Node, ReplyTo};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use support::in_process::{checkpoint_dir, two_nodes};

/// Multiplies what it is asked by its factor, at once.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Block {
    factor: u64,
    asked: u64,
}

#[messages]
impl Block {
    #[message]
    fn multiply(&mut self, x: u64) -> u64 {
        self.asked += 1;
        x * self.factor
    }

    #[message]
    fn asked(&mut self) -> u64 {
        self.asked
    }
}

/// Keeps the slots of its asks until released.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Gate {
    waiting: Vec<ReplyTo<u64>>,
}

#[messages]
impl Gate {
    #[message]
    fn wait(&mut self, reply: ReplyTo<u64>) {
        self.waiting.push(reply);
    }

    /// Hands the held slots to `to`, which answers them instead.
    #[message]
    fn pass_on(&mut self, to: ActorRef<Gate>) {
        for reply in self.waiting.drain(..) {
            let _ = to.tell(Adopt {
                slot: HeldSlot(reply),
            });
        }
    }

    /// Takes over a slot another gate held.
    #[message]
    fn adopt(&mut self, slot: HeldSlot) {
        self.waiting.push(slot.0);
    }

    /// How many slots it holds.
    #[message]
    fn held(&mut self) -> usize {
        self.waiting.len()
    }

    /// Answers every held ask with `value`; drops them unanswered with `None`.
    #[message]
    fn release(&mut self, value: Option<u64>) {
        for reply in self.waiting.drain(..) {
            if let Some(v) = value {
                reply.send(v);
            }
        }
    }
}

/// A reply slot carried inside a message.
#[derive(Serialize, Deserialize)]
struct HeldSlot(ReplyTo<u64>);

/// Sums the blocks' products of each step: one async handler per step.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Coordinator {
    blocks: Vec<ActorRef<Block>>,
    /// What each handler saw, in the order handlers ran: (step, sum).
    log: Vec<(u64, u64)>,
}

#[messages]
impl Coordinator {
    #[message]
    fn set_blocks(&mut self, blocks: Vec<ActorRef<Block>>) {
        self.blocks = blocks;
    }

    /// Asks every block at once and awaits them all.
    #[message]
    async fn step(&mut self, step: u64, ctx: &mut Context<Self>) -> u64 {
        let asks = self.blocks.iter().map(|b| ctx.ask(b, Multiply { x: step }));
        let products = join_all(asks).await;
        let sum = products
            .into_iter()
            .map(|p| p.expect("a block answers"))
            .sum();
        self.log.push((step, sum));
        sum
    }

    /// Asks the blocks one after the other, each with the previous product.
    #[message]
    async fn chain(&mut self, x: u64, ctx: &mut Context<Self>) -> u64 {
        let mut v = x;
        for b in self.blocks.clone() {
            v = ctx
                .ask(&b, Multiply { x: v })
                .await
                .expect("a block answers");
        }
        self.log.push((x, v));
        v
    }

    /// Like `chain`, asking with `ActorRef::ask`: inside an async handler it is the
    /// same await as `ctx.ask`.
    #[message]
    async fn chain_by_ref(&mut self, x: u64) -> u64 {
        let mut v = x;
        for b in self.blocks.clone() {
            v = b.ask(Multiply { x: v }).await.expect("a block answers");
        }
        self.log.push((x, v));
        v
    }

    /// A synchronous handler: runs only between async ones.
    #[message]
    fn log(&mut self) -> Vec<(u64, u64)> {
        self.log.clone()
    }
}

/// Sleeps in its handler; records what it handled, in order.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Sleeper {
    handled: Vec<String>,
}

#[messages]
impl Sleeper {
    /// Sleeps `ms`, then returns how long it slept.
    #[message]
    async fn nap(&mut self, ms: u64, ctx: &mut Context<Self>) -> Duration {
        let start = Instant::now();
        ctx.sleep(Duration::from_millis(ms)).await;
        self.handled.push("nap".into());
        start.elapsed()
    }

    #[message]
    fn note(&mut self) -> Vec<String> {
        self.handled.push("note".into());
        self.handled.clone()
    }
}

/// Awaits a gate: whatever it gets, or the error.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Waiter {
    got: Vec<Result<u64, String>>,
}

#[messages]
impl Waiter {
    #[message]
    async fn await_gate(&mut self, gate: ActorRef<Gate>, ctx: &mut Context<Self>) {
        let r = ctx.ask(&gate, Wait).await.map_err(|e| match e {
            AskError::NoReply(_) => "no reply".to_string(),
            other => other.to_string(),
        });
        self.got.push(r);
    }

    #[message]
    fn got(&mut self) -> Vec<Result<u64, String>> {
        self.got.clone()
    }
}

fn blocks(node: &Node, factors: &[u64]) -> Vec<ActorRef<Block>> {
    factors
        .iter()
        .map(|&factor| node.spawn(Block { factor, asked: 0 }).unwrap())
        .collect()
}

#[test]
fn an_async_handler_awaits_a_join_of_asks_and_replies_with_their_sum() {
    let node = Node::builder().cores(2).build().unwrap();
    let blocks = blocks(&node, &[1, 2, 3, 4]);
    let coordinator = node.spawn(Coordinator::default()).unwrap();
    coordinator
        .tell(SetBlocks {
            blocks: blocks.clone(),
        })
        .unwrap();
    for step in 1..=20 {
        let sum = node.block_on(coordinator.ask(Step { step })).unwrap();
        assert_eq!(sum, step * 10);
    }
    for b in &blocks {
        assert_eq!(
            node.block_on(b.ask(Asked)).unwrap(),
            20,
            "each ask handled once"
        );
    }
    node.shutdown();
}

#[test]
fn a_suspended_handler_holds_the_actors_other_messages_until_it_completes() {
    let node = Node::builder().cores(2).build().unwrap();
    let blocks = blocks(&node, &[2, 3]);
    let coordinator = node.spawn(Coordinator::default()).unwrap();
    coordinator.tell(SetBlocks { blocks }).unwrap();
    // Sent together: each handler runs whole before the next message is taken, so the
    // log is in send order and the synchronous `Log` sees every handler before it.
    let pending: Vec<_> = (1..=10u64).map(|x| coordinator.ask(Chain { x })).collect();
    let log = node.block_on(coordinator.ask(Log)).unwrap();
    let want: Vec<(u64, u64)> = (1..=10).map(|x| (x, x * 6)).collect();
    assert_eq!(log, want);
    for (x, p) in (1..=10u64).zip(pending) {
        assert_eq!(node.block_on(p).unwrap(), x * 6);
    }
    node.shutdown();
}

#[test]
fn the_core_runs_other_actors_while_a_handler_is_suspended() {
    // One core: the waiter is suspended on the gate, and the gate (same core) must run
    // to release it.
    let node = Node::builder().cores(1).build().unwrap();
    let gate = node.spawn(Gate::default()).unwrap();
    let waiter = node.spawn(Waiter::default()).unwrap();
    waiter.tell(AwaitGate { gate: gate.clone() }).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    gate.tell(Release { value: Some(42) }).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = node.block_on(waiter.ask(Got)).unwrap();
        if !got.is_empty() {
            assert_eq!(got, vec![Ok(42)]);
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never resumed");
        std::thread::sleep(Duration::from_millis(5));
    }
    node.shutdown();
}

#[test]
fn an_ask_dropped_unanswered_ends_the_await_with_an_error() {
    let node = Node::builder().cores(2).build().unwrap();
    let gate = node.spawn(Gate::default()).unwrap();
    let waiter = node.spawn(Waiter::default()).unwrap();
    waiter.tell(AwaitGate { gate: gate.clone() }).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    gate.tell(Release { value: None }).unwrap();
    // `Got` waits behind the suspended handler: it answers once the handler completed.
    let got = node.block_on(waiter.ask(Got)).unwrap();
    assert_eq!(got, vec![Err("no reply".to_string())]);
    node.shutdown();
}

#[test]
fn an_async_handler_awaits_actors_on_another_node() {
    let name = "async-handlers-two-nodes";
    let (node0, node1) = two_nodes(name, false);
    let far = blocks(&node1, &[5, 7]);
    let far: Vec<ActorRef<Block>> = far
        .iter()
        .map(|b| node0.handle().actor_ref::<Block>(b.id()).unwrap())
        .collect();
    let mut all = blocks(&node0, &[1]);
    all.extend(far);
    let coordinator = node0.spawn(Coordinator::default()).unwrap();
    coordinator.tell(SetBlocks { blocks: all }).unwrap();
    for step in 1..=50 {
        let sum = node0.block_on(coordinator.ask(Step { step })).unwrap();
        assert_eq!(sum, step * 13);
    }
    let chained = node0.block_on(coordinator.ask(Chain { x: 2 })).unwrap();
    assert_eq!(chained, 2 * 5 * 7);
    node1.shutdown();
    node0.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, false));
}

/// Waits until `gate` holds `count` slots.
#[test]
fn a_sleeping_handler_wakes_after_its_delay_and_its_actor_takes_nothing_meanwhile() {
    let node = Node::builder().cores(1).build().unwrap();
    let sleeper = node.spawn(Sleeper::default()).unwrap();
    let nap = sleeper.ask(Nap { ms: 50 });
    let note = sleeper.ask(Note);
    let slept = node.block_on(nap).unwrap();
    assert!(slept >= Duration::from_millis(50), "slept {slept:?}");
    assert_eq!(
        node.block_on(note).unwrap(),
        vec!["nap", "note"],
        "the message sent during the sleep was handled after it"
    );
}

#[test]
fn actor_ref_ask_awaited_in_an_async_handler_is_an_await_of_its_actor() {
    // Outside a handler `ActorRef::ask` waits on a Tokio timer for its timeout; a core
    // has no Tokio runtime. Inside an async handler it is `ctx.ask`: the reply comes back
    // as a result to the actor (recovered like one), with no timeout.
    let name = "async-handlers-ref-ask";
    let (node0, node1) = two_nodes(name, false);
    let far: Vec<ActorRef<Block>> = blocks(&node1, &[5])
        .iter()
        .map(|b| node0.handle().actor_ref::<Block>(b.id()).unwrap())
        .collect();
    let mut all = blocks(&node0, &[2, 3]);
    all.extend(far);
    let coordinator = node0.spawn(Coordinator::default()).unwrap();
    coordinator.tell(SetBlocks { blocks: all }).unwrap();
    let chained = node0
        .block_on(coordinator.ask(ChainByRef { x: 1 }))
        .unwrap();
    assert_eq!(chained, 30);
    node0.shutdown();
    node1.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, false));
}

fn wait_until_held(node: &Node, gate: &ActorRef<Gate>, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.block_on(gate.ask(Held)).unwrap() != count {
        assert!(
            Instant::now() < deadline,
            "the gate never held {count} slots"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_awaited_slot_handed_to_another_node_and_back_brings_the_reply_not_an_error() {
    let name = "async-handlers-pass-on";
    let (node0, node1) = two_nodes(name, false);
    let far = node1.spawn(Gate::default()).unwrap();
    let far = node0.handle().actor_ref::<Gate>(far.id()).unwrap();
    let near = node0.spawn(Gate::default()).unwrap();
    // The waiter asks the near gate, which hands the slot to the far one and gets it
    // back: the copies left behind say nothing, the one that answers does.
    let waiter = node0.spawn(Waiter::default()).unwrap();
    waiter.tell(AwaitGate { gate: near.clone() }).unwrap();
    wait_until_held(&node0, &near, 1);
    near.tell(PassOn { to: far.clone() }).unwrap();
    wait_until_held(&node0, &far, 1);
    far.tell(PassOn { to: near.clone() }).unwrap();
    wait_until_held(&node0, &near, 1);
    near.tell(Release { value: Some(9) }).unwrap();
    assert_eq!(node0.block_on(waiter.ask(Got)).unwrap(), vec![Ok(9)]);
    node1.shutdown();
    node0.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, false));
}

/// `power --coordinator async` on 4 processes: an actor on node 0 whose async handler,
/// one per step, asks all 8 blocks and awaits their replies. Its answer is the sequential
/// iteration's, bit for bit (`verified=true`), and the one `main` driving the asks gets.
#[test]
fn power_driven_by_an_async_handler_gives_the_sequential_answer() {
    use std::process::Command;
    use support::launched::Launched;
    let run = |coordinator: &str, extra: &[&str]| {
        let mut cmd = Command::new(support::bin("lazarus"));
        cmd.args(["run", "-n", "4", "--"])
            .arg(support::bin("power"))
            .args(["--n", "192", "--steps", "400", "--coordinator", coordinator])
            .args(extra);
        let f = Launched::spawn(cmd, 4).finish();
        assert_eq!(f.verified()["coordinator"], coordinator, "{extra:?}");
        f.checksum()
    };
    let by_main = run("main", &[]);
    assert_eq!(run("async", &[]), by_main);
    // Blocks that answer from a later handler, 100 µs on.
    assert_eq!(run("async", &["--reply-after-us", "100"]), by_main);
}
