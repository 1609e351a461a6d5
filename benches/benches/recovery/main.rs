//! The cost and speed of rollback recovery, measured on real processes with the apps'
//! own measurement modes (release binaries, `lazarus run`), every comparison in the same
//! run, repetitions interleaved (in alternating order), medians reported; the overhead
//! target is judged on 95% confidence intervals:
//!
//! 1. Failure-free overhead on jacobi2d, 4 nodes, a short run (1500 iterations, under
//!    a checkpoint period) and a steady one (6000): recovery off / on (correlated sets:
//!    only messages between nodes are logged) / on with payload logging forced for every
//!    message (what correlated sets save), with log bytes and piggyback per message, wall
//!    time and the CPU time of all processes. Then off / on over a long run (24000
//!    iterations, about 10 checkpoints per node), and the same on 2 nodes, one per core
//!    of a 2-core host (the 4-node runs oversubscribe it). At a coarse grain (n=4096):
//!    5 s checkpoints, with and without them, and 20 s over a 3 times longer run.
//! 2. The log's memory quota (`--log-quota`): 1 MiB ping-pong between 2 nodes (the
//!    heaviest log there is: every message crosses nodes) with recovery off, on with
//!    1 s checkpoints, the same with a 64 MiB quota, and the quota alone (no period),
//!    each of the last two also with a logger node taking what is over the quota:
//!    bandwidth against off, each node's log peak and what went to the logger. And
//!    logger nodes at a moderate log rate: jacobi2d at the fine grain on 2 nodes, on
//!    against on with an 8 MiB quota and a logger node (`logger`).
//! 3. Asks between nodes (`asks`): `power` on 4 nodes, its iteration driven by node 0's
//!    `main` (asks recovered through the reply journal) or by an actor whose asks'
//!    replies are its messages (`ctx.ask(..).reply_as`), each with recovery off and on:
//!    what recovery costs each, and the actor against `main`.
//! 4. Recovery of a node holding ~100 MB of set state (jacobi2d n=5000 on 4 nodes): time
//!    from the supervisor seeing the SIGKILL to the restored set resuming, its phases,
//!    and how fast the survivors learned of the failure.
//!
//! The wall-time ratio of a pair varies by up to ±20% on a shared VM because the
//! sweeps' speed depends on the physical memory a run gets. So besides the interval of
//! the median paired ratio, each table gives the ratio at equal kernel CPU (the nodes'
//! `KERNEL` lines, `jacobi2d --kernel-time`: each pair's wall difference less the part
//! its sweeps' CPU difference explains, `stats::adjusted_difference`) and the CPU each
//! mode adds outside the sweeps.
//!
//! Writes `<criterion dir>/lazarus-recovery-summary.md`. `LAZARUS_BENCH_REPS` sets the
//! repetitions (default 5; a verdict needs 6 or more); `LAZARUS_BENCH_ONLY` one part
//! (`fine`, `fine-long`, `coarse`, `coarse-long`, `quota`, `logger`, `asks`, `restore`). Running the apps and
//! reading their output is the library's (`lazarus_benches::runs`), shared with the
//! results report (`lazarus-report`).

use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::machine::Machine;
use lazarus_benches::report::apps::Mode;
use lazarus_benches::runs::{run, Cue, KernelTime, Launch, Run, TimelineEntry, DIED};
use lazarus_benches::stats::{adjusted_difference, median, median_interval, Adjusted, Verdict};
use lazarus_benches::target::{build_release, Bins};
use lazarus_benches::Result;
use std::time::Duration;

/// Node 2's first timeline entry that `found` accepts.
fn node2(r: &Run, found: impl Fn(&TimelineEntry) -> bool) -> Option<TimelineEntry> {
    r.timeline().into_iter().find(|e| e.rank == 2 && found(e))
}

/// The time (seconds since launch) of node 2's first timeline entry that `found` accepts.
fn node2_at(r: &Run, found: impl Fn(&TimelineEntry) -> bool) -> Option<f64> {
    node2(r, found).map(|e| e.at)
}

/// Every mode of the overhead table.
const ALL_MODES: [Mode; 5] = [
    Mode::Off,
    Mode::On,
    Mode::OnBuddy,
    Mode::LoggingAlone,
    Mode::LogEverything,
];

/// The problem and checkpoint period of an overhead measurement.
#[derive(Clone, Copy)]
struct Grain {
    /// Grid side.
    n: u32,
    /// Jacobi iterations.
    iters: u32,
    /// Checkpoint period.
    every: Duration,
}

impl Grain {
    /// n=1024 with 1 s checkpoints: the finest grain measured, about 9000 messages of
    /// 2-4 KiB logged per node and second.
    const fn fine(iters: u32) -> Grain {
        Grain {
            n: 1024,
            iters,
            every: Duration::from_secs(1),
        }
    }
}

/// Recovery on against off on jacobi2d on `nodes` nodes at `grain`, in `modes` (the
/// first is the baseline, `Mode::Off`). Ratios
/// are medians of per-repetition ratios (each repetition runs every mode back to back),
/// because this VM's speed drifts between repetitions by more than the overhead
/// measured; wall time and the CPU time of all processes are both reported, as 4 nodes
/// share 2 cores.
fn overhead(
    bins: &Bins,
    nodes: u16,
    grain: Grain,
    modes: &[Mode],
    reps: usize,
    md: &mut String,
) -> Result<()> {
    let (n, iters, every) = (grain.n.to_string(), grain.iters.to_string(), grain.every);
    let app_args = [
        "--n",
        &n,
        "--iters",
        &iters,
        "--check",
        "bounds",
        "--kernel-time",
    ];
    let mut elapsed: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    // The nodes' `KERNEL` lines: their CPU over the timed part and jacobi2d's share of it.
    let mut kernel: Vec<Vec<Option<KernelTime>>> = vec![Vec::new(); modes.len()];
    let mut last: Vec<Option<Run>> = vec![None; modes.len()];
    let mut checksums = Vec::new();
    for rep in 0..reps {
        // Odd repetitions run the modes in reverse, so that no mode always runs right
        // after another's checkpoint files were written or always on a warm machine.
        let mut order: Vec<usize> = (0..modes.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let mode = &modes[i];
            let mut launch = Launch::new("jacobi2d", nodes, &app_args);
            mode.apply(&mut launch, every);
            // Failure-free runs: a node of an oversubscribed host that misses heartbeats
            // for 1 s while its core runs long sweeps must not end the run (session 21).
            launch
                .env
                .push(("LAZARUS_FAILURE_TIMEOUT_MS".into(), "10000".into()));
            let r = run(bins, &launch, |_| None)?;
            let res = r.result()?;
            let e = res.number("elapsed_s")?;
            let c = r.cpu.as_secs_f64();
            let k = r.kernel_time();
            let (w, kc) = k.map_or((f64::NAN, f64::NAN), |k| (k.window, k.kernel));
            eprintln!(
                "n {n} iters {iters} rep {rep} {}: {e:.3} s, cpu {c:.3} s, timed part: nodes' cpu {w:.3} s, kernel {kc:.3} s",
                mode.label()
            );
            elapsed[i].push(e);
            cpu[i].push(c);
            kernel[i].push(k);
            checksums.push(res.get("checksum")?.to_string());
            last[i] = Some(r);
        }
    }
    checksums.dedup();
    assert_eq!(checksums.len(), 1, "every mode computes the same answer");
    // Mode / off within each repetition.
    let ratios = |series: &[Vec<f64>], i: usize| -> Vec<f64> {
        series[i]
            .iter()
            .zip(&series[0])
            .map(|(m, off)| m / off)
            .collect()
    };
    let paired = |series: &[Vec<f64>], i: usize| median(&ratios(series, i)).unwrap_or(f64::NAN);
    // The CPU a mode adds outside the kernel during the timed part, as a fraction of
    // off's CPU over it, per repetition: the kernel's speed (the memory bandwidth the
    // sweeps get) varies by up to 20% between runs on this VM and swamps the wall-time
    // ratio; the runtime's work outside it varies far less.
    let added_outside = |i: usize| -> Vec<f64> {
        kernel[i]
            .iter()
            .zip(&kernel[0])
            .filter_map(|(m, off)| {
                Some((m.as_ref()?.outside() - off.as_ref()?.outside()) / off.as_ref()?.window)
            })
            .collect()
    };
    // Wall time at equal kernel CPU: each pair's wall difference with the part its
    // sweeps' CPU difference explains taken out (`adjusted_difference`), as a ratio to
    // off's median. Sound because recovery does not touch what the sweep reads and
    // writes. It shares the memory bandwidth, so a slowdown of the sweeps through that
    // would hide here; the bytes recovery moves in the timed part (images, staging,
    // CRC, log) are about 1% of what the sweeps stream at n=4096 with 5 s checkpoints,
    // which bounds it.
    let off_wall = median(&elapsed[0]).unwrap_or(f64::NAN);
    let at_equal_kernel = |i: usize| -> Option<Adjusted> {
        let (dy, dx): (Vec<f64>, Vec<f64>) = (0..elapsed[i].len())
            .filter_map(|r| {
                let (m, off) = (kernel[i][r].as_ref()?, kernel[0][r].as_ref()?);
                Some((elapsed[i][r] - elapsed[0][r], m.kernel - off.kernel))
            })
            .unzip();
        adjusted_difference(&dy, &dx).map(|a| Adjusted {
            effect: 1.0 + a.effect / off_wall,
            interval: (1.0 + a.interval.0 / off_wall, 1.0 + a.interval.1 / off_wall),
            ..a
        })
    };
    md.push_str(&format!(
        "### Failure-free overhead: jacobi2d n={n}, {iters} iterations, {nodes} nodes, checkpoints every {:?} (median of {reps})\n\n| mode | time (s) | vs off | vs off at equal kernel CPU (95% CI) | CPU s (all processes) | CPU vs off | nodes' CPU added outside the kernel, timed part (% of off's) | log peak (MB, all nodes) | messages logged | piggyback (B/msg) | target |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        every
    ));
    for (i, mode) in modes.iter().enumerate() {
        let t = median(&elapsed[i]).unwrap_or(f64::NAN);
        let c = median(&cpu[i]).unwrap_or(f64::NAN);
        let (ratio, cpu_ratio) = (paired(&elapsed, i), paired(&cpu, i));
        let (log_mb, logged, piggy) = match (mode, &last[i]) {
            (Mode::Off, _) | (_, None) => (0.0, 0.0, 0.0),
            (_, Some(r)) => {
                let delivered = r.final_sum("delivered")?;
                (
                    (r.final_sum("log_peak_bytes")? + r.final_sum("forced_peak_bytes")?) / 1e6,
                    delivered + r.final_sum("forced_logged")?,
                    r.final_sum("piggyback_bytes")? / delivered.max(1.0),
                )
            }
        };
        // Judged on the 95% interval of the median paired ratio: one pair on this VM
        // differs by up to ±15%, so a median alone would pass or miss by chance. The
        // runtime's CPU is judged alongside: the kernel's speed, which recovery does
        // not touch, is most of that spread.
        let added = added_outside(i);
        let target = match (mode, median_interval(&ratios(&elapsed, i), 0.95)) {
            (Mode::On, Some(ci)) => {
                let runtime = median_interval(&added, 0.95).map_or(
                    "INCONCLUSIVE (under 6 pairs with KERNEL lines)".to_string(),
                    |c| {
                        format!(
                            "{} (95% CI {:+.1}–{:+.1}%)",
                            Verdict::of(c, 0.03).label(),
                            100.0 * c.0,
                            100.0 * c.1
                        )
                    },
                );
                let adjusted = at_equal_kernel(i).map_or(
                    "INCONCLUSIVE (under 6 pairs with KERNEL lines)".to_string(),
                    |a| {
                        format!(
                            "{} (95% CI {:.3}–{:.3})",
                            Verdict::of(a.interval, 1.03).label(),
                            a.interval.0,
                            a.interval.1
                        )
                    },
                );
                format!(
                    "wall ≤ 1.03× off: {} (95% CI {:.3}–{:.3}); at equal kernel CPU: {adjusted}; runtime CPU ≤ +3%: {runtime}",
                    Verdict::of(ci, 1.03).label(),
                    ci.0,
                    ci.1
                )
            }
            (Mode::On, None) => {
                format!("≤ 1.03× off: INCONCLUSIVE ({reps} pairs; 6+ give a 95% CI)")
            }
            _ => String::new(),
        };
        let outside_cell = match (i, median(&added)) {
            (0, _) | (_, None) => String::new(),
            (_, Some(m)) => format!("{:+.1}%", 100.0 * m),
        };
        let adjusted_cell = match (i, at_equal_kernel(i)) {
            (0, _) | (_, None) => String::new(),
            (_, Some(a)) => format!(
                "{:.3} ({:.3}–{:.3}; r={:.2})",
                a.effect, a.interval.0, a.interval.1, a.correlation
            ),
        };
        md.push_str(&format!(
            "| {} | {t:.3} | {ratio:.3} | {adjusted_cell} | {c:.2} | {cpu_ratio:.3} | {outside_cell} | {log_mb:.1} | {logged} | {piggy:.1} | {target} |\n",
            mode.label(),
        ));
    }
    md.push('\n');
    Ok(())
}

/// What the log's memory quota costs and saves: 1 MiB ping-pong between 2 nodes, the
/// modes interleaved (in alternating order); bandwidth as the median of per-repetition
/// ratios to recovery off.
fn quota_cost(bins: &Bins, reps: usize, md: &mut String) -> Result<()> {
    const MIB: u64 = 1 << 20;
    const QUOTA: u64 = 64 * MIB;
    const ROUND_TRIPS: u64 = 1500;
    let size = MIB.to_string();
    // pingpong runs `iters * 8 / size` round trips at a size.
    let iters = (ROUND_TRIPS * MIB / 8).to_string();
    let app_args = ["--min-size", &size, "--max-size", &size, "--iters", &iters];
    let second = Duration::from_secs(1);
    // (label, checkpoint period, quota, logger nodes); `None` period: recovery off.
    let modes: [(&str, Option<Duration>, Option<u64>, u16); 6] = [
        ("recovery off", None, None, 0),
        ("on, 1 s checkpoints", Some(second), None, 0),
        (
            "on, 1 s checkpoints, 64 MiB quota",
            Some(second),
            Some(QUOTA),
            0,
        ),
        (
            "on, 64 MiB quota, no period",
            Some(Duration::ZERO),
            Some(QUOTA),
            0,
        ),
        (
            "on, 1 s checkpoints, 64 MiB quota, 1 logger node",
            Some(second),
            Some(QUOTA),
            1,
        ),
        (
            "on, 64 MiB quota, 1 logger node, no period",
            Some(Duration::ZERO),
            Some(QUOTA),
            1,
        ),
    ];
    let mut bandwidth: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut peak: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut checkpoints: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut dumped: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..modes.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, every, quota, loggers) = modes[i];
            let mut launch = Launch::new("pingpong", 2, &app_args);
            launch.recovery = every;
            launch.log_quota = quota;
            launch.loggers = loggers;
            let r = run(bins, &launch, |_| None)?;
            let bw = r.result()?.number("max_bandwidth_MBps")?;
            let (p, c) = if every.is_some() {
                let finals = r.finals();
                let p = finals
                    .iter()
                    .map(|e| e.number("log_peak_bytes"))
                    .collect::<Result<Vec<f64>>>()?
                    .into_iter()
                    .fold(0.0, f64::max);
                (p, r.final_sum("checkpoints")?)
            } else {
                (0.0, 0.0)
            };
            let d = if loggers > 0 {
                r.final_sum("bytes_dumped")?
            } else {
                0.0
            };
            eprintln!(
                "quota rep {rep} {label}: {bw:.1} MB/s, log peak {:.1} MiB, {c} checkpoints, {:.0} MiB dumped",
                p / MIB as f64,
                d / MIB as f64
            );
            dumped[i].push(d);
            bandwidth[i].push(bw);
            peak[i].push(p);
            checkpoints[i].push(c);
        }
    }
    let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    md.push_str(&format!(
        "### The log's memory quota (pingpong, 2 nodes, 1 MiB, {ROUND_TRIPS} round trips; medians of {reps}, ratios the medians of per-repetition ratios)

| mode | bandwidth (MB/s) | vs off | largest log peak of a node (MiB) | checkpoints (both nodes) | dumped to loggers (MiB, both nodes) |
|---|---|---|---|---|---|
"
    ));
    for (i, (label, every, _, _)) in modes.iter().enumerate() {
        let ratios: Vec<f64> = bandwidth[i]
            .iter()
            .zip(&bandwidth[0])
            .map(|(b, off)| b / off)
            .collect();
        let (p, c) = if every.is_some() {
            (
                format!("{:.0}", med(&peak[i]) / MIB as f64),
                format!("{:.0}", med(&checkpoints[i])),
            )
        } else {
            ("-".into(), "-".into())
        };
        md.push_str(&format!(
            "| {label} | {:.1} | {:.3}× | {p} | {c} | {:.0} |
",
            med(&bandwidth[i]),
            med(&ratios),
            med(&dumped[i]) / MIB as f64,
        ));
    }
    md.push('\n');
    Ok(())
}

fn asks_cost(bins: &Bins, reps: usize, md: &mut String) -> Result<()> {
    const STEPS: &str = "3000";
    let second = Duration::from_secs(1);
    // (label, coordinator, checkpoint period; `None`: recovery off).
    let modes: [(&str, &str, Option<Duration>); 4] = [
        ("main asks, recovery off", "main", None),
        ("main asks, on, 1 s checkpoints", "main", Some(second)),
        ("an actor asks, recovery off", "actor", None),
        ("an actor asks, on, 1 s checkpoints", "actor", Some(second)),
    ];
    let mut elapsed: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for rep in 0..reps {
        let mut order: Vec<usize> = (0..modes.len()).collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, coordinator, every) = modes[i];
            let app_args = ["--n", "512", "--steps", STEPS, "--coordinator", coordinator];
            let mut launch = Launch::new("power", 4, &app_args);
            launch.recovery = every;
            let r = run(bins, &launch, |_| None)?;
            let result = r.result()?;
            if !result.verified() {
                return Err(lazarus_benches::Error::new(format!(
                    "power {label}: the answer was not verified"
                )));
            }
            let e = result.number("elapsed_s")?;
            eprintln!("asks rep {rep} {label}: {e:.3} s");
            elapsed[i].push(e);
        }
    }
    let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    let ratio = |a: usize, b: usize| {
        let r: Vec<f64> = elapsed[a]
            .iter()
            .zip(&elapsed[b])
            .map(|(x, y)| x / y)
            .collect();
        med(&r)
    };
    md.push_str(&format!(
        "### Asks between nodes (power, 4 nodes, n=512, {STEPS} steps of 8 asks; medians of {reps}, ratios the medians of per-repetition ratios)

| mode | time (s) | vs recovery off, same coordinator | vs `main` asking, same recovery |
|---|---|---|---|
"
    ));
    for (i, (label, _, _)) in modes.iter().enumerate() {
        let off = i - i % 2;
        let main = i % 2;
        md.push_str(&format!(
            "| {label} | {:.3} | {:.3}× | {:.3}× |\n",
            med(&elapsed[i]),
            ratio(i, off),
            ratio(i, main),
        ));
    }
    md.push('\n');
    Ok(())
}

fn restore_time(bins: &Bins, reps: usize, md: &mut String) -> Result<()> {
    // n=5000: each node's tiles hold 5000²/4 points × 2 grids × 8 B = 100 MB.
    let app_args = ["--n", "5000", "--iters", "300", "--check", "bounds"];
    let mut total = Vec::new();
    let mut load = Vec::new();
    let mut detect = Vec::new();
    let mut bytes = 0.0;
    for rep in 0..reps {
        let mut killed = false;
        let mut launch = Launch::new("jacobi2d", 4, &app_args);
        launch.recovery = Some(Duration::from_secs(3));
        let r = run(bins, &launch, |line| {
            // Kill node 2 as soon as it has a checkpoint to restore.
            (!killed && line.contains("node 2: checkpoint committed")).then(|| {
                killed = true;
                Cue::Kill {
                    rank: 2,
                    after: Duration::ZERO,
                }
            })
        })?;
        if let Some(b) =
            node2(&r, |e| e.is_event("checkpoint")).and_then(|e| e.number("bytes").ok())
        {
            bytes = b;
        }
        let Some(died) = node2_at(&r, |e| e.what.starts_with(DIED)) else {
            panic!(
                "node 2 was not killed (no checkpoint before the end?):\n{}",
                r.tail()
            );
        };
        let resumed = node2_at(&r, |e| e.is_event("resumed")).expect("node 2 resumed");
        let loaded = node2_at(&r, |e| e.is_event("loaded")).expect("loaded");
        let noticed = r
            .timeline()
            .into_iter()
            .find(|e| e.is_event("reconnected"))
            .map_or(f64::NAN, |e| e.at);
        eprintln!(
            "rep {rep}: died {died:.3} loaded {loaded:.3} resumed {resumed:.3} survivors reconnected {noticed:.3} (wall {:.1}s)",
            r.wall.as_secs_f64()
        );
        total.push(resumed - died);
        load.push(loaded - died);
        detect.push(noticed - died);
    }
    let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    let t = med(&total);
    md.push_str(&format!(
        "### Recovery of a node with {:.0} MB of checkpointed set state (jacobi2d n=5000, 4 nodes; median of {reps})\n\n| phase | seconds after the supervisor saw the SIGKILL |\n|---|---|\n| survivors connected to the replacement (they learn of the failure) | {:.3} |\n| replacement loaded its checkpoint | {:.3} |\n| actors restored, set resumed | {:.3} (target ≤ 1 s: {}) |\n\n",
        bytes / 1e6,
        med(&detect),
        med(&load),
        t,
        if t <= 1.0 { "PASS" } else { "MISS" }
    ));
    Ok(())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Err(e) = measure() {
        eprintln!("recovery bench: {e}");
        std::process::exit(1);
    }
}

fn measure() -> Result<()> {
    build_release()?;
    let bins = Bins::release();
    let reps = std::env::var("LAZARUS_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut md = format!("## Rollback recovery ({})\n\n", Machine::this().describe());
    // `LAZARUS_BENCH_ONLY=fine|fine-long|coarse|coarse-long|quota|logger|asks|restore` runs one
    // part.
    let only = std::env::var("LAZARUS_BENCH_ONLY").ok();
    let part = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if part("fine") {
        // A short run (mostly logging: few checkpoints fall inside it) and a steady one.
        overhead(&bins, 4, Grain::fine(1500), &ALL_MODES, reps, &mut md)?;
        overhead(&bins, 4, Grain::fine(6000), &ALL_MODES, reps, &mut md)?;
    }
    if part("fine") || part("fine-long") {
        // A long run: about 10 checkpoints per node. And the same on 2 nodes, one per
        // core of this 2-core host: the 4-node runs oversubscribe it (8+ busy threads
        // on 2 cores), which amplifies whatever the checkpoints and the log cost.
        overhead(
            &bins,
            4,
            Grain::fine(24000),
            &[Mode::Off, Mode::On],
            reps,
            &mut md,
        )?;
        overhead(
            &bins,
            2,
            Grain::fine(12000),
            &[Mode::Off, Mode::On],
            reps,
            &mut md,
        )?;
    }
    if part("logger") {
        // Logger nodes at a moderate log rate (about 25 MB/s per node here): the fine
        // grain on 2 nodes, one per core, the logger a third process on the two cores.
        overhead(
            &bins,
            2,
            Grain::fine(12000),
            &[Mode::Off, Mode::On, Mode::OnLoggerNode],
            reps,
            &mut md,
        )?;
    }
    if part("coarse") {
        // A coarser grain (16 times the points per tile, 4 times the halo bytes: a
        // quarter of the bytes logged per unit of work) and a 5 s period (each node's
        // 67 MB of grids goes into every checkpoint), about 15 s per run.
        let coarse = Grain {
            n: 4096,
            iters: 2000,
            every: Duration::from_secs(5),
        };
        // Without checkpoints too: what logging alone costs, the rest is checkpoints'.
        overhead(
            &bins,
            4,
            coarse,
            &[Mode::Off, Mode::On, Mode::LoggingAlone],
            reps,
            &mut md,
        )?;
    }
    if part("coarse") || part("coarse-long") {
        // The same grain for 3 times longer, with a period closer to what a user picks
        // (Young/Daly: the square root of twice the checkpoint's cost, ~0.1 s here, times
        // the mean time between failures: 27 s for an MTBF of an hour, 2 min for a day).
        let long = Grain {
            n: 4096,
            iters: 6000,
            every: Duration::from_secs(20),
        };
        overhead(&bins, 4, long, &[Mode::Off, Mode::On], reps, &mut md)?;
    }
    if part("quota") {
        quota_cost(&bins, reps, &mut md)?;
    }
    if part("asks") {
        asks_cost(&bins, reps, &mut md)?;
    }
    if part("restore") {
        restore_time(&bins, reps.min(3), &mut md)?;
    }
    println!("\n{md}");
    let out = criterion_dir().join("lazarus-recovery-summary.md");
    // The directory exists only once a criterion bench has run in this target.
    let written = std::fs::create_dir_all(criterion_dir()).and_then(|()| std::fs::write(&out, md));
    if let Err(e) = written {
        eprintln!("could not write {}: {e}", out.display());
    }
    Ok(())
}
