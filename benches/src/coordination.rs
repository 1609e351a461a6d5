//! What the set checkpoint coordination benchmark measures (`benches/checkpoint_
//! coordination`: pause and resume every core of a node, against the number of busy
//! actors on it) and the table of its results, read back from criterion's estimates.
//! The benchmark's own summary and the results report both use it.

use crate::criterion_data::median_ns;
use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

/// The criterion group.
pub const GROUP: &str = "checkpoint_coordination";
/// The benchmark function; its parameter is the number of actors.
pub const FUNCTION: &str = "busy_actors";
/// The numbers of busy actors on the node.
pub const ACTORS: [usize; 6] = [1, 4, 16, 64, 128, 256];
/// The target: coordination at 64 actors within this many µs.
pub const TARGET_US_AT_64: f64 = 200.0;

/// The criterion id of the measurement with `actors` actors.
pub fn id(actors: usize) -> String {
    format!("{GROUP}/{FUNCTION}/{actors}")
}

/// (actors, median coordination time in ns) for every count criterion measured in
/// `dir` at or after `since`.
pub fn measured(dir: &Path, since: SystemTime) -> Vec<(usize, f64)> {
    ACTORS
        .iter()
        .filter_map(|&k| Some((k, median_ns(dir, &id(k), since)?)))
        .collect()
}

/// The markdown table: median per count, ratio to one actor, the target at 64.
pub fn table(measured: &[(usize, f64)]) -> String {
    let base = measured.iter().find(|(k, _)| *k == 1).map(|(_, ns)| *ns);
    let mut md = String::from(
        "| busy actors on the node | coordination (µs, median) | vs 1 actor | target |\n\
         |---:|---:|---:|---|\n",
    );
    for &(k, ns) in measured {
        let target = if k == 64 {
            let verdict = if ns <= TARGET_US_AT_64 * 1e3 {
                "PASS"
            } else {
                "MISS"
            };
            format!("≤ {TARGET_US_AT_64} µs: {verdict}")
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| {k} | {:.1} | {:.2} | {target} |",
            ns / 1e3,
            base.map_or(f64::NAN, |b| ns / b)
        );
    }
    md
}
