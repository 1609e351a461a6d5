//! Specification of the app's `main` asking actors with recovery on (docs/recovery.md,
//! "The app's main"): a reply from another node comes back as a logged message, one from
//! main's own node is kept directly, and both are handed to the ask in order; an ask to
//! an actor that is not there, or has stopped, fails at once with the reason instead of
//! waiting for ever, and the node goes on answering; one that times out keeps the timeout
//! as its outcome and the late answer is dropped. Two nodes in this process; the test thread is their `main`. (With
//! real processes and SIGKILL: `driver_asks_kill.rs`.)

mod support;

use lazarus::{messages, Actor, ActorId, ActorRef, AskError, Cluster};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use support::in_process::{checkpoint_dir, two_nodes};

/// Adds what it is asked to add; answers with the running total.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Adder {
    total: u64,
}

#[messages]
impl Adder {
    #[message]
    fn add(&mut self, amount: u64) -> u64 {
        self.total += amount;
        self.total
    }
}

/// Answers after a while.
#[derive(Actor, Serialize, Deserialize, Default)]
struct Slow {
    answered: u64,
}

#[messages]
impl Slow {
    #[message]
    fn answer_after(&mut self, millis: u64) -> u64 {
        std::thread::sleep(Duration::from_millis(millis));
        self.answered += 1;
        self.answered
    }
}

fn shut_down(name: &str, node0: Cluster, node1: Cluster) {
    node1.shutdown();
    node0.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, true));
}

/// `main` (on node 0) asks `adder` to add 1, 2 and 3; the answers it got.
fn three_asks(node0: &Cluster, adder: &ActorRef<Adder>) -> Vec<u64> {
    (1..=3)
        .map(|k| {
            node0
                .block_on(
                    adder
                        .ask(Add { amount: k })
                        .timeout(Duration::from_secs(10)),
                )
                .unwrap()
        })
        .collect()
}

#[test]
fn with_recovery_on_main_gets_the_replies_of_another_nodes_actor_in_order() {
    let (node0, node1) = two_nodes("driver-asks", true);
    let adder = node1.spawn(Adder::default()).unwrap();
    let remote = node0.handle().actor_ref::<Adder>(adder.id()).unwrap();
    assert_eq!(three_asks(&node0, &remote), [1, 3, 6]);
    shut_down("driver-asks", node0, node1);
}

#[test]
fn with_recovery_on_an_ask_from_main_to_an_actor_that_is_not_there_fails_at_once() {
    let (node0, node1) = two_nodes("driver-asks-missing", true);
    // Node 1 has no actor with this id: the logged ask is undeliverable there, and `main`
    // hears so (before, it waited for a reply that never came).
    let nobody = ActorId::new(1, 4242).unwrap();
    let remote = node0.handle().actor_ref::<Adder>(nobody).unwrap();
    let answer = node0.block_on(
        remote
            .ask(Add { amount: 1 })
            .timeout(Duration::from_secs(20)),
    );
    assert!(
        matches!(&answer, Err(AskError::Rejected { reason, .. }) if reason.contains("no actor")),
        "the ask failed with the reason, not a timeout: {answer:?}"
    );
    shut_down("driver-asks-missing", node0, node1);
}

#[test]
fn with_recovery_on_main_gets_the_replies_of_its_own_nodes_actor_in_order() {
    let (node0, node1) = two_nodes("driver-asks-local", true);
    let adder = node0.spawn(Adder::default()).unwrap();
    assert_eq!(three_asks(&node0, &adder), [1, 3, 6]);
    shut_down("driver-asks-local", node0, node1);
}

/// Stops `adder` and waits until it has.
fn stop(adder: &lazarus::ActorRef<Adder>) {
    adder.stop();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while adder.is_alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the adder did not stop"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn with_recovery_on_an_ask_from_main_to_a_stopped_actor_fails_once_and_the_nodes_go_on() {
    let (node0, node1) = two_nodes("driver-asks-stopped", true);
    let local = node0.spawn(Adder::default()).unwrap();
    stop(&local);
    let answer = node0.block_on(
        local
            .ask(Add { amount: 1 })
            .timeout(Duration::from_secs(20)),
    );
    assert!(
        matches!(answer, Err(AskError::ActorStopped(_))),
        "main's own node answers a stopped actor's ask with the reason: {answer:?}"
    );
    let gone = node1.spawn(Adder::default()).unwrap();
    let live = node1.spawn(Adder::default()).unwrap();
    let (gone, live) = (
        node0.handle().actor_ref::<Adder>(gone.id()).unwrap(),
        node0.handle().actor_ref::<Adder>(live.id()).unwrap(),
    );
    stop(&node1.handle().lookup::<Adder>(gone.id()).unwrap());
    let answer = node0.block_on(gone.ask(Add { amount: 1 }).timeout(Duration::from_secs(20)));
    assert!(
        matches!(
            answer,
            Err(AskError::ActorStopped(_) | AskError::Rejected { .. })
        ),
        "another node answers a stopped actor's ask with the reason: {answer:?}"
    );
    let after = node0.block_on(live.ask(Add { amount: 5 }).timeout(Duration::from_secs(20)));
    assert_eq!(after.unwrap(), 5, "the asked node still answers");
    shut_down("driver-asks-stopped", node0, node1);
}

/// `main` asks `slow` once with a timeout too short for the answer, then once with
/// time enough; what it got each time.
fn a_timeout_then_an_answer(
    node0: &Cluster,
    slow: &ActorRef<Slow>,
) -> (Result<u64, AskError>, u64) {
    let first = node0.block_on(
        slow.ask(AnswerAfter { millis: 400 })
            .timeout(Duration::from_millis(50)),
    );
    let second = node0
        .block_on(
            slow.ask(AnswerAfter { millis: 0 })
                .timeout(Duration::from_secs(10)),
        )
        .expect("the second ask is answered");
    (first, second)
}

#[test]
fn with_recovery_on_an_ask_from_main_that_times_out_stays_timed_out_and_the_late_reply_is_dropped()
{
    let (node0, node1) = two_nodes("driver-asks-timeout", true);
    let remote = node1.spawn(Slow::default()).unwrap();
    let remote = node0.handle().actor_ref::<Slow>(remote.id()).unwrap();
    let local = node0.spawn(Slow::default()).unwrap();
    for slow in [&remote, &local] {
        let (first, second) = a_timeout_then_an_answer(&node0, slow);
        assert!(
            matches!(first, Err(AskError::Timeout { .. })),
            "the short ask timed out: {first:?}"
        );
        // The late answer to the first ask (1) is not taken for the second's (2): the
        // timeout was kept as the first ask's outcome, so a re-executed `main` times out
        // there too.
        assert_eq!(second, 2, "the second ask got its own answer");
        // An ask dropped unanswered is given up on the same way.
        drop(slow.ask(AnswerAfter { millis: 200 }));
        let fourth = node0
            .block_on(
                slow.ask(AnswerAfter { millis: 0 })
                    .timeout(Duration::from_secs(10)),
            )
            .expect("answered");
        assert_eq!(fourth, 4, "not the dropped ask's answer (3)");
    }
    shut_down("driver-asks-timeout", node0, node1);
}

#[test]
fn with_recovery_on_sends_of_main_from_a_second_thread_are_counted_as_not_reproducible() {
    let (node0, node1) = two_nodes("driver-asks-threads", true);
    let adder = node0.spawn(Adder::default()).unwrap();
    let layer = lazarus::recovery::layer::RecoveryLayer::of(node0.handle()).unwrap();
    adder.tell(Add { amount: 1 }).unwrap();
    assert_eq!(layer.stats().main_off_thread_sends, 0, "one thread so far");
    let from_elsewhere = adder.clone();
    std::thread::spawn(move || from_elsewhere.tell(Add { amount: 2 }).unwrap())
        .join()
        .unwrap();
    assert_eq!(
        layer.stats().main_off_thread_sends,
        1,
        "a tell from a second thread is numbered by the race between threads: reported"
    );
    shut_down("driver-asks-threads", node0, node1);
}
