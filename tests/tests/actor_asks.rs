//! Specification of an actor's ask (`ctx.ask(&to, msg).reply_as::<H>()`, docs/semantics.md,
//! "tell and ask"): the message leaves like a tell and the reply comes back to the asking
//! actor as its message `H`, whether the replier is on the asker's node or another one,
//! answers at once or keeps the slot and answers from a later handler, or hands the slot
//! on to a third actor. With recovery on the ask and the reply are ordinary logged
//! messages between nodes (SIGKILL of either node: `actor_asks_kill.rs`).

mod support;

use lazarus::{messages, Actor, ActorRef, Context, Node, ReplyTo, SendError};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use support::in_process::{checkpoint_dir, two_nodes};

/// A value with the number of the ask it answers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Answer {
    ask: u64,
    value: u64,
}

/// Squares what it is asked, at once.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Squarer {
    asked: u64,
}

#[messages]
impl Squarer {
    #[message]
    fn square(&mut self, ask: u64, x: u64) -> Answer {
        self.asked += 1;
        Answer { ask, value: x * x }
    }
}

/// Keeps the slots of its asks and answers them all, in order, when released.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Holder {
    waiting: Vec<(u64, ReplyTo<Answer>)>,
}

#[messages]
impl Holder {
    #[message]
    fn hold(&mut self, ask: u64, reply: ReplyTo<Answer>) {
        self.waiting.push((ask, reply));
    }

    /// Answers every held ask with `value + ask`.
    #[message]
    fn release(&mut self, value: u64) {
        for (ask, reply) in self.waiting.drain(..) {
            reply.send(Answer {
                ask,
                value: value + ask,
            });
        }
    }

    /// Hands the held slots to `to`, which answers them instead.
    #[message]
    fn pass_on(&mut self, to: ActorRef<Holder>) {
        for (ask, reply) in self.waiting.drain(..) {
            let _ = to.tell(Adopt {
                ask,
                slot: Slot(reply),
            });
        }
    }

    /// Takes over a slot another holder kept.
    #[message]
    fn adopt(&mut self, ask: u64, slot: Slot) {
        self.waiting.push((ask, slot.0));
    }

    /// How many slots it holds.
    #[message]
    fn held(&mut self) -> usize {
        self.waiting.len()
    }
}

/// Waits until `holder` holds `count` slots.
fn wait_until_held(node: &Node, holder: &ActorRef<Holder>, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = node.block_on(holder.ask(Held)).unwrap();
        if held == count {
            return;
        }
        assert!(Instant::now() < deadline, "{held} slots held, not {count}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A reply slot carried inside a message (a handler's own `ReplyTo` argument is the slot
/// of the message itself).
#[derive(Serialize, Deserialize)]
struct Slot(ReplyTo<Answer>);

/// Asks and collects the replies, which arrive as its `got` message.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Asker {
    answers: Vec<Answer>,
}

#[messages]
impl Asker {
    /// Asks `squarer` for the squares of `1..=count`.
    #[message]
    fn ask_squares(&mut self, squarer: ActorRef<Squarer>, count: u64, ctx: &mut Context<Self>) {
        for k in 1..=count {
            ctx.ask(&squarer, Square { ask: k, x: k })
                .reply_as::<Got>()
                .expect("the squarer takes asks");
        }
    }

    /// Asks `holder` `count` times; it answers when released.
    #[message]
    fn ask_held(&mut self, holder: ActorRef<Holder>, count: u64, ctx: &mut Context<Self>) {
        for ask in 1..=count {
            ctx.ask(&holder, Hold { ask })
                .reply_as::<Got>()
                .expect("the holder takes asks");
        }
    }

    /// The reply of an ask.
    #[message]
    fn got(&mut self, answer: Answer) {
        self.answers.push(answer);
    }

    #[message]
    fn answers(&mut self) -> Vec<Answer> {
        self.answers.clone()
    }
}

/// Asks `asker` for its answers until it has `count` of them (replies are messages, so
/// they arrive in their own time).
fn answers_of(
    ask: impl Fn() -> Result<Vec<Answer>, lazarus::AskError>,
    count: usize,
) -> Vec<Answer> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answers = ask().expect("the asker answers");
        if answers.len() >= count || std::time::Instant::now() > deadline {
            return answers;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn squares(count: u64) -> Vec<Answer> {
    (1..=count)
        .map(|k| Answer {
            ask: k,
            value: k * k,
        })
        .collect()
}

#[test]
fn an_actors_ask_inside_its_node_comes_back_as_its_reply_message_in_order() {
    let node = Node::builder().cores(2).build().unwrap();
    let squarer = node.spawn(Squarer::default()).unwrap();
    let asker = node.spawn(Asker::default()).unwrap();
    asker
        .tell(AskSquares {
            squarer: squarer.clone(),
            count: 50,
        })
        .unwrap();
    let got = answers_of(|| node.block_on(asker.ask(Answers)), 50);
    assert_eq!(got, squares(50), "each reply once, in the order asked");
    node.shutdown();
}

#[test]
fn a_reply_kept_by_the_replier_reaches_the_asker_when_given_from_a_later_handler() {
    let node = Node::builder().cores(2).build().unwrap();
    let holder = node.spawn(Holder::default()).unwrap();
    let asker = node.spawn(Asker::default()).unwrap();
    asker
        .tell(AskHeld {
            holder: holder.clone(),
            count: 3,
        })
        .unwrap();
    // Nothing comes back before the holder answers.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(node.block_on(asker.ask(Answers)).unwrap(), []);
    holder.tell(Release { value: 100 }).unwrap();
    let got = answers_of(|| node.block_on(asker.ask(Answers)), 3);
    let want: Vec<_> = (1..=3)
        .map(|ask| Answer {
            ask,
            value: 100 + ask,
        })
        .collect();
    assert_eq!(got, want);
    node.shutdown();
}

#[test]
fn an_ask_to_a_stopped_actor_hands_the_message_back_to_the_asker() {
    #[derive(Actor, Serialize, Deserialize, Default)]
    struct Prober {
        refused: Option<u64>,
    }
    #[messages]
    impl Prober {
        #[message]
        fn probe(&mut self, squarer: ActorRef<Squarer>, ctx: &mut Context<Self>) {
            if let Err(SendError::ActorStopped { message, .. }) = ctx
                .ask(&squarer, Square { ask: 7, x: 7 })
                .reply_as::<Squared>()
            {
                self.refused = Some(message.ask);
            }
        }
        #[message]
        fn squared(&mut self, _answer: Answer) {}
        #[message]
        fn refused(&mut self) -> Option<u64> {
            self.refused
        }
    }
    let node = Node::builder().cores(1).build().unwrap();
    let squarer = node.spawn(Squarer::default()).unwrap();
    squarer.stop();
    while squarer.is_alive() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let prober = node.spawn(Prober::default()).unwrap();
    prober.tell(Probe { squarer }).unwrap();
    assert_eq!(node.block_on(prober.ask(Refused)).unwrap(), Some(7));
    node.shutdown();
}

/// Asker on node 0, the replier on node 1.
fn across_nodes(name: &str, recovery: bool) {
    let (node0, node1) = two_nodes(name, recovery);
    let squarer = node1.spawn(Squarer::default()).unwrap();
    let squarer = node0.handle().actor_ref::<Squarer>(squarer.id()).unwrap();
    let asker = node0.spawn(Asker::default()).unwrap();
    asker
        .tell(AskSquares {
            squarer,
            count: 200,
        })
        .unwrap();
    let got = answers_of(|| node0.block_on(asker.ask(Answers)), 200);
    assert_eq!(got, squares(200), "each reply once, in the order asked");
    node1.shutdown();
    node0.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, recovery));
}

#[test]
fn an_actors_ask_to_another_node_comes_back_as_its_reply_message() {
    across_nodes("actor-asks-off", false);
}

#[test]
fn with_recovery_on_an_actors_ask_to_another_node_comes_back_as_its_reply_message() {
    across_nodes("actor-asks-on", true);
}

#[test]
fn a_reply_slot_sent_to_another_node_and_back_still_reaches_the_asker() {
    for recovery in [false, true] {
        let name = "actor-asks-pass-on";
        let (node0, node1) = two_nodes(name, recovery);
        // The asker and the holder that answers at the end are on node 0; the first
        // holder, on node 1, gets the slots over the network and passes them back.
        let far = node1.spawn(Holder::default()).unwrap();
        let far = node0.handle().actor_ref::<Holder>(far.id()).unwrap();
        let near = node0.spawn(Holder::default()).unwrap();
        let asker = node0.spawn(Asker::default()).unwrap();
        asker
            .tell(AskHeld {
                holder: far.clone(),
                count: 4,
            })
            .unwrap();
        // The slots are at `far` first, then at `near`.
        wait_until_held(&node0, &far, 4);
        far.tell(PassOn { to: near.clone() }).unwrap();
        wait_until_held(&node0, &near, 4);
        near.tell(Release { value: 10 }).unwrap();
        let got = answers_of(|| node0.block_on(asker.ask(Answers)), 4);
        let want: Vec<_> = (1..=4)
            .map(|ask| Answer {
                ask,
                value: 10 + ask,
            })
            .collect();
        assert_eq!(got, want, "recovery {recovery}");
        node1.shutdown();
        node0.shutdown();
        let _ = std::fs::remove_dir_all(checkpoint_dir(name, recovery));
    }
}
