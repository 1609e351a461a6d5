//! The table printed after criterion: medians, Lazarus/contender ratios and the issue's
//! targets, read back from the `estimates.json` files criterion wrote in this run.

use crate::{Scenario, ACTIX, KAMEO, LAZARUS, SCENARIOS, SPAWNS, TELLS, TOKIO};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where criterion writes. Resolved the way criterion resolves its own default and then
/// handed to criterion explicitly, so that the table reads the very files it wrote.
pub fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    let metadata = std::env::var_os("CARGO").and_then(|cargo| {
        std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()
    });
    metadata
        .and_then(|out| serde_json::from_slice::<serde_json::Value>(&out.stdout).ok())
        .and_then(|v| v["target_directory"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

/// Median time of one round in ns, if criterion measured `group/id` in this run (not in
/// `--test` mode, not filtered out: older files are ignored).
fn median_ns(dir: &Path, group: &str, id: &str, since: SystemTime) -> Option<f64> {
    let path = dir.join(group).join(id).join("new").join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

/// A target of the issue: Lazarus's median time at most `max_ratio` times `other`'s.
struct Target {
    group: &'static str,
    other: &'static str,
    max_ratio: f64,
    text: &'static str,
}

const TARGETS: &[Target] = &[
    Target {
        group: "tell_same_core",
        other: ACTIX,
        max_ratio: 1.0,
        text: "throughput ≥ actix",
    },
    Target {
        group: "tell_same_core",
        other: KAMEO,
        max_ratio: 0.5,
        text: "throughput ≥ 2× kameo",
    },
    Target {
        group: "ask_roundtrip_cross_core",
        other: TOKIO,
        max_ratio: 1.5,
        text: "round trip ≤ 1.5× tokio",
    },
];

fn human_time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn human_rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

/// The markdown rows of one scenario (none if it was not measured in this run).
fn rows(out: &mut String, dir: &Path, s: &Scenario, since: SystemTime) -> bool {
    let lazarus = median_ns(dir, s.group, LAZARUS, since);
    let mut any = false;
    for (id, _) in s.contenders {
        let Some(ns) = median_ns(dir, s.group, id, since) else {
            continue;
        };
        any = true;
        let per = ns / s.elements as f64;
        // Time ratio: below 1, Lazarus is faster.
        let ratio = lazarus.map(|l| l / ns);
        let ratio_text = ratio.map_or("-".into(), |r| format!("{r:.2}"));
        let (target, verdict) = match TARGETS
            .iter()
            .find(|t| t.group == s.group && t.other == *id)
        {
            Some(t) => (
                format!("{} (ratio ≤ {})", t.text, t.max_ratio),
                match ratio {
                    Some(r) if r <= t.max_ratio => "**PASS**",
                    Some(_) => "**MISS**",
                    None => "-",
                },
            ),
            None => (String::new(), ""),
        };
        let _ = writeln!(
            out,
            "| {} | {id} | {} | {} | {}{}/s | {ratio_text} | {target} | {verdict} |",
            s.group,
            human_time(ns),
            human_time(per),
            human_rate(1e9 / per),
            s.unit,
        );
    }
    any
}

/// Prints the table and writes it to `<criterion dir>/lazarus-summary.md`, if anything
/// was measured since `since`.
pub fn report(since: SystemTime) {
    let dir = criterion_dir();
    let mut table = String::from(
        "| scenario | contender | median / round | per element | throughput | \
         lazarus / contender (time) | target | verdict |\n\
         |---|---|---:|---:|---:|---:|---|---|\n",
    );
    let mut any = false;
    for scenario in SCENARIOS {
        any |= rows(&mut table, &dir, scenario, since);
    }
    if !any {
        return;
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let text = format!(
        "# Lazarus local messaging\n\n\
         Machine: {cores} cores, {cpu}. Round: {TELLS} messages (tell), 1 ask, {SPAWNS} \
         spawns. Ratio: Lazarus's median time over the contender's (below 1, Lazarus is \
         faster).\n\n{table}"
    );
    println!("\n{text}");
    let path = dir.join("lazarus-summary.md");
    match std::fs::write(&path, &text) {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
