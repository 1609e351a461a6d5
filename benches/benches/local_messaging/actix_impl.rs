//! actix 0.13: a System thread (core 0) and one Arbiter thread (core 1), both pinned.

use crate::support::{current_thread_runtime, pin_to, Counter};
use crate::{Workload, SPAWNS, TELLS};
use actix::{Actor, ActorContext, Addr, Arbiter, ArbiterHandle, Context, Handler, System};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

#[derive(Default)]
struct Sink {
    counter: Counter<oneshot::Sender<u64>>,
}
impl Actor for Sink {
    type Context = Context<Self>;
}

struct Add(u64);
impl actix::Message for Add {
    type Result = ();
}

/// actix has no reply slot a handler can keep, so the request carries a oneshot
/// (the same thing Lazarus's `ReplyTo` and the Tokio baseline use).
struct Expect(u64, oneshot::Sender<u64>);
impl actix::Message for Expect {
    type Result = ();
}

impl Handler<Add> for Sink {
    type Result = ();
    fn handle(&mut self, msg: Add, _: &mut Context<Self>) {
        if let Some((reply, n)) = self.counter.add(msg.0) {
            let _ = reply.send(n);
        }
    }
}

impl Handler<Expect> for Sink {
    type Result = ();
    fn handle(&mut self, msg: Expect, _: &mut Context<Self>) {
        if let Some((reply, n)) = self.counter.expect(msg.0, msg.1) {
            let _ = reply.send(n);
        }
    }
}

struct Source {
    sink: Addr<Sink>,
}
impl Actor for Source {
    type Context = Context<Self>;
}

struct Blast(u64);
impl actix::Message for Blast {
    type Result = ();
}

impl Handler<Blast> for Source {
    type Result = ();
    fn handle(&mut self, msg: Blast, _: &mut Context<Self>) {
        for i in 0..msg.0 {
            self.sink.do_send(Add(i));
        }
    }
}

struct Ponger;
impl Actor for Ponger {
    type Context = Context<Self>;
}

struct Ping(u64);
impl actix::Message for Ping {
    type Result = u64;
}

impl Handler<Ping> for Ponger {
    type Result = u64;
    fn handle(&mut self, msg: Ping, _: &mut Context<Self>) -> u64 {
        msg.0
    }
}

struct Child {
    sink: Addr<Sink>,
}
impl Actor for Child {
    type Context = Context<Self>;
}

struct Poke;
impl actix::Message for Poke {
    type Result = ();
}

impl Handler<Poke> for Child {
    type Result = ();
    fn handle(&mut self, _: Poke, ctx: &mut Context<Self>) {
        self.sink.do_send(Add(1));
        ctx.stop();
    }
}

/// A running actix System: arbiter 0 on the System thread, arbiter 1 on its own.
struct Sys {
    system: System,
    arbiters: [ArbiterHandle; 2],
    thread: Option<std::thread::JoinHandle<()>>,
    client: Runtime,
}

impl Sys {
    fn start() -> Sys {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("actix-core-0".into())
            .spawn(move || {
                pin_to(0);
                let sys = System::new();
                let (arbiter, handles) = sys.block_on(async {
                    let arbiter = Arbiter::new();
                    arbiter.spawn_fn(|| pin_to(1));
                    let handles = (System::current(), Arbiter::current(), arbiter.handle());
                    (arbiter, handles)
                });
                tx.send(handles).expect("bench alive");
                let _ = sys.run();
                arbiter.stop();
                let _ = arbiter.join();
            })
            .expect("spawn actix thread");
        let (system, a0, a1) = rx.recv().expect("actix started");
        Sys {
            system,
            arbiters: [a0, a1],
            thread: Some(thread),
            client: current_thread_runtime(),
        }
    }

    fn expect(&self, sink: &Addr<Sink>, target: u64) -> u64 {
        let (tx, rx) = oneshot::channel();
        sink.do_send(Expect(target, tx));
        self.client.block_on(rx).expect("sink answers")
    }
}

impl Drop for Sys {
    fn drop(&mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Tell {
    sink: Addr<Sink>,
    source: Addr<Source>,
    expected: u64,
    sys: Sys,
}

pub fn tell(receiver_core: usize) -> Box<dyn Workload> {
    let sys = Sys::start();
    let sink = Sink::start_in_arbiter(&sys.arbiters[receiver_core], |_| Sink::default());
    let to = sink.clone();
    let source = Source::start_in_arbiter(&sys.arbiters[0], move |_| Source { sink: to });
    Box::new(Tell {
        sink,
        source,
        expected: 0,
        sys,
    })
}

impl Workload for Tell {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            self.expected += TELLS;
            self.source.do_send(Blast(TELLS));
            self.sys.expect(&self.sink, self.expected);
        })
    }
}

struct Ask {
    ponger: Addr<Ponger>,
    sys: Sys,
}

pub fn ask() -> Box<dyn Workload> {
    let sys = Sys::start();
    let ponger = Ponger::start_in_arbiter(&sys.arbiters[1], |_| Ponger);
    Box::new(Ask { ponger, sys })
}

impl Workload for Ask {
    fn run(&mut self, iters: u64) -> Duration {
        let ponger = &self.ponger;
        self.sys.client.block_on(async move {
            let start = Instant::now();
            for i in 0..iters {
                assert_eq!(ponger.send(Ping(i)).await.ok(), Some(i));
            }
            start.elapsed()
        })
    }
}

struct Spawn {
    sink: Addr<Sink>,
    expected: u64,
    sys: Sys,
}

pub fn spawn() -> Box<dyn Workload> {
    let sys = Sys::start();
    let sink = Sink::start_in_arbiter(&sys.arbiters[1], |_| Sink::default());
    Box::new(Spawn {
        sink,
        expected: 0,
        sys,
    })
}

impl Workload for Spawn {
    fn run(&mut self, iters: u64) -> Duration {
        crate::support::timed(iters, || {
            for _ in 0..SPAWNS {
                let sink = self.sink.clone();
                let child = Child::start_in_arbiter(&self.sys.arbiters[1], |_| Child { sink });
                child.do_send(Poke);
            }
            self.expected += SPAWNS;
            self.sys.expect(&self.sink, self.expected);
        })
    }
}
