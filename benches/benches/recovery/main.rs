//! The cost and speed of rollback recovery, measured on real processes with the apps'
//! own measurement modes (release binaries, `lazarus run`), every comparison in the same
//! run, repetitions interleaved, medians reported:
//!
//! 1. Failure-free overhead on jacobi2d, 4 nodes: recovery off / on (correlated sets: only
//!    messages between nodes are logged) / on with payload logging forced for every
//!    message (what correlated sets save), with log bytes and piggyback per message.
//! 2. Recovery of a node holding ~100 MB of set state (jacobi2d n=5000 on 4 nodes): time
//!    from the supervisor seeing the SIGKILL to the restored set resuming, its phases,
//!    and how fast the survivors learned of the failure.
//!
//! Writes `target/criterion/lazarus-recovery-summary.md`. `LAZARUS_BENCH_REPS` sets the
//! repetitions (default 5).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn build() {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root())
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "lazarus",
            "-p",
            "lazarus-apps",
            "--bins",
        ])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the release binaries failed");
}

fn bin(name: &str) -> PathBuf {
    root().join("target/release").join(name)
}

/// One finished `lazarus run`: its output lines (stdout and stderr) with arrival times.
struct Run {
    lines: Vec<(Duration, String)>,
    wall: Duration,
}

impl Run {
    fn result(&self) -> HashMap<String, String> {
        self.lines
            .iter()
            .rev()
            .find(|(_, l)| l.starts_with("RESULT "))
            .map(|(_, l)| {
                l.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_else(|| panic!("no RESULT:\n{}", self.text()))
    }

    fn text(&self) -> String {
        self.lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sum over nodes of a field of their `final` recovery totals.
    fn final_sum(&self, key: &str) -> u64 {
        self.lines
            .iter()
            .filter(|(_, l)| l.contains(": final "))
            .filter_map(|(_, l)| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// The timeline time (seconds since launch) of the first line containing `needle`.
    fn timeline_at(&self, needle: &str) -> Option<f64> {
        self.lines
            .iter()
            .find(|(_, l)| l.contains(needle))
            .and_then(|(_, l)| {
                l.strip_prefix("timeline")?
                    .split_whitespace()
                    .next()?
                    .trim_end_matches('s')
                    .parse()
                    .ok()
            })
    }
}

/// Runs `lazarus run` with `launcher` options and app arguments; `kill` is called with
/// each output line and may return a rank to SIGKILL (by the PID the launcher printed).
fn run(
    launcher: &[&str],
    app: &str,
    app_args: &[&str],
    env: &[(&str, &str)],
    mut kill: impl FnMut(&str) -> Option<u16>,
) -> Run {
    let started = Instant::now();
    let mut child = Command::new(bin("lazarus"))
        .arg("run")
        .args(launcher)
        .arg("--")
        .arg(bin(app))
        .args(app_args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("launcher starts");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let t2 = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = t2.send(l);
        }
    });
    let mut lines = Vec::new();
    let mut pids: HashMap<u16, i32> = HashMap::new();
    for line in rx {
        if let Some(rest) = line.strip_prefix("node ") {
            if let Some((rank, rest)) = rest.split_once(" pid ") {
                if let (Ok(r), Some(Ok(p))) = (
                    rank.parse::<u16>(),
                    rest.split_whitespace().next().map(str::parse::<i32>),
                ) {
                    pids.insert(r, p);
                }
            }
        }
        if let Some(rank) = kill(&line) {
            if let Some(pid) = pids.get(&rank) {
                // SAFETY: kill(2) on a PID the launcher printed for one of its nodes.
                unsafe {
                    kill_pid(*pid, 9);
                }
            }
        }
        lines.push((started.elapsed(), line));
    }
    let status = child.wait().expect("launcher ends");
    let run = Run {
        lines,
        wall: started.elapsed(),
    };
    assert!(status.success(), "run failed:\n{}", run.text());
    run
}

extern "C" {
    #[link_name = "kill"]
    fn kill_pid(pid: i32, sig: i32) -> i32;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A measured configuration: name, launcher options, extra environment.
struct Mode {
    name: &'static str,
    launcher: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

/// Recovery totals of one run, summed over nodes.
#[derive(Clone, Copy, Default)]
struct Totals {
    log_peak_bytes: u64,
    forced_peak_bytes: u64,
    piggyback_bytes: u64,
    delivered: u64,
    forced_logged: u64,
}

fn overhead(reps: usize, md: &mut String) {
    let app_args = ["--n", "1024", "--iters", "1500", "--check", "bounds"];
    let modes = [
        Mode {
            name: "recovery off",
            launcher: &["-n", "4"],
            env: &[],
        },
        Mode {
            name: "recovery on (correlated sets)",
            launcher: &["-n", "4", "--ft", "on", "--checkpoint-every", "1s"],
            env: &[],
        },
        Mode {
            name: "recovery on, no periodic checkpoint (logging alone)",
            launcher: &["-n", "4", "--ft", "on", "--checkpoint-every", "0"],
            env: &[],
        },
        Mode {
            name: "recovery on, every message logged",
            launcher: &["-n", "4", "--ft", "on", "--checkpoint-every", "1s"],
            env: &[("LAZARUS_LOG_EVERYTHING", "on")],
        },
    ];
    let mut elapsed: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut stats: Vec<Vec<Totals>> = vec![Vec::new(); modes.len()];
    let mut checksums = Vec::new();
    for rep in 0..reps {
        for (i, mode) in modes.iter().enumerate() {
            let (name, launcher, env) = (mode.name, mode.launcher, mode.env);
            let r = run(launcher, "jacobi2d", &app_args, env, |_| None);
            let res = r.result();
            let e: f64 = res["elapsed_s"].parse().unwrap();
            eprintln!("rep {rep} {name}: {e:.3} s");
            elapsed[i].push(e);
            checksums.push(res["checksum"].clone());
            stats[i].push(Totals {
                log_peak_bytes: r.final_sum("log_peak_bytes"),
                forced_peak_bytes: r.final_sum("forced_peak_bytes"),
                piggyback_bytes: r.final_sum("piggyback_bytes"),
                delivered: r.final_sum("delivered"),
                forced_logged: r.final_sum("forced_logged"),
            });
        }
    }
    checksums.dedup();
    assert_eq!(checksums.len(), 1, "every mode computes the same answer");
    let base = median(elapsed[0].clone());
    md.push_str(&format!(
        "### Failure-free overhead: jacobi2d n=1024, 1500 iterations, 4 nodes (median of {reps})\n\n| mode | time (s) | vs off | log peak (MB, all nodes) | messages logged | piggyback (B/msg) | target |\n|---|---|---|---|---|---|---|\n"
    ));
    for (i, mode) in modes.iter().enumerate() {
        let name = mode.name;
        let t = median(elapsed[i].clone());
        let s = stats[i].last().copied().unwrap_or_default();
        let (log_mb, logged, piggy) = match i {
            0 => (0.0, 0, 0.0),
            _ => (
                (s.log_peak_bytes + s.forced_peak_bytes) as f64 / 1e6,
                s.delivered + s.forced_logged,
                s.piggyback_bytes as f64 / s.delivered.max(1) as f64,
            ),
        };
        let target = if i == 1 {
            if t / base <= 1.03 {
                "≤ 1.03× off: PASS"
            } else {
                "≤ 1.03× off: MISS"
            }
        } else {
            ""
        };
        md.push_str(&format!(
            "| {name} | {t:.3} | {:.3} | {log_mb:.1} | {logged} | {piggy:.1} | {target} |\n",
            t / base
        ));
    }
    md.push('\n');
}

fn restore_time(reps: usize, md: &mut String) {
    // n=5000: each node's tiles hold 5000²/4 points × 2 grids × 8 B = 100 MB.
    let app_args = ["--n", "5000", "--iters", "300", "--check", "bounds"];
    let mut total = Vec::new();
    let mut load = Vec::new();
    let mut detect = Vec::new();
    let mut bytes = 0u64;
    for rep in 0..reps {
        let mut killed = false;
        let r = run(
            &["-n", "4", "--ft", "on", "--checkpoint-every", "3s"],
            "jacobi2d",
            &app_args,
            &[],
            |line| {
                if !killed && line.contains("node 2: checkpoint committed") {
                    killed = true;
                    if let Some(b) = line
                        .split_whitespace()
                        .find_map(|kv| kv.strip_prefix("bytes="))
                    {
                        bytes = b.parse().unwrap_or(0);
                    }
                    return Some(2);
                }
                None
            },
        );
        let Some(died) = r.timeline_at("node 2: died") else {
            panic!(
                "node 2 was not killed (no checkpoint before the end?):\n{}",
                r.text()
            );
        };
        let resumed = r
            .timeline_at("node 2: actors restored")
            .expect("node 2 resumed");
        let loaded = r
            .timeline_at("node 2: restarted node loaded")
            .expect("loaded");
        let noticed = r
            .timeline_at("connection to a restarted peer is up")
            .unwrap_or(f64::NAN);
        eprintln!(
            "rep {rep}: died {died:.3} loaded {loaded:.3} resumed {resumed:.3} survivors reconnected {noticed:.3} (wall {:.1}s)",
            r.wall.as_secs_f64()
        );
        total.push(resumed - died);
        load.push(loaded - died);
        detect.push(noticed - died);
    }
    let t = median(total);
    md.push_str(&format!(
        "### Recovery of a node with {:.0} MB of checkpointed set state (jacobi2d n=5000, 4 nodes; median of {reps})\n\n| phase | seconds after the supervisor saw the SIGKILL |\n|---|---|\n| survivors connected to the replacement (they learn of the failure) | {:.3} |\n| replacement loaded its checkpoint | {:.3} |\n| actors restored, set resumed | {:.3} (target ≤ 1 s: {}) |\n\n",
        bytes as f64 / 1e6,
        median(detect),
        median(load),
        t,
        if t <= 1.0 { "PASS" } else { "MISS" }
    ));
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    build();
    let reps = std::env::var("LAZARUS_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mut md = format!(
        "## Rollback recovery ({} cores: {cpu})\n\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    overhead(reps, &mut md);
    restore_time(reps.min(3), &mut md);
    println!("\n{md}");
    let _ = std::fs::write(
        root().join("target/criterion/lazarus-recovery-summary.md"),
        md,
    );
}
