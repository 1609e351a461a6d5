//! The app's `main` as a coordinator that asks actors on other nodes, with real processes:
//! `power` on 4 nodes under `lazarus run --ft on` (node 0's `main` asks every row block,
//! most of them remote, for its part of `A·x` at every step and keeps the vector itself).
//! Nodes are SIGKILLed by PID from outside mid-run. The run must end with the failure-free
//! answer: a restarted `main` skips the asks its checkpoint contains and gets their
//! replies from that checkpoint, and replies to later asks come back as logged messages
//! (docs/recovery.md, "The app's main").
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

mod support;

use std::process::Command;
use std::sync::{Mutex, OnceLock};
use support::bin;
use support::launched::{assert_only_restarted, Finished, Launched};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Matrix order and steps: a few seconds of work on this machine with recovery on, so
/// that a kill after the second checkpoint lands mid-run.
const ORDER: &str = "512";
const STEPS: &str = "3000";
/// Asks per step: one per block, 8 blocks (2 of them on node 0).
const ASKS_PER_STEP: u64 = 8;

fn launch(ft: bool) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4"]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "500ms"]);
    }
    cmd.arg("--")
        .arg(bin("power"))
        .args(["--n", ORDER, "--steps", STEPS]);
    Launched::spawn(cmd, 4)
}

/// The answer of the same run without failures and without recovery.
fn reference() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| launch(false).finish().checksum())
}

/// SIGKILLs `victims` together once each has committed its second checkpoint.
fn kill_mid_run(victims: &[u16]) -> Finished {
    let mut run = launch(true);
    run.wait_started();
    for &v in victims {
        run.wait_for(&format!("a second checkpoint of node {v}"), |l| {
            l.contains(&format!("node {v}: checkpoint committed id=2"))
        });
    }
    for &v in victims {
        run.kill(v);
    }
    run.finish()
}

/// The answer is the failure-free one and only the killed nodes were restarted.
fn assert_failure_free_answer(f: &Finished, killed: &[u16]) {
    assert_eq!(
        f.checksum(),
        reference(),
        "the recovered run's vector equals the failure-free run's bit for bit"
    );
    assert_eq!(
        f.verified()["asks_handled_once"],
        "true",
        "every block handled each of main's asks exactly once"
    );
    assert!(
        !f.has("reply to main"),
        "no reply to main was refused (a duplicate, undecodable), dropped or left unsent"
    );
    assert_only_restarted(f, killed);
    let steps: u64 = STEPS.parse().unwrap();
    assert_eq!(
        f.finals()[&0]["driver_replies"],
        steps * ASKS_PER_STEP,
        "node 0's main got exactly one reply to each of its asks"
    );
}

/// How many of its sends node 0's restarted `main` skipped because its checkpoint held
/// them.
fn skipped_by_restarted_main(f: &Finished) -> u64 {
    f.lines
        .iter()
        .filter(|l| l.contains("node 0: actors restored"))
        .filter_map(|l| l.split("skipped_driver_sends=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("node 0 was not restored:\n{}", f.lines.join("\n")))
}

#[test]
fn a_coordinating_main_killed_mid_run_gets_every_answer_again_and_the_result_is_the_failure_free_one(
) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = kill_mid_run(&[0]);
    assert_failure_free_answer(&f, &[0]);
    assert!(
        skipped_by_restarted_main(&f) > 0,
        "the restarted main skipped the asks its checkpoint contains"
    );
    let totals = &f.finals()[&0];
    assert!(
        totals["suppressed"] > 0,
        "asks made again after the checkpoint were not delivered twice: {totals:?}"
    );
}

#[test]
fn a_node_that_main_is_asking_killed_mid_run_answers_after_its_restore() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = kill_mid_run(&[2]);
    assert_failure_free_answer(&f, &[2]);
    assert!(
        f.finals()[&0]["replayed"] > 0,
        "node 0 sent its logged asks to the restored node again"
    );
}

#[test]
fn main_and_a_node_it_asks_killed_together_end_with_the_failure_free_answer() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let f = kill_mid_run(&[0, 2]);
    assert_failure_free_answer(&f, &[0, 2]);
    assert!(skipped_by_restarted_main(&f) > 0);
}
