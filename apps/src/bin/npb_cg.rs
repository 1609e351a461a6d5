//! `npb-cg`: the NPB CG kernel (inverse power method with 25 conjugate gradient steps per
//! outer iteration) with the matrix rows distributed over worker actors on all nodes and
//! cores, verified against the official `zeta`.
//!
//! The rows are cut into [`BLOCKS`] fixed blocks; every worker owns a contiguous range of
//! blocks. A worker keeps its rows of the matrix and of `z`, `r`, `q`, and a full copy of
//! `x` and `p`. Every dot product is reduced as per-block partial sums that each worker
//! adds up in block order, so all workers compute bit-identical scalars, and since the
//! blocks do not depend on the number of workers, neither do the results.
//!
//! One CG step needs two all-to-all exchanges (NPB's `conj_grad` has three reductions and
//! a gather of `p`; they fold into two):
//! - `Direction`: after `q = A p` on its rows, a worker shares its partials of `p.q` (and,
//!   on the first step, of `r.r`). With `d` everyone updates its rows of `z` and `r`.
//! - `Residual`: a worker shares its rows of `r` and its partials of `r.r`. With `rho`
//!   everyone forms the whole new `p = r + beta p` and multiplies its rows again.
//!
//! After the last step a `Solution` exchange shares the rows of `z` with the partials of
//! `x.z` and `z.z`; everyone then has `zeta` and the new `x`, and sends its partials of
//! `||x - A z||^2` to the collector, which reports NPB's per-iteration table.
//!
//! Shares arrive tagged with a step number and are kept until their step comes (during a
//! recovery replay, shares of many future steps may be waiting). A worker handles at most
//! one step per message and follows each step with one `Resume` to itself, so no handler
//! runs long and what a worker sends, to itself included, depends only on the steps done.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, Context, ReplyTo};
use lazarus_apps::ending::Verdict;
use lazarus_apps::npb::cg::{self, Matrix, CGITMAX};
use lazarus_apps::npb::driver::{self, Done, Kernel};
use lazarus_apps::npb::exchange::Exchanges;
use lazarus_apps::npb::{exact, split, Class, Placement};
use lazarus_apps::{init_logging, ResultLine};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Fixed row blocks: the unit of the reductions, hence the most workers there can be.
const BLOCKS: usize = 64;

/// NPB CG: conjugate gradient on a random sparse matrix, verified against the official
/// zeta. Runs on any number of nodes N >= 1 (alone, under `lazarus run -n N` or under
/// Slurm) with up to 64 workers in all; the result is bit-identical for every N.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Problem class: S (na=1400), W (na=7000) or A (na=14000).
    #[arg(long, value_enum, ignore_case = true, default_value_t = Class::S)]
    class: Class,
    /// Workers in the whole cluster (default: one per core of every node, at most 64).
    #[arg(long)]
    workers: Option<usize>,
    /// Cores to use on each node (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
}

/// The block-based layout every worker computes identically.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Rows {
    na: usize,
    workers: usize,
}

impl Rows {
    fn blocks_of(&self, w: usize) -> Range<usize> {
        split(BLOCKS, self.workers, w)
    }

    fn block(&self, b: usize) -> Range<usize> {
        split(self.na, BLOCKS, b)
    }

    fn of(&self, w: usize) -> Range<usize> {
        let blocks = self.blocks_of(w);
        self.block(blocks.start).start..self.block(blocks.end - 1).end
    }
}

/// What the shares of a step carry, hence what to do once they are all in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Phase {
    /// Partials of `p.q` (preceded on the first CG step by those of `r.r`).
    Direction,
    /// Rows of `r` and partials of `r.r`.
    Residual,
    /// Rows of `z` and partials of `x.z` then `z.z`.
    Solution,
}

/// One worker's contribution to an exchange.
#[derive(Debug, Serialize, Deserialize)]
struct Contribution {
    /// The worker's rows of a vector (empty when the step shares only partials).
    segment: Vec<f64>,
    /// Per-block partial sums: each quantity for all the worker's blocks, in block order.
    partials: Vec<f64>,
}

/// Owns a range of rows and runs NPB's CG on them in step with the other workers.
#[derive(Actor, Serialize, Deserialize)]
struct Worker {
    index: usize,
    placement: Placement,
    layout: Rows,
    niter: usize,
    shift: f64,
    /// Global rows of this worker.
    rows: Range<usize>,
    /// This worker's rows of the matrix (global column indices).
    matrix: Matrix,
    /// The whole current `x`.
    x: Vec<f64>,
    /// The whole current search direction `p`.
    p: Vec<f64>,
    /// This worker's rows of `z`, `r` and `q = A p`.
    z: Vec<f64>,
    r: Vec<f64>,
    q: Vec<f64>,
    /// `r.r`, and its value before the current step (`rho0` in `cg.c`).
    rho: f64,
    rho0: f64,
    /// Outer iteration (1-based) and CG step within it (1-based).
    it: usize,
    cgit: usize,
    /// The exchange this worker waits for, and what it carries.
    step: u64,
    phase: Phase,
    /// Shares of the steps not handled yet; early ones wait here for their step.
    pending: Exchanges<Contribution>,
    /// Whether `Start` has come: before it, shares from faster workers are only stored.
    started: bool,
    peers: Vec<ActorRef<Worker>>,
    collector: Option<ActorRef<Collector>>,
}

#[messages]
impl Worker {
    /// Resolves the other workers and the collector, then starts the first iteration.
    #[message]
    fn start(&mut self, ctx: &mut Context<Self>) {
        self.peers = self.placement.peers(ctx.node());
        self.collector = Some(Placement::collector_on(ctx.node()));
        self.started = true;
        self.begin_iteration();
        self.progress(ctx);
    }

    /// Worker `from`'s contribution to exchange `step`.
    #[message]
    fn share(
        &mut self,
        ctx: &mut Context<Self>,
        step: u64,
        from: usize,
        segment: Vec<f64>,
        partials: Vec<f64>,
    ) {
        // Anything else would be a protocol bug; failing loudly beats a silent hang (the
        // failure hook ends the process).
        assert!(
            step >= self.step && from < self.layout.workers && from != self.index,
            "worker {}: share of step {step} from {from} while at step {}",
            self.index,
            self.step
        );
        self.pending
            .deposit(step, from, Contribution { segment, partials });
        if self.started {
            self.progress(ctx);
        }
    }

    /// Handles the next step if it is complete (the worker sends this to itself after each
    /// step, so that one handler never does more than one step's work).
    #[message]
    fn resume(&mut self, ctx: &mut Context<Self>) {
        self.progress(ctx);
    }
}

impl Worker {
    fn new(index: usize, placement: Placement, params: &cg::Params, matrix: &Matrix) -> Worker {
        let layout = Rows {
            na: params.na,
            workers: placement.workers,
        };
        let rows = layout.of(index);
        let len = rows.len();
        Worker {
            index,
            placement,
            layout,
            niter: params.niter,
            shift: params.shift,
            matrix: matrix.slice(rows.clone()),
            rows,
            x: vec![1.0; layout.na],
            p: vec![0.0; layout.na],
            z: vec![0.0; len],
            r: vec![0.0; len],
            q: vec![0.0; len],
            rho: 0.0,
            rho0: 0.0,
            it: 1,
            cgit: 1,
            step: 0,
            phase: Phase::Direction,
            pending: Exchanges::new(placement.workers),
            started: false,
            peers: Vec::new(),
            collector: None,
        }
    }

    /// Per-block sums of `term(j)` over this worker's rows `j` (global), each block summed
    /// in row order from zero.
    fn per_block(&self, term: impl Fn(usize) -> f64) -> Vec<f64> {
        self.layout
            .blocks_of(self.index)
            .map(|b| {
                let mut sum = 0.0;
                for j in self.layout.block(b) {
                    sum += term(j);
                }
                sum
            })
            .collect()
    }

    /// The global value of quantity `k` from everyone's partials: every block's partial in
    /// block order, whoever computed it.
    fn reduce(&self, shares: &[Contribution], k: usize) -> f64 {
        let mut sum = 0.0;
        for (w, share) in shares.iter().enumerate() {
            let nb = self.layout.blocks_of(w).len();
            for v in &share.partials[k * nb..(k + 1) * nb] {
                sum += v;
            }
        }
        sum
    }

    /// `q = A p` on this worker's rows.
    fn multiply(&mut self) {
        for (i, q) in self.q.iter_mut().enumerate() {
            *q = self.matrix.row_dot(i, &self.p);
        }
    }

    /// The start of `conj_grad`: `z = 0`, `r = x`, `p = r`, then the first `q = A p`.
    fn begin_iteration(&mut self) {
        let start = self.rows.start;
        self.z.fill(0.0);
        self.r.copy_from_slice(&self.x[self.rows.clone()]);
        self.p.copy_from_slice(&self.x);
        self.cgit = 1;
        let mut partials = self.per_block(|j| self.x[j] * self.x[j]);
        self.multiply();
        partials.extend(self.per_block(|j| self.p[j] * self.q[j - start]));
        self.publish(Phase::Direction, Vec::new(), partials);
    }

    /// Contributes to the current step: keeps our own share and sends it to the others.
    fn publish(&mut self, phase: Phase, segment: Vec<f64>, partials: Vec<f64>) {
        self.phase = phase;
        for (w, peer) in self.peers.iter().enumerate() {
            if w != self.index {
                peer.tell(Share {
                    step: self.step,
                    from: self.index,
                    segment: segment.clone(),
                    partials: partials.clone(),
                })
                .unwrap_or_else(|e| panic!("worker {}: peer {w} unreachable: {e}", self.index));
            }
        }
        self.pending
            .deposit(self.step, self.index, Contribution { segment, partials });
    }

    /// Handles the current step if every share is in. Every step handled is followed by
    /// exactly one `Resume` to ourselves, whatever has arrived meanwhile: each handler does
    /// at most one step's work, and the messages a worker sends itself depend, like those
    /// it sends the others, only on the steps it has done (recovery replays rely on it).
    fn progress(&mut self, ctx: &mut Context<Self>) {
        let Some(shares) = self.pending.take(self.step) else {
            return;
        };
        self.step += 1;
        match self.phase {
            Phase::Direction => self.on_direction(&shares),
            Phase::Residual => self.on_residual(&shares),
            Phase::Solution => self.on_solution(&shares),
        }
        ctx.myself()
            .tell(Resume)
            .unwrap_or_else(|e| panic!("worker {}: cannot resume: {e}", self.index));
    }

    /// `alpha = rho / p.q`, then `z += alpha p`, `r -= alpha q` on our rows.
    fn on_direction(&mut self, shares: &[Contribution]) {
        let d = if self.cgit == 1 {
            self.rho = self.reduce(shares, 0);
            self.reduce(shares, 1)
        } else {
            self.reduce(shares, 0)
        };
        let alpha = self.rho / d;
        self.rho0 = self.rho;
        let start = self.rows.start;
        for (i, (z, r)) in self.z.iter_mut().zip(self.r.iter_mut()).enumerate() {
            *z += alpha * self.p[start + i];
            *r -= alpha * self.q[i];
        }
        if self.cgit < CGITMAX {
            let partials = self.per_block(|j| self.r[j - start] * self.r[j - start]);
            self.publish(Phase::Residual, self.r.clone(), partials);
        } else {
            // cg.c also forms rho, beta and p after the last step, but never uses them.
            let mut partials = self.per_block(|j| self.x[j] * self.z[j - start]);
            partials.extend(self.per_block(|j| self.z[j - start] * self.z[j - start]));
            self.publish(Phase::Solution, self.z.clone(), partials);
        }
    }

    /// `beta = rho / rho0`, the whole new `p = r + beta p`, and the next `q = A p`.
    fn on_residual(&mut self, shares: &[Contribution]) {
        self.rho = self.reduce(shares, 0);
        let beta = self.rho / self.rho0;
        for (w, share) in shares.iter().enumerate() {
            let rows = self.layout.of(w);
            for (p, r) in self.p[rows].iter_mut().zip(&share.segment) {
                *p = r + beta * *p;
            }
        }
        self.cgit += 1;
        self.multiply();
        let start = self.rows.start;
        let partials = self.per_block(|j| self.p[j] * self.q[j - start]);
        self.publish(Phase::Direction, Vec::new(), partials);
    }

    /// The end of an outer iteration: `zeta`, the residual norm's partials for the
    /// collector, and the normalised `z` as the next `x`.
    fn on_solution(&mut self, shares: &[Contribution]) {
        let mut z = vec![0.0; self.layout.na];
        for (w, share) in shares.iter().enumerate() {
            z[self.layout.of(w)].copy_from_slice(&share.segment);
        }
        let norm_temp1 = self.reduce(shares, 0);
        let norm_temp2 = self.reduce(shares, 1);
        // ||x - A z||, with the x this iteration started from.
        let start = self.rows.start;
        let residual = self.per_block(|j| {
            let d = self.x[j] - self.matrix.row_dot(j - start, &z);
            d * d
        });
        let norm_temp2 = 1.0 / norm_temp2.sqrt();
        let zeta = self.shift + 1.0 / norm_temp1;
        for (x, z) in self.x.iter_mut().zip(&z) {
            *x = norm_temp2 * z;
        }
        self.collector
            .as_ref()
            .expect("started")
            .tell(Report {
                it: self.it,
                from: self.index,
                residual,
                zeta,
            })
            .unwrap_or_else(|e| panic!("worker {}: collector unreachable: {e}", self.index));
        if self.it < self.niter {
            self.it += 1;
            self.begin_iteration();
        }
    }
}

/// Lives on rank 0: assembles NPB's per-iteration `||r||` and `zeta` table.
#[derive(Actor, Serialize, Deserialize)]
struct Collector {
    /// Per iteration: each worker's residual partials, once arrived.
    residuals: Vec<Vec<Option<Vec<f64>>>>,
    /// Per iteration: `zeta`, which every worker computes identically.
    zetas: Vec<Option<f64>>,
    missing: usize,
    done: ReplyTo<Vec<(f64, f64)>>,
}

#[messages]
impl Collector {
    /// Worker `from`'s partials of `||x - A z||^2` after iteration `it`, and its `zeta`.
    #[message]
    fn report(&mut self, it: usize, from: usize, residual: Vec<f64>, zeta: f64) {
        let slot = &mut self.residuals[it - 1][from];
        assert!(
            slot.is_none(),
            "worker {from} reported iteration {it} twice"
        );
        *slot = Some(residual);
        match self.zetas[it - 1] {
            None => self.zetas[it - 1] = Some(zeta),
            // Every worker reduces the same partials in the same order.
            Some(z) => assert_eq!(
                z.to_bits(),
                zeta.to_bits(),
                "workers disagree on zeta in iteration {it}"
            ),
        }
        self.missing -= 1;
        self.reply_if_done();
    }

    /// Replies with `(||r||, zeta)` of every iteration once all are in.
    #[message]
    fn wait(&mut self, reply: ReplyTo<Vec<(f64, f64)>>) {
        self.done = reply;
        self.reply_if_done();
    }
}

impl Collector {
    fn reply_if_done(&mut self) {
        if self.missing > 0 || !self.done.is_requested() {
            return;
        }
        let table = self
            .residuals
            .iter()
            .zip(&self.zetas)
            .map(|(parts, zeta)| {
                // Worker order is block order.
                let mut sum = 0.0;
                for v in parts.iter().flatten().flatten() {
                    sum += v;
                }
                (sum.sqrt(), zeta.expect("complete"))
            })
            .collect();
        self.done.take().send(table);
    }
}

/// CG's parts for the shared driver.
struct Cg {
    params: cg::Params,
    /// `--workers`.
    workers: Option<usize>,
    /// The whole matrix, generated for the first of this node's workers.
    matrix: Option<Matrix>,
}

impl Kernel for Cg {
    type Collector = Collector;
    type Worker = Worker;
    type Start = Start;
    type Wait = Wait;
    const START: Start = Start;
    const WAIT: Wait = Wait;

    fn workers(&self, nodes: usize, cores: usize) -> usize {
        driver::one_per_core(self.workers, nodes, cores, BLOCKS)
    }

    fn collector(&self, placement: &Placement) -> Collector {
        let (workers, niter) = (placement.workers, self.params.niter);
        Collector {
            residuals: vec![vec![None; workers]; niter],
            zetas: vec![None; niter],
            missing: workers * niter,
            done: ReplyTo::none(),
        }
    }

    /// Every node with workers generates the whole matrix (the generator is one sequential
    /// random stream, as in the NPB MPI version); each worker keeps its rows. Not timed, as
    /// in NPB.
    fn worker(&mut self, w: usize, placement: &Placement) -> Worker {
        let matrix = self.matrix.get_or_insert_with(|| cg::makea(&self.params));
        Worker::new(w, *placement, &self.params, matrix)
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let class = args.class;
    let params = cg::params(class);
    driver::check_count("--workers", args.workers, BLOCKS)?;
    let kernel = Cg {
        params,
        workers: args.workers,
        matrix: None,
    };
    // Rank 0 reports before the cluster shuts down: the RESULT is out before any node may leave.
    driver::run(kernel, args.cores, |done| {
        let Done {
            outcome: table,
            elapsed,
            nodes,
            workers,
        } = done;
        let (rnorm, zeta) = *table.last().expect("at least one iteration");
        let (err, verified) = cg::verify(&params, zeta);
        println!(
            "NPB CG class {class}: na={} nonzer={} over {workers} workers on {nodes} nodes",
            params.na, params.nonzer
        );
        println!("   iteration           ||r||                 zeta");
        for (it, (rnorm, zeta)) in table.iter().enumerate() {
            println!("    {:5}       {rnorm:20.14e}{zeta:20.13}", it + 1);
        }
        Verdict {
            result: ResultLine::new("npb-cg")
                .field("class", class)
                .field("nodes", nodes)
                .field("workers", workers)
                .field("na", params.na)
                .field("zeta", exact(zeta))
                .field("zeta_err", format!("{err:.3e}"))
                .field("rnorm", exact(rnorm))
                .elapsed(elapsed)
                .field("mops", format!("{:.2}", cg::mops(&params, elapsed))),
            verified,
            failure: format!(
                "verification failed: zeta {zeta} is off by {err:e} (tolerance {:e})",
                cg::EPSILON
            ),
        }
    })
}
