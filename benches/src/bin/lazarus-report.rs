//! `lazarus-report`: runs the measurement suite on this machine and writes the results
//! report (markdown and SVG plots) into `docs/results/`. `scripts/report.sh` builds the
//! release binaries and runs it; see `lazarus_benches::report` for what is measured.

use clap::Parser;
use lazarus_benches::report::{generate, Options};
use lazarus_benches::target::{workspace_root, Bins};
use std::path::PathBuf;
use std::process::ExitCode;

/// Run the measurement suite and write the results report.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// One repetition, small problems, short criterion runs: checks in a few minutes
    /// that everything works.
    #[arg(long)]
    quick: bool,
    /// Repetitions of every app run (default: 1 with --quick, else 5).
    #[arg(long)]
    reps: Option<usize>,
    /// Output directory (default: docs/results in the workspace).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Directory of the release binaries `lazarus`, `jacobi2d`, `npb-*`, `pingpong`
    /// (default: `release/` in the target directory: CARGO_TARGET_DIR or cargo's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Run only these sections (apps, recovery, pingpong, coordination, local, scaling);
    /// repeatable. The page then holds only them.
    #[arg(long)]
    only: Vec<String>,
}

const SECTIONS: [&str; 6] = [
    "apps",
    "recovery",
    "pingpong",
    "coordination",
    "local",
    "scaling",
];

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(bad) = args.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
        eprintln!("lazarus-report: unknown section `{bad}` (one of {SECTIONS:?})");
        return ExitCode::from(2);
    }
    let reps = args.reps.unwrap_or(if args.quick { 1 } else { 5 });
    if reps == 0 {
        eprintln!("lazarus-report: --reps must be at least 1");
        return ExitCode::from(2);
    }
    let options = Options {
        quick: args.quick,
        reps,
        out: args
            .out
            .unwrap_or_else(|| workspace_root().join("docs").join("results")),
        bins: args.bin_dir.map_or_else(Bins::release, Bins::in_dir),
        only: args.only,
    };
    match generate(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lazarus-report: {e}");
            ExitCode::FAILURE
        }
    }
}
