//! The results report of issue 5: runs the measurement suite on this machine and writes
//! `docs/results/` (a markdown summary and SVG plots). Each section owns one experiment:
//!
//! - [`apps`]: the apps on 4 nodes without failures in every recovery mode: overhead
//!   and log statistics;
//! - [`recovery`]: the same apps with a node SIGKILLed mid-run: the recovery timeline;
//! - [`pingpong`]: latency and bandwidth against message size;
//! - [`coordination`]: set checkpoint coordination time against actors per node;
//! - [`local`]: local messaging against other actor runtimes;
//! - [`scaling`]: jacobi2d strong scaling over nodes and cores.
//!
//! [`markdown`] assembles the page, [`plot`] draws the figures. Every number on the page
//! comes from a run made by the same invocation; nothing is carried over.

pub mod apps;
pub mod coordination;
pub mod local;
pub mod markdown;
pub mod pingpong;
pub mod plot;
pub mod recovery;
pub mod scaling;

use crate::error::{Error, Result};
use crate::machine::{git_commit, Machine};
use crate::target::Bins;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// How much to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Quick mode: one repetition, small problems and short criterion runs, to check in
    /// a few minutes that everything works. Its numbers are not meant to be read.
    pub quick: bool,
    /// Repetitions of every app run (medians are reported).
    pub reps: usize,
    /// Where the page and plots go.
    pub out: PathBuf,
    /// The release binaries of the launcher and the apps.
    pub bins: Bins,
    /// The sections to run (all when empty).
    pub only: Vec<String>,
}

/// One section of the page: a heading and its markdown body (tables, figure links).
pub struct Section {
    /// The heading.
    pub title: String,
    /// The body.
    pub body: String,
}

/// What every section needs: options, provenance and a progress log.
pub struct Context {
    /// The options.
    pub options: Options,
    /// The machine.
    pub machine: Machine,
    /// The commit measured.
    pub commit: String,
    started: Instant,
}

impl Context {
    /// The context of a report made with `options`, on this machine, from this checkout.
    pub fn new(options: Options) -> Self {
        Context {
            options,
            machine: Machine::this(),
            commit: git_commit(),
            started: Instant::now(),
        }
    }

    /// The provenance of a table or plot: machine, commit and how values were summarised
    /// (`what`, e.g. "median of 3 repetitions").
    pub fn provenance(&self, what: &str) -> String {
        format!(
            "{} · commit {} · {what}{}",
            self.machine.describe(),
            self.commit,
            if self.options.quick {
                " · QUICK MODE (smoke test, not for reading)"
            } else {
                ""
            }
        )
    }

    /// "median of N repetitions" for the app runs.
    pub fn reps_text(&self) -> String {
        match self.options.reps {
            1 => "1 repetition (no median)".into(),
            n => format!("median of {n} repetitions"),
        }
    }

    /// The path of output file `name`.
    pub fn out(&self, name: &str) -> PathBuf {
        self.options.out.join(name)
    }

    /// Prints a progress line with the time since the report started.
    pub fn progress(&self, what: &str) {
        eprintln!(
            "[report {:>7.1}s] {what}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Time since the report started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Runs `cargo bench -p lazarus-benches --bench <bench> -- <args>` and returns the
    /// time it started, so readers can ignore older criterion files.
    pub fn cargo_bench(&self, bench: &str, args: &[&str]) -> Result<SystemTime> {
        let since = SystemTime::now();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        self.progress(&format!(
            "cargo bench --bench {bench} -- {}",
            args.join(" ")
        ));
        let status = Command::new(cargo)
            .current_dir(crate::target::workspace_root())
            .args([
                "bench",
                "--quiet",
                "-p",
                "lazarus-benches",
                "--bench",
                bench,
                "--",
            ])
            .args(args)
            .status()
            .map_err(|e| Error::new(format!("cannot run cargo bench: {e}")))?;
        if status.success() {
            Ok(since)
        } else {
            Err(Error::new(format!(
                "cargo bench --bench {bench} failed ({status})"
            )))
        }
    }
}

/// The criterion options of quick mode: short warm-up and measurement, few samples.
pub const QUICK_CRITERION: &[&str] = &[
    "--warm-up-time",
    "0.3",
    "--measurement-time",
    "1",
    "--sample-size",
    "10",
];

/// Runs every selected section and writes the page and plots into `options.out`. A
/// section that fails is reported on the page with its error, the others still run; the
/// result is then an error naming the failed sections.
pub fn generate(options: Options) -> Result<()> {
    std::fs::create_dir_all(&options.out)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", options.out.display())))?;
    let ctx = Context::new(options);
    let wanted =
        |name: &str| ctx.options.only.is_empty() || ctx.options.only.iter().any(|o| o == name);
    let mut sections = Vec::new();
    let mut failed = Vec::new();
    let mut record = |name: &str, title: &str, outcome: Result<Vec<Section>>| match outcome {
        Ok(s) => sections.extend(s),
        Err(e) => {
            eprintln!("report: section {name} failed: {e}");
            failed.push(name.to_string());
            sections.push(Section {
                title: title.to_string(),
                body: format!("**Not measured: this section failed.**\n\n```\n{e}\n```\n"),
            });
        }
    };
    let mut app_runs = None;
    if wanted("apps") || wanted("recovery") {
        match apps::measure(&ctx) {
            Ok(runs) => {
                if wanted("apps") {
                    record(
                        "apps",
                        "1. Failure-free overhead",
                        apps::sections(&ctx, &runs),
                    );
                }
                app_runs = Some(runs);
            }
            Err(e) => record("apps", "1. Failure-free overhead", Err(e)),
        }
    }
    if wanted("recovery") {
        let outcome = match &app_runs {
            Some(runs) => recovery::section(&ctx, runs).map(|s| vec![s]),
            None => Err(Error::new("needs the failure-free app runs, which failed")),
        };
        record("recovery", "5. Recovery timeline", outcome);
    }
    if wanted("pingpong") {
        record(
            "pingpong",
            "Ping-pong",
            pingpong::section(&ctx).map(|s| vec![s]),
        );
    }
    if wanted("coordination") {
        record(
            "coordination",
            "4. Set checkpoint coordination",
            coordination::section(&ctx).map(|s| vec![s]),
        );
    }
    if wanted("local") {
        record(
            "local",
            "Local messaging",
            local::section(&ctx).map(|s| vec![s]),
        );
    }
    if wanted("scaling") {
        record(
            "scaling",
            "7. Strong scaling",
            scaling::section(&ctx).map(|s| vec![s]),
        );
    }
    // Measured in the order the data needs (recovery reuses the app runs), shown in the
    // issue's order: every title starts with its number.
    sections.sort_by(|a, b| a.title.cmp(&b.title));
    let page = markdown::page(&ctx, &sections);
    let path = ctx.out("README.md");
    std::fs::write(&path, page)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    ctx.progress(&format!("wrote {}", path.display()));
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::new(format!(
            "sections failed: {}",
            failed.join(", ")
        )))
    }
}

/// `x` with three significant digits, without an exponent: 1234, 56.7, 0.00123.
pub fn three_digits(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 || a == 0.0 || !a.is_finite() {
        return format!("{x:.0}");
    }
    let decimals = (2 - a.log10().floor() as i32).clamp(0, 9) as usize;
    format!("{x:.decimals$}")
}

/// The file name part of `path`, for links from the page.
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits() {
        assert_eq!(three_digits(1234.4), "1234");
        assert_eq!(three_digits(56.78), "56.8");
        assert_eq!(three_digits(1.0), "1.00");
        assert_eq!(three_digits(0.000_4), "0.000400");
        assert_eq!(three_digits(0.0), "0");
    }
}
