//! Lazarus: actors written as users write them (`#[derive(Actor)]`, `#[messages]`), on a
//! default node (pinned cores), driven from the client with `tell` and `Node::block_on`.

use crate::support::Counter;
use crate::{Workload, ACTOR_ASKS, SPAWNS, TELLS};
use lazarus::{messages, Actor, ActorRef, Context, CoreId, Node, NodeBuilder, ReplyTo};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Sink {
    counter: Counter<ReplyTo<u64>>,
}

#[messages]
impl Sink {
    #[message]
    fn add(&mut self, amount: u64) {
        if let Some((reply, n)) = self.counter.add(amount) {
            reply.send(n);
        }
    }

    #[message]
    fn expect(&mut self, target: u64, reply: ReplyTo<u64>) {
        if let Some((reply, n)) = self.counter.expect(target, reply) {
            reply.send(n);
        }
    }
}

#[derive(Actor, Serialize, Deserialize)]
struct Source {
    sink: ActorRef<Sink>,
}

#[messages]
impl Source {
    #[message]
    fn blast(&mut self, n: u64) {
        for i in 0..n {
            assert!(self.sink.tell(Add { amount: i }).is_ok(), "sink gone");
        }
    }
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Ponger;

#[messages]
impl Ponger {
    #[message]
    fn ping(&mut self, v: u64) -> u64 {
        v
    }
}

#[derive(Actor, Serialize, Deserialize)]
struct Child {
    sink: ActorRef<Sink>,
}

#[messages]
impl Child {
    #[message]
    fn poke(&mut self, ctx: &mut Context<Self>) {
        assert!(self.sink.tell(Add { amount: 1 }).is_ok(), "sink gone");
        ctx.stop();
    }
}

/// A node shut down (drained) when the workload is dropped.
struct Running(Option<Node>);

impl Running {
    /// A node with default settings (pinned cores, default idle spin).
    fn start() -> Running {
        Running::with(Node::builder())
    }

    fn with(builder: NodeBuilder) -> Running {
        let node = builder.build().expect("node starts");
        assert!(node.num_cores() >= 2, "these benchmarks need 2 cores");
        Running(Some(node))
    }
    fn node(&self) -> &Node {
        self.0.as_ref().expect("node running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(node) = self.0.take() {
            node.shutdown();
        }
    }
}

struct Tell {
    sink: ActorRef<Sink>,
    source: ActorRef<Source>,
    expected: u64,
    node: Running,
}

pub fn tell(receiver_core: usize) -> Box<dyn Workload> {
    let node = Running::start();
    let sink = node
        .node()
        .spawn_on(CoreId(receiver_core), Sink::default())
        .expect("spawn");
    let source = node
        .node()
        .spawn_on(CoreId(0), Source { sink: sink.clone() })
        .expect("spawn");
    Box::new(Tell {
        sink,
        source,
        expected: 0,
        node,
    })
}

impl Workload for Tell {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            self.expected += TELLS;
            assert!(self.source.tell(Blast { n: TELLS }).is_ok());
            let ask = self.sink.ask(Expect {
                target: self.expected,
            });
            let n = self.node.node().block_on(ask).expect("sink answers");
            debug_assert!(n >= self.expected);
        })
    }
}

/// How the ask scenario's node and asks are set up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum AskVariant {
    /// Defaults: idle cores spin before parking, asks carry the default timeout.
    Default,
    /// `.no_timeout()`: no timer is armed per ask.
    NoTimeout,
    /// `NodeBuilder::idle_spin(0)`: idle cores park at once, as Tokio's do, so each
    /// request pays an OS wake-up like the other contenders.
    NoSpin,
}

struct Ask {
    ponger: ActorRef<Ponger>,
    timeout: bool,
    node: Running,
}

pub fn ask(variant: AskVariant) -> Box<dyn Workload> {
    let node = match variant {
        AskVariant::NoSpin => Running::with(Node::builder().idle_spin(Duration::ZERO)),
        _ => Running::start(),
    };
    let ponger = node.node().spawn_on(CoreId(1), Ponger).expect("spawn");
    Box::new(Ask {
        ponger,
        timeout: variant != AskVariant::NoTimeout,
        node,
    })
}

impl Workload for Ask {
    fn run(&mut self, iters: u64) -> Duration {
        let ponger = &self.ponger;
        let timeout = self.timeout;
        self.node.node().block_on(async move {
            let start = Instant::now();
            for i in 0..iters {
                let v = if timeout {
                    ponger.ask(Ping { v: i }).await
                } else {
                    ponger.ask(Ping { v: i }).no_timeout().await
                };
                assert_eq!(v, Ok(i));
            }
            start.elapsed()
        })
    }
}

struct Spawn {
    sink: ActorRef<Sink>,
    expected: u64,
    node: Running,
}

pub fn spawn() -> Box<dyn Workload> {
    let node = Running::start();
    let sink = node
        .node()
        .spawn_on(CoreId(1), Sink::default())
        .expect("spawn");
    Box::new(Spawn {
        sink,
        expected: 0,
        node,
    })
}

impl Workload for Spawn {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            let node = self.node.node();
            for _ in 0..SPAWNS {
                let child = node
                    .spawn_on(
                        CoreId(1),
                        Child {
                            sink: self.sink.clone(),
                        },
                    )
                    .expect("spawn");
                assert!(child.tell(Poke).is_ok());
            }
            self.expected += SPAWNS;
            let ask = self.sink.ask(Expect {
                target: self.expected,
            });
            node.block_on(ask).expect("collector answers");
        })
    }
}

/// Asks the ponger again and again from its handlers: awaiting each ask in one `async fn`
/// handler, or continuing in the handler of each reply (`reply_as`).
#[derive(Actor, Serialize, Deserialize)]
struct Asker {
    ponger: ActorRef<Ponger>,
    /// The continuation's progress: asks made, their sum, and who waits for it.
    made: u64,
    sum: u64,
    done: Option<ReplyTo<u64>>,
    left_after: u64,
}

#[messages]
impl Asker {
    /// `n` asks, each awaited; returns the sum of the replies.
    #[message]
    async fn awaits(&mut self, n: u64, ctx: &mut Context<Self>) -> u64 {
        let mut sum = 0;
        for i in 0..n {
            sum += ctx
                .ask(&self.ponger, Ping { v: i })
                .await
                .expect("ponger answers");
        }
        sum
    }

    /// `n` asks, each made by the handler of the previous one's reply; answers `reply`
    /// with the sum.
    #[message]
    fn continued(&mut self, n: u64, reply: ReplyTo<u64>, ctx: &mut Context<Self>) {
        (self.made, self.sum) = (0, 0);
        if n == 0 {
            reply.send(0);
            return;
        }
        self.done = Some(reply);
        self.made = 1;
        let ask = ctx.ask(&self.ponger, Ping { v: 0 });
        assert!(ask.reply_as::<Pong>().is_ok(), "ponger gone");
        self.left_after = n;
    }

    #[message]
    fn pong(&mut self, v: u64, ctx: &mut Context<Self>) {
        self.sum += v;
        if self.made < self.left_after {
            let ask = ctx.ask(&self.ponger, Ping { v: self.made });
            self.made += 1;
            assert!(ask.reply_as::<Pong>().is_ok(), "ponger gone");
        } else if let Some(reply) = self.done.take() {
            reply.send(self.sum);
        }
    }
}

struct ActorAsk {
    asker: ActorRef<Asker>,
    awaited: bool,
    node: Running,
}

/// The actor-ask scenario: awaited asks (`awaited`) or the `reply_as` continuation.
pub fn actor_ask(awaited: bool) -> Box<dyn Workload> {
    let node = Running::start();
    let ponger = node.node().spawn_on(CoreId(1), Ponger).expect("spawn");
    let asker = Asker {
        ponger,
        made: 0,
        sum: 0,
        done: None,
        left_after: 0,
    };
    let asker = node.node().spawn_on(CoreId(0), asker).expect("spawn");
    Box::new(ActorAsk {
        asker,
        awaited,
        node,
    })
}

impl Workload for ActorAsk {
    fn run(&mut self, iters: u64) -> Duration {
        let expected = ACTOR_ASKS * (ACTOR_ASKS - 1) / 2;
        crate::support::timed(iters, || {
            let sum = if self.awaited {
                let ask = self.asker.ask(Awaits { n: ACTOR_ASKS });
                self.node.node().block_on(ask)
            } else {
                let ask = self.asker.ask(Continued { n: ACTOR_ASKS });
                self.node.node().block_on(ask)
            };
            assert_eq!(sum, Ok(expected));
        })
    }
}
