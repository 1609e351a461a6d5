//! Specification of selective receive: an order-sensitive actor can name the one sender
//! whose messages it handles next (`ctx.receive_only_from`); everyone else's messages wait
//! in its mailbox, in arrival order, until it opens up again (`ctx.receive_from_anyone`).
//! The sender is known for local and remote messages, with recovery on or off; with
//! recovery on, the deliveries made while a sender is named are determined by that
//! channel's FIFO order and log no determinant. (With real processes and SIGKILL:
//! `master-worker`'s master winds down with selective receives, `determinants_kill.rs`.)

mod support;

use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, Context, Node, ReceiveError};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Collects labels; can wait for `expect` messages from one sender first.
#[derive(Actor, Serialize, Deserialize, Default)]
#[actor(order_sensitive)]
struct Gatherer {
    log: Vec<String>,
    expect: u32,
}

#[messages]
impl Gatherer {
    /// Handle only `sender`'s next `count` items, then anyone's again.
    #[message]
    fn wait_for(&mut self, sender: ActorId, count: u32, ctx: &mut Context<Self>) {
        ctx.receive_only_from(sender).expect("order-sensitive");
        self.expect = count;
    }

    #[message]
    fn item(&mut self, label: String, ctx: &mut Context<Self>) {
        self.log.push(label);
        if self.expect > 0 {
            self.expect -= 1;
            if self.expect == 0 {
                ctx.receive_from_anyone();
            }
        }
    }

    #[message]
    fn log(&mut self) -> Vec<String> {
        self.log.clone()
    }
}

/// Tells a gatherer items, as itself.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Sender;

#[messages]
impl Sender {
    #[message]
    fn emit(&mut self, to: ActorRef<Gatherer>, labels: Vec<String>) {
        for label in labels {
            to.tell(Item { label }).expect("gatherer alive");
        }
    }
}

/// An actor that is not order-sensitive.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Plain;

#[messages]
impl Plain {
    /// Whether the refusal is the one expected, and its text.
    #[message]
    fn try_select(&mut self, ctx: &mut Context<Self>) -> (bool, String) {
        match ctx.receive_only_from(ctx.id()) {
            Ok(()) => (false, "accepted".into()),
            Err(e) => (e == ReceiveError::NotOrderSensitive("Plain"), e.to_string()),
        }
    }
}

fn labels(l: &[&str]) -> Vec<String> {
    l.iter().map(|s| s.to_string()).collect()
}

/// Sends `items` from `sender` to `gatherer` and waits until they are in its mailbox
/// (local) or on their way in order (remote).
fn send(node: &Node, sender: &ActorRef<Sender>, gatherer: &ActorRef<Gatherer>, items: &[&str]) {
    node.block_on(sender.ask(Emit {
        to: gatherer.clone(),
        labels: labels(items),
    }))
    .expect("sender alive");
}

/// The gatherer's log once it holds `n` labels (asked from `main`, whose ask is itself a
/// message that waits while a selective receive names someone else), and how many asks
/// that took.
fn log_of(node: &Node, gatherer: &ActorRef<Gatherer>, n: usize) -> (Vec<String>, u64) {
    for asks in 1..=500 {
        let log = node
            .block_on(gatherer.ask(Log).timeout(Duration::from_secs(10)))
            .expect("the gatherer answers once it receives from anyone");
        if log.len() >= n {
            return (log, asks);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the gatherer never got {n} items");
}

#[test]
fn messages_from_other_senders_wait_until_the_named_one_has_been_heard() {
    let node = Node::builder().build().unwrap();
    let gatherer = node.spawn(Gatherer::default()).unwrap();
    let a = node.spawn(Sender).unwrap();
    let b = node.spawn(Sender).unwrap();
    node.block_on(gatherer.ask(WaitFor {
        sender: a.id(),
        count: 2,
    }))
    .unwrap();
    // b's items arrive first, then a's: a's are handled first, then b's in arrival order.
    send(&node, &b, &gatherer, &["b1", "b2"]);
    send(&node, &a, &gatherer, &["a1", "a2", "a3"]);
    assert_eq!(
        log_of(&node, &gatherer, 5).0,
        ["a1", "a2", "b1", "b2", "a3"]
    );
    node.shutdown();
}

#[test]
fn only_order_sensitive_actors_can_receive_selectively() {
    let node = Node::builder().build().unwrap();
    let plain = node.spawn(Plain).unwrap();
    let (refused, text) = node.block_on(plain.ask(TrySelect)).unwrap();
    assert!(refused, "{text}");
    assert!(text.contains("#[actor(order_sensitive)]"), "{text}");
    node.shutdown();
}

/// Two nodes in this process over loopback QUIC, recovery on or off.
fn two_nodes(recovery: bool) -> (Cluster, Cluster) {
    support::in_process::two_nodes("selective", recovery)
}

/// The gatherer on node 0 waits for sender `a` on node 1 while `b` (node 1) sent first.
/// Returns its log and the number of `Log` asks it answered.
fn across_nodes(node0: &Cluster, node1: &Cluster) -> (Vec<String>, u64) {
    let gatherer = node0.spawn(Gatherer::default()).unwrap();
    let a = node1.spawn(Sender).unwrap();
    let b = node1.spawn(Sender).unwrap();
    let remote_gatherer = node1.handle().actor_ref::<Gatherer>(gatherer.id()).unwrap();
    node0
        .block_on(gatherer.ask(WaitFor {
            sender: a.id(),
            count: 2,
        }))
        .unwrap();
    send(node1, &b, &remote_gatherer, &["b1", "b2"]);
    send(node1, &a, &remote_gatherer, &["a1", "a2"]);
    log_of(node0, &gatherer, 4)
}

#[test]
fn the_sender_of_a_message_from_another_node_is_known() {
    let (node0, node1) = two_nodes(false);
    assert_eq!(across_nodes(&node0, &node1).0, ["a1", "a2", "b1", "b2"]);
    node1.shutdown();
    node0.shutdown();
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The sum of counter `name` over its series, only those labelled `actor_type = of` if
/// given.
fn counter(snapshot: &Snapshot, name: &str, of: Option<&str>) -> u64 {
    snapshot
        .iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == name
                && of.is_none_or(|t| {
                    key.key()
                        .labels()
                        .any(|l| l.key() == "actor_type" && l.value() == t)
                })
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn with_recovery_on_a_selective_receive_logs_no_determinant() {
    // The only test of this binary that reads metrics (the recorder is process-global).
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("first recorder in this process");
    let (node0, node1) = two_nodes(true);
    let (log, asks) = across_nodes(&node0, &node1);
    assert_eq!(log, ["a1", "a2", "b1", "b2"]);
    node1.shutdown();
    node0.shutdown();
    // One snapshot: reading resets the debugging recorder's counters. (Only this test
    // has recovery on, so every determinant and selected delivery is its gatherer's.)
    let snapshot: Snapshot = snapshotter.snapshot().into_vec();
    let selected = counter(
        &snapshot,
        lazarus::recovery::layer::events::SELECTED_DELIVERIES,
        None,
    );
    let determinants = counter(
        &snapshot,
        lazarus::recovery::layer::events::DETERMINANTS,
        None,
    );
    let _ = std::fs::remove_dir_all(support::in_process::checkpoint_dir("selective", true));
    assert_eq!(
        selected, 2,
        "a1 and a2 were delivered by the selective receive"
    );
    assert_eq!(
        determinants,
        3 + asks,
        "only the free deliveries are determinants: main's WaitFor, b1, b2 and each Log"
    );
}
