//! `histogram`: a distributed histogram built with one-sided operations. Every node draws
//! its keys, counts them per bin and accumulates the counts into the bins' owners' parts
//! of a window (bin `b` lives on node `b % n`); a fetch-and-op on node 0 hands out one
//! ticket per node and round; a fence closes each round. Then every node peeks at one bin
//! of the next node with a get (folded into `peeks`, the same in every run) and fences
//! again. At the end node 0 gets every part and checks it against the histogram it
//! computes itself from every node's keys, and the ticket counter against the number of
//! rounds.

use clap::Parser;
use lazarus::{Cluster, ClusterSpec, Node, ReduceOp};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{init_logging, mix, ResultLine};

/// Count keys into bins spread over the nodes with accumulates.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Bins of the histogram.
    #[arg(long, default_value_t = 4096)]
    bins: usize,
    /// Keys each node draws per round.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Rounds (fences).
    #[arg(long, default_value_t = 10)]
    rounds: u64,
    /// Seed of the keys.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Key `k` of node `rank` in round `round`.
fn key(seed: u64, rank: u16, round: u64, k: u64) -> u64 {
    mix(mix(mix(seed, u64::from(rank)), round), k)
}

/// Node `rank`'s counts of round `round`, per bin.
fn counts(args: &Args, rank: u16, round: u64) -> Vec<u64> {
    let mut c = vec![0u64; args.bins];
    for k in 0..args.keys {
        c[(key(args.seed, rank, round, k) % args.bins as u64) as usize] += 1;
    }
    c
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.bins == 0 {
        return Err("--bins must be at least 1".into());
    }
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, n) = (cluster.rank(), cluster.size());
    let per_node = args.bins.div_ceil(n);
    // The last element of each part is a counter: node 0's hands out tickets.
    let ticket = per_node;
    let window = cluster.window::<u64>(per_node + 1)?;
    let started = cluster.begin_timed_part();
    let mut tickets = Vec::new();
    let mut peeks = 0u64;
    eprintln!("histogram: node {rank}: rounds started");
    for round in 0..args.rounds {
        let c = counts(&args, rank, round);
        for target in 0..n {
            // Node `target`'s bins, in its order: b = target + n * offset.
            let mine: Vec<u64> = (target..args.bins).step_by(n).map(|b| c[b]).collect();
            window.accumulate(target as u16, 0, &mine, ReduceOp::Sum)?;
        }
        tickets.push(window.fetch_and_op(0, ticket, 1, ReduceOp::Sum)?);
        window.fence()?;
        // Nobody accumulates in this epoch: what a get reads is fixed.
        let next = (rank as usize + 1) % n;
        let bin = (round as usize * 7) % per_node;
        peeks = mix(peeks, window.get(next as u16, bin, 1)?[0]);
        window.fence()?;
    }
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let mut histogram = vec![0u64; args.bins];
    for target in 0..n {
        let part = window.get(target as u16, 0, per_node)?;
        for (offset, count) in part.into_iter().enumerate() {
            let b = target + n * offset;
            if b < args.bins {
                histogram[b] = count;
            }
        }
    }
    let handed_out = window.get(0, ticket, 1)?[0];
    let elapsed = started.elapsed().as_secs_f64();
    let mut expected = vec![0u64; args.bins];
    for r in 0..n as u16 {
        for round in 0..args.rounds {
            for (e, c) in expected.iter_mut().zip(counts(&args, r, round)) {
                *e += c;
            }
        }
    }
    let total: u64 = histogram.iter().sum();
    let checksum = histogram.iter().fold(0, |acc, c| mix(acc, *c));
    let verified = histogram == expected && handed_out == args.rounds * n as u64;
    let updates = args.keys * args.rounds * n as u64;
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("histogram")
            .field("nodes", n)
            .field("bins", args.bins)
            .field("keys", total)
            .field("rounds", args.rounds)
            .field("tickets", handed_out)
            .field("first_ticket", tickets.first().copied().unwrap_or(0))
            .hex("peeks", peeks)
            .hex("checksum", checksum)
            .elapsed(elapsed)
            .field("keys_per_s", format!("{:.0}", updates as f64 / elapsed)),
        verified,
        failure: "histogram differs from the keys drawn".into(),
    })
}
