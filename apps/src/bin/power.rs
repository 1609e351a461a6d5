//! `power`: power iteration for the dominant eigenvalue of a dense symmetric matrix whose
//! row blocks live in actors on every node, driven step by step from node 0.
//!
//! Each step, the coordinator asks every block for its rows of `A·x`, normalises the
//! result and starts the next step with it: its data moves as asks and replies, most of
//! them between nodes. The coordinator is either node 0's `main`, written as a plain loop
//! (a solver's outer iteration, a parameter sweep), or with `--coordinator actor` an actor
//! whose asks (`ctx.ask(..).reply_as::<Part>()`) bring the replies back as its messages,
//! or with `--coordinator async` an actor whose `async fn` handler, one per step, asks
//! every block and awaits all the replies (`join_all`).
//! With recovery on, a node that dies mid-run is restored and the asks and their replies
//! are replayed (docs/recovery.md, "The app's main" and "Asks between actors"), so the
//! answer is the failure-free one. The answer is verified against the same iteration
//! computed sequentially, bit for bit.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Power iteration with `main` as the coordinator.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Matrix order.
    #[arg(long, default_value_t = 512)]
    n: usize,
    /// Steps of the iteration.
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// Row blocks (actors) per node.
    #[arg(long, default_value_t = 2)]
    blocks_per_node: usize,
    /// Verify the answer against a sequential run of the same iteration.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    check: bool,
    /// Blocks answer each ask this many microseconds later, from a timer's handler,
    /// keeping its reply slot in their state meanwhile (so checkpoints hold slots).
    #[arg(long)]
    reply_after_us: Option<u64>,
    /// Who drives the iteration: node 0's `main` (a loop of asks) or an actor on node 0
    /// (asks whose replies are its messages).
    #[arg(long, value_enum, default_value_t = CoordinatorKind::Main)]
    coordinator: CoordinatorKind,
    /// Break the determinism contract on purpose: a restarted `main` asks its blocks in
    /// the reverse order, so the replies kept from before the failure answer other
    /// blocks' questions (the runtime must report it).
    #[arg(long)]
    break_contract: bool,
}

/// Who drives the iteration.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum CoordinatorKind {
    /// Node 0's `main`.
    Main,
    /// The `Coordinator` actor on node 0.
    Actor,
    /// The `AsyncCoordinator` actor on node 0: one async handler per step.
    Async,
}

/// The matrix entry `A[i][j]`: symmetric, diagonally dominant, with a clear dominant
/// eigenvalue.
fn entry(i: usize, j: usize) -> f64 {
    let d = i.abs_diff(j) as f64;
    1.0 / (1.0 + d) + if i == j { 2.0 } else { 0.0 }
}

/// The rows of `matrix` (row-major, `n` columns) times `x`, each row summed in column
/// order (the sequential check sums in the same order, so the answers agree bit for bit).
fn multiply_rows(n: usize, matrix: &[f64], x: &[f64]) -> Vec<f64> {
    matrix
        .chunks_exact(n)
        .map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

/// One step's bookkeeping, shared by the distributed and the sequential run: returns the
/// next `x` and the Rayleigh quotient `x·Ax` of this step's `x`.
fn normalise(x: &[f64], y: Vec<f64>) -> (Vec<f64>, f64) {
    let lambda: f64 = x.iter().zip(&y).map(|(a, b)| a * b).sum();
    let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
    (y.into_iter().map(|v| v / norm).collect(), lambda)
}

/// Whether this process is a restarted node's.
fn restarted() -> bool {
    std::env::var("LAZARUS_INCARNATION").is_ok_and(|i| i != "0")
}

fn start_vector(n: usize) -> Vec<f64> {
    vec![1.0 / (n as f64).sqrt(); n]
}

/// A block of consecutive rows of `A`.
#[derive(Actor, Serialize, Deserialize)]
struct Block {
    /// Its position among the blocks.
    index: usize,
    n: usize,
    /// Its rows of `A`, row-major.
    matrix: Vec<f64>,
    /// Products computed so far: the coordinator checks that every step's ask was
    /// handled exactly once (a recovery that handled one twice, or skipped one, would
    /// show).
    products: u64,
    /// Answer this long later, from a timer's handler (`--reply-after-us`).
    reply_after: Option<Duration>,
    /// With `reply_after`: the answer and its slot, kept until the block's timer
    /// fires (a checkpoint in between holds the slot).
    waiting: Option<(ReplyTo<Product>, Product)>,
    /// This process has run a handler of the block.
    #[serde(skip)]
    ran: bool,
}

impl Block {
    fn new(
        index: usize,
        first: usize,
        rows: usize,
        n: usize,
        reply_after: Option<Duration>,
    ) -> Self {
        let matrix = (first..first + rows)
            .flat_map(|i| (0..n).map(move |j| entry(i, j)))
            .collect();
        Block {
            index,
            n,
            matrix,
            products: 0,
            reply_after,
            waiting: None,
            ran: false,
        }
    }
}

/// A block's answer to one step.
#[derive(Serialize, Deserialize, Debug)]
struct Product {
    block: usize,
    /// The step it answers.
    step: u64,
    /// Its rows of `A·x`.
    rows: Vec<f64>,
    /// How many products it has computed.
    products: u64,
}

#[messages]
impl Block {
    /// This block's rows of `A·x`.
    #[message]
    fn multiply(
        &mut self,
        step: u64,
        x: Vec<f64>,
        ctx: &mut Context<Self>,
        reply: ReplyTo<Product>,
    ) {
        self.ran = true;
        self.products += 1;
        let product = Product {
            block: self.index,
            step,
            rows: multiply_rows(self.n, &self.matrix, &x),
            products: self.products,
        };
        let Some(delay) = self.reply_after else {
            reply.send(product);
            return;
        };
        // One ask at a time: the coordinator asks again only after every answer.
        if let Some((earlier, product)) = self.waiting.replace((reply, product)) {
            earlier.send(product);
        }
        ctx.send_after(delay, Answer);
    }

    /// Answers the kept ask.
    #[message]
    fn answer(&mut self) {
        if let Some((reply, product)) = self.waiting.take() {
            if !std::mem::replace(&mut self.ran, true) && restarted() {
                tracing::info!(
                    "block {} answers a slot its checkpoint held (step {})",
                    self.index,
                    product.step
                );
            }
            reply.send(product);
        }
    }
}

/// The iteration's outcome: the last `x`, its Rayleigh quotient, and whether every ask
/// was handled once.
type Outcome = (Vec<f64>, f64, bool);

/// The coordinator as an actor: asks every block each step and moves on when the last
/// part is in. Parts are kept by step and block, so neither the order they arrive in nor
/// a part of a later step arriving early (a replay keeps only each block's order,
/// docs/recovery.md) changes the answer.
#[derive(Actor, Serialize, Deserialize)]
struct Coordinator {
    blocks: Vec<ActorRef<Block>>,
    steps: u64,
    step: u64,
    x: Vec<f64>,
    lambda: f64,
    /// Parts received, by step, then by block.
    parts: BTreeMap<u64, Vec<Option<Vec<f64>>>>,
    handled_once: bool,
    /// `main`'s ask, answered at the last step.
    done: ReplyTo<Outcome>,
}

impl Coordinator {
    fn new(blocks: Vec<ActorRef<Block>>, n: usize, steps: u64) -> Self {
        Coordinator {
            blocks,
            steps,
            step: 0,
            x: start_vector(n),
            lambda: 0.0,
            parts: BTreeMap::new(),
            handled_once: true,
            done: ReplyTo::none(),
        }
    }

    fn ask_all(&mut self, ctx: &mut Context<Self>) {
        for block in &self.blocks {
            let ask = Multiply {
                step: self.step,
                x: self.x.clone(),
            };
            if let Err(e) = ctx.ask(block, ask).reply_as::<Part>() {
                // Counted against the check: the answer is then not claimed.
                tracing::error!("block {} did not take its ask: {e}", block.id());
                self.handled_once = false;
            }
        }
    }

    /// This step's parts, once every block's is in.
    fn take_complete_step(&mut self) -> Option<Vec<f64>> {
        let parts = self.parts.get(&self.step)?;
        if parts.iter().any(Option::is_none) {
            return None;
        }
        let parts = self.parts.remove(&self.step)?;
        Some(parts.into_iter().flatten().flatten().collect())
    }
}

#[messages]
impl Coordinator {
    /// Runs the iteration; answers when it is over.
    #[message]
    fn run(&mut self, ctx: &mut Context<Self>, reply: ReplyTo<Outcome>) {
        self.done = reply;
        if self.steps == 0 {
            self.finish();
        } else {
            self.ask_all(ctx);
        }
    }

    /// One block's reply to one step's ask.
    #[message]
    fn part(&mut self, product: Product, ctx: &mut Context<Self>) {
        self.handled_once &= product.products == product.step + 1;
        let blocks = self.blocks.len();
        let slot = self
            .parts
            .entry(product.step)
            .or_insert_with(|| vec![None; blocks])
            .get_mut(product.block);
        match slot {
            Some(slot @ None) if product.step >= self.step => *slot = Some(product.rows),
            _ => {
                tracing::error!(
                    "a second, late or unknown part: block {} step {}",
                    product.block,
                    product.step
                );
                self.handled_once = false;
                return;
            }
        }
        while let Some(y) = self.take_complete_step() {
            (self.x, self.lambda) = normalise(&self.x, y);
            self.step += 1;
            if self.step == self.steps {
                self.finish();
                return;
            }
            self.ask_all(ctx);
        }
    }
}

impl Coordinator {
    fn finish(&mut self) {
        let outcome = (std::mem::take(&mut self.x), self.lambda, self.handled_once);
        let _ = self.done.take().send(outcome);
    }
}

/// The coordinator as an actor with an async handler: `main` asks it for one step at a
/// time, and the step's handler asks every block and awaits all their replies at once.
#[derive(Actor, Serialize, Deserialize)]
struct AsyncCoordinator {
    blocks: Vec<ActorRef<Block>>,
    step: u64,
    x: Vec<f64>,
    lambda: f64,
    handled_once: bool,
}

#[messages]
impl AsyncCoordinator {
    /// One step of the iteration; returns how many steps are done.
    #[message]
    async fn step(&mut self, ctx: &mut Context<Self>) -> u64 {
        let asks = self.blocks.iter().map(|block| {
            let ask = Multiply {
                step: self.step,
                x: self.x.clone(),
            };
            ctx.ask(block, ask)
        });
        let products = futures::future::join_all(asks).await;
        let mut y = Vec::with_capacity(self.x.len());
        for (b, product) in products.into_iter().enumerate() {
            match product {
                Ok(p) => {
                    self.handled_once &= p.products == self.step + 1 && p.block == b;
                    y.extend(p.rows);
                }
                Err(e) => {
                    // Counted against the check: the answer is then not claimed.
                    tracing::error!("block {b} did not answer step {}: {e}", self.step);
                    self.handled_once = false;
                }
            }
        }
        if y.len() == self.x.len() {
            (self.x, self.lambda) = normalise(&self.x, y);
        }
        self.step += 1;
        self.step
    }

    /// The iteration's outcome so far.
    #[message]
    fn finished(&mut self) -> Outcome {
        (self.x.clone(), self.lambda, self.handled_once)
    }
}

/// Rows of block `b` of `blocks` for order `n`: `(first, rows)`.
fn block_rows(b: usize, blocks: usize, n: usize) -> (usize, usize) {
    let first = b * n / blocks;
    (first, (b + 1) * n / blocks - first)
}

fn sequential(n: usize, steps: u64) -> (Vec<f64>, f64) {
    let matrix: Vec<f64> = (0..n)
        .flat_map(|i| (0..n).map(move |j| entry(i, j)))
        .collect();
    let mut x = start_vector(n);
    let mut lambda = 0.0;
    for _ in 0..steps {
        let y = multiply_rows(n, &matrix, &x);
        (x, lambda) = normalise(&x, y);
    }
    (x, lambda)
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let n = args.n;
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    let per_node = args.blocks_per_node.max(1);
    let blocks = per_node * size;
    if blocks > n {
        return Err(format!("{blocks} blocks need --n >= {blocks}").into());
    }
    // Block b lives on node b % size as that node's (b / size)-th actor: its id is known
    // everywhere without a lookup.
    let id_of = |b: usize| ActorId::new((b % size) as u16, (b / size) as u64).ok_or("too many");
    for b in (0..blocks).filter(|b| b % size == rank) {
        let (first, rows) = block_rows(b, blocks, n);
        let block = cluster.spawn(Block::new(
            b,
            first,
            rows,
            n,
            args.reply_after_us.map(Duration::from_micros),
        ))?;
        expect_id(block, id_of(b)?, format!("block {b}"))?;
    }
    let refs = (0..blocks)
        .map(|b| Ok(cluster.handle().actor_ref::<Block>(id_of(b)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    // Spawned with the blocks, before `main` first talks to anyone: a restarted `main`
    // must spawn again every actor its checkpoint holds by then.
    let coordinator = (rank == 0 && args.coordinator == CoordinatorKind::Actor)
        .then(|| cluster.spawn(Coordinator::new(refs.clone(), n, args.steps)))
        .transpose()?;
    let async_coordinator = (rank == 0 && args.coordinator == CoordinatorKind::Async)
        .then(|| {
            cluster.spawn(AsyncCoordinator {
                blocks: refs.clone(),
                step: 0,
                x: start_vector(n),
                lambda: 0.0,
                handled_once: true,
            })
        })
        .transpose()?;
    // Nobody asks a block that does not exist yet.
    cluster.barrier()?;
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let started = cluster.begin_timed_part();
    let (x, lambda, handled_once) = match (coordinator, async_coordinator) {
        (Some(coordinator), _) => cluster.block_on(coordinator.ask(Run).no_timeout())?,
        (None, Some(coordinator)) => {
            for _ in 0..args.steps {
                cluster.block_on(coordinator.ask(Step).no_timeout())?;
            }
            cluster.block_on(coordinator.ask(Finished).no_timeout())?
        }
        (None, None) => main_drives(&cluster, &refs, &args)?,
    };
    let elapsed = started.elapsed().as_secs_f64();
    let checksum = x
        .iter()
        .fold(mix(0, n as u64), |acc, v| mix(acc, v.to_bits()));
    let verified = handled_once
        && (!args.check || {
            let (x_seq, lambda_seq) = sequential(n, args.steps);
            x_seq == x && lambda_seq.to_bits() == lambda.to_bits()
        });
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("power")
            .field("nodes", size)
            .field("blocks", blocks)
            .field("n", n)
            .field("steps", args.steps)
            .field(
                "coordinator",
                format!("{:?}", args.coordinator).to_lowercase(),
            )
            .field("reply_after_us", args.reply_after_us.unwrap_or(0))
            .field("lambda", format!("{lambda:.15e}"))
            .hex("checksum", checksum)
            .elapsed(elapsed)
            .field("check", if args.check { "sequential" } else { "none" })
            .field("asks_handled_once", handled_once),
        verified,
        failure: "the answer differs from the sequential iteration's".into(),
    })
}

/// The iteration as a loop of `main`'s asks.
fn main_drives(
    cluster: &Cluster,
    refs: &[ActorRef<Block>],
    args: &Args,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let blocks = refs.len();
    let mut x = start_vector(args.n);
    let mut lambda = 0.0;
    let mut handled_once = true;
    let order: Vec<usize> = if args.break_contract && restarted() {
        (0..blocks).rev().collect()
    } else {
        (0..blocks).collect()
    };
    for step in 0..args.steps {
        // Every block's ask is out before the first reply is awaited.
        let asks: Vec<_> = order
            .iter()
            .map(|&b| {
                let ask = Multiply { step, x: x.clone() };
                (b, refs[b].ask(ask).no_timeout())
            })
            .collect();
        let mut parts = vec![Vec::new(); blocks];
        for (b, ask) in asks {
            let product = cluster.block_on(ask)?;
            handled_once &= product.products == step + 1 && product.block == b;
            parts[b] = product.rows;
        }
        let y: Vec<f64> = parts.concat();
        (x, lambda) = normalise(&x, y);
    }
    Ok((x, lambda, handled_once))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_row_once() {
        let n = 37;
        let covered: Vec<usize> = (0..5)
            .flat_map(|b| {
                let (first, rows) = block_rows(b, 5, n);
                first..first + rows
            })
            .collect();
        assert_eq!(covered, (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn the_iteration_finds_the_dominant_eigenvalue() {
        // Gershgorin: every eigenvalue lies within row sums of the diagonal 3.
        let (x, lambda) = sequential(64, 400);
        let max_row: f64 = (0..64).map(|j| entry(32, j)).sum();
        assert!(lambda > 3.0 && lambda <= max_row, "lambda = {lambda}");
        let norm: f64 = x.iter().map(|v| v * v).sum();
        assert!((norm - 1.0).abs() < 1e-12);
    }
}
