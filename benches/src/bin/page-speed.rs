//! `page-speed`: how much the speed of a memory-bound sweep depends on the physical
//! memory it was given. Allocates two arrays again and again (fresh pages each time) and
//! times the same 3-point stencil over each allocation twice. On a VM whose host backs
//! guest memory unevenly, the two batches of one allocation agree and allocations differ:
//! that is why two runs of jacobi2d differ by up to ±20% here for no reason of their own,
//! and why the recovery bench compares wall time at equal kernel CPU (see
//! `lazarus_benches::stats::adjusted_difference`).

use clap::Parser;
use std::time::Instant;

/// Time a stencil sweep over fresh allocations.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Size of each of the two arrays, in MiB (default: twice this VM's 32 MiB L3).
    #[arg(long, default_value_t = 64)]
    mib: usize,
    /// Fresh allocations to time.
    #[arg(long, default_value_t = 6)]
    allocations: usize,
    /// Sweeps per batch (two batches per allocation).
    #[arg(long, default_value_t = 15)]
    sweeps: usize,
}

/// One 3-point Jacobi sweep of `src` into `dst` (ends fixed).
fn sweep(src: &[f64], dst: &mut [f64]) {
    for (o, w) in dst[1..].iter_mut().zip(src.windows(3)) {
        *o = 0.5 * (w[0] + w[2]);
    }
}

/// The median time of `sweeps` sweeps, in milliseconds, swapping the arrays each time.
fn batch(a: &mut Vec<f64>, b: &mut Vec<f64>, sweeps: usize) -> f64 {
    let mut times: Vec<f64> = (0..sweeps)
        .map(|_| {
            let t = Instant::now();
            sweep(a, b);
            std::mem::swap(a, b);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let args = Args::parse();
    let n = (args.mib << 20) / std::mem::size_of::<f64>();
    let sweeps = args.sweeps.max(1);
    let mut medians = Vec::new();
    for k in 0..args.allocations {
        let mut a: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut b = vec![0.0; n];
        let first = batch(&mut a, &mut b, sweeps);
        let second = batch(&mut a, &mut b, sweeps);
        println!("allocation {k}: median sweep {first:.2} ms, then {second:.2} ms");
        medians.push((first + second) / 2.0);
    }
    let (lo, hi) = medians
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &m| (l.min(m), h.max(m)));
    println!(
        "fastest allocation {lo:.2} ms, slowest {hi:.2} ms: {:.0}% apart",
        100.0 * (hi / lo - 1.0)
    );
}
