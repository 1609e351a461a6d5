//! kameo 0.22 (default features off: no tracing spans per message), with unbounded
//! mailboxes, each actor spawned onto the pinned runtime of its core (`Handle::enter`).

use crate::support::{Cores, Counter};
use crate::{Workload, ACTOR_ASKS, SPAWNS, TELLS};
use kameo::actor::{ActorRef, Spawn as _};
use kameo::error::Infallible;
use kameo::mailbox;
use kameo::message::{Context, Message};
use kameo::reply::{DelegatedReply, ReplySender};
use kameo::Actor;
use std::time::{Duration, Instant};

/// Implements `kameo::Actor` with the actor as its own spawn argument (what
/// `#[derive(Actor)]` generates).
macro_rules! kameo_actor {
    ($t:ty) => {
        impl Actor for $t {
            type Args = Self;
            type Error = Infallible;
            async fn on_start(args: Self, _: ActorRef<Self>) -> Result<Self, Infallible> {
                Ok(args)
            }
        }
    };
}

#[derive(Default)]
struct Sink {
    counter: Counter<ReplySender<u64>>,
}
kameo_actor!(Sink);

struct Add(u64);
struct Expect(u64);

impl Message<Add> for Sink {
    type Reply = ();
    async fn handle(&mut self, msg: Add, _: &mut Context<Self, ()>) {
        if let Some((reply, n)) = self.counter.add(msg.0) {
            reply.send(n);
        }
    }
}

impl Message<Expect> for Sink {
    type Reply = DelegatedReply<u64>;
    async fn handle(
        &mut self,
        msg: Expect,
        ctx: &mut Context<Self, Self::Reply>,
    ) -> DelegatedReply<u64> {
        let (delegated, reply) = ctx.reply_sender();
        if let Some(reply) = reply {
            if let Some((reply, n)) = self.counter.expect(msg.0, reply) {
                reply.send(n);
            }
        }
        delegated
    }
}

struct Source {
    sink: ActorRef<Sink>,
}
kameo_actor!(Source);

struct Blast(u64);

impl Message<Blast> for Source {
    type Reply = ();
    async fn handle(&mut self, msg: Blast, _: &mut Context<Self, ()>) {
        for i in 0..msg.0 {
            assert!(self.sink.tell(Add(i)).try_send().is_ok(), "sink gone");
        }
    }
}

struct Ponger;
kameo_actor!(Ponger);

struct Ping(u64);

impl Message<Ping> for Ponger {
    type Reply = u64;
    async fn handle(&mut self, msg: Ping, _: &mut Context<Self, u64>) -> u64 {
        msg.0
    }
}

struct Child {
    sink: ActorRef<Sink>,
}
kameo_actor!(Child);

struct Poke;

impl Message<Poke> for Child {
    type Reply = ();
    async fn handle(&mut self, _: Poke, ctx: &mut Context<Self, ()>) {
        assert!(self.sink.tell(Add(1)).try_send().is_ok(), "sink gone");
        ctx.stop();
    }
}

/// Spawns `actor` with an unbounded mailbox on core `core`'s runtime.
fn spawn_on<A: Actor<Args = A>>(cores: &Cores, core: usize, actor: A) -> ActorRef<A> {
    let _on = cores.core(core).enter();
    A::spawn_with_mailbox(actor, mailbox::unbounded())
}

fn expect(cores: &Cores, sink: &ActorRef<Sink>, target: u64) -> u64 {
    cores
        .client
        .block_on(async { sink.ask(Expect(target)).await })
        .unwrap_or_else(|_| panic!("sink did not answer"))
}

struct Tell {
    sink: ActorRef<Sink>,
    source: ActorRef<Source>,
    expected: u64,
    cores: Cores,
}

pub fn tell(receiver_core: usize) -> Box<dyn Workload> {
    let cores = Cores::new("kameo");
    let sink = spawn_on(&cores, receiver_core, Sink::default());
    let source = spawn_on(&cores, 0, Source { sink: sink.clone() });
    Box::new(Tell {
        sink,
        source,
        expected: 0,
        cores,
    })
}

impl Workload for Tell {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            self.expected += TELLS;
            assert!(self.source.tell(Blast(TELLS)).try_send().is_ok());
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}

struct Ask {
    ponger: ActorRef<Ponger>,
    cores: Cores,
}

pub fn ask() -> Box<dyn Workload> {
    let cores = Cores::new("kameo");
    let ponger = spawn_on(&cores, 1, Ponger);
    Box::new(Ask { ponger, cores })
}

impl Workload for Ask {
    fn run(&mut self, iters: u64) -> Duration {
        let ponger = &self.ponger;
        self.cores.client.block_on(async move {
            let start = Instant::now();
            for i in 0..iters {
                assert_eq!(ponger.ask(Ping(i)).await.ok(), Some(i));
            }
            start.elapsed()
        })
    }
}

struct Spawn {
    sink: ActorRef<Sink>,
    expected: u64,
    cores: Cores,
}

pub fn spawn() -> Box<dyn Workload> {
    let cores = Cores::new("kameo");
    let sink = spawn_on(&cores, 1, Sink::default());
    Box::new(Spawn {
        sink,
        expected: 0,
        cores,
    })
}

impl Workload for Spawn {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            for _ in 0..SPAWNS {
                let sink = self.sink.clone();
                let child = spawn_on(&self.cores, 1, Child { sink });
                assert!(child.tell(Poke).try_send().is_ok());
            }
            self.expected += SPAWNS;
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}

/// Asks the ponger again and again from one async handler, awaiting each reply.
struct Asker {
    ponger: ActorRef<Ponger>,
}
kameo_actor!(Asker);

struct Awaits(u64);

impl Message<Awaits> for Asker {
    type Reply = u64;
    async fn handle(&mut self, msg: Awaits, _: &mut Context<Self, u64>) -> u64 {
        let mut sum = 0;
        for i in 0..msg.0 {
            sum += self.ponger.ask(Ping(i)).await.expect("ponger answers");
        }
        sum
    }
}

struct ActorAsk {
    asker: ActorRef<Asker>,
    cores: Cores,
}

/// The actor-ask scenario: the asker on core 0, the ponger on core 1.
pub fn actor_ask() -> Box<dyn Workload> {
    let cores = Cores::new("kameo");
    let ponger = spawn_on(&cores, 1, Ponger);
    let asker = spawn_on(&cores, 0, Asker { ponger });
    Box::new(ActorAsk { asker, cores })
}

impl Workload for ActorAsk {
    fn run(&mut self, iters: u64) -> Duration {
        let expected = ACTOR_ASKS * (ACTOR_ASKS - 1) / 2;
        crate::support::timed(iters, || {
            let sum = self
                .cores
                .client
                .block_on(async { self.asker.ask(Awaits(ACTOR_ASKS)).await });
            assert_eq!(sum.ok(), Some(expected));
        })
    }
}
