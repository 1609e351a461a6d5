//! Exact recovery of order-sensitive async handlers, with real processes: `payments` on 4
//! nodes under `lazarus run --ft on`. A payer's async handler keeps payments in flight and
//! takes their outcomes in the order they come, each changing the payments it draws next;
//! banks refuse overdrafts, so their answers depend on the order withdrawals and deposits
//! arrive. Both are order-sensitive: the order a payer took its results in is logged like
//! its messages' (determinants), and a restored payer re-executes its suspended handler,
//! then takes its results again in that order. Nodes are SIGKILLed by PID from outside
//! mid-run: one node with its payer suspended, one whose payer races sleeps against its
//! outcomes (`--patience-us`: which came first is logged too, and the sleeps that lost are
//! given up), two at once, and random victims at random moments (the seed is printed;
//! `LAZARUS_TEST_SEED=<seed>` replays the schedule).
//!
//! Every run must end as a failure-free one would: a RESULT whose every invariant holds
//! (`verified=true`: money conserved, no overdraft, every payment answered once, every
//! balance the one the payers' journals give; a restored payer that drew other payments
//! than its first life did, already applied by surviving banks, breaks the last), only
//! the killed ranks restarted, and no regenerated message differing from the delivered
//! copy.
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use support::launched::{
    assert_one_restart_per_kill, assert_only_restarted, assert_replayed_determinants,
    four_nodes_recovering, Finished, Launched, TestRng,
};

/// Payments per payer (one payer per node): a few seconds with recovery on, so that kills
/// after a node's second checkpoint, or 0.3-1.3 s apart, land mid-run.
const PAYMENTS: &str = "12000";

fn launch() -> Launched {
    launch_with(PAYMENTS, &[])
}

/// `payments` with `payments` per payer and more options (`app`).
fn launch_with(payments: &str, app: &[&str]) -> Launched {
    let args = [&["--payments", payments][..], app].concat();
    Launched::spawn(four_nodes_recovering("payments", &args), 4)
}

/// Kills `victims` together once each has committed its second checkpoint and the last
/// of them one that keeps its payer's handler suspended.
fn kill_with_handlers_suspended(victims: &[u16]) -> Finished {
    let mut run = launch();
    run.wait_started();
    run.wait_for_checkpoints(victims, 2);
    let last = victims[victims.len() - 1];
    run.wait_for("a checkpoint with a suspended handler", |l| {
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
    assert_eq!(verified["failed"], "0", "{verified:?}");
    for (rank, totals) in &f.finals() {
        assert_eq!(
            totals["contract_violations"], 0,
            "node {rank}: no regenerated message differed from the delivered one"
        );
    }
}

#[test]
fn a_node_killed_with_its_payer_suspended_takes_its_results_again_in_the_logged_order() {
    let _one = support::one_at_a_time();
    let f = kill_with_handlers_suspended(&[2]);
    assert_invariants(&f);
    assert_only_restarted(&f, &[2]);
    assert!(
        f.reexecuted_handlers(2) > 0,
        "the restore re-executed the payer's handler its checkpoint kept suspended"
    );
    assert_replayed_determinants(&f, &[2], "payer and bank");
}

#[test]
fn a_payer_racing_sleeps_against_its_outcomes_replays_which_came_first() {
    // Payers wait 1 ms for an outcome before they note a wait: whether a sleep or a result
    // came first is a logged delivery, and a sleep that lost is given up (its end, if it
    // came, leaves without a delivery: a replay may give it up before it ends).
    // Killed a while after a checkpoint, so the replay goes through many such races.
    let _one = support::one_at_a_time();
    let mut run = launch_with("4000", &["--patience-us", "1000"]);
    run.wait_started();
    run.wait_for_checkpoints(&[1], 2);
    std::thread::sleep(std::time::Duration::from_millis(250));
    run.kill(1);
    let f = run.finish();
    assert_invariants(&f);
    assert_ne!(
        f.verified()["waits"],
        "0",
        "sleeps ended first now and then"
    );
    assert_only_restarted(&f, &[1]);
    assert_replayed_determinants(&f, &[1], "payer and bank");
}

#[test]
fn two_nodes_killed_together_end_with_every_balance_matching_the_journals() {
    let _one = support::one_at_a_time();
    let f = kill_with_handlers_suspended(&[0, 3]);
    assert_invariants(&f);
    assert_only_restarted(&f, &[0, 3]);
    assert_replayed_determinants(&f, &[0, 3], "payer and bank");
}

#[test]
fn two_sigkills_of_random_nodes_at_random_moments_end_with_every_balance_matching_the_journals() {
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
