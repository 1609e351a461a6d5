//! What recovery costs apps whose actors have async handlers, measured on real processes
//! (release binaries, `lazarus run`, 4 nodes), recovery on with 1 s checkpoints against
//! off, repetitions interleaved, medians reported:
//!
//! 1. `power --coordinator async`: one async handler per step on node 0 awaits the eight
//!    blocks' replies (a join); time of the timed part.
//! 2. `transfer`: clients' async handlers await tellers' async handlers on the next
//!    node, which await a take and a put on two ledgers; transfers per second.
//! 3. `payments`: order-sensitive payers' async handlers keep payments in flight and take
//!    their outcomes in the order they come (logged as determinants with recovery on),
//!    against order-sensitive banks; payments per second.
//!
//! With recovery on, every async handler that starts encodes its actor's state (what a
//! checkpoint keeps while it is suspended), its awaited results are recorded, and the
//! messages between nodes are logged. Every ratio is the median of the per-repetition
//! ratios (`lazarus_benches::interleaved`). Writes
//! `target/criterion/lazarus-async-handlers-summary.md`. `LAZARUS_BENCH_REPS` sets the
//! repetitions (default 5). The in-core cost of an awaited ask against the synchronous
//! continuation and against kameo is the `actor_ask_cross_core` group of
//! `local_messaging`.

use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::interleaved::{measure, Variant};
use lazarus_benches::machine::Machine;
use lazarus_benches::runs::Launch;
use lazarus_benches::target::{build_release, Bins};
use lazarus_benches::Result;
use std::time::Duration;

/// `power --coordinator async`, order 512, 2000 steps, 4 nodes.
fn power(recovery: bool) -> Launch {
    let args = ["--n", "512", "--steps", "2000", "--coordinator", "async"];
    let mut l = Launch::new("power", 4, &args);
    l.recovery = recovery.then_some(Duration::from_secs(1));
    l
}

/// `transfer`, 4 nodes, 3000 transfers per client.
fn transfer(recovery: bool) -> Launch {
    let mut l = Launch::new("transfer", 4, &["--transfers", "3000"]);
    l.recovery = recovery.then_some(Duration::from_secs(1));
    l
}

/// `payments`, 4 nodes, 3000 payments per payer.
fn payments(recovery: bool) -> Launch {
    let mut l = Launch::new("payments", 4, &["--payments", "3000"]);
    l.recovery = recovery.then_some(Duration::from_secs(1));
    l
}

fn main() -> Result<()> {
    build_release()?;
    let bins = Bins::release();
    let reps: usize = std::env::var("LAZARUS_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let variants = [
        Variant {
            name: "power --coordinator async, recovery off",
            launch: power(false),
            field: "elapsed_s",
        },
        Variant {
            name: "power --coordinator async, recovery on",
            launch: power(true),
            field: "elapsed_s",
        },
        Variant {
            name: "transfer, recovery off",
            launch: transfer(false),
            field: "transfers_per_s",
        },
        Variant {
            name: "transfer, recovery on",
            launch: transfer(true),
            field: "transfers_per_s",
        },
        Variant {
            name: "payments, recovery off",
            launch: payments(false),
            field: "payments_per_s",
        },
        Variant {
            name: "payments, recovery on",
            launch: payments(true),
            field: "payments_per_s",
        },
    ];
    let s = measure(&bins, &variants, reps)?;
    let summary = format!(
        "Async handlers, recovery on (1 s checkpoints) against off ({}; commit {}; medians of \
         {reps} interleaved runs; ratios are medians of the per-run ratios)\n\n\
         | 4 nodes | recovery off | recovery on | on/off |\n\
         |---|---|---|---|\n\
         | power --coordinator async, n=512, 2000 steps (time, s) | {:.3} | {:.3} | {:.2}× time |\n\
         | transfer, 3000 transfers/client (transfers/s) | {:.0} | {:.0} | {:.2}× throughput |\n\
         | payments (order-sensitive), 3000 payments/payer (payments/s) | {:.0} | {:.0} | {:.2}× throughput |\n",
        Machine::this().describe(),
        lazarus_benches::machine::git_commit(),
        s.median(0),
        s.median(1),
        s.ratio(1, 0),
        s.median(2),
        s.median(3),
        s.ratio(3, 2),
        s.median(4),
        s.median(5),
        s.ratio(5, 4),
    );
    println!("\n{summary}");
    let path = criterion_dir().join("lazarus-async-handlers-summary.md");
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&path, summary)
        .map_err(|e| lazarus_benches::error::Error::new(e.to_string()))?;
    println!("written to {}", path.display());
    Ok(())
}
