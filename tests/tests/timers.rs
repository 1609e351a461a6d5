//! Specification of timers: `ctx.send_after` sends an actor a message of its own after a
//! delay; `ctx.cancel_timer` takes it back while it is not handled yet. (Their recovery —
//! pending timers in checkpoints, timer deliveries replayed at their logged points — is
//! exercised with real processes in determinants_kill.rs and over many seeds in the
//! recovery simulator.)

use lazarus::timer::TimerId;
use lazarus::{messages, Actor, Context, Node};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Alarm {
    log: Vec<String>,
    armed_at: Option<u64>,
}

#[messages]
impl Alarm {
    /// Arms a timer that rings `label` after `ms`.
    #[message]
    fn arm(&mut self, label: String, ms: u64, ctx: &mut Context<Self>) -> TimerId {
        ctx.send_after(Duration::from_millis(ms), Ring { label })
    }

    /// Arms several timers in one handler, so their deadlines are as far apart as asked
    /// whatever the round trips to arm them would take.
    #[message]
    fn arm_all(&mut self, timers: Vec<(String, u64)>, ctx: &mut Context<Self>) -> Vec<TimerId> {
        timers
            .into_iter()
            .map(|(label, ms)| ctx.send_after(Duration::from_millis(ms), Ring { label }))
            .collect()
    }

    /// Arms a timer of `ms`, queues a message to this actor that cancels it, and stays
    /// busy for `busy_ms` (longer): the timer fires while this handler runs, so its
    /// message waits in the mailbox behind the cancel.
    #[message]
    fn arm_and_queue_cancel(&mut self, ms: u64, busy_ms: u64, ctx: &mut Context<Self>) {
        let timer = ctx.send_after(
            Duration::from_millis(ms),
            Ring {
                label: "fired".into(),
            },
        );
        ctx.myself()
            .tell(CancelAndNote { timer })
            .expect("an actor can tell itself");
        std::thread::sleep(Duration::from_millis(busy_ms));
    }

    /// Cancels `timer` and logs whether that took it back.
    #[message]
    fn cancel_and_note(&mut self, timer: TimerId, ctx: &mut Context<Self>) {
        let cancelled = ctx.cancel_timer(timer);
        self.log.push(format!("cancelled={cancelled}"));
    }

    #[message]
    fn ring(&mut self, label: String) {
        self.log.push(label);
    }

    #[message]
    fn note(&mut self, label: String) {
        self.log.push(label);
    }

    #[message]
    fn cancel(&mut self, timer: TimerId, ctx: &mut Context<Self>) -> bool {
        ctx.cancel_timer(timer)
    }

    #[message]
    fn log(&mut self) -> Vec<String> {
        self.log.clone()
    }
}

fn node() -> Node {
    Node::builder().build().expect("node starts")
}

/// Arms a timer on `alarm` that rings `label` after `ms`.
fn arm(node: &Node, alarm: &lazarus::ActorRef<Alarm>, label: &str, ms: u64) -> TimerId {
    node.block_on(alarm.ask(Arm {
        label: label.into(),
        ms,
    }))
    .unwrap()
}

fn wait_for_log(node: &Node, alarm: &lazarus::ActorRef<Alarm>, len: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.block_on(alarm.ask(Log {})).unwrap();
        if log.len() >= len || Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_timer_message_is_handled_after_its_delay_and_not_before() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    let started = Instant::now();
    // Long enough that the tell below is certainly sent before it rings, even when
    // this thread is off its core for a while on a loaded host.
    arm(&node, &alarm, "ring", 500);
    alarm
        .tell(Note {
            label: "told".into(),
        })
        .unwrap();
    let log = wait_for_log(&node, &alarm, 2);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(log, ["told", "ring"], "a message told meanwhile goes first");
    node.shutdown();
}

#[test]
fn timers_ring_in_deadline_order_not_in_the_order_they_were_armed() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    let timers = [("late", 120), ("early", 10), ("middle", 60)]
        .map(|(label, ms)| (label.to_string(), ms))
        .to_vec();
    node.block_on(alarm.ask(ArmAll { timers })).unwrap();
    assert_eq!(wait_for_log(&node, &alarm, 3), ["early", "middle", "late"]);
    node.shutdown();
}

#[test]
fn a_cancelled_timer_never_rings_and_cancelling_reports_whether_it_still_could_have() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    // The cancel has 2 s to arrive before "doomed" would ring: ample on a loaded host.
    let timers = vec![("doomed".to_string(), 2000), ("kept".to_string(), 2100)];
    let [doomed, kept] = node.block_on(alarm.ask(ArmAll { timers })).unwrap()[..] else {
        panic!("two timers armed")
    };
    assert!(node.block_on(alarm.ask(Cancel { timer: doomed })).unwrap());
    // "kept" rings after "doomed"'s deadline, so the log shows whether "doomed" rang.
    assert_eq!(wait_for_log(&node, &alarm, 1), ["kept"]);
    assert_eq!(node.block_on(alarm.ask(Log {})).unwrap(), ["kept"]);
    assert!(
        !node.block_on(alarm.ask(Cancel { timer: kept })).unwrap(),
        "a timer already handled cannot be cancelled"
    );
    node.shutdown();
}

#[test]
fn a_timer_that_fired_while_its_actor_was_busy_can_still_be_cancelled() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    alarm
        .tell(ArmAndQueueCancel { ms: 5, busy_ms: 60 })
        .unwrap();
    assert_eq!(wait_for_log(&node, &alarm, 1), ["cancelled=true"]);
    // The timer's message was queued before the busy handler ended, so before this ask:
    // had the cancel not removed it, "fired" would be in the log by now.
    assert_eq!(
        node.block_on(alarm.ask(Log {})).unwrap(),
        ["cancelled=true"]
    );
    node.shutdown();
}

#[test]
fn a_timer_of_an_actor_that_has_stopped_goes_nowhere_and_other_timers_still_ring() {
    let failures = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&failures);
    let node = Node::builder()
        .on_failure(move |e| seen.lock().unwrap().push(format!("{e:?}")))
        .build()
        .expect("node starts");
    let gone = node.spawn(Alarm::default()).unwrap();
    arm(&node, &gone, "orphan", 10);
    gone.stop();
    std::thread::sleep(Duration::from_millis(40));
    let alarm = node.spawn(Alarm::default()).unwrap();
    arm(&node, &alarm, "still", 10);
    assert_eq!(wait_for_log(&node, &alarm, 1), ["still"]);
    // The orphan reached no actor (the new one's log has only its own timer), failed
    // nothing, and left nothing behind that keeps the node from stopping cleanly.
    assert!(failures.lock().unwrap().is_empty(), "{failures:?}");
    let report = node.shutdown();
    assert!(report.drained && report.all_stopped, "{report:?}");
}
