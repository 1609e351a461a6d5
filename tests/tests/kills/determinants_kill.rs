//! Exact recovery of an order-sensitive actor with real processes: `master-worker` on 4
//! nodes under `lazarus run --ft on`, whose master hands out tasks in arrival order,
//! salts each with `ctx.random()` and stamps each with the epoch of its timer. Nodes are SIGKILLed by PID from outside. The run must
//! end with every task done exactly once (the answer) and with the recovered master's
//! ledger agreeing with what every worker received (`consistent=true`): no survivor holds
//! a hand-out that the recovered run contradicts.
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use std::process::Command;
use support::bin;
use support::launched::{
    assert_one_restart_per_kill, assert_only_restarted, Finished, Launched, TestRng,
};

/// Tasks: a run of about 4 s in CI (16,000 took under 2 s there), so that the kill (300
/// ms after the master's first checkpoint, itself at about 1 s) falls well inside the
/// run and not in its wind-down.
const TASKS: &str = "32000";
const WORK: &str = "20000";

fn launch(env: &[(&str, &str)], tasks: &str) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4", "--ft", "on", "--checkpoint-every", "1s"])
        .arg("--")
        .arg(bin("master-worker"))
        .args(["--tasks", tasks, "--work", WORK])
        .envs(env.iter().copied());
    Launched::spawn(cmd, 4)
}

/// Runs master-worker and SIGKILLs `victims` together once the master's node has
/// committed a checkpoint and handed out work after it.
fn killed_mid_run(victims: &[u16], env: &[(&str, &str)], tasks: &str) -> Finished {
    let mut run = launch(env, tasks);
    run.wait_started();
    run.wait_for("a checkpoint of the master's node", |l| {
        l.contains("node 0: checkpoint committed")
    });
    // Hand-outs happen after that checkpoint: they are what the restored master must
    // reproduce.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for &v in victims {
        run.kill(v);
    }
    run.finish()
}

#[test]
fn the_masters_node_sigkilled_mid_run_hands_out_exactly_what_the_workers_received() {
    let _one = support::one_at_a_time();
    let f = killed_mid_run(&[0], &[], TASKS);
    let result = f.verified();
    assert_eq!(result["consistent"], "true");
    assert_eq!(result["tasks_per_worker"].split("..").count(), 2);
    assert_only_restarted(&f, &[0]);
    let finals = f.finals();
    assert!(
        finals[&0]["determinants_replayed"] > 0,
        "the restored master replayed logged hand-outs: {:?}",
        finals[&0]
    );
    // The workers' nodes logged the master's determinants and released them again.
    assert!(finals[&0]["determinants"] > 0);
    // Its epoch timer fired among the requests; the restored master handled the timer
    // messages at the logged points (the epochs are in every hand-out the workers hold).
    assert!(result["epochs"].parse::<u64>().unwrap() > 1, "{result:?}");
    assert!(
        finals[&0]["timers_replayed"] > 0,
        "the restored master replayed its timer deliveries: {:?}",
        finals[&0]
    );
    // It wound down in worker order with selective receives: every worker's report (at
    // least) was delivered that way, unlogged.
    let workers: u64 = result["workers"].parse().unwrap();
    assert!(
        finals[&0]["selected_deliveries"] >= workers,
        "{workers} workers, {:?}",
        finals[&0]
    );
}

/// Tasks of the random-kills test: about 8 s (16,000 tasks took under 2 s in CI,
/// shorter than three kills 0.3-1.3 s apart), so that every kill lands before the end.
const LONG_TASKS: &str = "64000";

#[test]
fn three_sigkills_of_random_nodes_at_random_moments_leave_the_ledger_consistent() {
    // The master's node, its loggers, a node twice, a node before its first checkpoint:
    // whatever the schedule (printed seed, LAZARUS_TEST_SEED replays it), every task is
    // done once and the recovered master's ledger matches what the workers received.
    let _one = support::one_at_a_time();
    let mut run = launch(&[], LONG_TASKS);
    run.wait_started();
    let victims = run.kill_at_random(&mut TestRng::from_env(), 3);
    let f = run.finish();
    assert_eq!(
        f.verified()["consistent"],
        "true",
        "victims in order: {victims:?}"
    );
    assert_one_restart_per_kill(&f, &victims);
}

#[test]
fn a_workers_node_restarted_from_the_beginning_after_the_masters_restart_agrees() {
    let _one = support::one_at_a_time();
    // The master's node dies before its first checkpoint, then a worker's node before
    // its own (first checkpoints at 1 s and 1.5 s): both start again from the top. The
    // restarted master's tasks reach the new worker in channel order only, so one can
    // come before `main`'s `Begin`; master-worker once dropped such a task (and hung,
    // its worker's regenerated requests differing from the delivered ones). Session 34
    // found it with the random test below (LAZARUS_TEST_SEED=214668994).
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4", "--ft", "on", "--checkpoint-every", "1s"])
        .args(["--kill", "0@0.5,2@1.07"])
        .arg("--")
        .arg(bin("master-worker"))
        .args(["--tasks", LONG_TASKS, "--work", WORK]);
    let f = Launched::spawn(cmd, 4).finish();
    assert_eq!(f.verified()["consistent"], "true");
    assert!(
        f.has("node 0: restarted node loaded its checkpoint source=beginning")
            && f.has("node 2: restarted node loaded its checkpoint source=beginning"),
        "both nodes started again from the beginning:\n{}",
        f.lines.join("\n")
    );
    assert_one_restart_per_kill(&f, &[0, 2]);
}

#[test]
fn the_masters_node_and_one_of_its_loggers_killed_together_still_agree() {
    let _one = support::one_at_a_time();
    // Node 0's loggers are nodes 1 and 2 (the next two ranks): node 1 dies with it, node
    // 2 and node 1's journal keep the determinants.
    let f = killed_mid_run(&[0, 1], &[], TASKS);
    assert_eq!(f.verified()["consistent"], "true");
    assert_only_restarted(&f, &[0, 1]);
    assert!(
        f.finals()[&0]["determinants_replayed"] > 0,
        "the restored master replayed the hand-outs node 2 and node 1's journal kept: {:?}",
        f.finals()[&0]
    );
}

#[test]
fn a_workers_node_sigkilled_mid_run_changes_nothing_the_master_saw() {
    let _one = support::one_at_a_time();
    let f = killed_mid_run(&[2], &[], TASKS);
    assert_eq!(f.verified()["consistent"], "true");
    assert_only_restarted(&f, &[2]);
    let finals = f.finals();
    let resent: u64 = [0, 1, 3].iter().map(|r| finals[r]["replayed"]).sum();
    assert!(
        resent > 0,
        "the survivors resent what they had sent node 2 since its checkpoint"
    );
}

#[test]
fn a_workers_node_killed_before_its_first_checkpoint_restarts_from_the_beginning() {
    let _one = support::one_at_a_time();
    // Node 3 dies inside its first checkpoint, before the store has it, with tasks done
    // since the start: whatever the other nodes' timing, it has no checkpoint. (A kill
    // from outside "before node 3's first checkpoint", cued by another node's first one,
    // raced with the spread of first checkpoints, which a busy machine shifts by whole
    // periods: twice in CI node 3 had checkpointed first.)
    // Enough tasks that the run outlasts node 3's first checkpoint turn (1.75 periods
    // after the start) with room to spare: at 8000 it can end first.
    let run = launch(&[("LAZARUS_FAILPOINT", "checkpoint:3:1")], "30000");
    let f = run.finish();
    assert!(f.has("failpoint: SIGKILL during checkpoint 1"));
    // Its main runs again from the top: the barrier it passed before returns at once,
    // and the master's logged answers reach the new worker only after main has told it
    // to begin (they depend on that tell), so it asks for work again instead of
    // receiving answers to questions it never asked.
    assert!(
        f.has("node 3: restarted node loaded its checkpoint source=beginning"),
        "{}",
        f.lines.join("\n")
    );
    assert_eq!(f.verified()["consistent"], "true");
    assert_only_restarted(&f, &[3]);
}

#[test]
fn the_masters_node_killed_in_its_wind_down_replays_it_by_selective_receive() {
    let _one = support::one_at_a_time();
    // Every task is handed out; the master has told the first worker to stop and
    // receives only from it. It stalls before handling that worker's report, and dies.
    let mut run = launch(&[("LAZARUS_FAILPOINT", "stall-on:0:Finished:60000")], TASKS);
    run.wait_started();
    run.wait_for("the master stalled in its wind-down", |l| {
        l.contains("failpoint: node 0 stalls")
    });
    run.kill(0);
    let f = run.finish();
    let result = f.verified();
    assert_eq!(result["consistent"], "true");
    assert_only_restarted(&f, &[0]);
    let finals = f.finals();
    // The restored master replayed its logged hand-outs, then wound down again by
    // selective receive, in worker order, with nothing logged for those deliveries.
    assert!(finals[&0]["determinants_replayed"] > 0, "{:?}", finals[&0]);
    let workers: u64 = result["workers"].parse().unwrap();
    assert!(
        finals[&0]["selected_deliveries"] >= workers,
        "{workers} workers, {:?}",
        finals[&0]
    );
}

#[test]
fn without_event_loggers_the_recovered_master_contradicts_its_workers() {
    let _one = support::one_at_a_time();
    // The control experiment: the same kill with determinants kept nowhere. The restored
    // master re-draws its salts and re-orders its hand-outs, and the workers notice.
    // Without loggers no answer waits for an acknowledgement, so the run is several times
    // faster: more tasks keep the kill mid-run (with 20000, one CI run of session 33
    // verified: the kill most likely fell in the master's wind-down).
    let f = killed_mid_run(&[0], &[("LAZARUS_EVENT_LOGGERS", "0")], "80000");
    assert!(!f.success, "the run must not verify");
    assert_eq!(
        f.result.as_ref().map(|r| r["consistent"].as_str()),
        Some("false"),
        "{}",
        f.lines.join("\n")
    );
}
