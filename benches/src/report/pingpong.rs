//! Ping-pong latency and bandwidth against message size (the `pingpong` app's sweep),
//! inside one node and between two nodes, with recovery off, on, and logging every
//! message; all combinations in each repetition, interleaved.

use super::apps::{checkpoint_every, Mode};
use super::{plot, three_digits, Context, Section};
use crate::error::{Error, Result};
use crate::runs::{self, Launch, Run};
use crate::stats::median;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The modes compared.
pub const MODES: [Mode; 3] = [Mode::Off, Mode::On, Mode::LogEverything];

/// Where the two actors are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On two cores of one node (`lazarus run -n 1 --cores-per-node 2`).
    Intra,
    /// On two nodes of one core each (`lazarus run -n 2`).
    Inter,
}

/// Both placements, in the order of tables and legends.
pub const PLACEMENTS: [Placement; 2] = [Placement::Inter, Placement::Intra];

impl Placement {
    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            Placement::Intra => "intra-node",
            Placement::Inter => "inter-node",
        }
    }

    /// The run of the sweep `args` with `iters` round trips for the smallest size:
    /// inside a node more than between nodes (a round trip there takes a microsecond, and
    /// a sweep of a few milliseconds would be mostly noise).
    fn launch(self, args: &[&str], iters: [&str; 2]) -> Launch {
        let mut l = match self {
            // Two nodes, both actors on node 0: a one-node cluster has no recovery layer,
            // so intra-node on / log-everything would otherwise measure the off code.
            Placement::Intra => {
                let mut l = Launch::new("pingpong", 2, args);
                l.cores_per_node = Some(2);
                l.args.push("--same-node".to_string());
                l
            }
            Placement::Inter => Launch::new("pingpong", 2, args),
        };
        let n = if self == Placement::Intra {
            iters[1]
        } else {
            iters[0]
        };
        l.args.extend(["--iters".to_string(), n.to_string()]);
        l
    }
}

/// The `size iters latency_us bandwidth_MB_per_s` lines of node 0, as (size, latency in
/// µs, bandwidth in MB/s). The bandwidth is recomputed from the latency (size / latency):
/// the app prints it with one decimal, too coarse for small messages.
fn sweep(run: &Run) -> Result<Vec<(u64, f64, f64)>> {
    let rows: Vec<(u64, f64, f64)> = run
        .node_output(0)
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[..] {
                [size, iters, lat, bw] => {
                    iters.parse::<u64>().ok()?;
                    bw.parse::<f64>().ok()?;
                    let size: u64 = size.parse().ok()?;
                    let lat: f64 = lat.parse().ok()?;
                    (lat > 0.0).then_some((size, lat, size as f64 / lat))
                }
                _ => None,
            }
        })
        .collect();
    if rows.is_empty() {
        return Err(Error::new(format!(
            "`{}` printed no size/latency/bandwidth lines:\n{}",
            run.command,
            run.tail()
        )));
    }
    if !run.result()?.verified() {
        return Err(Error::new(format!(
            "`{}`: the payload came back corrupted (verified=false)",
            run.command
        )));
    }
    Ok(rows)
}

/// Per size, the latencies and bandwidths of the repetitions.
type Series = BTreeMap<u64, (Vec<f64>, Vec<f64>)>;

/// Runs the sweeps and builds the section with its two plots and tables.
pub fn section(ctx: &Context) -> Result<Section> {
    let quick = ctx.options.quick;
    let every = checkpoint_every(quick);
    // Round trips for the smallest size, between nodes and inside a node.
    let (args, iters): (&[&str], [&str; 2]) = if quick {
        (
            &["--min-size", "8", "--max-size", "1048576"],
            ["1000", "20000"],
        )
    } else {
        (
            &["--min-size", "8", "--max-size", "4194304"],
            ["10000", "200000"],
        )
    };
    let combos: Vec<(Placement, Mode)> = PLACEMENTS
        .iter()
        .flat_map(|p| MODES.iter().map(move |m| (*p, *m)))
        .collect();
    let mut data: Vec<Series> = combos.iter().map(|_| Series::new()).collect();
    for rep in 0..ctx.options.reps {
        for (i, (placement, mode)) in combos.iter().enumerate() {
            let mut launch = placement.launch(args, iters);
            mode.apply(&mut launch, every);
            let run = runs::run(&ctx.options.bins, &launch, |_| None)?;
            for (size, lat, bw) in sweep(&run)? {
                let e = data[i].entry(size).or_default();
                e.0.push(lat);
                e.1.push(bw);
            }
            ctx.progress(&format!(
                "rep {} pingpong {} {}: done (wall {:.1} s)",
                rep + 1,
                placement.label(),
                mode.label(),
                run.wall.as_secs_f64()
            ));
        }
    }
    let med = |v: &[f64]| median(v).unwrap_or(f64::NAN);
    let name = |(p, m): (Placement, Mode)| format!("{}, {}", p.label(), m.label());
    let mut tables = String::new();
    for (metric, unit, pick) in [("latency", "µs", 0usize), ("bandwidth", "MB/s", 1usize)] {
        let _ = write!(
            tables,
            "\n{} ({unit}, one way = half a round trip):\n\n| size |",
            metric
        );
        for c in &combos {
            let _ = write!(tables, " {} |", name(*c));
        }
        let _ = writeln!(tables, "\n|---:|{}", "---:|".repeat(combos.len()));
        let sizes: Vec<u64> = data
            .iter()
            .flat_map(|d| d.keys().copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for size in sizes {
            let _ = write!(tables, "| {} |", plot::bytes_label(size as f64));
            for d in &data {
                match d.get(&size) {
                    Some(v) => {
                        let x = med(if pick == 0 { &v.0 } else { &v.1 });
                        let _ = write!(tables, " {} |", three_digits(x));
                    }
                    None => tables.push_str(" - |"),
                }
            }
            tables.push('\n');
        }
    }
    let provenance = ctx.provenance(&format!(
        "{}; all six combinations measured in the same invocation, repetitions interleaved",
        ctx.reps_text()
    ));
    let lines = |pick: usize| -> Vec<plot::Line> {
        combos
            .iter()
            .zip(&data)
            .map(|(c, d)| plot::Line {
                name: name(*c),
                points: d
                    .iter()
                    .map(|(size, v)| (*size as f64, med(if pick == 0 { &v.0 } else { &v.1 })))
                    .collect(),
                color: MODES.iter().position(|m| *m == c.1).unwrap_or(0),
                hollow: c.0 == Placement::Intra,
            })
            .collect()
    };
    let latency_svg = ctx.out("pingpong-latency.svg");
    plot::lines(
        &latency_svg,
        &plot::LinePlot {
            title: "Ping-pong latency (one way) against message size",
            x_desc: "message size",
            y_desc: "latency (µs)",
            log_x: true,
            log_y: true,
            lines: lines(0),
            x_format: plot::bytes_label,
            footer: &provenance,
        },
    )?;
    let bandwidth_svg = ctx.out("pingpong-bandwidth.svg");
    plot::lines(
        &bandwidth_svg,
        &plot::LinePlot {
            title: "Ping-pong bandwidth against message size",
            x_desc: "message size",
            y_desc: "bandwidth (MB/s)",
            log_x: true,
            log_y: true,
            lines: lines(1),
            x_format: plot::bytes_label,
            footer: &provenance,
        },
    )?;
    let body = format!(
        "The `pingpong` app (`{} --iters {}`, inside a node `--iters {}`): two actors bounce a payload that the pong side flips \
         byte by byte, round trips per size scaled down for large sizes; latency = half the \
         round trip, bandwidth = size / latency. **Inter-node**: `lazarus run -n 2` (one core \
         per node, QUIC over loopback with mutual TLS). **Intra-node**: `lazarus run -n 2 \
         --cores-per-node 2 -- pingpong --same-node` (both actors on cores 0 and 1 of node 0, \
         node 1 idle, so the recovery layer is present). Modes as in the overhead section \
         (checkpoint every {} ms): inside a node \"on\" logs nothing (the set's checkpoint \
         covers its messages) and \"log everything\" logs every ball.\n\n\
         ![latency]({})\n\n![bandwidth]({})\n{tables}\n_{provenance}._\n",
        args.join(" "),
        iters[0],
        iters[1],
        every.as_millis(),
        super::file_name(&latency_svg),
        super::file_name(&bandwidth_svg),
    );
    let body = format!("{body}\n{}", against_raw_quinn(ctx)?);
    Ok(Section {
        title: "3. Ping-pong latency and bandwidth".into(),
        body,
    })
}

/// The `internode` criterion benchmark: Lazarus between two nodes against a raw quinn
/// ping-pong, and recovery on against off, in paired turns; its ratio table.
fn against_raw_quinn(ctx: &Context) -> Result<String> {
    let args = if ctx.options.quick {
        super::QUICK_CRITERION
    } else {
        &[]
    };
    let since = std::time::SystemTime::now();
    ctx.cargo_bench("internode", args)?;
    let path = crate::criterion_data::criterion_dir().join("lazarus-internode-summary.md");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    let table = std::fs::read_to_string(&path)
        .ok()
        .filter(|_| fresh)
        .ok_or_else(|| Error::new(format!("the internode bench wrote no {}", path.display())))?;
    Ok(format!(
        "### Against raw QUIC, and recovery on against off\n\n\
         `cargo bench -p lazarus-benches --bench internode`: both nodes (one pinned core \
         each) in the bench process over loopback with mutual TLS, against a ping-pong over \
         one raw quinn stream with the same TLS and window settings, its two endpoints \
         pinned to the same cores. {table}"
    ))
}
