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

use crate::support;

use std::process::Command;
use std::sync::OnceLock;
use support::bin;
use support::launched::{assert_only_restarted, Finished, Launched};

/// Matrix order and steps: a few seconds of work on this machine with recovery on, so
/// that a kill after the second checkpoint lands mid-run. (3000 steps took 1.35 s on the
/// session-28 VM: node 2's second checkpoint came as `main` finished, and the kill found
/// no ask left to replay.)
const ORDER: &str = "512";
const STEPS: &str = "10000";
/// Asks per step: one per block, 8 blocks (2 of them on node 0).
const ASKS_PER_STEP: u64 = 8;

fn launch(ft: bool) -> Launched {
    launch_with(ft, &[], &[])
}

/// `launch` with more launcher options (`extra`) and `power` options (`app`).
fn launch_with(ft: bool, extra: &[&std::ffi::OsStr], app: &[&str]) -> Launched {
    launch_steps(ft, STEPS, extra, app)
}

/// `launch_with` for `steps` steps of the power iteration.
fn launch_steps(ft: bool, steps: &str, extra: &[&std::ffi::OsStr], app: &[&str]) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4"]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "500ms"]);
    }
    cmd.args(extra);
    cmd.arg("--")
        .arg(bin("power"))
        .args(["--n", ORDER, "--steps", steps])
        .args(app);
    Launched::spawn(cmd, 4)
}

/// The answer of the same run without failures and without recovery.
fn reference() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| launch(false).finish().checksum())
}

/// SIGKILLs `victims` together once each has committed its second checkpoint and a
/// survivor has committed one after that.
fn kill_mid_run(victims: &[u16]) -> Finished {
    let run = launch(true);
    kill_after_second_checkpoints(run, victims)
}

fn kill_after_second_checkpoints(mut run: Launched, victims: &[u16]) -> Finished {
    run.wait_started();
    run.wait_for_checkpoints(victims, 2);
    run.wait_for_a_survivors_checkpoint(victims);
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
    let _one = support::one_at_a_time();
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
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[2]);
    assert_failure_free_answer(&f, &[2]);
    assert!(
        f.finals()[&0]["replayed"] > 0,
        "node 0 sent its logged asks to the restored node again"
    );
}

#[test]
fn main_and_a_node_it_asks_killed_together_end_with_the_failure_free_answer() {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[0, 2]);
    assert_failure_free_answer(&f, &[0, 2]);
    assert!(skipped_by_restarted_main(&f) > 0);
}

/// `(image bytes, journal bytes)` of each checkpoint node `rank` committed, in order.
fn checkpoints_of(f: &Finished, rank: u16) -> Vec<(u64, u64)> {
    let field = |l: &str, name: &str| -> Option<u64> {
        l.split(&format!(" {name}="))
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    f.lines
        .iter()
        .filter(|l| l.contains(&format!("node {rank}: checkpoint committed")))
        .filter_map(|l| Some((field(l, "bytes")?, field(l, "journal_bytes")?)))
        .collect()
}

#[test]
fn mains_replies_go_to_a_journal_so_its_checkpoints_do_not_grow_with_the_run() {
    let _one = support::one_at_a_time();
    // Enough checkpoints after the second for megabytes of replies, however fast the
    // machine runs the steps.
    const LONG: &str = STEPS;
    let f = launch_steps(true, LONG, &[], &[]).finish();
    assert_eq!(
        f.checksum(),
        launch_steps(false, LONG, &[], &[]).finish().checksum()
    );
    let node0 = checkpoints_of(&f, 0);
    assert!(node0.len() >= 3, "a few checkpoints of node 0: {node0:?}");
    let journal: Vec<u64> = node0.iter().map(|c| c.1).collect();
    // A checkpoint taken after `main`'s last ask (or between two asks on a slow
    // machine) has nothing to append.
    assert!(
        journal.windows(2).all(|w| w[0] <= w[1]),
        "each checkpoint appends the replies since the previous one: {journal:?}"
    );
    // Before the journal, every image held every reply so far (session 15: 33 to 55 MB
    // over a run). Now an image holds none: the last is no larger than the first,
    // give or take the logged messages, while the journal grew by megabytes.
    let (first, last) = (node0[1].0, node0[node0.len() - 1].0);
    let grown = journal[journal.len() - 1] - journal[1];
    assert!(grown > 4 << 20, "the journal grew: {journal:?}");
    assert!(
        last < first + grown / 2,
        "node 0's images do not grow with its replies: {node0:?}"
    );
}

/// A run with its checkpoints in `dir` and the buddy replica on (one host: it is only
/// kept when asked for), once node 0 has committed its second checkpoint.
fn buddy_run_past_node0s_second_checkpoint(dir: &std::path::Path) -> Launched {
    let _ = std::fs::remove_dir_all(dir);
    let extra = [
        "--checkpoint-dir".as_ref(),
        dir.as_os_str(),
        "--buddy".as_ref(),
        "on".as_ref(),
    ];
    let mut run = launch_with(true, &extra, &[]);
    run.wait_started();
    run.wait_for_checkpoints(&[0], 2);
    run
}

#[test]
fn a_coordinating_main_whose_checkpoint_directory_is_lost_gets_its_replies_from_the_buddy() {
    let _one = support::one_at_a_time();
    let dir = std::env::temp_dir().join(format!("lazarus-journal-test-{}", std::process::id()));
    let mut run = buddy_run_past_node0s_second_checkpoint(&dir);
    // The host's disk is gone: node 0's checkpoints and reply journal with it.
    std::fs::remove_dir_all(dir.join("set-0")).expect("node 0 has a checkpoint directory");
    run.kill(0);
    let f = run.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        f.has("node 0: restarted node loaded its checkpoint source=buddy:"),
        "restored from the buddy; output:\n{}",
        f.lines.join("\n")
    );
    assert_failure_free_answer(&f, &[0]);
    assert!(skipped_by_restarted_main(&f) > 0);
}

#[test]
fn a_reply_journal_lost_under_a_running_node_is_put_back_from_the_buddy_and_serves_a_restore() {
    let _one = support::one_at_a_time();
    let dir = std::env::temp_dir().join(format!("lazarus-journal-lost-{}", std::process::id()));
    let mut run = buddy_run_past_node0s_second_checkpoint(&dir);
    // The disk loses node 0's checkpoints and journal; node 0 runs on.
    std::fs::remove_dir_all(dir.join("set-0")).expect("node 0 has a checkpoint directory");
    run.wait_for("node 0's journal put back", |l| {
        l.contains("node 0: its reply journal was lost: put back")
    });
    run.wait_for("a checkpoint of node 0 on the rebuilt journal", |l| {
        l.contains("node 0: checkpoint committed id=3")
    });
    run.kill(0);
    let f = run.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        f.has("node 0: restarted node loaded its checkpoint source=directory:"),
        "restored from its own directory, journal included; output:\n{}",
        f.lines.join("\n")
    );
    assert_failure_free_answer(&f, &[0]);
    assert!(skipped_by_restarted_main(&f) > 0);
}

#[test]
fn a_restarted_main_that_asks_other_actors_than_before_is_reported_as_breaking_the_contract() {
    let _one = support::one_at_a_time();
    // `--break-contract`: the restarted main asks its blocks in the reverse order, so
    // the replies kept from before the failure answer other blocks' questions (and its
    // regenerated asks reach other blocks than before: the run does not end).
    let mut run = launch_with(true, &[], &["--break-contract"]);
    run.wait_started();
    run.wait_for_checkpoints(&[0], 2);
    run.kill(0);
    let line = run.wait_for("the diverging ask reported", |l| {
        l.contains("DETERMINISM CONTRACT BROKEN") && l.contains("found_by=main")
    });
    run.abort();
    assert!(
        line.contains("node 0:") && line.contains("asked_before="),
        "it names the node and the actor asked before the failure: {line}"
    );
}
