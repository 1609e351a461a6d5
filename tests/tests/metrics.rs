//! The runtime reports its activity through the `metrics` facade: messages sent and
//! delivered, mailbox depth, handler time, failures, dead letters and refused requests.
//! (One test per binary: the recorder is process-global.)

use lazarus::{messages, telemetry, Actor, CoreId, Node};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Actor, Serialize, Deserialize, Default)]
struct Probe {
    n: u64,
}

#[messages]
impl Probe {
    #[message]
    fn bump(&mut self) -> u64 {
        self.n += 1;
        self.n
    }
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Doomed;

#[messages]
impl Doomed {
    #[message]
    fn nap(&mut self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    #[message]
    fn boom(&mut self) {
        panic!("boom");
    }
}

type Values = HashMap<(String, Vec<(String, String)>), DebugValue>;

fn counter(values: &Values, name: &str, label: (&str, &str)) -> u64 {
    values
        .iter()
        .filter(|((n, labels), _)| {
            n == name && labels.iter().any(|(k, v)| k == label.0 && v == label.1)
        })
        .map(|(_, v)| match v {
            DebugValue::Counter(c) => *c,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .sum()
}

#[test]
fn the_runtime_counts_what_happens_to_every_message() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("first recorder in this process");
    telemetry::describe();
    // The per-actor series is an opt-in (unbounded cardinality for Prometheus).
    telemetry::set_per_actor_labels(true);

    let node = Node::builder().build().unwrap();
    let probe = node.spawn(Probe::default()).unwrap();
    for _ in 0..100 {
        probe.tell(Bump).unwrap();
    }
    assert_eq!(node.block_on(probe.ask(Bump)).unwrap(), 101);

    // A failing actor: three messages queued behind the panic become dead letters, and a
    // send after the failure is refused.
    let doomed = node.spawn_on(CoreId(0), Doomed).unwrap();
    doomed.tell(Nap { ms: 1000 }).unwrap();
    doomed.tell(Boom).unwrap();
    for _ in 0..3 {
        doomed.tell(Nap { ms: 0 }).unwrap();
    }
    let timed_out = node.block_on(probe.ask(Bump).timeout(Duration::from_secs(5)));
    assert!(timed_out.is_ok());
    while doomed.is_alive() {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(doomed.tell(Nap { ms: 0 }).is_err());

    let slow = node.spawn(Doomed).unwrap();
    let err = node.block_on(slow.ask(Nap { ms: 200 }).timeout(Duration::from_millis(10)));
    assert!(err.is_err());
    assert!(node.spawn_on(CoreId(99), Probe::default()).is_err());
    assert!(node.shutdown().all_stopped);

    let values: Values = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind_key, _) = (key.key().clone(), key.kind());
            let labels = kind_key
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            ((kind_key.name().to_string(), labels), value)
        })
        .collect();

    let probe_type = ("actor_type", "Probe");
    assert_eq!(counter(&values, telemetry::MESSAGES_SENT, probe_type), 102);
    assert_eq!(
        counter(&values, telemetry::MESSAGES_DELIVERED, probe_type),
        102
    );
    let doomed_type = ("actor_type", "Doomed");
    assert_eq!(counter(&values, telemetry::ACTOR_FAILURES, doomed_type), 1);
    assert_eq!(counter(&values, telemetry::DEAD_LETTERS, doomed_type), 3);
    assert_eq!(counter(&values, telemetry::SEND_ERRORS, doomed_type), 1);
    assert_eq!(counter(&values, telemetry::ASK_TIMEOUTS, doomed_type), 1);
    assert_eq!(
        counter(&values, telemetry::SPAWN_ERRORS, ("reason", "no_such_core")),
        1
    );
    let handler_samples: usize = values
        .iter()
        .filter(|((n, _), _)| n == telemetry::HANDLER_SECONDS)
        .map(|(_, v)| match v {
            DebugValue::Histogram(h) => h.len(),
            _ => 0,
        })
        .sum();
    assert!(handler_samples >= 2, "handler time is sampled");
    let probe_depth = values.iter().find(|((n, labels), _)| {
        n == telemetry::MAILBOX_DEPTH
            && labels.contains(&("actor_id".into(), probe.id().to_string()))
    });
    assert!(matches!(probe_depth, Some((_, DebugValue::Gauge(_)))));
}
