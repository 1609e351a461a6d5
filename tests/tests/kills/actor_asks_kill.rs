//! Asks between actors of different nodes survive SIGKILLs of either side: `power` on 4
//! nodes under `lazarus run --ft on`, where an actor on node 0 asks every row block (most
//! of them remote) for its part of `A·x` at every step. With `--coordinator actor` it asks
//! with `ctx.ask(..).reply_as::<Part>()` and each reply comes back as a message; with
//! `--coordinator async` one async handler per step awaits all eight replies, and a
//! checkpoint mostly finds it suspended. Nodes are SIGKILLed by PID from outside mid-run;
//! the run must end with the failure-free answer, every ask handled once, and the
//! regenerated asks and replies compared with the delivered ones by the contract checker
//! (docs/recovery.md, "Asks between actors" and "Suspended async handlers").
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use std::process::Command;
use std::sync::OnceLock;
use support::bin;
use support::launched::{assert_only_restarted, Finished, Launched};

/// Matrix order and steps: several seconds with recovery on here, so that a kill after a
/// node's second checkpoint (at 500 ms checkpoints) lands mid-run.
const ORDER: &str = "512";
const STEPS: &str = "12000";

/// With `--reply-after-us`: fewer steps, each longer by the answer's delay.
const DELAYED_STEPS: &str = "8000";
/// Blocks answer 200 µs after each ask, keeping the slot in their state meanwhile: most
/// checkpoints hold the slots of the step in flight.
const REPLY_AFTER_US: &str = "200";

fn launch(ft: bool) -> Launched {
    launch_with(ft, &["--steps", STEPS])
}

/// The coordinator as an actor with one async handler per step.
fn launch_async(ft: bool, failpoint: Option<&str>) -> Launched {
    launch_coordinated(ft, "async", failpoint, &["--steps", STEPS])
}

/// Blocks answering from a later handler, their slots kept in checkpointed state.
fn launch_delayed(ft: bool) -> Launched {
    launch_with(
        ft,
        &["--steps", DELAYED_STEPS, "--reply-after-us", REPLY_AFTER_US],
    )
}

fn launch_with(ft: bool, app: &[&str]) -> Launched {
    launch_coordinated(ft, "actor", None, app)
}

/// `power` with coordinator `coordinator`, `LAZARUS_FAILPOINT` set to `failpoint`.
fn launch_coordinated(
    ft: bool,
    coordinator: &str,
    failpoint: Option<&str>,
    app: &[&str],
) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    // `power` reports at info when a restored block answers a slot its image held.
    cmd.env("RUST_LOG", "warn,power=info");
    if let Some(point) = failpoint {
        cmd.env("LAZARUS_FAILPOINT", point);
    }
    cmd.args(["run", "-n", "4"]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "500ms"]);
    }
    cmd.arg("--")
        .arg(bin("power"))
        .args(["--n", ORDER, "--coordinator", coordinator])
        .args(app);
    Launched::spawn(cmd, 4)
}

/// The answer of the same run without failures and without recovery.
fn reference() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| {
        let f = launch(false).finish();
        assert_eq!(
            f.verified()["verified"],
            "true",
            "the failure-free run equals the sequential iteration"
        );
        f.checksum()
    })
}

/// The failure-free answer with delayed replies (the same vector: the steps differ).
fn delayed_reference() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| launch_delayed(false).finish().checksum())
}

/// SIGKILLs `victims` together once each has committed its second checkpoint and a
/// survivor has committed one after that.
fn kill_mid_run(victims: &[u16]) -> Finished {
    kill_after_second_checkpoints(launch(true), victims)
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

/// The answer is the failure-free one, each ask was handled once, nothing contradicted
/// what was delivered before the failure, and only the killed nodes were restarted.
fn assert_failure_free_answer(f: &Finished, killed: &[u16]) {
    assert_same_answer(f, reference(), killed);
}

fn assert_same_answer(f: &Finished, reference: &str, killed: &[u16]) {
    assert_eq!(
        f.checksum(),
        reference,
        "the recovered run's vector equals the failure-free run's bit for bit"
    );
    assert_eq!(
        f.verified()["asks_handled_once"],
        "true",
        "every block handled each of the coordinator's asks exactly once, and each reply \
         reached it once"
    );
    assert_eq!(f.verified()["verified"], "true");
    for (rank, totals) in &f.finals() {
        assert_eq!(
            totals["contract_violations"], 0,
            "node {rank}: no regenerated ask or reply differed from the delivered one"
        );
    }
    assert_only_restarted(f, killed);
}

#[test]
fn the_asking_actors_node_killed_mid_run_gets_every_reply_again_and_the_result_is_the_failure_free_one(
) {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[0]);
    assert_failure_free_answer(&f, &[0]);
    let finals = f.finals();
    let coordinator = &finals[&0];
    assert!(
        coordinator["suppressed"] > 0 && coordinator["regenerations_checked"] > 0,
        "the asks the restored coordinator made again were not delivered twice, and were \
         compared with the first ones: {coordinator:?}"
    );
    let resent: u64 = (1..4).map(|r| finals[&r]["replayed"]).sum();
    assert!(
        resent > 0,
        "the blocks' nodes resent their logged replies to the restored coordinator"
    );
}

#[test]
fn an_asked_actors_node_killed_mid_run_answers_again_after_its_restore() {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[2]);
    assert_failure_free_answer(&f, &[2]);
    assert!(
        f.finals()[&0]["replayed"] > 0,
        "node 0 resent its logged asks to the restored node"
    );
    let finals = f.finals();
    assert!(
        finals[&0]["regenerations_checked"] + finals[&2]["regenerations_checked"] > 0,
        "the replies the restored blocks made again were compared with the delivered ones \
         (by node 0 as duplicates, or by node 2 against node 0's digests)"
    );
}

#[test]
fn the_asking_and_an_asked_node_killed_together_end_with_the_failure_free_answer() {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[0, 1]);
    assert_failure_free_answer(&f, &[0, 1]);
}

#[test]
fn slots_held_in_checkpointed_state_are_answered_after_the_asking_and_an_asked_node_die() {
    // Blocks 0 and 4 (node 0) hold slots of the coordinator's asks on their own node;
    // blocks 2 and 6 (node 2) hold slots of asks from node 0. A restored block answers
    // the slot its image held through the encoded route. Whether an image holds a slot
    // depends on the moment of its checkpoint (a slot is held 200 µs per step), so the
    // line `power` prints then ("answers a slot its checkpoint held", at info) is not
    // asserted: session 34 saw it in one of two runs.
    let _one = support::one_at_a_time();
    let f = kill_after_second_checkpoints(launch_delayed(true), &[0, 2]);
    assert_same_answer(&f, delayed_reference(), &[0, 2]);
}

/// Kills `victims` together once node 0 has committed a checkpoint, its second or later,
/// that keeps the coordinator's async handler suspended (the state from before the step,
/// the step's message, the replies taken so far).
fn kill_after_a_suspended_checkpoint(victims: &[u16]) -> Finished {
    let mut run = launch_async(true, None);
    run.wait_started();
    run.wait_for_checkpoints(victims, 2);
    run.wait_for("a checkpoint of node 0 with the handler suspended", |l| {
        l.contains("node 0: checkpoint committed") && l.contains(" suspended_handlers=1 ")
    });
    for &v in victims {
        run.kill(v);
    }
    run.finish()
}

#[test]
fn an_async_handler_suspended_when_its_node_is_killed_is_re_executed_and_the_result_is_the_failure_free_one(
) {
    let _one = support::one_at_a_time();
    let f = kill_after_a_suspended_checkpoint(&[0]);
    assert_failure_free_answer(&f, &[0]);
    assert_eq!(
        f.reexecuted_handlers(0),
        1,
        "the restore re-executed the coordinator's suspended step"
    );
    let resent: u64 = (1..4).map(|r| f.finals()[&r]["replayed"]).sum();
    assert!(
        resent > 0,
        "the blocks' nodes resent their logged replies to the restored coordinator"
    );
}

#[test]
fn a_node_an_async_handler_awaits_killed_mid_run_answers_after_its_restore() {
    let _one = support::one_at_a_time();
    let mut run = launch_async(true, None);
    run.wait_started();
    run.wait_for_checkpoints(&[2], 2);
    run.wait_for_a_survivors_checkpoint(&[2]);
    run.kill(2);
    let f = run.finish();
    assert_failure_free_answer(&f, &[2]);
    assert!(
        f.finals()[&0]["replayed"] > 0,
        "node 0 resent its logged asks to the restored node"
    );
}

#[test]
fn an_async_handlers_node_and_a_node_it_awaits_killed_together_end_with_the_failure_free_answer() {
    let _one = support::one_at_a_time();
    let f = kill_after_a_suspended_checkpoint(&[0, 2]);
    assert_failure_free_answer(&f, &[0, 2]);
    assert_eq!(f.reexecuted_handlers(0), 1);
}

#[test]
fn an_async_handlers_node_killed_during_a_checkpoint_restores_the_one_before() {
    let _one = support::one_at_a_time();
    // Node 0 dies in the middle of its third checkpoint (its set read, nothing stored):
    // it comes back from the second.
    let f = launch_async(true, Some("checkpoint:0:3")).finish();
    assert!(f.has("failpoint: SIGKILL during checkpoint 3"));
    assert_failure_free_answer(&f, &[0]);
}
