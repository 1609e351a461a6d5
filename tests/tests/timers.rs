//! Specification of timers: `ctx.send_after` sends an actor a message of its own after a
//! delay; `ctx.cancel_timer` takes it back while it is not handled yet. (Their recovery —
//! pending timers in checkpoints, timer deliveries replayed at their logged points — is
//! exercised with real processes in determinants_kill.rs and over many seeds in the
//! recovery simulator.)

use lazarus::timer::TimerId;
use lazarus::{messages, Actor, Context, Node};
use serde::{Deserialize, Serialize};
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

    /// Sleeps in the handler (so that a timer fires while the actor is busy).
    #[message]
    fn busy(&mut self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
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
    arm(&node, &alarm, "ring", 80);
    alarm
        .tell(Note {
            label: "told".into(),
        })
        .unwrap();
    let log = wait_for_log(&node, &alarm, 2);
    assert!(started.elapsed() >= Duration::from_millis(80));
    assert_eq!(log, ["told", "ring"], "a message told meanwhile goes first");
    node.shutdown();
}

#[test]
fn timers_ring_in_deadline_order_not_in_the_order_they_were_armed() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    for (label, ms) in [("late", 120), ("early", 10), ("middle", 60)] {
        arm(&node, &alarm, label, ms);
    }
    assert_eq!(wait_for_log(&node, &alarm, 3), ["early", "middle", "late"]);
    node.shutdown();
}

#[test]
fn a_cancelled_timer_never_rings_and_cancelling_reports_whether_it_still_could_have() {
    let node = node();
    let alarm = node.spawn(Alarm::default()).unwrap();
    let doomed = arm(&node, &alarm, "doomed", 30);
    let kept = arm(&node, &alarm, "kept", 60);
    assert!(node.block_on(alarm.ask(Cancel { timer: doomed })).unwrap());
    assert_eq!(wait_for_log(&node, &alarm, 1), ["kept"]);
    std::thread::sleep(Duration::from_millis(50));
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
    let timer = arm(&node, &alarm, "fired", 5);
    // The timer fires during this handler: its message waits in the mailbox behind
    // the cancel, which removes it.
    alarm.tell(Busy { ms: 60 }).unwrap();
    assert!(node.block_on(alarm.ask(Cancel { timer })).unwrap());
    alarm
        .tell(Note {
            label: "after".into(),
        })
        .unwrap();
    assert_eq!(wait_for_log(&node, &alarm, 1), ["after"]);
    node.shutdown();
}

#[test]
fn a_timer_of_an_actor_that_has_stopped_goes_nowhere_and_other_timers_still_ring() {
    let node = node();
    let gone = node.spawn(Alarm::default()).unwrap();
    arm(&node, &gone, "orphan", 10);
    gone.stop();
    std::thread::sleep(Duration::from_millis(40));
    let alarm = node.spawn(Alarm::default()).unwrap();
    arm(&node, &alarm, "still", 10);
    assert_eq!(wait_for_log(&node, &alarm, 1), ["still"]);
    node.shutdown();
}
