//! `power`: power iteration for the dominant eigenvalue of a dense symmetric matrix whose
//! row blocks live in actors on every node, driven step by step from node 0's `main`.
//!
//! Each step, `main` asks every block for its rows of `A·x`, normalises the result and
//! starts the next step with it: the app's state between steps lives in `main`, and its
//! data moves as asks and replies, most of them between nodes. That is the pattern of a
//! coordinator written as a plain loop (a solver's outer iteration, a parameter sweep).
//! With recovery on, a node that dies mid-run is restored and `main`'s asks and their
//! replies are replayed (docs/recovery.md, "The app's main"), so the answer is the
//! failure-free one. The answer is verified against the same iteration computed
//! sequentially, bit for bit.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, Cluster, ClusterSpec, Node};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
    /// Break the determinism contract on purpose: a restarted `main` asks its blocks in
    /// the reverse order, so the replies kept from before the failure answer other
    /// blocks' questions (the runtime must report it).
    #[arg(long)]
    break_contract: bool,
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

fn start_vector(n: usize) -> Vec<f64> {
    vec![1.0 / (n as f64).sqrt(); n]
}

/// A block of consecutive rows of `A`.
#[derive(Actor, Serialize, Deserialize)]
struct Block {
    n: usize,
    /// Its rows of `A`, row-major.
    matrix: Vec<f64>,
    /// Products computed so far: `main` checks that every step's ask was handled
    /// exactly once (a recovery that handled one twice, or skipped one, would show).
    products: u64,
}

impl Block {
    fn new(first: usize, rows: usize, n: usize) -> Self {
        let matrix = (first..first + rows)
            .flat_map(|i| (0..n).map(move |j| entry(i, j)))
            .collect();
        Block {
            n,
            matrix,
            products: 0,
        }
    }
}

#[messages]
impl Block {
    /// This block's rows of `A·x`, and how many products it has computed.
    #[message]
    fn multiply(&mut self, x: Vec<f64>) -> (Vec<f64>, u64) {
        self.products += 1;
        (multiply_rows(self.n, &self.matrix, &x), self.products)
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
        let block = cluster.spawn(Block::new(first, rows, n))?;
        expect_id(block, id_of(b)?, format!("block {b}"))?;
    }
    // Nobody asks a block that does not exist yet.
    cluster.barrier()?;
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let refs = (0..blocks)
        .map(|b| Ok(cluster.handle().actor_ref::<Block>(id_of(b)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let started = Instant::now();
    let mut x = start_vector(n);
    let mut lambda = 0.0;
    let mut handled_once = true;
    let restarted = std::env::var("LAZARUS_INCARNATION").is_ok_and(|i| i != "0");
    let order: Vec<usize> = if args.break_contract && restarted {
        (0..blocks).rev().collect()
    } else {
        (0..blocks).collect()
    };
    for step in 0..args.steps {
        // Every block's ask is out before the first reply is awaited.
        let asks: Vec<_> = order
            .iter()
            .map(|&b| (b, refs[b].ask(Multiply { x: x.clone() }).no_timeout()))
            .collect();
        let mut parts = vec![Vec::new(); blocks];
        for (b, ask) in asks {
            let (rows, products) = cluster.block_on(ask)?;
            handled_once &= products == step + 1;
            parts[b] = rows;
        }
        let y: Vec<f64> = parts.concat();
        (x, lambda) = normalise(&x, y);
    }
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
            .field("lambda", format!("{lambda:.15e}"))
            .hex("checksum", checksum)
            .elapsed(elapsed)
            .field("check", if args.check { "sequential" } else { "none" })
            .field("asks_handled_once", handled_once),
        verified,
        failure: "the answer differs from the sequential iteration's".into(),
    })
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
