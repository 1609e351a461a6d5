//! The run's timeline as data: every event of a run, the launcher's (a node started,
//! died, was killed, the verdict) and the nodes' (`lazarus-event` lines: checkpoints,
//! restore, replay) and their samples (messages handled, log size), as [`RunEvent`]s.
//!
//! The launcher prints the text timeline as before; the same events go to whoever asked
//! for them: `--timeline FILE` (JSON lines as the run goes, and a Chrome/Perfetto trace
//! when it ends, see [`trace`]) and the live dashboard (`--dashboard`), which reads
//! every event so far and then each new one ([`Timeline::subscribe`]).

pub mod trace;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// One event of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvent {
    /// Which run of this launcher (`lazarus demo` makes two): counts from 0.
    #[serde(default)]
    pub run: u32,
    /// Milliseconds since the run started.
    pub at_ms: u64,
    /// The node; `None` for the run's own events (started, verdict) and loggers'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u16>,
    /// What happened, one word: a node event's kind (`checkpoint`, `loaded`, `resumed`,
    /// `replayed`, `suspected`, ...) or the launcher's (`run`, `started`, `died`,
    /// `killed`, `fenced`, `released`, `verdict`, `sample`, ...).
    pub kind: String,
    /// Its `key=value` details.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
    /// The text timeline's line for it, if it has one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

impl RunEvent {
    /// An event of `kind`, at `at_ms`, of node `rank` (or of the run).
    pub fn new(at_ms: u64, rank: Option<u16>, kind: &str) -> Self {
        RunEvent {
            run: 0,
            at_ms,
            rank,
            kind: kind.to_string(),
            fields: BTreeMap::new(),
            text: String::new(),
        }
    }

    /// With one more detail.
    pub fn field(mut self, key: &str, value: impl ToString) -> Self {
        self.fields.insert(key.to_string(), value.to_string());
        self
    }

    /// With every `key=value` word of `details` as a detail (other words are left out).
    pub fn fields_from(mut self, details: &str) -> Self {
        for (k, v) in details.split_whitespace().filter_map(|w| w.split_once('=')) {
            if !k.is_empty() {
                self.fields.insert(k.to_string(), v.to_string());
            }
        }
        self
    }

    /// With the text timeline's line.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = text.into();
        self
    }

    /// A detail read as a number.
    pub fn number(&self, key: &str) -> Option<f64> {
        self.fields.get(key)?.parse().ok()
    }
}

/// Where a run's events go besides the text timeline. Shared by the output pumps, the
/// supervision loop and the dashboard's server.
pub struct Timeline {
    state: Mutex<State>,
    live: broadcast::Sender<Arc<str>>,
    /// Whether anybody reads samples (the launcher asks nodes for them only then).
    wants_samples: bool,
}

struct State {
    /// Runs started so far.
    runs: u32,
    /// Every event so far (for a dashboard's new readers and the trace), samples
    /// thinned once there are [`KEPT_MAX`].
    events: Vec<RunEvent>,
    /// `--timeline FILE`, written as events come; the trace goes next to it.
    file: Option<(std::io::BufWriter<std::fs::File>, PathBuf)>,
    /// The first write error, said once.
    failed: Option<String>,
}

/// Events a slow dashboard reader may fall behind by before it is told to reload.
const LIVE_BACKLOG: usize = 4096;

/// Events kept before every other sample is dropped: a run of days, sampled twice a
/// second per node, keeps a bounded history at a coarser grain (the events that are not
/// samples are all kept).
const KEPT_MAX: usize = 100_000;

impl Timeline {
    /// A timeline that keeps nothing: the text timeline only.
    pub fn text_only() -> Self {
        Self::build(None, false)
    }

    /// A timeline writing JSON lines to `file` (created or truncated now), and keeping
    /// every event for a dashboard if `dashboard`.
    pub fn new(file: Option<&Path>, dashboard: bool) -> std::io::Result<Self> {
        let file = match file {
            Some(path) => Some((
                std::io::BufWriter::new(std::fs::File::create(path)?),
                path.to_path_buf(),
            )),
            None => None,
        };
        Ok(Self::build(file, dashboard))
    }

    fn build(file: Option<(std::io::BufWriter<std::fs::File>, PathBuf)>, dashboard: bool) -> Self {
        let wants_samples = dashboard || file.is_some();
        Timeline {
            state: Mutex::new(State {
                runs: 0,
                events: Vec::new(),
                file,
                failed: None,
            }),
            live: broadcast::channel(LIVE_BACKLOG).0,
            wants_samples,
        }
    }

    /// Whether the launcher should ask its nodes for samples.
    pub fn wants_samples(&self) -> bool {
        self.wants_samples
    }

    /// Records `e` (of the current run) for every reader.
    pub fn record(&self, mut e: RunEvent) {
        if !self.wants_samples {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if e.kind == "run" {
            state.runs += 1;
        }
        e.run = state.runs.saturating_sub(1);
        let Ok(json) = serde_json::to_string(&e) else {
            return;
        };
        if let Some((w, path)) = &mut state.file {
            if let Err(err) = writeln!(w, "{json}").and_then(|()| w.flush()) {
                let said = format!("cannot write the timeline to {}: {err}", path.display());
                if state.failed.is_none() {
                    tracing::warn!("{said}");
                    state.failed = Some(said);
                }
            }
        }
        state.events.push(e);
        if state.events.len() > KEPT_MAX {
            thin_samples(&mut state.events);
        }
        // Under the lock: a reader subscribing now gets it either in the past or live.
        let _ = self.live.send(json.into());
    }

    /// Every event so far (as JSON lines) and a receiver of the ones to come.
    pub fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let past = state
            .events
            .iter()
            .filter_map(|e| serde_json::to_string(e).ok())
            .map(Arc::from)
            .collect();
        (past, self.live.subscribe())
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<RunEvent> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.events.clone()
    }

    /// Live readers still connected.
    pub fn readers(&self) -> usize {
        self.live.receiver_count()
    }

    /// Whether every live reader has taken every event.
    pub fn drained(&self) -> bool {
        self.live.is_empty()
    }

    /// Ends the `--timeline` file and writes the Chrome/Perfetto trace next to it
    /// ([`trace_path`]); returns both paths, or the error.
    pub fn finish(&self) -> Result<Option<(PathBuf, PathBuf)>, String> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((w, path)) = &mut state.file else {
            return Ok(None);
        };
        let path = path.clone();
        w.flush()
            .map_err(|e| format!("cannot write the timeline to {}: {e}", path.display()))?;
        let trace = trace_path(&path);
        let json = serde_json::to_vec(&trace::chrome_trace(&state.events))
            .map_err(|e| format!("cannot encode the trace: {e}"))?;
        std::fs::write(&trace, json)
            .map_err(|e| format!("cannot write the trace to {}: {e}", trace.display()))?;
        if let Some(failed) = state.failed.take() {
            return Err(failed);
        }
        Ok(Some((path, trace)))
    }
}

/// Drops every other sample of each node (the first of each pair stays).
fn thin_samples(events: &mut Vec<RunEvent>) {
    let mut odd = std::collections::HashMap::new();
    events.retain(|e| {
        if e.kind != "sample" {
            return true;
        }
        let flip = odd.entry(e.rank).or_insert(false);
        *flip = !*flip;
        *flip
    });
}

/// Where the trace of a `--timeline FILE` goes: `run.jsonl` gives `run.trace.json`,
/// any other name gets `.trace.json` appended.
pub fn trace_path(timeline: &Path) -> PathBuf {
    match timeline.extension() {
        Some(ext) if ext == "jsonl" => timeline.with_extension("trace.json"),
        _ => {
            let mut name = timeline.as_os_str().to_os_string();
            name.push(".trace.json");
            PathBuf::from(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_its_details_and_keeps_its_text() {
        let e = RunEvent::new(1250, Some(2), "checkpoint")
            .fields_from("committed id=4 actors=3 bytes=9200 total_ms=4")
            .text("node 2: checkpoint committed id=4");
        assert_eq!(e.number("bytes"), Some(9200.0));
        assert_eq!(e.fields.len(), 4, "words without `=` are left out");
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<RunEvent>(&json).unwrap(), e);
    }

    #[test]
    fn a_timeline_file_gets_one_json_line_per_event_and_a_trace_next_to_it() {
        let dir = std::env::temp_dir().join(format!("lazarus-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.jsonl");
        let t = Timeline::new(Some(&path), false).unwrap();
        t.record(RunEvent::new(0, None, "run").field("nodes", 2));
        t.record(RunEvent::new(10, Some(1), "started").field("pid", 42));
        t.record(RunEvent::new(900, Some(1), "checkpoint").field("total_ms", 12));
        let (jsonl, trace) = t.finish().unwrap().unwrap();
        let lines: Vec<RunEvent> = std::fs::read_to_string(&jsonl)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2].kind, "checkpoint");
        assert_eq!(trace, dir.join("run.trace.json"));
        let trace: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
        assert!(trace["traceEvents"].as_array().unwrap().len() >= 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dashboard_reader_gets_the_past_then_the_new_events_and_runs_are_counted() {
        let t = Timeline::new(None, true).unwrap();
        t.record(RunEvent::new(0, None, "run"));
        t.record(RunEvent::new(5, Some(0), "started"));
        let (past, mut live) = t.subscribe();
        assert_eq!(past.len(), 2);
        t.record(RunEvent::new(0, None, "run"));
        let next: RunEvent = serde_json::from_str(&live.try_recv().unwrap()).unwrap();
        assert_eq!((next.kind.as_str(), next.run), ("run", 1));
        assert!(t.drained());
    }

    #[test]
    fn a_long_run_keeps_every_event_but_fewer_samples() {
        let t = Timeline::new(None, true).unwrap();
        t.record(RunEvent::new(0, None, "run"));
        for i in 0..(KEPT_MAX as u64 + 10) {
            t.record(RunEvent::new(i, Some((i % 4) as u16), "sample"));
            if i % 1000 == 0 {
                t.record(RunEvent::new(i, Some(1), "checkpoint"));
            }
        }
        let kept = t.events();
        assert!(kept.len() <= KEPT_MAX, "bounded: {}", kept.len());
        let checkpoints = kept.iter().filter(|e| e.kind == "checkpoint").count();
        assert_eq!(
            checkpoints,
            KEPT_MAX / 1000 + 1,
            "every other event is kept"
        );
        let node3 = kept.iter().filter(|e| e.rank == Some(3)).count();
        assert!(
            node3 > KEPT_MAX / 16,
            "each node keeps its share of samples"
        );
    }

    #[test]
    fn the_trace_goes_next_to_the_timeline() {
        assert_eq!(
            trace_path(Path::new("/x/run.jsonl")),
            Path::new("/x/run.trace.json")
        );
        assert_eq!(
            trace_path(Path::new("/x/events")),
            Path::new("/x/events.trace.json")
        );
    }
}
