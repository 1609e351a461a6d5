//! A run's events as a Chrome trace (the Trace Event Format that Perfetto's UI and
//! `chrome://tracing` open): one process per node (the launcher is process 0), its
//! checkpoints and recovery phases as spans, its message rate and log size as counters,
//! every other event as an instant. Times are microseconds since the first run began;
//! the runs of `lazarus demo` follow one another.

use super::RunEvent;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The trace's thread of a node's checkpoints and other events.
const EVENTS: u32 = 0;
/// The thread of its restore and replay phases.
const PHASES: u32 = 1;
/// The thread of whole recoveries, from death to replay complete.
const RECOVERY: u32 = 2;
/// Between two runs of one launcher.
const GAP_US: f64 = 500_000.0;

/// The trace of `events`, in their order.
pub fn chrome_trace(events: &[RunEvent]) -> Value {
    let mut out = Vec::new();
    let mut offset = 0.0;
    let mut last_end = 0.0f64;
    let mut ranks = std::collections::BTreeSet::new();
    // Per rank: when it died (the recovery span's start), its last sample.
    let mut died: BTreeMap<u16, f64> = BTreeMap::new();
    let mut sampled: BTreeMap<u16, (f64, f64)> = BTreeMap::new();
    for e in events {
        if e.kind == "run" && e.run > 0 {
            offset = last_end + GAP_US;
            died.clear();
            sampled.clear();
        }
        let at = offset + e.at_ms as f64 * 1000.0;
        last_end = last_end.max(at);
        let pid = e.rank.map_or(0, |r| u32::from(r) + 1);
        if let Some(r) = e.rank {
            ranks.insert(r);
        }
        let args = json!(e.fields);
        // A phase that ended at `at` and lasted the event's `key` milliseconds.
        let span = |name: &str, key: &str, tid: u32| {
            let dur = e.number(key).unwrap_or(0.0).max(0.1) * 1000.0;
            json!({"name": name, "ph": "X", "ts": (at - dur).max(0.0), "dur": dur,
                   "pid": pid, "tid": tid, "args": args})
        };
        match e.kind.as_str() {
            "checkpoint" => out.push(span("checkpoint", "total_ms", EVENTS)),
            "loaded" => out.push(span("load checkpoint", "load_ms", PHASES)),
            "resumed" => out.push(span("restore actors", "restore_ms", PHASES)),
            "replayed" => {
                out.push(span("replay", "ms", PHASES));
                if let Some(from) = e.rank.and_then(|r| died.remove(&r)) {
                    out.push(json!({"name": "recovery", "ph": "X", "ts": from,
                        "dur": at - from, "pid": pid, "tid": RECOVERY, "args": {}}));
                }
            }
            "sample" => {
                let Some(r) = e.rank else { continue };
                let handled = e.number("handled").unwrap_or(0.0);
                // A new incarnation counts from 0 again: no rate across it.
                if let Some((t, h)) = sampled.insert(r, (at, handled)) {
                    if at > t && handled >= h {
                        let rate = (handled - h) / ((at - t) / 1e6);
                        out.push(json!({"name": "messages/s", "ph": "C", "ts": at,
                            "pid": pid, "args": {"handled": rate.round()}}));
                    }
                }
                if let Some(bytes) = e.number("log_bytes") {
                    out.push(json!({"name": "log bytes", "ph": "C", "ts": at,
                        "pid": pid, "args": {"bytes": bytes}}));
                }
            }
            kind => {
                if kind == "died" {
                    if let Some(r) = e.rank {
                        died.insert(r, at);
                        sampled.remove(&r);
                    }
                }
                let name = if e.text.is_empty() { kind } else { &e.text };
                out.push(
                    json!({"name": name, "cat": kind, "ph": "i", "s": "p", "ts": at,
                    "pid": pid, "tid": EVENTS, "args": args}),
                );
            }
        }
    }
    let mut meta = vec![json!({"name": "process_name", "ph": "M", "pid": 0,
        "args": {"name": "lazarus run"}})];
    for r in ranks {
        let pid = u32::from(r) + 1;
        meta.push(json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": format!("node {r}")}}));
        meta.push(json!({"name": "process_sort_index", "ph": "M", "pid": pid,
            "args": {"sort_index": pid}}));
        for (tid, name) in [
            (EVENTS, "checkpoints and events"),
            (PHASES, "restore and replay"),
            (RECOVERY, "recovery"),
        ] {
            meta.push(
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                "args": {"name": name}}),
            );
        }
    }
    meta.extend(out);
    json!({"traceEvents": meta, "displayTimeUnit": "ms"})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<RunEvent> {
        let e = RunEvent::new;
        vec![
            e(0, None, "run"),
            e(1000, Some(2), "checkpoint").field("total_ms", 40),
            e(1500, Some(2), "sample").field("handled", 1000),
            e(2000, Some(2), "sample")
                .field("handled", 3000)
                .field("log_bytes", 512),
            e(2100, Some(2), "died").text("node 2: died (was killed by SIGKILL)"),
            e(2300, Some(2), "loaded").field("load_ms", 5),
            e(2310, Some(2), "resumed").field("restore_ms", 2),
            e(2400, Some(2), "replayed").field("ms", 90),
        ]
    }

    #[test]
    fn checkpoints_and_recoveries_are_spans_samples_are_counters_the_rest_instants() {
        let trace = chrome_trace(&events());
        let all = trace["traceEvents"].as_array().unwrap();
        let named = |name: &str| all.iter().find(|e| e["name"] == name).unwrap().clone();
        let ckpt = named("checkpoint");
        assert_eq!(
            (ckpt["ph"].as_str(), ckpt["pid"].as_u64()),
            (Some("X"), Some(3))
        );
        assert_eq!(
            ckpt["ts"].as_f64(),
            Some(960_000.0),
            "it ended when committed"
        );
        assert_eq!(ckpt["dur"].as_f64(), Some(40_000.0));
        let recovery = named("recovery");
        assert_eq!(recovery["ts"].as_f64(), Some(2_100_000.0), "from the death");
        assert_eq!(
            recovery["dur"].as_f64(),
            Some(300_000.0),
            "to replay complete"
        );
        let rate = named("messages/s");
        assert_eq!(rate["args"]["handled"].as_f64(), Some(4000.0));
        assert_eq!(named("log bytes")["args"]["bytes"].as_f64(), Some(512.0));
        assert_eq!(named("node 2: died (was killed by SIGKILL)")["ph"], "i");
        assert!(all
            .iter()
            .any(|e| e["ph"] == "M" && e["args"]["name"] == "node 2"));
    }

    #[test]
    fn a_second_run_follows_the_first() {
        let mut two = events();
        let mut again = RunEvent::new(0, None, "run");
        again.run = 1;
        let mut ckpt = RunEvent::new(1000, Some(2), "checkpoint").field("total_ms", 1);
        ckpt.run = 1;
        two.extend([again, ckpt]);
        let trace = chrome_trace(&two);
        let last = trace["traceEvents"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert!(last["ts"].as_f64().unwrap() > 2_400_000.0 + GAP_US);
    }
}
