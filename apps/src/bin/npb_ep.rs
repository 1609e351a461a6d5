//! `npb-ep`: the NPB EP kernel (Gaussian pairs by the polar method) over actors on all
//! nodes and cores, verified against the official NPB sums.
//!
//! The `2^(M-16)` batches of EP are cut into chunks (one batch by default), one actor per
//! chunk (like the tiles of `jacobi2d`, many more actors than cores). Each chunk actor
//! computes its batches in one handler of a few milliseconds and sends their [`Tally`]s to
//! the collector on rank 0, which adds them in batch order. Many small actors rather than
//! one long-running worker per core keep every handler and every executor turn short, so
//! the network (which a single-core node drives between turns) keeps moving.
//!
//! Because every batch is computed by the same code from its own seed and the tallies are
//! combined in a fixed order, `sx`, `sy` and the counts are bit-identical for any number of
//! nodes and any chunk size.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, Context, ReplyTo};
use lazarus_apps::ending::Verdict;
use lazarus_apps::npb::driver::{self, Done, Kernel};
use lazarus_apps::npb::ep::{self, Tally};
use lazarus_apps::npb::{exact, Class, Placement};
use lazarus_apps::{init_logging, ResultLine};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Default batches per chunk actor: one batch is 2-3 ms of work in a release build. A
/// single-core node drives the network between executor turns, one turn per actor here,
/// every 16 turns; short chunks keep those gaps far below the 1 s failure timeout even on
/// an oversubscribed machine.
const BATCHES_PER_ACTOR: usize = 1;

/// NPB EP: Gaussian random pairs, verified against the official sums. Runs on any number
/// of nodes N >= 1 (alone, under `lazarus run -n N` or under Slurm); the result is
/// bit-identical for every N.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Problem class: S (2^24 pairs), W (2^25) or A (2^28).
    #[arg(long, value_enum, ignore_case = true, default_value_t = Class::S)]
    class: Class,
    /// Batches of 2^16 pairs per actor (default: 1). The result does not depend on it.
    #[arg(long)]
    batches_per_actor: Option<usize>,
    /// Cores to use on each node (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
}

/// Computes one chunk of batches.
#[derive(Actor, Serialize, Deserialize)]
struct Chunk {
    batches: Range<u64>,
    /// `A^(2 NK)`, from one batch's seed to the next's.
    an: f64,
}

#[messages]
impl Chunk {
    /// Computes the chunk and reports its tallies to the collector.
    #[message]
    fn start(&mut self, ctx: &mut Context<Self>) {
        let mut scratch = Vec::new();
        let tallies = self
            .batches
            .clone()
            .map(|k| ep::batch(k, self.an, &mut scratch))
            .collect();
        let collector: ActorRef<Collector> = Placement::collector_on(ctx.node());
        collector
            .tell(BatchesDone {
                first: self.batches.start,
                tallies,
            })
            .unwrap_or_else(|e| panic!("chunk {:?}: collector unreachable: {e}", self.batches));
    }
}

/// Lives on rank 0: gathers every batch's tally and adds them up in batch order.
#[derive(Actor, Serialize, Deserialize)]
struct Collector {
    /// Tally of every batch, by batch number, once it has arrived.
    tallies: Vec<Option<Tally>>,
    missing: usize,
    done: ReplyTo<Tally>,
}

#[messages]
impl Collector {
    /// The tallies of batches `first..first + tallies.len()`.
    #[message]
    fn batches_done(&mut self, first: u64, tallies: Vec<Tally>) {
        for (k, t) in tallies.into_iter().enumerate() {
            let slot = &mut self.tallies[first as usize + k];
            assert!(
                slot.is_none(),
                "batch {} reported twice",
                first as usize + k
            );
            *slot = Some(t);
            self.missing -= 1;
        }
        self.reply_if_done();
    }

    /// Replies with the total once every batch is in.
    #[message]
    fn wait(&mut self, reply: ReplyTo<Tally>) {
        self.done = reply;
        self.reply_if_done();
    }
}

impl Collector {
    fn reply_if_done(&mut self) {
        if self.missing == 0 && self.done.is_requested() {
            let total = ep::combine(self.tallies.iter().flatten());
            self.done.take().send(total);
        }
    }
}

/// EP's parts for the shared driver.
struct Ep {
    /// Batches in the class.
    total: usize,
    /// Batches per chunk actor.
    per_actor: usize,
    /// `A^(2 NK)`.
    an: f64,
}

impl Kernel for Ep {
    type Collector = Collector;
    type Worker = Chunk;
    type Start = Start;
    type Wait = Wait;
    const START: Start = Start;
    const WAIT: Wait = Wait;
    const WORKER: &'static str = "chunk";

    /// The chunks depend only on the class and the command line, so every node computes
    /// the same placement whatever its core count.
    fn workers(&self, _nodes: usize, _cores: usize) -> usize {
        self.total.div_ceil(self.per_actor)
    }

    fn collector(&self, _: &Placement) -> Collector {
        Collector {
            tallies: vec![None; self.total],
            missing: self.total,
            done: ReplyTo::none(),
        }
    }

    fn worker(&mut self, c: usize, _: &Placement) -> Chunk {
        let batches =
            (c * self.per_actor) as u64..((c + 1) * self.per_actor).min(self.total) as u64;
        Chunk {
            batches,
            an: self.an,
        }
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let class = args.class;
    let total = ep::batches(class) as usize;
    driver::check_count("--batches-per-actor", args.batches_per_actor, total)?;
    let per_actor = args.batches_per_actor.unwrap_or(BATCHES_PER_ACTOR);
    let kernel = Ep {
        total,
        per_actor,
        an: ep::batch_multiplier(),
    };
    // Rank 0 reports before the cluster shuts down: the RESULT is out before any node may leave.
    driver::run(kernel, args.cores, |done| {
        let Done {
            outcome: tally,
            elapsed,
            nodes,
            workers: chunks,
        } = done;
        let (sx_err, sy_err, verified) = ep::verify(class, tally.sx, tally.sy);
        println!(
            "NPB EP class {class}: 2^{} pairs in {total} batches, {per_actor} per actor, on {nodes} nodes",
            ep::m(class)
        );
        for (l, count) in tally.q.iter().enumerate() {
            println!("  annulus {l}: {count}");
        }
        let counts: Vec<String> = tally.q.iter().map(u64::to_string).collect();
        Verdict {
            result: ResultLine::new("npb-ep")
                .field("class", class)
                .field("nodes", nodes)
                .field("actors", chunks)
                .field("batches_per_actor", per_actor)
                .field("m", ep::m(class))
                .field("sx", exact(tally.sx))
                .field("sy", exact(tally.sy))
                .field("sx_err", format!("{sx_err:.3e}"))
                .field("sy_err", format!("{sy_err:.3e}"))
                .field("gaussian_pairs", tally.pairs())
                .field("counts", counts.join(","))
                .elapsed(elapsed)
                .field("mops", format!("{:.2}", ep::mops(class, elapsed))),
            verified,
            failure: format!(
                "verification failed: sx relative error {sx_err:e}, sy relative error {sy_err:e} \
                 (tolerance {:e})",
                ep::EPSILON
            ),
        }
    })
}
