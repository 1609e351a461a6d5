//! The NPB kernels under rollback recovery: each runs class S (EP) or W (CG, IS, MG) on
//! 4 nodes under `lazarus run --ft on`, a node dies mid-run, and the run still verifies with exactly
//! the failure-free values, with only that node restarted.
//!
//! Most tests SIGKILL the node by PID from this test process while it is provably
//! mid-run. Such a run lasts a fraction of a second, too short to aim a kill at, so
//! the runtime's `stall:RANK:K:MILLIS` failpoint makes the moment: the node takes a
//! checkpoint after `K` handler calls, makes `K` more (its later checkpoints are held
//! uncommitted), then stalls before the next one. The test waits for the stall to begin
//! and for that checkpoint's commit, then kills the node. At that moment the node is
//! alive, its newest committed checkpoint holds at least `K` handled messages, the `K`
//! handled since are lost and must be redone, and the kernel cannot have finished (the
//! handler call that stalls has not run); the stall never ends (checked: the kill landed
//! inside it). The restarted node runs free: the failpoint fires in the first incarnation
//! only.
//!
//! One test takes the other way a node fails, a handler panic (the node rolls back by
//! itself: its process re-executes as the next incarnation), before the node has any
//! checkpoint.
//!
//! The runs go one at a time: 4-node clusters on a small machine are already
//! oversubscribed, and the failure detector's 1 s timeout must not fire falsely.

mod support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use support::launched::{assert_only_restarted, assert_only_rolled_back, Finished, Launched};
use support::{bin, parse_result};

/// How long the failpoint stalls the node: far longer than the test takes to see the
/// stall and kill, so a stall that ends means the kill missed it.
const STALL_MS: u64 = 20_000;

/// One kernel under test.
struct Kernel {
    /// The app's binary.
    app: &'static str,
    /// The RESULT fields that carry its verification values.
    values: &'static [&'static str],
    /// The NPB class: long enough that checkpoints land inside the kernel, not only
    /// around it (class S of CG, IS and MG runs for about 10 ms on 4 nodes).
    class: &'static str,
    /// The stall failpoint's `K`: handler calls of the victim before its checkpoint and
    /// again after it. A fraction of its calls in a run on 4 nodes (64 for EP's
    /// node 1; in class S about 80 for IS, 190 for MG, 3000 for CG), so the checkpoint holds
    /// progress, work is lost, and more is left.
    k: u64,
    /// `--checkpoint-every`: short enough that the checkpoint after `k` calls comes long
    /// before the victim's work runs out.
    checkpoint_every: &'static str,
}

const EP: Kernel = Kernel {
    app: "npb-ep",
    class: "S",
    values: &["sx", "sy", "counts"],
    k: 8,
    checkpoint_every: "20ms",
};
const CG: Kernel = Kernel {
    app: "npb-cg",
    class: "W",
    values: &["zeta", "rnorm"],
    k: 600,
    checkpoint_every: "200ms",
};
const IS: Kernel = Kernel {
    app: "npb-is",
    class: "W",
    values: &["ranks", "passed", "full_verify"],
    k: 20,
    checkpoint_every: "20ms",
};
const MG: Kernel = Kernel {
    app: "npb-mg",
    class: "W",
    values: &["rnm2", "rnmu"],
    k: 50,
    checkpoint_every: "20ms",
};

/// Held by every test while it runs a cluster.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the others still run.
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel's answer without failures: the app alone (its values are
/// bit-identical for any number of nodes, which `apps/tests/npb.rs` checks).
fn failure_free(kernel: &Kernel) -> HashMap<String, String> {
    let out = support::output(Command::new(bin(kernel.app)).args(["--class", kernel.class]))
        .expect("app starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {stdout}", kernel.app);
    let result = parse_result(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|| panic!("{}: no RESULT line: {stdout}", kernel.app));
    assert_eq!(result["verified"], "true", "{result:?}");
    result
}

/// Starts a run of `kernel` on 4 nodes with recovery on, checkpoints every
/// `checkpoint_every` and `failpoint` set.
fn launch(kernel: &Kernel, checkpoint_every: &str, failpoint: &str) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4", "--ft", "on"])
        .args(["--checkpoint-every", checkpoint_every, "--"])
        .arg(bin(kernel.app))
        .args(["--class", kernel.class])
        .env("LAZARUS_FAILPOINT", failpoint);
    let mut run = Launched::spawn(cmd, 4);
    run.wait_started();
    run
}

/// The run verified, with every verification value of the failure-free run.
fn assert_failure_free_values(kernel: &Kernel, f: &Finished, expected: &HashMap<String, String>) {
    let result = f.verified();
    for key in kernel.values {
        assert_eq!(result[*key], expected[*key], "{}: {key}", kernel.app);
    }
}

/// A run of `kernel` on 4 nodes with recovery on in which node `victim` is
/// SIGKILLed mid-run, checked to end with the failure-free values. Returns the run for
/// the kernel-specific checks.
fn killed_mid_run(kernel: &Kernel, victim: u16) -> Finished {
    let expected = failure_free(kernel);
    let stall = format!("stall:{victim}:{}:{STALL_MS}", kernel.k);
    let mut run = launch(kernel, kernel.checkpoint_every, &stall);
    let stalls = format!("failpoint: node {victim} stalls ");
    let stall = run.wait_for("the stall", |l| l.contains(&stalls));
    let checkpoint: u64 = stall
        .rsplit_once("after checkpoint ")
        .and_then(|(_, id)| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("no checkpoint id in `{stall}`"));
    // The commit may come before or after the stall begins.
    let committed = format!("node {victim}: checkpoint committed id={checkpoint} ");
    run.wait_for_seen("the checkpoint's commit", |l| l.contains(&committed));
    run.kill(victim);

    let f = run.finish();
    assert_failure_free_values(kernel, &f, &expected);
    assert!(
        !f.has(&format!("failpoint: node {victim} stall over")),
        "the kill landed inside the stall, before the kernel could finish"
    );
    assert!(
        f.has(&format!(
            "node {victim}: died (was killed by SIGKILL), restarting as incarnation 1"
        )),
        "the launcher saw the SIGKILL"
    );
    assert!(
        f.has(&format!(
            "node {victim}: restarted node loaded its checkpoint source=directory:{checkpoint} "
        )) || f.has(&format!(
            "node {victim}: restarted node loaded its checkpoint source=buddy:{checkpoint} "
        )),
        "the restart resumed from the checkpoint the stall followed (the failpoint holds \
         later ones uncommitted); output:\n{}",
        f.lines.join("\n")
    );
    assert_only_restarted(&f, &[victim]);
    f
}

/// Logged messages the survivors resent to the restarted `victim` when it rolled back
/// (the restarted node's own count is left out: it resends what its checkpointed log
/// holds, which the survivors drop as duplicates).
fn resent_to(f: &Finished, victim: u16) -> u64 {
    f.finals()
        .iter()
        .filter(|(rank, _)| **rank != victim)
        .map(|(_, totals)| totals["replayed"])
        .sum()
}

/// The survivors resent `victim` some `what` they had sent it.
fn assert_resent(f: &Finished, victim: u16, what: &str) {
    assert!(
        resent_to(f, victim) > 0,
        "the survivors resent {what} to node {victim}: {:?}",
        f.finals()
    );
}

#[test]
fn ep_verifies_with_the_failure_free_sums_when_node_1_is_sigkilled_mid_run() {
    let _serial = serial();
    let f = killed_mid_run(&EP, 1);
    // EP's chunks only ever send, to the collector on node 0: nothing is logged for node
    // 1, so nothing is resent. The batches it computed after its checkpoint are computed
    // again from the restored chunks' pending Start messages.
    assert_eq!(resent_to(&f, 1), 0, "nobody ever sent node 1 a message");
    assert_eq!(f.finals()[&1]["delivered"], 0);
}

#[test]
fn ep_verifies_when_node_0_with_the_collector_is_sigkilled_mid_run() {
    let _serial = serial();
    let f = killed_mid_run(&EP, 0);
    // The other nodes' chunks do not depend on node 0: they report to its collector
    // throughout (when node 0 stalls, after 16 of its 321 handler calls, they are far from
    // done), and the reports it received after its checkpoint come back from their logs.
    assert_resent(&f, 0, "batches");
}

#[test]
fn cg_verifies_with_the_failure_free_zeta_when_node_1_is_sigkilled_mid_run() {
    let _serial = serial();
    let f = killed_mid_run(&CG, 1);
    // Every CG step is an all-to-all exchange, so no worker gets more than a step ahead of
    // node 1's: most of the 600 messages node 1 handled after its checkpoint arrived after
    // it, and those come back from the senders' logs.
    assert_resent(&f, 1, "shares");
}

#[test]
fn is_verifies_every_rank_when_node_1_is_sigkilled_mid_run() {
    let _serial = serial();
    let f = killed_mid_run(&IS, 1);
    // Every IS step is an all-to-all exchange, so the others never send node 1 more than
    // a step ahead (3 shares): most of the 20 messages it handled after its checkpoint
    // arrived after it, and those come back from the senders' logs.
    assert_resent(&f, 1, "shares");
}

#[test]
fn mg_verifies_with_the_failure_free_norms_when_node_1_is_sigkilled_mid_run() {
    let _serial = serial();
    let f = killed_mid_run(&MG, 1);
    // Node 1's neighbours send it their planes an operator at a time, as far as they got
    // ahead of it, and they need its planes to get on: most of the 50 messages it handled
    // after its checkpoint arrived after it, and those come back from the senders' logs.
    assert_resent(&f, 1, "planes");
}

#[test]
fn is_verifies_when_a_handler_panic_rolls_node_1_back_to_the_beginning() {
    let _serial = serial();
    let expected = failure_free(&IS);
    // Actor 1:0, node 1's worker, panics in its 20th handler call (a transient fault: the
    // rolled-back node runs free). No periodic checkpoints: there is none to load.
    let f = launch(&IS, "0", "panic:1:0:20").finish();
    assert_failure_free_values(&IS, &f, &expected);
    assert!(
        f.has("actor=1:0 type=Worker ") && f.has("injected panic in handler call 20 of actor 1:0"),
        "the panic was reported"
    );
    assert!(
        f.has("node 1: rolls back in place: its process re-executes itself incarnation=1"),
        "node 1 rolled back by itself"
    );
    assert!(f.restarted().is_empty(), "the launcher started no process");
    assert!(
        f.has("node 1: restarted node loaded its checkpoint source=beginning "),
        "node 1 started over; output:\n{}",
        f.lines.join("\n")
    );
    assert_only_rolled_back(&f, &[1]);
    // Everything the others had sent node 1 comes back from their logs.
    assert_resent(&f, 1, "shares");
}
