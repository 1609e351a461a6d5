//! `spawn-ring`: actors spawned at run time, from inside handlers, doing the work.
//!
//! `main` spawns one foreman per node (and, on node 0, a collector). Told to start, each
//! foreman spawns its node's workers from its handler, spread over the node's cores,
//! and each worker spawns a tally from its `on_start` hook: two generations of actors
//! that `main` never spawns. Worker `i` of every node forms a ring over the nodes with
//! worker `i` of the others: each round it passes its value downstream, folds the value
//! that came from upstream into its own with some work, and tells its tally. The foremen
//! swap their workers' references across nodes so each worker learns its downstream
//! peer. When a tally has seen every round it reports its digest to the collector.
//! A worker whose ring is done, and its tally once it has reported, stop: with
//! `--uneven` the rings have different lengths, so actors exit while the others run on
//! (and the foremen keep references to workers that have exited).
//!
//! Every actor receives from one sender at a time (send-deterministic), so with recovery
//! on a node killed mid-run comes back with the workers and tallies its handlers had
//! spawned, rebuilt from the checkpoint, and the answer is the failure-free one. The
//! RESULT is verified against the same rings computed sequentially.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Rings of workers over the nodes, spawned at run time by one foreman per node.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Workers per node.
    #[arg(long, default_value_t = 4)]
    workers: u64,
    /// Rounds each ring goes around.
    #[arg(long, default_value_t = 2000)]
    rounds: u64,
    /// Work per round and worker (mixing steps).
    #[arg(long, default_value_t = 20_000)]
    work: u64,
    /// Rings of different lengths: ring `i` goes around `rounds * (i + 1) / workers`
    /// times, so they finish one after the other.
    #[arg(long)]
    uneven: bool,
}

/// What every worker needs to know, the same on every node.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Plan {
    nodes: u64,
    workers: u64,
    rounds: u64,
    work: u64,
    uneven: bool,
}

impl Plan {
    /// How many times ring `index` goes around.
    fn rounds_of(&self, index: u64) -> u64 {
        if self.uneven {
            (self.rounds * (index + 1) / self.workers.max(1)).max(1)
        } else {
            self.rounds
        }
    }
}

/// The value worker `index` of node `rank` starts from.
fn seed(rank: u64, index: u64) -> u64 {
    mix(mix(0x5eed, rank + 1), index + 1)
}

/// One round of a worker: its value with the upstream one folded in.
fn step(value: u64, upstream: u64, work: u64) -> u64 {
    (0..work).fold(value ^ upstream, mix)
}

/// The node's foreman: spawns the node's workers and introduces them to their peers.
#[derive(Actor, Serialize, Deserialize)]
struct Foreman {
    rank: u64,
    /// This node's workers, by index, once spawned.
    workers: Vec<ActorRef<Worker>>,
    /// The next node's workers (each of ours passes downstream to its namesake there),
    /// if they came before we spawned ours.
    downstream: Option<Vec<ActorRef<Worker>>>,
}

#[messages]
impl Foreman {
    /// Spawns the workers, hands their references to the previous node's foreman.
    #[message]
    fn start(
        &mut self,
        plan: Plan,
        collector: ActorRef<Collector>,
        upstream: ActorRef<Foreman>,
        ctx: &mut Context<Self>,
    ) {
        let cores = ctx.node().num_cores().max(1);
        for index in 0..plan.workers {
            let worker = Worker {
                rank: self.rank,
                index,
                plan,
                value: seed(self.rank, index),
                round: 0,
                to: None,
                early: BTreeMap::new(),
                tally: None,
                collector: collector.clone(),
            };
            let core = lazarus::node::CoreId(index as usize % cores);
            match ctx.node().spawn_on(core, worker) {
                Ok(w) => self.workers.push(w),
                Err(e) => panic!("foreman {}: cannot spawn worker {index}: {e}", self.rank),
            }
        }
        upstream
            .tell(Downstream {
                workers: self.workers.clone(),
            })
            .unwrap_or_else(|e| panic!("foreman {}: upstream unreachable: {e}", self.rank));
        self.introduce();
    }

    /// The next node's workers.
    #[message]
    fn downstream(&mut self, workers: Vec<ActorRef<Worker>>) {
        self.downstream = Some(workers);
        self.introduce();
    }
}

impl Foreman {
    fn introduce(&mut self) {
        if self.workers.is_empty() {
            return;
        }
        let Some(down) = self.downstream.take() else {
            return;
        };
        for (mine, theirs) in self.workers.iter().zip(down) {
            mine.tell(Next { to: theirs })
                .unwrap_or_else(|e| panic!("foreman {}: worker unreachable: {e}", self.rank));
        }
    }
}

/// One position of ring `index`: passes values downstream, round after round.
#[derive(Actor, Serialize, Deserialize)]
#[actor(on_start = spawn_tally)]
struct Worker {
    rank: u64,
    index: u64,
    plan: Plan,
    value: u64,
    /// The next round whose upstream value it waits for.
    round: u64,
    to: Option<ActorRef<Worker>>,
    /// Upstream values that came before they could be used, by round.
    early: BTreeMap<u64, u64>,
    tally: Option<ActorRef<Tally>>,
    collector: ActorRef<Collector>,
}

#[messages]
impl Worker {
    /// Its downstream peer: round 0 starts with the worker's seed.
    #[message]
    fn next(&mut self, to: ActorRef<Worker>, ctx: &mut Context<Self>) {
        self.send(&to, 0);
        self.to = Some(to);
        self.advance(ctx);
    }

    /// The upstream value of round `round`.
    #[message]
    fn step(&mut self, round: u64, value: u64, ctx: &mut Context<Self>) {
        assert!(
            round >= self.round && self.early.insert(round, value).is_none(),
            "worker {}:{}: round {round} came twice",
            self.rank,
            self.index
        );
        self.advance(ctx);
    }
}

impl Worker {
    fn spawn_tally(&mut self, ctx: &mut Context<Self>) {
        let tally = Tally {
            rank: self.rank,
            index: self.index,
            rounds: self.plan.rounds_of(self.index),
            seen: 0,
            digest: 0,
            collector: self.collector.clone(),
        };
        match ctx.node().spawn_on(ctx.core(), tally) {
            Ok(t) => self.tally = Some(t),
            Err(e) => panic!(
                "worker {}:{}: cannot spawn its tally: {e}",
                self.rank, self.index
            ),
        }
    }

    fn send(&self, to: &ActorRef<Worker>, round: u64) {
        to.tell(Step {
            round,
            value: self.value,
        })
        .unwrap_or_else(|e| {
            panic!(
                "worker {}:{}: downstream unreachable: {e}",
                self.rank, self.index
            )
        });
    }

    fn advance(&mut self, ctx: &mut Context<Self>) {
        let (Some(to), Some(tally)) = (self.to.clone(), self.tally.clone()) else {
            return;
        };
        let rounds = self.plan.rounds_of(self.index);
        while let Some(upstream) = self.early.remove(&self.round) {
            self.value = step(self.value, upstream, self.plan.work);
            tally
                .tell(Add { value: self.value })
                .unwrap_or_else(|e| panic!("worker {}:{}: tally gone: {e}", self.rank, self.index));
            self.round += 1;
            if self.round < rounds {
                self.send(&to, self.round);
            }
        }
        if self.round == rounds {
            // Upstream sends nothing after the last round: the ring is done here.
            println!(
                "spawn-ring: worker {}:{} finished its {rounds} rounds",
                self.rank, self.index
            );
            ctx.stop();
        }
    }
}

/// Digests one worker's values; reports once it has every round's.
#[derive(Actor, Serialize, Deserialize)]
struct Tally {
    rank: u64,
    index: u64,
    rounds: u64,
    seen: u64,
    digest: u64,
    collector: ActorRef<Collector>,
}

#[messages]
impl Tally {
    #[message]
    fn add(&mut self, value: u64, ctx: &mut Context<Self>) {
        self.digest = mix(self.digest, value);
        self.seen += 1;
        if self.seen == self.rounds {
            ctx.stop();
            self.collector
                .tell(Done {
                    rank: self.rank,
                    index: self.index,
                    digest: self.digest,
                })
                .unwrap_or_else(|e| {
                    panic!("tally {}:{}: collector gone: {e}", self.rank, self.index)
                });
        }
    }
}

/// Gathers every tally's digest (node 0).
#[derive(Actor, Serialize, Deserialize, Default)]
struct Collector {
    expected: u64,
    digests: BTreeMap<(u64, u64), u64>,
    waiting: ReplyTo<u64>,
}

#[messages]
impl Collector {
    #[message]
    fn done(&mut self, rank: u64, index: u64, digest: u64) {
        assert!(
            self.digests.insert((rank, index), digest).is_none(),
            "tally {rank}:{index} reported twice"
        );
        self.answer();
    }

    /// Answers with the digest of every tally's once all have reported.
    #[message]
    fn wait_all(&mut self, reply: ReplyTo<u64>) {
        self.waiting = reply;
        self.answer();
    }
}

impl Collector {
    fn answer(&mut self) {
        if self.digests.len() as u64 == self.expected && self.waiting.is_requested() {
            let all = self.digests.values().fold(0, |acc, &d| mix(acc, d));
            self.waiting.take().send(all);
        }
    }
}

/// The collector's answer, computed sequentially.
fn expected_answer(plan: Plan) -> u64 {
    let mut digests = BTreeMap::new();
    for index in 0..plan.workers {
        let mut values: Vec<u64> = (0..plan.nodes).map(|r| seed(r, index)).collect();
        let mut digest = vec![0u64; plan.nodes as usize];
        for _ in 0..plan.rounds_of(index) {
            let sent = values.clone();
            for r in 0..plan.nodes as usize {
                let up = sent[(r + plan.nodes as usize - 1) % plan.nodes as usize];
                values[r] = step(values[r], up, plan.work);
                digest[r] = mix(digest[r], values[r]);
            }
        }
        for (r, d) in digest.into_iter().enumerate() {
            digests.insert((r as u64, index), d);
        }
    }
    digests.values().fold(0, |acc, &d| mix(acc, d))
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank(), cluster.size() as u64);
    let plan = Plan {
        nodes: size,
        workers: args.workers,
        rounds: args.rounds.max(1),
        work: args.work,
        uneven: args.uneven,
    };
    // Node 0 spawns the collector (0:0) and then its foreman; the others only a foreman.
    let foreman_id = |r: u64| ActorId::new(r as u16, u64::from(r == 0)).ok_or("bad rank");
    let collector_id = ActorId::new(0, 0).ok_or("bad id")?;
    if rank == 0 {
        let c = cluster.spawn(Collector {
            expected: plan.nodes * plan.workers,
            ..Collector::default()
        })?;
        expect_id(c, collector_id, "the collector")?;
    }
    let foreman = cluster.spawn(Foreman {
        rank: u64::from(rank),
        workers: Vec::new(),
        downstream: None,
    })?;
    expect_id(foreman.clone(), foreman_id(u64::from(rank))?, "the foreman")?;
    // Nobody sends to a foreman that does not exist yet.
    cluster.barrier()?;
    let started = cluster.begin_timed_part();
    let handle = cluster.handle();
    let upstream = (u64::from(rank) + size - 1) % size;
    foreman
        .tell(Start {
            plan,
            collector: handle.actor_ref::<Collector>(collector_id)?,
            upstream: handle.actor_ref::<Foreman>(foreman_id(upstream)?)?,
        })
        .map_err(|e| e.to_string())?;
    // The others stay until the answer is in: their workers serve the rings.
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let collector = handle.actor_ref::<Collector>(collector_id)?;
    let answer = cluster.block_on(collector.ask(WaitAll).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    let verified = answer == expected_answer(plan);
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("spawn-ring")
            .field("nodes", size)
            .field("workers", plan.workers)
            .field("rounds", plan.rounds)
            .field("work", plan.work)
            .field("uneven", plan.uneven)
            .hex("checksum", answer)
            .elapsed(elapsed),
        verified,
        failure: "checksum mismatch".into(),
    })
}
