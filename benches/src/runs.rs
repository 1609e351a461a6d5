//! Runs of apps under the launcher (`lazarus run`): starting one, collecting its output
//! lines with their arrival times, killing a node on cue, and reading back what the run
//! printed: the app's `RESULT` line, the launcher's recovery timeline and each node's
//! final recovery totals.
//!
//! Everything read from a child's output is checked: a missing or malformed line is an
//! [`Error`] that quotes the output, never a panic.

use crate::error::{Error, Result};
use crate::target::Bins;
use lazarus_cli::supervisor::{describe_event, NodeEvent};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

/// One `lazarus run` to start.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Node processes (`-n`).
    pub nodes: u16,
    /// `--cores-per-node` (default: the launcher divides the host's cores).
    pub cores_per_node: Option<usize>,
    /// Recovery on with this checkpoint period (`--ft on --checkpoint-every`; zero: no
    /// periodic checkpoint); `None`: recovery off.
    pub recovery: Option<Duration>,
    /// Checkpoints also replicated to the buddy node (`--buddy on`; otherwise the
    /// launcher's default, off on one host).
    pub buddy: bool,
    /// With recovery on: the memory quota of each node's log in bytes (`--log-quota`).
    pub log_quota: Option<u64>,
    /// With a quota: logger nodes that take what is over it (`--loggers`).
    pub loggers: u16,
    /// A planned SIGKILL by the launcher: rank and seconds after launch (`--kill R@S`).
    pub kill: Option<(u16, Duration)>,
    /// Extra environment of the nodes.
    pub env: Vec<(String, String)>,
    /// The app binary's name (in the release directory).
    pub app: String,
    /// The app's arguments.
    pub args: Vec<String>,
    /// The run is killed and reported as failed after this long.
    pub timeout: Duration,
}

impl Launch {
    /// `nodes` nodes of `app` with `args`, recovery off, no kill, a 10-minute timeout.
    pub fn new(app: &str, nodes: u16, args: &[&str]) -> Self {
        Launch {
            nodes,
            cores_per_node: None,
            recovery: None,
            buddy: false,
            log_quota: None,
            loggers: 0,
            kill: None,
            env: Vec::new(),
            app: app.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            timeout: Duration::from_secs(600),
        }
    }

    /// The launcher's command line after `lazarus` (for error messages and logs).
    pub fn command_line(&self) -> String {
        let mut words = self.launcher_args();
        words.push("--".into());
        words.push(self.app.clone());
        words.extend(self.args.iter().cloned());
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let env = if env.is_empty() {
            String::new()
        } else {
            format!("{} ", env.join(" "))
        };
        format!("{env}lazarus {}", words.join(" "))
    }

    fn launcher_args(&self) -> Vec<String> {
        let mut a = vec!["run".to_string(), "-n".into(), self.nodes.to_string()];
        if let Some(c) = self.cores_per_node {
            a.extend(["--cores-per-node".into(), c.to_string()]);
        }
        if let Some(every) = self.recovery {
            a.extend([
                "--ft".into(),
                "on".into(),
                "--checkpoint-every".into(),
                format!("{}ms", every.as_millis()),
            ]);
            if self.buddy {
                a.extend(["--buddy".into(), "on".into()]);
            }
            if let Some(q) = self.log_quota {
                a.extend(["--log-quota".into(), q.to_string()]);
            }
            if self.loggers > 0 {
                a.extend(["--loggers".into(), self.loggers.to_string()]);
            }
        }
        if let Some((rank, at)) = self.kill {
            a.extend(["--kill".into(), format!("{rank}@{:.3}", at.as_secs_f64())]);
        }
        a
    }
}

/// One output line of a run and when it arrived, counted from the launch.
#[derive(Clone, Debug)]
pub struct Line {
    /// Arrival time since the launcher was started.
    pub at: Duration,
    /// The line as printed (node lines carry the launcher's `[rank] ` prefix).
    pub text: String,
}

/// CPU seconds over all nodes of a run, from their `KERNEL` lines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KernelTime {
    /// In the app's numerical kernel (thread CPU time).
    pub kernel: f64,
    /// Of the node processes over the app's timed part (every thread).
    pub window: f64,
}

impl KernelTime {
    /// The window's CPU outside the kernel: what the runtime cost while the app computed.
    pub fn outside(&self) -> f64 {
        self.window - self.kernel
    }
}

/// A finished, successful `lazarus run`.
#[derive(Clone, Debug)]
pub struct Run {
    /// What was run.
    pub command: String,
    /// Every line of stdout and stderr, in arrival order.
    pub lines: Vec<Line>,
    /// From the launch to the launcher's exit.
    pub wall: Duration,
    /// The SIGKILLs `on_line` asked for: rank, and when (since the launch, this clock).
    pub kills: Vec<(u16, Duration)>,
    /// CPU time (user + system) of the launcher and every node process it waited for.
    /// On an oversubscribed host (4 nodes on 2 cores) wall time mostly measures how the
    /// nodes shared the cores; CPU time is the work the run cost. Assumes no other child
    /// of this process ends meanwhile (runs go one at a time).
    pub cpu: Duration,
    /// The launcher exited successfully (the app's status).
    pub success: bool,
}

/// What [`run`]'s `on_line` may ask for on cue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cue {
    /// SIGKILL node `rank` `after` this long (by the PID the launcher printed for it).
    Kill {
        /// The node's rank.
        rank: u16,
        /// How long after the cue.
        after: Duration,
    },
    /// Forget the kills of node `rank` that are not due yet.
    Cancel {
        /// The node's rank.
        rank: u16,
    },
}

/// Starts `launch` and waits for it; a run that fails, or outlives its timeout, is an
/// error that quotes the end of its output. `on_line` sees each line as it arrives and
/// may ask for a node to be SIGKILLed, at once or a little later ([`Run::kills`] says
/// when that happened).
pub fn run(bins: &Bins, launch: &Launch, on_line: impl FnMut(&str) -> Option<Cue>) -> Result<Run> {
    let run = run_to_end(bins, launch, on_line)?;
    if run.success {
        Ok(run)
    } else {
        Err(Error::new(format!(
            "`{}` failed:\n{}",
            run.command,
            run.tail()
        )))
    }
}

/// As [`run`], but a run that fails is returned too ([`Run::success`] is false), for
/// callers that can tell why from its output.
pub fn run_to_end(
    bins: &Bins,
    launch: &Launch,
    mut on_line: impl FnMut(&str) -> Option<Cue>,
) -> Result<Run> {
    let command = launch.command_line();
    let cpu_before = children_cpu();
    let started = Instant::now();
    let mut child = Command::new(bins.path("lazarus")?)
        .args(launch.launcher_args())
        .arg("--")
        .arg(bins.path(&launch.app)?)
        .args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::new(format!("cannot start `{command}`: {e}")))?;
    let (tx, rx) = mpsc::channel::<String>();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut lines = Vec::new();
    let mut pids: HashMap<u16, i32> = HashMap::new();
    let mut pending: Vec<(Instant, u16)> = Vec::new();
    let mut kills = Vec::new();
    let deadline = started + launch.timeout;
    loop {
        let now = Instant::now();
        // Kills that are due, by the PID the launcher printed last for the rank.
        pending.retain(|&(due, rank)| {
            if due > now {
                return true;
            }
            if let Some(pid) = pids.get(&rank) {
                // SAFETY: kill(2) with a PID the launcher printed for one of its nodes,
                // which is alive or a zombie until the launcher reaps it.
                unsafe {
                    libc::kill(*pid, libc::SIGKILL);
                }
                kills.push((rank, started.elapsed()));
            }
            false
        });
        let next = pending.iter().map(|p| p.0).min().unwrap_or(deadline);
        let text = match rx.recv_timeout(next.min(deadline).saturating_duration_since(now)) {
            Ok(text) => text,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => continue,
            Err(RecvTimeoutError::Timeout) => {
                // The launcher's nodes die with it (PR_SET_PDEATHSIG).
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::new(format!(
                    "`{command}` did not finish within {:?}:\n{}",
                    launch.timeout,
                    tail(&lines)
                )));
            }
        };
        if let Some((rank, pid)) = node_pid(&text) {
            pids.insert(rank, pid);
        }
        match on_line(&text) {
            Some(Cue::Kill { rank, after }) => pending.push((Instant::now() + after, rank)),
            Some(Cue::Cancel { rank }) => pending.retain(|p| p.1 != rank),
            None => {}
        }
        lines.push(Line {
            at: started.elapsed(),
            text,
        });
    }
    let status = child
        .wait()
        .map_err(|e| Error::new(format!("waiting for `{command}`: {e}")))?;
    let wall = started.elapsed();
    Ok(Run {
        command,
        lines,
        wall,
        kills,
        cpu: children_cpu().saturating_sub(cpu_before),
        success: status.success(),
    })
}

/// User + system CPU time of every child (and their waited-for descendants) this process
/// has waited for.
fn children_cpu() -> Duration {
    // SAFETY: `getrusage` fills the zeroed struct we pass and keeps no reference to it.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// `node <rank> pid <pid>[ incarnation <i>]`, as the launcher prints when it starts a node.
fn node_pid(line: &str) -> Option<(u16, i32)> {
    let mut w = line.strip_prefix("node ")?.split_whitespace();
    let rank = w.next()?.parse().ok()?;
    (w.next()? == "pid").then_some(())?;
    Some((rank, w.next()?.parse().ok()?))
}

/// The last lines of an output, for error messages.
fn tail(lines: &[Line]) -> String {
    const KEEP: usize = 40;
    let skip = lines.len().saturating_sub(KEEP);
    let mut out: Vec<&str> = lines[skip..].iter().map(|l| l.text.as_str()).collect();
    if skip > 0 {
        out.insert(0, "...");
    }
    out.join("\n")
}

/// The `key=value` fields of an app's `RESULT` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultFields(pub Vec<(String, String)>);

impl ResultFields {
    /// The value of `key`, or an error naming the line.
    pub fn get(&self, key: &str) -> Result<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| Error::new(format!("RESULT has no `{key}`: {}", self.line())))
    }

    /// The value of `key` as a number.
    pub fn number(&self, key: &str) -> Result<f64> {
        let v = self.get(key)?;
        v.parse()
            .map_err(|_| Error::new(format!("RESULT field {key}={v} is not a number")))
    }

    /// Whether the app verified its answer (`verified=true`).
    pub fn verified(&self) -> bool {
        self.get("verified").is_ok_and(|v| v == "true")
    }

    /// The fields that make up the answer: all but those in `varying` (timings).
    pub fn answer(&self, varying: &[&str]) -> Vec<(String, String)> {
        self.0
            .iter()
            .filter(|(k, _)| !varying.contains(&k.as_str()))
            .cloned()
            .collect()
    }

    fn line(&self) -> String {
        let kv: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("RESULT {}", kv.join(" "))
    }
}

/// One entry of the launcher's recovery timeline
/// (`timeline <seconds>s  node <rank>: <what>`).
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineEntry {
    /// Seconds since the launch.
    pub at: f64,
    /// The node it is about.
    pub rank: u16,
    /// What happened, with its `key=value` details.
    pub what: String,
}

/// The timeline text of the launcher's own entry for a node it saw die.
pub const DIED: &str = "died (";

impl TimelineEntry {
    /// Whether this entry reports a node event of kind `kind` (the first word of a
    /// `lazarus-event` line, e.g. `checkpoint`, `loaded`, `resumed`, `final`), as the
    /// supervisor describes it.
    pub fn is_event(&self, kind: &str) -> bool {
        self.what.starts_with(&event_text(kind))
    }

    /// The value of `key=value` in the entry's details.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.what
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    /// The value of `key` as a number.
    pub fn number(&self, key: &str) -> Result<f64> {
        let v = self.field(key).ok_or_else(|| {
            Error::new(format!(
                "timeline entry has no `{key}`: node {}: {}",
                self.rank, self.what
            ))
        })?;
        v.parse()
            .map_err(|_| Error::new(format!("timeline field {key}={v} is not a number")))
    }
}

/// How the supervisor describes a node event of kind `kind` in the timeline, without the
/// `node <rank>: ` prefix and the details.
pub fn event_text(kind: &str) -> String {
    let described = describe_event(&NodeEvent {
        unix_ms: 0,
        rank: 0,
        kind: kind.to_string(),
        details: String::new(),
    });
    described
        .strip_prefix("node 0: ")
        .unwrap_or(&described)
        .trim_end()
        .to_string()
}

/// Parses a line of the launcher's timeline; `None` for any other line.
pub fn timeline_entry(line: &str) -> Option<TimelineEntry> {
    let rest = line.strip_prefix("timeline")?.trim_start();
    let (secs, rest) = rest.split_once(char::is_whitespace)?;
    let at = secs.strip_suffix('s')?.parse().ok()?;
    let (node, what) = rest.trim_start().strip_prefix("node ")?.split_once(": ")?;
    Some(TimelineEntry {
        at,
        rank: node.parse().ok()?,
        what: what.to_string(),
    })
}

impl Run {
    /// What the nodes' `KERNEL` lines report (`lazarus_apps::kernel_time`), summed
    /// over ranks, the last line of each rank counting; `None` if the app printed none.
    pub fn kernel_time(&self) -> Option<KernelTime> {
        let mut by_rank = std::collections::BTreeMap::new();
        for line in &self.lines {
            let Some((_, rest)) = line.text.split_once("KERNEL ") else {
                continue;
            };
            let field = |key: &str| {
                rest.split(' ')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            let number = |key: &str| field(key).and_then(|v| v.parse::<f64>().ok());
            if let (Some(rank), Some(kernel), Some(window)) =
                (field("rank"), number("cpu_s"), number("window_cpu_s"))
            {
                by_rank.insert(rank.to_string(), (kernel, window));
            }
        }
        (!by_rank.is_empty()).then(|| KernelTime {
            kernel: by_rank.values().map(|v| v.0).sum(),
            window: by_rank.values().map(|v| v.1).sum(),
        })
    }

    /// The app's `RESULT` line (the launcher repeats the final one last).
    pub fn result(&self) -> Result<ResultFields> {
        self.lines
            .iter()
            .rev()
            .find(|l| l.text.starts_with("RESULT "))
            .and_then(|l| lazarus_apps::parse_result_line(&l.text))
            .map(ResultFields)
            .ok_or_else(|| {
                Error::new(format!(
                    "`{}` printed no well-formed RESULT line:\n{}",
                    self.command,
                    tail(&self.lines)
                ))
            })
    }

    /// The recovery timeline, in the order the launcher printed it.
    pub fn timeline(&self) -> Vec<TimelineEntry> {
        self.lines
            .iter()
            .filter_map(|l| timeline_entry(&l.text))
            .collect()
    }

    /// Each node's `final` recovery totals (one per node process that ended normally),
    /// as entries whose fields are the counters.
    pub fn finals(&self) -> Vec<TimelineEntry> {
        self.timeline()
            .into_iter()
            .filter(|e| e.is_event("final"))
            .collect()
    }

    /// The sum over nodes of the `final` counter `key`; an error if no node reported
    /// totals (recovery off?) or one's counter is missing or malformed.
    pub fn final_sum(&self, key: &str) -> Result<f64> {
        let finals = self.finals();
        if finals.is_empty() {
            return Err(Error::new(format!(
                "`{}` printed no final recovery totals",
                self.command
            )));
        }
        finals.iter().map(|e| e.number(key)).sum()
    }

    /// Where the launcher's timeline clock starts on this run's clock ([`Line::at`]), in
    /// seconds: the launcher counts from its own start, a little after ours. Estimated as
    /// the least delay between a timeline entry's time and its arrival, which is never
    /// less than the true offset; `None` if the run printed no timeline.
    pub fn timeline_origin(&self) -> Option<f64> {
        self.lines
            .iter()
            .filter_map(|l| Some(l.at.as_secs_f64() - timeline_entry(&l.text)?.at))
            .min_by(f64::total_cmp)
    }

    /// The output lines of node `rank` (stdout and stderr), without the `[rank] ` prefix.
    pub fn node_output(&self, rank: u16) -> impl Iterator<Item = &str> {
        let prefix = format!("[{rank}] ");
        self.lines
            .iter()
            .filter_map(move |l| l.text.strip_prefix(prefix.as_str()))
    }

    /// The end of the output, for error messages.
    pub fn tail(&self) -> String {
        tail(&self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_lines_parse_and_events_are_recognised() {
        let e = timeline_entry(
            "timeline    1.664s  node 2: restarted node loaded its checkpoint source=directory:1 actors=2 load_ms=38",
        )
        .unwrap();
        assert_eq!((e.at, e.rank), (1.664, 2));
        assert!(e.is_event("loaded"));
        assert!(!e.is_event("resumed"));
        assert_eq!(e.number("load_ms").unwrap(), 38.0);
        assert!(e.number("bytes").is_err());
        let k = timeline_entry(
            "timeline    1.519s  node 2: died (was killed by SIGKILL), restarting as incarnation 1",
        )
        .unwrap();
        assert!(k.what.starts_with(DIED));
        assert!(timeline_entry("[2] timeline 1s node 2: x").is_none());
        assert!(timeline_entry("timeline garbage").is_none());
    }

    #[test]
    fn node_pids_parse_with_and_without_incarnation() {
        assert_eq!(node_pid("node 3 pid 77"), Some((3, 77)));
        assert_eq!(node_pid("node 3 pid 78 incarnation 1"), Some((3, 78)));
        assert_eq!(node_pid("node 3: checkpoint"), None);
    }

    #[test]
    fn kernel_time_sums_the_last_report_of_each_rank() {
        let run = |texts: &[&str]| Run {
            command: "x".into(),
            lines: texts
                .iter()
                .map(|t| Line {
                    at: Duration::ZERO,
                    text: t.to_string(),
                })
                .collect(),
            wall: Duration::ZERO,
            kills: Vec::new(),
            cpu: Duration::ZERO,
            success: true,
        };
        let r = run(&[
            "[1] KERNEL app=j rank=1 cpu_s=2.5 window_cpu_s=3 calls=9",
            "[0] KERNEL app=j rank=0 cpu_s=1.0 window_cpu_s=1.25 calls=9",
            // A restarted rank 1 reports again: its last line counts.
            "[1] KERNEL app=j rank=1 cpu_s=0.5 window_cpu_s=1 calls=3",
            "[1] KERNEL app=j rank=1 cpu_s=bad window_cpu_s=1",
        ]);
        let k = r.kernel_time().unwrap();
        assert_eq!((k.kernel, k.window, k.outside()), (1.5, 2.25, 0.75));
        assert_eq!(run(&["RESULT app=j verified=true"]).kernel_time(), None);
    }

    #[test]
    fn result_fields_report_missing_and_bad_values() {
        let r = ResultFields(
            lazarus_apps::parse_result_line("RESULT app=x a=1.5 b=z verified=true").unwrap(),
        );
        assert_eq!(r.number("a").unwrap(), 1.5);
        assert!(r.number("b").is_err());
        assert!(r.get("c").unwrap_err().to_string().contains("no `c`"));
        assert!(r.verified());
        assert_eq!(
            r.answer(&["a", "verified", "app"]),
            vec![("b".into(), "z".into())]
        );
    }
}
