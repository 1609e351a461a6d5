//! The cost of determinants (order-sensitive actors), measured on real processes with the
//! apps' own measurement modes (release binaries, `lazarus run --ft on`), every comparison
//! in the same run, repetitions interleaved, medians reported:
//!
//! 1. Inter-node ping-pong latency (8 B, 2 nodes, recovery on): a deterministic receiver
//!    with event loggers configured (the feature present) against the same with none
//!    (`LAZARUS_EVENT_LOGGERS=0`: what recovery cost before this feature) — deterministic
//!    deliveries must cost nothing more; and an order-sensitive receiver (each ball a
//!    determinant, its answer held until two loggers acknowledged) against the
//!    deterministic one — target ≤ 2×.
//! 2. `kvstore` throughput (4 nodes, order-sensitive shards) with recovery on against off.
//!
//! Writes `target/criterion/lazarus-determinants-summary.md`. `LAZARUS_BENCH_REPS` sets
//! the repetitions (default 5).

use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::machine::Machine;
use lazarus_benches::runs::{run, Launch};
use lazarus_benches::stats::median;
use lazarus_benches::target::{build_release, Bins};
use lazarus_benches::Result;
use std::time::Duration;

/// One configuration of a comparison.
struct Variant {
    name: &'static str,
    launch: Launch,
    /// The RESULT field measured.
    field: &'static str,
}

fn pingpong(order_sensitive: bool, loggers: &str) -> Launch {
    let mut args = vec!["--min-size", "8", "--max-size", "8", "--iters", "4000"];
    if order_sensitive {
        args.push("--order-sensitive");
    }
    let mut l = Launch::new("pingpong", 2, &args);
    l.recovery = Some(Duration::ZERO);
    l.env.push(("LAZARUS_EVENT_LOGGERS".into(), loggers.into()));
    l
}

fn kvstore(recovery: bool) -> Launch {
    let mut l = Launch::new("kvstore", 4, &["--ops", "3000", "--measure"]);
    l.recovery = recovery.then_some(Duration::from_secs(1));
    l
}

/// Runs every variant `reps` times, interleaved; returns the medians of `field`.
fn measure(bins: &Bins, variants: &[Variant], reps: usize) -> Result<Vec<f64>> {
    let mut samples = vec![Vec::new(); variants.len()];
    for rep in 0..reps {
        for (i, v) in variants.iter().enumerate() {
            let r = run(bins, &v.launch, |_| None)?;
            let value = r.result()?.number(v.field)?;
            println!("rep {rep} {:<40} {} = {value}", v.name, v.field);
            samples[i].push(value);
        }
    }
    Ok(samples
        .iter()
        .map(|s| median(s).unwrap_or(f64::NAN))
        .collect())
}

fn main() -> Result<()> {
    build_release()?;
    let bins = Bins::release();
    let reps: usize = std::env::var("LAZARUS_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let latency = [
        Variant {
            name: "deterministic, no event loggers",
            launch: pingpong(false, "0"),
            field: "min_latency_us",
        },
        Variant {
            name: "deterministic, 2 event loggers",
            launch: pingpong(false, "2"),
            field: "min_latency_us",
        },
        Variant {
            name: "order-sensitive, 2 event loggers",
            launch: pingpong(true, "2"),
            field: "min_latency_us",
        },
    ];
    let lat = measure(&bins, &latency, reps)?;
    let throughput = [
        Variant {
            name: "kvstore recovery off",
            launch: kvstore(false),
            field: "ops_per_s",
        },
        Variant {
            name: "kvstore recovery on",
            launch: kvstore(true),
            field: "ops_per_s",
        },
    ];
    let tput = measure(&bins, &throughput, reps)?;
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let summary = format!(
        "Determinants ({}; commit {}; medians of {reps} interleaved runs)\n\n\
         | inter-node ping-pong, 8 B, recovery on | one-way latency (µs) | ratio | target |\n\
         |---|---|---|---|\n\
         | deterministic receiver, no event loggers | {:.1} | 1.00 | |\n\
         | deterministic receiver, 2 event loggers | {:.1} | {:.2} vs no loggers | ≤ 1.0× (+noise): {} |\n\
         | order-sensitive receiver, 2 event loggers | {:.1} | {:.2} vs deterministic | ≤ 2×: {} |\n\n\
         | kvstore, 4 nodes, 3000 ops/client | ops/s | on/off |\n\
         |---|---|---|\n\
         | recovery off | {:.0} | |\n\
         | recovery on (order-sensitive shards) | {:.0} | {:.2} |\n",
        Machine::this().describe(),
        lazarus_benches::machine::git_commit(),
        lat[0],
        lat[1],
        lat[1] / lat[0],
        verdict(lat[1] / lat[0] <= 1.05),
        lat[2],
        lat[2] / lat[1],
        verdict(lat[2] / lat[1] <= 2.0),
        tput[0],
        tput[1],
        tput[1] / tput[0],
    );
    println!("\n{summary}");
    let path = criterion_dir().join("lazarus-determinants-summary.md");
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&path, summary)
        .map_err(|e| lazarus_benches::error::Error::new(e.to_string()))?;
    println!("written to {}", path.display());
    Ok(())
}
