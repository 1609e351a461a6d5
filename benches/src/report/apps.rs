//! Failure-free runs of the apps (jacobi2d, power and the four NPB kernels) on 4 nodes in every
//! recovery mode, repetitions interleaved, and what they show: the overhead of recovery
//! (time normalised to recovery off) and the sender-based log (growth rate, bytes and
//! messages logged per node, piggyback per message). The recovery section reuses these
//! runs as its failure-free reference.

use super::{plot, three_digits, Context, Section};
use crate::error::{Error, Result};
use crate::runs::{self, Launch, ResultFields, Run, TimelineEntry};
use crate::stats::median;
use std::fmt::Write as _;
use std::time::Duration;

/// Nodes of every app run.
pub const NODES: u16 = 4;
/// RESULT fields that are timings, not part of the answer.
pub const TIMING_FIELDS: [&str; 3] = ["elapsed_s", "mops", "mlups"];
/// The environment variable that makes the recovery layer log every message, also those
/// between actors of one node (`runtime/src/recovery/layer/mod.rs`).
pub const LOG_EVERYTHING: (&str, &str) = ("LAZARUS_LOG_EVERYTHING", "on");

/// An app and the arguments it runs with.
#[derive(Clone, Debug)]
pub struct App {
    /// The binary (and the name shown).
    pub name: &'static str,
    /// Its arguments.
    pub args: Vec<String>,
}

impl App {
    fn new(name: &'static str, args: &[&str]) -> Self {
        App {
            name,
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }
}

/// The apps: NPB class W (S in quick mode), and a jacobi2d and a power iteration (whose
/// `main` asks every node's row blocks at every step) of similar length.
pub fn apps(quick: bool) -> Vec<App> {
    let class = if quick { "S" } else { "W" };
    let jacobi: &[&str] = if quick {
        &["--n", "512", "--iters", "300", "--check", "bounds"]
    } else {
        &["--n", "1024", "--iters", "1500", "--check", "bounds"]
    };
    let power: &[&str] = if quick {
        &["--n", "256", "--steps", "300"]
    } else {
        &["--n", "1024", "--steps", "1500"]
    };
    let mut apps = vec![App::new("jacobi2d", jacobi), App::new("power", power)];
    for npb in ["npb-ep", "npb-cg", "npb-is", "npb-mg"] {
        apps.push(App::new(npb, &["--class", class]));
    }
    apps
}

/// The period of the nodes' checkpoints with recovery on.
pub fn checkpoint_every(quick: bool) -> Duration {
    // Quick mode's class S runs last a fraction of a second: checkpoint often enough
    // that a killed node still has a checkpoint to restore.
    Duration::from_millis(if quick { 100 } else { 500 })
}

/// A recovery mode of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No recovery layer.
    Off,
    /// Correlated sets: messages between nodes are logged, each node checkpoints into
    /// the checkpoint directory.
    On,
    /// As `On`, and each checkpoint is also copied into the memory of the next node
    /// (`--buddy on`; by default only when that node is on another host).
    OnBuddy,
    /// As `On` without periodic checkpoints: the cost of logging alone, and a log that is
    /// never released, so its size at the end is everything logged.
    LoggingAlone,
    /// As `On`, and every message inside a node is logged too (what correlated sets save).
    LogEverything,
    /// As `LogEverything` without periodic checkpoints.
    LogEverythingAlone,
    /// As `On` with an 8 MiB log quota and a logger node taking what is over it
    /// (`--log-quota 8MiB --loggers 1`): the cost of logger nodes at a moderate log rate.
    /// Not in [`MODES`] (the results report); the recovery bench's `logger` part.
    OnLoggerNode,
}

/// Every mode, in the order of tables and plots.
pub const MODES: [Mode; 6] = [
    Mode::Off,
    Mode::On,
    Mode::OnBuddy,
    Mode::LoggingAlone,
    Mode::LogEverything,
    Mode::LogEverythingAlone,
];

impl Mode {
    /// A short name for legends and table headers.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::On => "on (sets)",
            Mode::OnBuddy => "on (sets) + buddy replica",
            Mode::LoggingAlone => "on, no checkpoints",
            Mode::LogEverything => "log everything",
            Mode::LogEverythingAlone => "log everything, no checkpoints",
            Mode::OnLoggerNode => "on (sets), 8 MiB quota + logger node",
        }
    }

    /// The run of `app` on [`NODES`] nodes in this mode with checkpoints every `every`.
    pub fn launch(self, app: &App, every: Duration) -> Launch {
        let args: Vec<&str> = app.args.iter().map(String::as_str).collect();
        let mut l = Launch::new(app.name, NODES, &args);
        self.apply(&mut l, every);
        l
    }

    /// Sets `launch`'s recovery options and environment for this mode.
    pub fn apply(self, launch: &mut Launch, every: Duration) {
        launch.recovery = match self {
            Mode::Off => None,
            Mode::On | Mode::OnBuddy | Mode::LogEverything | Mode::OnLoggerNode => Some(every),
            Mode::LoggingAlone | Mode::LogEverythingAlone => Some(Duration::ZERO),
        };
        launch.buddy = self == Mode::OnBuddy;
        if self == Mode::OnLoggerNode {
            launch.log_quota = Some(8 << 20);
            launch.loggers = 1;
        }
        if matches!(self, Mode::LogEverything | Mode::LogEverythingAlone) {
            launch
                .env
                .push((LOG_EVERYTHING.0.into(), LOG_EVERYTHING.1.into()));
        }
    }
}

/// One finished run and what was read from it.
pub struct Sample {
    /// The run.
    pub run: Run,
    /// Its RESULT line.
    pub result: ResultFields,
    /// The app's own time for its computation (`elapsed_s`), seconds.
    pub elapsed: f64,
    /// When the RESULT line arrived, seconds since the launch.
    pub result_at: f64,
}

impl Sample {
    /// Reads the RESULT line and its arrival time from a finished run.
    pub fn from_run(run: Run) -> Result<Self> {
        let result = run.result()?;
        let elapsed = result.number("elapsed_s")?;
        let result_at = run
            .lines
            .iter()
            .find(|l| l.text.starts_with("[0] RESULT "))
            .map(|l| l.at.as_secs_f64())
            .ok_or_else(|| Error::new(format!("`{}`: node 0 printed no RESULT", run.command)))?;
        Ok(Sample {
            run,
            result,
            elapsed,
            result_at,
        })
    }

    /// The answer: the RESULT fields without timings.
    pub fn answer(&self) -> Vec<(String, String)> {
        self.result.answer(&TIMING_FIELDS)
    }

    /// Each node's final recovery totals (empty with recovery off).
    pub fn finals(&self) -> Vec<TimelineEntry> {
        self.run.finals()
    }
}

/// All runs of one app: per mode (in [`MODES`] order), one sample per repetition.
pub struct AppRuns {
    /// The app.
    pub app: App,
    /// Samples per mode.
    pub samples: Vec<Vec<Sample>>,
}

impl AppRuns {
    /// The samples of `mode`.
    pub fn of(&self, mode: Mode) -> &[Sample] {
        let i = MODES.iter().position(|m| *m == mode).unwrap_or(0);
        &self.samples[i]
    }

    /// The median of `f` over the samples of `mode`.
    pub fn median_of(&self, mode: Mode, f: impl Fn(&Sample) -> Result<f64>) -> Result<f64> {
        let values = self.of(mode).iter().map(f).collect::<Result<Vec<f64>>>()?;
        median(&values).ok_or_else(|| {
            Error::new(format!(
                "{}: no runs in mode {}",
                self.app.name,
                mode.label()
            ))
        })
    }

    /// The answer of the first run with recovery off: the failure-free reference.
    pub fn reference_answer(&self) -> Option<Vec<(String, String)>> {
        self.of(Mode::Off).first().map(Sample::answer)
    }

    /// Whether every run in every mode gave the reference answer and verified.
    pub fn all_identical_and_verified(&self) -> (bool, bool) {
        let reference = self.reference_answer();
        let all = self.samples.iter().flatten();
        let identical = all.clone().all(|s| Some(s.answer()) == reference);
        let verified = all.clone().all(|s| s.result.verified());
        (identical, verified)
    }
}

/// Runs every app in every mode, `reps` times; within a repetition the modes of an app
/// run back to back, in an order rotated from one repetition to the next.
pub fn measure(ctx: &Context) -> Result<Vec<AppRuns>> {
    let quick = ctx.options.quick;
    let every = checkpoint_every(quick);
    let mut all: Vec<AppRuns> = apps(quick)
        .into_iter()
        .map(|app| AppRuns {
            app,
            samples: MODES.iter().map(|_| Vec::new()).collect(),
        })
        .collect();
    for rep in 0..ctx.options.reps {
        for app_runs in all.iter_mut() {
            for k in 0..MODES.len() {
                let i = (k + rep) % MODES.len();
                let launch = MODES[i].launch(&app_runs.app, every);
                let run = runs::run(&ctx.options.bins, &launch, |_| None)?;
                let sample = Sample::from_run(run)?;
                ctx.progress(&format!(
                    "rep {} {} {}: {:.3} s (wall {:.2} s)",
                    rep + 1,
                    app_runs.app.name,
                    MODES[i].label(),
                    sample.elapsed,
                    sample.run.wall.as_secs_f64()
                ));
                app_runs.samples[i].push(sample);
            }
        }
    }
    Ok(all)
}

/// Sum over nodes of the final counter `key` of a run.
fn sum(s: &Sample, key: &str) -> Result<f64> {
    s.run.final_sum(key)
}

/// Largest over nodes of the sum of the final counters `keys`.
fn max_node(s: &Sample, keys: &[&str]) -> Result<f64> {
    let mut best: f64 = 0.0;
    for e in s.finals() {
        let mut v = 0.0;
        for k in keys {
            v += e.number(k)?;
        }
        best = best.max(v);
    }
    Ok(best)
}

/// The overhead and logging sections.
pub fn sections(ctx: &Context, runs: &[AppRuns]) -> Result<Vec<Section>> {
    Ok(vec![overhead(ctx, runs)?, logging(ctx, runs)?])
}

fn overhead(ctx: &Context, runs: &[AppRuns]) -> Result<Section> {
    let every = checkpoint_every(ctx.options.quick);
    let mut table = String::from("| app | arguments |");
    for m in MODES {
        let _ = write!(table, " {} (s) |", m.label());
    }
    table.push_str(" checkpoints per node (on) | same answer in every run | verified |\n|---|---|");
    table.push_str(&"---:|".repeat(MODES.len() + 1));
    table.push_str("---|---|\n");
    let mut series: Vec<(String, Vec<Option<f64>>)> = MODES
        .iter()
        .map(|m| (m.label().to_string(), Vec::new()))
        .collect();
    for r in runs {
        let off = r.median_of(Mode::Off, |s| Ok(s.elapsed))?;
        let _ = write!(table, "| {} | `{}` |", r.app.name, r.app.args.join(" "));
        for (i, m) in MODES.iter().enumerate() {
            let t = r.median_of(*m, |s| Ok(s.elapsed))?;
            series[i].1.push(Some(t / off));
            if *m == Mode::Off {
                let _ = write!(table, " {t:.3} |");
            } else {
                let _ = write!(table, " {t:.3} ({:.2}×) |", t / off);
            }
        }
        let ckpts = r.median_of(Mode::On, |s| Ok(sum(s, "checkpoints")? / NODES as f64))?;
        let (identical, verified) = r.all_identical_and_verified();
        let _ = writeln!(
            table,
            " {ckpts:.1} | {} | {} |",
            yes_no(identical),
            yes_no(verified)
        );
    }
    let provenance = ctx.provenance(&format!(
        "{}; all modes of an app measured in the same invocation, repetitions interleaved \
         (modes rotate their order each repetition)",
        ctx.reps_text()
    ));
    let svg = ctx.out("overhead.svg");
    plot::grouped_bars(
        &svg,
        &plot::BarPlot {
            title: &format!(
                "Failure-free time normalised to recovery off ({NODES} nodes, checkpoint every {} ms)",
                every.as_millis()
            ),
            y_desc: "app time / app time with recovery off",
            groups: runs.iter().map(|r| r.app.name.to_string()).collect(),
            series,
            log_y: false,
            reference: Some(1.0),
            value_format: |v| format!("{v:.2}"),
            footer: &provenance,
        },
    )?;
    let body = format!(
        "Each app on {NODES} nodes of this host (`lazarus run -n {NODES}`), time as the app \
         measures its computation (`elapsed_s` of its RESULT line). Modes: **off** (no \
         recovery layer); **on (sets)** (`--ft on --checkpoint-every {every}ms`: each node \
         is one correlated set, only messages between nodes are logged, each node \
         checkpoints periodically into its directory); **on (sets) + buddy replica** \
         (the same with `--buddy on`: each checkpoint is also copied over the network into \
         the next node's memory, the default when that node is on another host); **on, no \
         checkpoints** (`--checkpoint-every 0`: the \
         cost of logging alone); **log everything** (`{k}={v}`, the same with every message \
         logged, also between actors of one node: what correlated sets save); **log \
         everything, no checkpoints**. Cells: median time in seconds (ratio to off).\n\n\
         ![overhead]({file})\n\n{table}\n_{provenance}._\n",
        every = every.as_millis(),
        k = LOG_EVERYTHING.0,
        v = LOG_EVERYTHING.1,
        file = super::file_name(&svg),
    );
    Ok(Section {
        title: "1. Failure-free overhead".into(),
        body,
    })
}

fn logging(ctx: &Context, runs: &[AppRuns]) -> Result<Section> {
    let every = checkpoint_every(ctx.options.quick);
    let nodes = NODES as f64;
    let mut table = String::from(
        "| app | what is logged | messages logged per node | MB logged per node | \
         log growth (MB/s per node) | piggyback (B per inter-node message) | \
         retained log peak (MB, busiest node, checkpoints on) |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        // Without checkpoints nothing is ever released: a node's log peak is everything
        // it logged. The counts and bytes come from those runs, the retained peak from the
        // runs with checkpoints.
        let rows = [
            (
                "between nodes (sets)",
                Mode::LoggingAlone,
                Mode::On,
                &["log_peak_bytes"][..],
                &["delivered"][..],
            ),
            (
                "every message",
                Mode::LogEverythingAlone,
                Mode::LogEverything,
                &["log_peak_bytes", "forced_peak_bytes"][..],
                &["delivered", "forced_logged"][..],
            ),
        ];
        for (what, alone, with_ckpt, bytes_keys, count_keys) in rows {
            let total =
                |s: &Sample, keys: &[&str]| -> Result<f64> { keys.iter().map(|k| sum(s, k)).sum() };
            let messages = r.median_of(alone, |s| Ok(total(s, count_keys)? / nodes))?;
            let mb = r.median_of(alone, |s| Ok(total(s, bytes_keys)? / nodes / 1e6))?;
            let rate = r.median_of(alone, |s| {
                Ok(total(s, bytes_keys)? / nodes / 1e6 / s.elapsed)
            })?;
            let piggyback = r.median_of(alone, |s| {
                Ok(sum(s, "piggyback_bytes")? / sum(s, "delivered")?.max(1.0))
            })?;
            let retained = r.median_of(with_ckpt, |s| Ok(max_node(s, bytes_keys)? / 1e6))?;
            let _ = writeln!(
                table,
                "| {} | {what} | {messages:.0} | {} | {} | {piggyback:.1} | {} |",
                r.app.name,
                three_digits(mb),
                three_digits(rate),
                three_digits(retained),
            );
        }
    }
    let provenance = ctx.provenance(&format!(
        "{}; measured in the same runs as the overhead table",
        ctx.reps_text()
    ));
    let body = format!(
        "From the totals each node prints when it shuts down (`lazarus-event ... final ...`). \
         Messages and bytes logged come from the runs without checkpoints, where nothing is \
         released, so a node's log at its peak holds everything it logged: bytes are payload \
         plus dependency vector, per node = sum over the {NODES} nodes / {NODES}. Growth = \
         MB logged per node / the app's time. Piggyback = recovery metadata (channel index, \
         incarnation, dependency vector) carried by each message between nodes (messages \
         inside a node carry none with sets). Retained peak = the largest log any node held \
         with checkpoints every {} ms (a checkpoint lets the senders release what it \
         covers).\n\n{table}\n_{provenance}._\n",
        every.as_millis()
    );
    Ok(Section {
        title: "2. Message logging".into(),
        body,
    })
}

/// `yes` or `**NO**`.
pub fn yes_no(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**NO**"
    }
}
