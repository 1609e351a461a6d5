//! ractor 0.16: actors spawned onto the pinned runtime of their core (`Handle::enter`);
//! `spawn_instant` so that spawning does not wait for `pre_start`, like the others.

use crate::support::{Cores, Counter};
use crate::{Workload, SPAWNS, TELLS};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, ActorRuntime, RpcReplyPort};
use std::time::{Duration, Instant};

enum SinkMsg {
    Add(u64),
    Expect(u64, RpcReplyPort<u64>),
}

struct Sink;

impl Actor for Sink {
    type Msg = SinkMsg;
    type State = Counter<RpcReplyPort<u64>>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<SinkMsg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Counter::default())
    }

    async fn handle(
        &self,
        _: ActorRef<SinkMsg>,
        msg: SinkMsg,
        counter: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let done = match msg {
            SinkMsg::Add(amount) => counter.add(amount),
            SinkMsg::Expect(target, reply) => counter.expect(target, reply),
        };
        if let Some((reply, n)) = done {
            let _ = reply.send(n);
        }
        Ok(())
    }
}

struct Source;

impl Actor for Source {
    type Msg = u64;
    type State = ActorRef<SinkMsg>;
    type Arguments = ActorRef<SinkMsg>;

    async fn pre_start(
        &self,
        _: ActorRef<u64>,
        sink: ActorRef<SinkMsg>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(sink)
    }

    async fn handle(
        &self,
        _: ActorRef<u64>,
        n: u64,
        sink: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for i in 0..n {
            sink.cast(SinkMsg::Add(i)).map_err(|_| "sink gone")?;
        }
        Ok(())
    }
}

struct Ponger;

impl Actor for Ponger {
    type Msg = (u64, RpcReplyPort<u64>);
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<Self::Msg>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        (v, reply): Self::Msg,
        _: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let _ = reply.send(v);
        Ok(())
    }
}

struct Child;

impl Actor for Child {
    type Msg = ();
    type State = ActorRef<SinkMsg>;
    type Arguments = ActorRef<SinkMsg>;

    async fn pre_start(
        &self,
        _: ActorRef<()>,
        sink: ActorRef<SinkMsg>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(sink)
    }

    async fn handle(
        &self,
        myself: ActorRef<()>,
        _: (),
        sink: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        sink.cast(SinkMsg::Add(1)).map_err(|_| "sink gone")?;
        myself.stop(None);
        Ok(())
    }
}

/// Spawns `actor` on core `core`'s runtime without waiting for its `pre_start`.
fn spawn_on<A: Actor>(
    cores: &Cores,
    core: usize,
    actor: A,
    args: A::Arguments,
) -> ActorRef<A::Msg> {
    let _on = cores.core(core).enter();
    let (actor, _started) = ActorRuntime::spawn_instant(None, actor, args).expect("spawn");
    actor
}

fn expect(cores: &Cores, sink: &ActorRef<SinkMsg>, target: u64) -> u64 {
    let call = sink.call(|reply| SinkMsg::Expect(target, reply), None);
    match cores.client.block_on(call) {
        Ok(CallResult::Success(n)) => n,
        _ => panic!("sink did not answer"),
    }
}

struct Tell {
    sink: ActorRef<SinkMsg>,
    source: ActorRef<u64>,
    expected: u64,
    cores: Cores,
}

pub fn tell(receiver_core: usize) -> Box<dyn Workload> {
    let cores = Cores::new("ractor");
    let sink = spawn_on(&cores, receiver_core, Sink, ());
    let source = spawn_on(&cores, 0, Source, sink.clone());
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
            assert!(self.source.cast(TELLS).is_ok());
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}

struct Ask {
    ponger: ActorRef<(u64, RpcReplyPort<u64>)>,
    cores: Cores,
}

pub fn ask() -> Box<dyn Workload> {
    let cores = Cores::new("ractor");
    let ponger = spawn_on(&cores, 1, Ponger, ());
    Box::new(Ask { ponger, cores })
}

impl Workload for Ask {
    fn run(&mut self, iters: u64) -> Duration {
        let ponger = &self.ponger;
        self.cores.client.block_on(async move {
            let start = Instant::now();
            for i in 0..iters {
                match ponger.call(|reply| (i, reply), None).await {
                    Ok(CallResult::Success(v)) => assert_eq!(v, i),
                    _ => panic!("ponger did not answer"),
                }
            }
            start.elapsed()
        })
    }
}

struct Spawn {
    sink: ActorRef<SinkMsg>,
    expected: u64,
    cores: Cores,
}

pub fn spawn() -> Box<dyn Workload> {
    let cores = Cores::new("ractor");
    let sink = spawn_on(&cores, 1, Sink, ());
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
                let child = spawn_on(&self.cores, 1, Child, self.sink.clone());
                assert!(child.cast(()).is_ok());
            }
            self.expected += SPAWNS;
            expect(&self.cores, &self.sink, self.expected);
        })
    }
}
