//! Plain Tokio: hand-written actors (a task, an unbounded mpsc of an enum, a oneshot per
//! request). The floor any actor runtime on Tokio pays.

use crate::support::{Cores, Counter};
use crate::{Workload, SPAWNS, TELLS};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::sync::oneshot;

enum SinkMsg {
    Add(u64),
    Expect(u64, oneshot::Sender<u64>),
}

fn spawn_sink(on: &Handle) -> UnboundedSender<SinkMsg> {
    let (tx, mut rx) = unbounded_channel();
    on.spawn(async move {
        let mut counter = Counter::default();
        while let Some(msg) = rx.recv().await {
            let done = match msg {
                SinkMsg::Add(amount) => counter.add(amount),
                SinkMsg::Expect(target, reply) => counter.expect(target, reply),
            };
            if let Some((reply, n)) = done {
                let _ = reply.send(n);
            }
        }
    });
    tx
}

/// The sender: its mailbox carries "send this many".
fn spawn_source(on: &Handle, sink: UnboundedSender<SinkMsg>) -> UnboundedSender<u64> {
    let (tx, mut rx) = unbounded_channel::<u64>();
    on.spawn(async move {
        while let Some(n) = rx.recv().await {
            for i in 0..n {
                assert!(sink.send(SinkMsg::Add(i)).is_ok(), "sink gone");
            }
        }
    });
    tx
}

/// Asks the sink for `target` and waits on the client runtime.
fn expect(cores: &Cores, sink: &UnboundedSender<SinkMsg>, target: u64) -> u64 {
    let (tx, rx) = oneshot::channel();
    assert!(sink.send(SinkMsg::Expect(target, tx)).is_ok());
    cores.client.block_on(rx).expect("sink answers")
}

struct Tell {
    sink: UnboundedSender<SinkMsg>,
    source: UnboundedSender<u64>,
    expected: u64,
    cores: Cores,
}

pub fn tell(receiver_core: usize) -> Box<dyn Workload> {
    let cores = Cores::new("tokio");
    let sink = spawn_sink(cores.core(receiver_core));
    let source = spawn_source(cores.core(0), sink.clone());
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
            assert!(self.source.send(TELLS).is_ok());
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}

struct Ask {
    /// Dropped before `cores`, which ends a spinning ponger.
    ponger: UnboundedSender<(u64, oneshot::Sender<u64>)>,
    cores: Cores,
}

/// `spin: false` is the plain baseline: the ponger's core parks when idle and each request
/// pays an OS wake-up. `spin: true` busy-polls the channel instead (the ponger never
/// sleeps), the floor for a runtime whose idle cores spin, as Lazarus's do by default.
pub fn ask(spin: bool) -> Box<dyn Workload> {
    let cores = Cores::new("tokio");
    let (ponger, mut rx) = unbounded_channel::<(u64, oneshot::Sender<u64>)>();
    cores.core(1).spawn(async move {
        if spin {
            // Never yields: ends when the workload drops the sender, which frees the core
            // thread to see its stop signal.
            loop {
                match rx.try_recv() {
                    Ok((v, reply)) => {
                        let _ = reply.send(v);
                    }
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(TryRecvError::Disconnected) => break,
                }
            }
        } else {
            while let Some((v, reply)) = rx.recv().await {
                let _ = reply.send(v);
            }
        }
    });
    Box::new(Ask { ponger, cores })
}

impl Workload for Ask {
    fn run(&mut self, iters: u64) -> Duration {
        let ponger = &self.ponger;
        self.cores.client.block_on(async move {
            let start = Instant::now();
            for i in 0..iters {
                let (tx, rx) = oneshot::channel();
                assert!(ponger.send((i, tx)).is_ok());
                assert_eq!(rx.await, Ok(i));
            }
            start.elapsed()
        })
    }
}

struct Spawn {
    sink: UnboundedSender<SinkMsg>,
    expected: u64,
    cores: Cores,
}

pub fn spawn() -> Box<dyn Workload> {
    let cores = Cores::new("tokio");
    let sink = spawn_sink(cores.core(1));
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
                // A child: a task with its own mailbox, which ends after one message.
                let (tx, mut rx) = unbounded_channel::<()>();
                let sink = self.sink.clone();
                self.cores.core(1).spawn(async move {
                    if rx.recv().await.is_some() {
                        assert!(sink.send(SinkMsg::Add(1)).is_ok(), "sink gone");
                    }
                });
                assert!(tx.send(()).is_ok());
            }
            self.expected += SPAWNS;
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}
