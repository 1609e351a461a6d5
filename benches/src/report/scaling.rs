//! jacobi2d strong scaling on this host: the same grid and iteration count on 1 node × 1
//! core, 1 node × 2 cores, 2 nodes × 1 core and 4 nodes × 1 core (recovery off), the
//! multi-node layouts once over QUIC and once over shared memory, repetitions interleaved; time, MLUPS and speed-up against 1 node × 1 core, and whether
//! every run gave the same checksum (the decomposition must not change the answer).

use super::apps::{yes_no, TIMING_FIELDS};
use super::{Context, Section};
use crate::error::{Error, Result};
use crate::runs::{self, Launch};
use crate::stats::median;
use std::fmt::Write as _;

/// The layouts measured: (nodes, cores per node, data path between the nodes).
pub const LAYOUTS: [(u16, usize, &str); 6] = [
    (1, 1, "-"),
    (1, 2, "-"),
    (2, 1, "quic"),
    (2, 1, "shm"),
    (4, 1, "quic"),
    (4, 1, "shm"),
];

/// jacobi2d's arguments (a smaller grid in quick mode).
fn args(quick: bool) -> [&'static str; 6] {
    if quick {
        ["--n", "512", "--iters", "100", "--check", "bounds"]
    } else {
        ["--n", "2048", "--iters", "300", "--check", "bounds"]
    }
}

/// One layout's runs: app times (s), MLUPS, answers.
#[derive(Default)]
struct LayoutRuns {
    times: Vec<f64>,
    mlups: Vec<f64>,
    answers: Vec<Vec<(String, String)>>,
    verified: bool,
}

/// Runs every layout `reps` times (rotating their order each repetition) and builds the
/// section.
pub fn section(ctx: &Context) -> Result<Section> {
    let args = args(ctx.options.quick);
    let mut runs: Vec<LayoutRuns> = LAYOUTS
        .iter()
        .map(|_| LayoutRuns {
            verified: true,
            ..Default::default()
        })
        .collect();
    for rep in 0..ctx.options.reps {
        for k in 0..LAYOUTS.len() {
            let i = (k + rep) % LAYOUTS.len();
            let (nodes, cores, path) = LAYOUTS[i];
            let mut launch = Launch::new("jacobi2d", nodes, &args);
            launch.cores_per_node = Some(cores);
            if nodes > 1 {
                launch
                    .env
                    .push(("LAZARUS_TRANSPORT".into(), path.to_string()));
            }
            let run = runs::run(&ctx.options.bins, &launch, |_| None)?;
            let result = run.result()?;
            let elapsed = result.number("elapsed_s")?;
            ctx.progress(&format!(
                "rep {} jacobi2d {nodes} node(s) × {cores} core(s) ({path}): {elapsed:.3} s",
                rep + 1
            ));
            let r = &mut runs[i];
            r.times.push(elapsed);
            r.mlups.push(result.number("mlups")?);
            r.answers.push(result.answer(&TIMING_FIELDS));
            r.verified &= result.verified();
        }
    }
    Ok(Section {
        title: "7. Strong scaling".into(),
        body: body(ctx, &args, &runs)?,
    })
}

fn body(ctx: &Context, args: &[&str], runs: &[LayoutRuns]) -> Result<String> {
    let med = |v: &[f64]| median(v).ok_or_else(|| Error::new("a layout has no runs"));
    let base = med(&runs[0].times)?;
    // Node and core counts differ between layouts, so the answer compared is the one
    // field that must not change: the checksum (and the sum it is taken with).
    let key = |a: &Vec<(String, String)>| {
        a.iter()
            .filter(|(k, _)| k == "checksum" || k == "sum")
            .cloned()
            .collect::<Vec<_>>()
    };
    let reference = runs[0].answers.first().map(key);
    let same = runs
        .iter()
        .flat_map(|r| r.answers.iter())
        .all(|a| Some(key(a)) == reference);
    let mut table = String::from(
        "| nodes × cores per node | between nodes | cores in use | time (s) | MLUPS | \
         speed-up vs 1 × 1 | verified |\n|---|---|---:|---:|---:|---:|---|\n",
    );
    for ((nodes, cores, path), r) in LAYOUTS.iter().zip(runs) {
        let t = med(&r.times)?;
        let path = match *path {
            "quic" => "QUIC",
            "shm" => "shared memory",
            other => other,
        };
        let _ = writeln!(
            table,
            "| {nodes} × {cores} | {path} | {} | {t:.3} | {:.0} | {:.2}× | {} |",
            *nodes as usize * cores,
            med(&r.mlups)?,
            base / t,
            yes_no(r.verified)
        );
    }
    let provenance = ctx.provenance(&format!(
        "{}; all layouts in the same invocation, repetitions interleaved (layouts rotate \
         their order each repetition)",
        ctx.reps_text()
    ));
    Ok(format!(
        "`lazarus run -n N --cores-per-node C -- jacobi2d {}` (recovery off): one problem, \
         split over more cores and nodes. Time is the app's own (`elapsed_s`), MLUPS = \
         million point updates per second. This host has 2 cores: 4 nodes × 1 core runs 4 \
         node processes on 2 cores (oversubscribed 2×), so its row shows what node processes \
         and the network between them cost, not more hardware. Same checksum in every run \
         of every layout: **{}**.\n\n{table}\n_{provenance}._\n",
        args.join(" "),
        yes_no(same)
    ))
}
