//! `npb-mg`: the NPB MG kernel (V-cycle multigrid on a periodic 3D grid) with every level
//! decomposed into z-slabs over worker actors on all nodes and cores, verified against the
//! official residual norm.
//!
//! At each level `k` (`2^k` points per side) worker `w` owns the contiguous interior
//! planes `split(2^k, workers, w)`; on coarse levels some workers own none. Every worker
//! runs the same program: NPB's sequence of operators (`resid`, `psinv`, `rprj3`,
//! `interp`, `zero3`), each applied plane by plane with `mg.c`'s expressions (see
//! `lazarus_apps::npb::mg`). Before an operator, each worker sends every other worker the
//! planes of its input that the other reads and does not own: z-ghost planes for `resid`
//! and `psinv`, the fine planes under a coarse slab for `rprj3`, the coarse planes over a
//! fine slab for `interp`. Which planes go where follows from the layout alone, so every
//! worker knows whom it waits for. Planes arrive tagged with the operator's position in
//! the program and wait there until the receiver gets to it (during a recovery replay,
//! planes for many operators ahead may be waiting).
//!
//! Every point is computed by the same expression from the same inputs as in the serial
//! `mg.c`, and the final norm adds per-plane sums in plane order, so the result is
//! bit-identical for any number of nodes and workers.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, Context, ReplyTo};
use lazarus_apps::ending::Verdict;
use lazarus_apps::npb::driver::{self, Done, Kernel};
use lazarus_apps::npb::mg::{self, size};
use lazarus_apps::npb::{exact, part_of, split, Class, Placement};
use lazarus_apps::{init_logging, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// NPB MG: V-cycle multigrid on a periodic cube, verified against the official residual
/// norm. Runs on any number of nodes N >= 1 (alone, under `lazarus run -n N` or under
/// Slurm) with at most one worker per plane of the finest grid (32 for class S); the
/// result is bit-identical for every N.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Problem class: S (32^3), W (128^3) or A (256^3), 4 V-cycles each.
    #[arg(long, value_enum, ignore_case = true, default_value_t = Class::S)]
    class: Class,
    /// Workers in the whole cluster (default: one per core of every node).
    #[arg(long)]
    workers: Option<usize>,
    /// Cores to use on each node (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
}

/// Which planes every worker owns at every level; computed identically everywhere.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Slabs {
    workers: usize,
}

impl Slabs {
    /// Worker `w`'s interior planes of level `k` (1-based `i3`, possibly empty).
    fn own(&self, k: usize, w: usize) -> Range<usize> {
        let r = split(size(k), self.workers, w);
        r.start + 1..r.end + 1
    }

    /// The owner of interior plane `i3` of level `k`.
    fn owner(&self, k: usize, i3: usize) -> usize {
        part_of(size(k), self.workers, i3 - 1)
    }
}

/// A grid of the V-cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Array {
    /// The approximate solution `u`.
    U,
    /// The residual `r`.
    R,
}

/// One operator of the program every worker runs, named after `mg.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    /// `resid` at level `k`: `r = v - A u`, where `v` is the right-hand side on the finest
    /// level and `r` itself below.
    Resid(usize),
    /// `psinv` at level `k`: `u = u + C r`.
    Psinv(usize),
    /// `rprj3` from level `k` to `k - 1`.
    Rprj3(usize),
    /// `interp` from level `k - 1` to `k`.
    Interp(usize),
    /// `zero3` of `u` at level `k`.
    Zero(usize),
    /// `norm2u3` of the finest `r`: partial sums to the collector.
    Norm,
}

impl Op {
    /// The grid the operator reads across planes, as (array, level).
    fn input(self) -> Option<(Array, usize)> {
        match self {
            Op::Resid(k) => Some((Array::U, k)),
            Op::Psinv(k) | Op::Rprj3(k) => Some((Array::R, k)),
            Op::Interp(k) => Some((Array::U, k - 1)),
            Op::Zero(_) | Op::Norm => None,
        }
    }

    /// The level the operator writes.
    fn output_level(self, lt: usize) -> usize {
        match self {
            Op::Resid(k) | Op::Psinv(k) | Op::Interp(k) | Op::Zero(k) => k,
            Op::Rprj3(k) => k - 1,
            Op::Norm => lt,
        }
    }

    /// The interior planes of the input grid that computing output planes `own` reads,
    /// with periodic ghost planes mapped to the interior planes they copy.
    fn reads(self, own: Range<usize>) -> BTreeSet<usize> {
        let Some((_, level)) = self.input() else {
            return BTreeSet::new();
        };
        if own.is_empty() {
            return BTreeSet::new();
        }
        let n = size(level);
        let wrap = |i3: usize| match i3 {
            0 => n,
            i if i == n + 1 => 1,
            i => i,
        };
        let (lo, hi) = (own.start, own.end - 1);
        let span = match self {
            Op::Resid(_) | Op::Psinv(_) => lo - 1..=hi + 1,
            // Coarse plane j3 reads fine planes 2 j3 - 1 ..= 2 j3 + 1.
            Op::Rprj3(_) => 2 * lo - 1..=2 * hi + 1,
            // Fine plane 2 i3 reads coarse plane i3; fine plane 2 i3 + 1 also i3 + 1.
            Op::Interp(_) => lo / 2..=hi.div_ceil(2),
            Op::Zero(_) | Op::Norm => unreachable!("no input"),
        };
        span.map(wrap).collect()
    }
}

/// NPB's timed part as a list of operators: the initial residual, `nit` V-cycles
/// (`mg3P`) each followed by a residual, and the final norm.
fn program(lt: usize, nit: usize) -> Vec<Op> {
    let mut ops = vec![Op::Resid(lt)];
    for _ in 0..nit {
        ops.extend((2..=lt).rev().map(Op::Rprj3));
        ops.extend([Op::Zero(1), Op::Psinv(1)]);
        for k in 2..lt {
            ops.extend([Op::Zero(k), Op::Interp(k), Op::Resid(k), Op::Psinv(k)]);
        }
        ops.extend([Op::Interp(lt), Op::Resid(lt), Op::Psinv(lt), Op::Resid(lt)]);
    }
    ops.push(Op::Norm);
    ops
}

/// A worker's planes of one level.
#[derive(Debug, Serialize, Deserialize)]
struct Level {
    /// Points per side (interior).
    n: usize,
    /// The interior planes owned (1-based `i3`).
    planes: Range<usize>,
    /// `u` and `r` on those planes, `(n + 2)^2` points each, ghost ring included.
    u: Vec<f64>,
    r: Vec<f64>,
}

impl Level {
    fn new(n: usize, planes: Range<usize>) -> Level {
        let len = planes.len() * (n + 2) * (n + 2);
        Level {
            n,
            planes,
            u: vec![0.0; len],
            r: vec![0.0; len],
        }
    }

    fn m(&self) -> usize {
        self.n + 2
    }

    fn array(&self, a: Array) -> &[f64] {
        match a {
            Array::U => &self.u,
            Array::R => &self.r,
        }
    }
}

/// Plane `i3` (0..=n+1) of an array of `level`: our own storage or a received copy.
fn plane<'a>(
    level: &'a Level,
    array: &'a [f64],
    received: &'a BTreeMap<usize, Vec<f64>>,
    i3: usize,
) -> &'a [f64] {
    let i3 = match i3 {
        0 => level.n,
        i if i == level.n + 1 => 1,
        i => i,
    };
    if level.planes.contains(&i3) {
        let p = level.m() * level.m();
        let at = (i3 - level.planes.start) * p;
        &array[at..at + p]
    } else {
        received
            .get(&i3)
            .unwrap_or_else(|| panic!("plane {i3} of level {} is missing", level.n))
    }
}

/// Planes received for one operator.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Inbox {
    senders: BTreeSet<usize>,
    planes: BTreeMap<usize, Vec<f64>>,
}

/// Owns a z-slab of every level and runs the program in step with the other workers.
#[derive(Actor, Serialize, Deserialize)]
struct Worker {
    index: usize,
    placement: Placement,
    slabs: Slabs,
    lt: usize,
    /// Levels `1..=lt` at indices `1..=lt` (index 0 is an empty placeholder).
    levels: Vec<Level>,
    /// The right-hand side on our finest planes.
    v: Vec<f64>,
    program: Vec<Op>,
    /// The next operator to run.
    pc: usize,
    /// Whether `Start` has come: before it, planes from faster workers are only stored
    /// (we cannot send ours before we know our peers).
    started: bool,
    /// Whether we have sent our planes for operator `pc`.
    sent: bool,
    /// Planes by operator; early ones wait here for their operator.
    inbox: BTreeMap<usize, Inbox>,
    peers: Vec<ActorRef<Worker>>,
    collector: Option<ActorRef<Collector>>,
}

#[messages]
impl Worker {
    /// Resolves the other workers and the collector, then runs.
    #[message]
    fn start(&mut self, ctx: &mut Context<Self>) {
        self.peers = self.placement.peers(ctx.node());
        self.collector = Some(Placement::collector_on(ctx.node()));
        self.started = true;
        self.run(ctx);
    }

    /// Worker `from`'s planes `(i3, values)` for operator `op`.
    #[message]
    fn planes(
        &mut self,
        ctx: &mut Context<Self>,
        op: usize,
        from: usize,
        planes: Vec<(usize, Vec<f64>)>,
    ) {
        // Anything else would be a protocol bug; failing loudly beats a silent hang (the
        // failure hook ends the process).
        assert!(
            op >= self.pc && from != self.index && from < self.placement.workers,
            "worker {}: planes for operator {op} from {from} at operator {}",
            self.index,
            self.pc
        );
        let inbox = self.inbox.entry(op).or_default();
        assert!(
            inbox.senders.insert(from),
            "worker {}: second message for operator {op} from {from}",
            self.index
        );
        inbox.planes.extend(planes);
        if self.started {
            self.run(ctx);
        }
    }

    /// Runs the next operator if its inputs are here (the worker sends this to itself after
    /// each operator, so that one handler never runs more than one).
    #[message]
    fn resume(&mut self, ctx: &mut Context<Self>) {
        self.run(ctx);
    }
}

impl Worker {
    fn new(index: usize, placement: Placement, p: &mg::Params) -> Worker {
        let slabs = Slabs {
            workers: placement.workers,
        };
        let lt = p.levels();
        let mut levels = vec![Level::new(0, 0..0)];
        levels.extend((1..=lt).map(|k| Level::new(size(k), slabs.own(k, index))));
        // zran3 is NPB's untimed setup; each worker builds only its planes.
        let v = mg::rhs_planes(p.n, slabs.own(lt, index));
        Worker {
            index,
            placement,
            slabs,
            lt,
            levels,
            v,
            program: program(lt, p.nit),
            pc: 0,
            started: false,
            sent: false,
            inbox: BTreeMap::new(),
            peers: Vec::new(),
            collector: None,
        }
    }

    /// The input planes worker `w` reads for `op` and does not own.
    fn foreign_reads(&self, op: Op, w: usize) -> BTreeSet<usize> {
        let Some((_, input)) = op.input() else {
            return BTreeSet::new();
        };
        let own_in = self.slabs.own(input, w);
        op.reads(self.slabs.own(op.output_level(self.lt), w))
            .into_iter()
            .filter(|i3| !own_in.contains(i3))
            .collect()
    }

    /// Sends every other worker the planes of ours it reads for operator `pc`.
    fn send_planes(&self) {
        let op = self.program[self.pc];
        let Some((array, input)) = op.input() else {
            return;
        };
        let level = &self.levels[input];
        let empty = BTreeMap::new();
        for (w, peer) in self.peers.iter().enumerate() {
            if w == self.index {
                continue;
            }
            let planes: Vec<(usize, Vec<f64>)> = self
                .foreign_reads(op, w)
                .into_iter()
                .filter(|i3| level.planes.contains(i3))
                .map(|i3| (i3, plane(level, level.array(array), &empty, i3).to_vec()))
                .collect();
            if !planes.is_empty() {
                peer.tell(Planes {
                    op: self.pc,
                    from: self.index,
                    planes,
                })
                .unwrap_or_else(|e| panic!("worker {}: peer {w} unreachable: {e}", self.index));
            }
        }
    }

    /// Whether every plane operator `pc` needs from others is here.
    fn ready(&self) -> bool {
        let op = self.program[self.pc];
        let Some((_, input)) = op.input() else {
            return true;
        };
        let senders: BTreeSet<usize> = self
            .foreign_reads(op, self.index)
            .into_iter()
            .map(|i3| self.slabs.owner(input, i3))
            .collect();
        senders.is_empty()
            || self
                .inbox
                .get(&self.pc)
                .is_some_and(|inbox| inbox.senders == senders)
    }

    /// Runs operator `pc` if its inputs are here, then offers our planes for the next one.
    ///
    /// Every operator run is followed by exactly one `Resume` to ourselves, whatever has
    /// arrived meanwhile: each handler runs at most one operator (so none keeps its core,
    /// which may also drive the network, busy for long), and the messages a worker sends
    /// itself depend, like those it sends the others, only on the operators it has run
    /// (recovery replays rely on it).
    fn run(&mut self, ctx: &mut Context<Self>) {
        if self.pc == self.program.len() {
            return;
        }
        if !self.sent {
            self.send_planes();
            self.sent = true;
        }
        if !self.ready() {
            return;
        }
        let received = self.inbox.remove(&self.pc).unwrap_or_default().planes;
        self.execute(self.program[self.pc], &received);
        self.pc += 1;
        self.sent = false;
        if self.pc < self.program.len() {
            // Right away, so that neighbours waiting for these planes need not wait for
            // our Resume.
            self.send_planes();
            self.sent = true;
        }
        ctx.myself()
            .tell(Resume)
            .unwrap_or_else(|e| panic!("worker {}: cannot resume: {e}", self.index));
    }

    /// Applies `op` to our planes.
    fn execute(&mut self, op: Op, received: &BTreeMap<usize, Vec<f64>>) {
        let lt = self.lt;
        match op {
            Op::Resid(k) => {
                let v = (k == lt).then_some(&self.v);
                let level = &mut self.levels[k];
                let (m, planes) = (level.m(), level.planes.clone());
                let p = m * m;
                let mut r = std::mem::take(&mut level.r);
                for (j, out) in planes.clone().zip(r.chunks_exact_mut(p)) {
                    let at = (j - planes.start) * p;
                    let u = [j - 1, j, j + 1].map(|i3| plane(level, &level.u, received, i3));
                    mg::resid_plane(m, u, v.map(|v| &v[at..at + p]), out);
                }
                level.r = r;
            }
            Op::Psinv(k) => {
                let level = &mut self.levels[k];
                let (m, planes) = (level.m(), level.planes.clone());
                let p = m * m;
                let mut u = std::mem::take(&mut level.u);
                for (j, out) in planes.clone().zip(u.chunks_exact_mut(p)) {
                    let r = [j - 1, j, j + 1].map(|i3| plane(level, &level.r, received, i3));
                    mg::psinv_plane(m, r, out);
                }
                level.u = u;
            }
            Op::Rprj3(k) => {
                let (coarse, fine) = self.levels.split_at_mut(k);
                let (fine, coarse) = (&fine[0], &mut coarse[k - 1]);
                let (mj, planes) = (coarse.m(), coarse.planes.clone());
                for (j, out) in planes.clone().zip(coarse.r.chunks_exact_mut(mj * mj)) {
                    let r =
                        [2 * j - 1, 2 * j, 2 * j + 1].map(|i3| plane(fine, &fine.r, received, i3));
                    mg::rprj3_plane(fine.m(), r, mj, out);
                }
            }
            Op::Interp(k) => {
                let (coarse, fine) = self.levels.split_at_mut(k);
                let (coarse, fine) = (&coarse[k - 1], &mut fine[0]);
                let (m, planes) = (fine.m(), fine.planes.clone());
                for (i, out) in planes.clone().zip(fine.u.chunks_exact_mut(m * m)) {
                    let z = plane(coarse, &coarse.u, received, i / 2);
                    let next = (i % 2 == 1).then(|| plane(coarse, &coarse.u, received, i / 2 + 1));
                    mg::interp_plane(coarse.m(), z, next, out);
                }
            }
            Op::Zero(k) => self.levels[k].u.fill(0.0),
            Op::Norm => {
                let level = &self.levels[lt];
                let m = level.m();
                let sums = level
                    .planes
                    .clone()
                    .zip(level.r.chunks_exact(m * m))
                    .map(|(i3, r)| {
                        let (s, max) = mg::norm_plane(m, r);
                        (i3, s, max)
                    })
                    .collect();
                self.collector
                    .as_ref()
                    .expect("started")
                    .tell(Norms { sums })
                    .unwrap_or_else(|e| {
                        panic!("worker {}: collector unreachable: {e}", self.index)
                    });
            }
        }
    }
}

/// Lives on rank 0: gathers the per-plane sums of the final residual.
#[derive(Actor, Serialize, Deserialize)]
struct Collector {
    n: usize,
    /// `(sum of squares, largest magnitude)` of every finest plane, once arrived.
    planes: Vec<Option<(f64, f64)>>,
    missing: usize,
    done: ReplyTo<(f64, f64)>,
}

#[messages]
impl Collector {
    /// A worker's planes: `(i3, sum of squares, largest magnitude)`.
    #[message]
    fn norms(&mut self, sums: Vec<(usize, f64, f64)>) {
        for (i3, s, max) in sums {
            let slot = &mut self.planes[i3 - 1];
            assert!(slot.is_none(), "plane {i3} reported twice");
            *slot = Some((s, max));
            self.missing -= 1;
        }
        self.reply_if_done();
    }

    /// Replies with `(rnm2, rnmu)` once every plane is in.
    #[message]
    fn wait(&mut self, reply: ReplyTo<(f64, f64)>) {
        self.done = reply;
        self.reply_if_done();
    }
}

impl Collector {
    fn reply_if_done(&mut self) {
        if self.missing == 0 && self.done.is_requested() {
            // Plane order, whoever computed them.
            let norms = mg::norms(self.n, self.planes.iter().flatten().copied());
            self.done.take().send(norms);
        }
    }
}

/// MG's parts for the shared driver.
struct Mg {
    params: mg::Params,
    /// `--workers`.
    workers: Option<usize>,
}

impl Kernel for Mg {
    type Collector = Collector;
    type Worker = Worker;
    type Start = Start;
    type Wait = Wait;
    const START: Start = Start;
    const WAIT: Wait = Wait;

    fn workers(&self, nodes: usize, cores: usize) -> usize {
        driver::one_per_core(self.workers, nodes, cores, self.params.n)
    }

    fn collector(&self, _: &Placement) -> Collector {
        let n = self.params.n;
        Collector {
            n,
            planes: vec![None; n],
            missing: n,
            done: ReplyTo::none(),
        }
    }

    fn worker(&mut self, w: usize, placement: &Placement) -> Worker {
        Worker::new(w, *placement, &self.params)
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let class = args.class;
    let params = mg::params(class);
    driver::check_count("--workers", args.workers, params.n)?;
    let kernel = Mg {
        params,
        workers: args.workers,
    };
    // NPB runs one untimed V-cycle first and then resets u and v: it leaves no trace in
    // the result, so it is left out.
    // Rank 0 reports before the cluster shuts down: the RESULT is out before any node may leave.
    driver::run(kernel, args.cores, |done| {
        let Done {
            outcome: (rnm2, rnmu),
            elapsed,
            nodes,
            workers,
        } = done;
        let (err, verified) = mg::verify(&params, rnm2);
        println!(
            "NPB MG class {class}: {n}x{n}x{n}, {} iterations over {workers} workers on {nodes} nodes",
            params.nit,
            n = params.n
        );
        println!(
            " L2 norm of the residual: {rnm2:20.13e} (reference {:20.13e})",
            params.rnm2
        );
        Verdict {
            result: ResultLine::new("npb-mg")
                .field("class", class)
                .field("nodes", nodes)
                .field("workers", workers)
                .field("n", params.n)
                .field("iterations", params.nit)
                .field("rnm2", exact(rnm2))
                .field("rnmu", exact(rnmu))
                .field("rnm2_err", format!("{err:.3e}"))
                .elapsed(elapsed)
                .field("mops", format!("{:.2}", mg::mops(&params, elapsed))),
            verified,
            failure: format!(
                "verification failed: rnm2 {rnm2:e} is off by {err:e} (tolerance {:e})",
                mg::EPSILON
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_plane_is_owned_by_someone_and_ghosts_wrap() {
        for workers in 1..9 {
            let slabs = Slabs { workers };
            for op in program(5, 1) {
                for w in 0..workers {
                    let own = slabs.own(op.output_level(5), w);
                    for i3 in op.reads(own) {
                        let (_, level) = op.input().expect("reads only with an input");
                        assert!((1..=size(level)).contains(&i3), "{op:?} reads {i3}");
                        assert!(slabs.own(level, slabs.owner(level, i3)).contains(&i3));
                    }
                }
            }
        }
    }

    #[test]
    fn the_program_is_npbs_sequence_of_operators() {
        let ops = program(3, 1);
        use Op::*;
        assert_eq!(
            ops,
            vec![
                Resid(3),
                Rprj3(3),
                Rprj3(2),
                Zero(1),
                Psinv(1),
                Zero(2),
                Interp(2),
                Resid(2),
                Psinv(2),
                Interp(3),
                Resid(3),
                Psinv(3),
                Resid(3),
                Norm
            ]
        );
    }
}
