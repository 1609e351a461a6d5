//! Exact recovery of async handlers that await each other across nodes, with real
//! processes: `transfer` on 4 nodes under `lazarus run --ft on`. A client's async handler
//! awaits a teller's on the next node, which awaits a take from one ledger and a put into
//! another; nearly every checkpoint finds handlers suspended. Nodes are SIGKILLed by PID
//! from outside mid-run: one node with its handlers suspended, node 0 (`main`'s asks),
//! two at once, and random victims at random moments (the seed is printed;
//! `LAZARUS_TEST_SEED=<seed>` replays the schedule).
//!
//! Every run must end as a failure-free one would: a RESULT whose every invariant holds
//! (`verified=true`: money conserved, every transfer taken, put and counted exactly once,
//! every balance the one computed from the clients' seeds), only the killed ranks
//! restarted, and no regenerated message differing from the delivered copy.
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use support::launched::{
    assert_one_restart_per_kill, assert_only_restarted, four_nodes_recovering, Finished, Launched,
    TestRng,
};

/// Transfers per client (one client per node): several seconds with recovery on, so that
/// kills after a node's second checkpoint, or 0.3-1.3 s apart, land mid-run.
const TRANSFERS: &str = "10000";

fn launch() -> Launched {
    launch_with(TRANSFERS, &[])
}

/// `transfer` with `transfers` per client and more options (`app`).
fn launch_with(transfers: &str, app: &[&str]) -> Launched {
    let args = [&["--transfers", transfers][..], app].concat();
    Launched::spawn(four_nodes_recovering("transfer", &args), 4)
}

/// Kills `victims` together once each has committed its second checkpoint and the last
/// of them one that keeps suspended handlers.
fn kill_with_handlers_suspended(victims: &[u16]) -> Finished {
    let mut run = launch();
    run.wait_started();
    run.wait_for_checkpoints(victims, 2);
    let last = victims[victims.len() - 1];
    run.wait_for("a checkpoint with suspended handlers", |l| {
        l.contains(&format!("node {last}: checkpoint committed"))
            && !l.contains(" suspended_handlers=0 ")
    });
    for &v in victims {
        run.kill(v);
    }
    run.finish()
}

/// Every invariant held and every node's regenerated messages equalled the delivered
/// ones.
fn assert_invariants(f: &Finished) {
    let verified = f.verified();
    assert_eq!(verified["verified"], "true", "{verified:?}");
    assert_eq!(verified["made"], verified["transfers"]);
    for (rank, totals) in &f.finals() {
        assert_eq!(
            totals["contract_violations"], 0,
            "node {rank}: no regenerated message differed from the delivered one"
        );
    }
}

#[test]
fn a_node_killed_with_its_handlers_suspended_re_executes_them_and_every_balance_is_exact() {
    let _one = support::one_at_a_time();
    let f = kill_with_handlers_suspended(&[2]);
    assert_invariants(&f);
    assert_only_restarted(&f, &[2]);
    assert!(
        f.reexecuted_handlers(2) > 0,
        "the restore re-executed the handlers its checkpoint kept suspended"
    );
}

#[test]
fn a_node_killed_while_a_handler_sleeps_ends_the_sleep_after_its_restore() {
    // Tellers sleep 1 ms between the take and the put, the money in flight, so most
    // checkpoints find one asleep: a checkpoint keeps a sleep with the time it had left,
    // and the restore arms it again. (Any checkpoint of node 1 that holds a sleep, among
    // the lines already read too.)
    let _one = support::one_at_a_time();
    let mut run = launch_with("3000", &["--think-us", "1000"]);
    run.wait_started();
    run.wait_for_seen("a checkpoint of node 1 holding a sleep", |l| {
        l.contains("node 1: checkpoint committed") && !l.contains(" sleeps=0 ")
    });
    run.kill(1);
    let f = run.finish();
    assert_invariants(&f);
    assert_only_restarted(&f, &[1]);
    assert!(f.reexecuted_handlers(1) > 0);
}

#[test]
fn node_0_killed_mid_run_ends_with_every_balance_exact() {
    let _one = support::one_at_a_time();
    let f = kill_with_handlers_suspended(&[0]);
    assert_invariants(&f);
    assert_only_restarted(&f, &[0]);
}

#[test]
fn two_nodes_killed_together_end_with_every_balance_exact() {
    let _one = support::one_at_a_time();
    let f = kill_with_handlers_suspended(&[1, 3]);
    assert_invariants(&f);
    assert_only_restarted(&f, &[1, 3]);
}

#[test]
fn two_sigkills_of_random_nodes_at_random_moments_end_with_every_balance_exact() {
    // Whatever comes: a node before its first checkpoint, node 0, the same node twice, a
    // node killed while another recovers. LAZARUS_TEST_SEED=<seed> replays the schedule.
    let _one = support::one_at_a_time();
    let mut run = launch();
    run.wait_started();
    let victims = run.kill_at_random(&mut TestRng::from_env(), 2);
    let f = run.finish();
    assert_invariants(&f);
    assert_one_restart_per_kill(&f, &victims);
}
