//! Actors spawned from inside handlers, which `main` never spawns, survive a SIGKILL of
//! their node: `spawn-ring` on 3 nodes under `lazarus run --ft on` (each node's foreman
//! spawns 4 workers from a handler, each worker spawns a tally from its `on_start` hook,
//! and the workers of the nodes pass values around rings). A node is SIGKILLed by PID
//! from outside mid-run; its replacement rebuilds the workers and tallies from the
//! checkpoint under the ids its peers know, and the run ends with the failure-free
//! answer (docs/semantics.md, "Actors spawned by actors").
//!
//! Runs go one at a time (3-node clusters on a 2-core machine are oversubscribed).

use crate::support;

use std::process::Command;
use std::sync::OnceLock;
use support::bin;
use support::launched::{assert_only_restarted, Finished, Launched};

/// A few seconds of rings on this machine, so a kill after a node's second checkpoint
/// lands mid-run.
const ROUNDS: &str = "12000";
const WORK: &str = "4000";
/// Actors on every node: a foreman, 4 workers it spawned, a tally each worker spawned
/// (and, on node 0, the collector).
const ACTORS_PER_NODE: [u64; 3] = [10, 9, 9];

fn launch(ft: bool) -> Launched {
    launch_every(ft.then_some("300ms"))
}

/// A run with recovery on and checkpoints every `period`, or off without one.
fn launch_every(period: Option<&str>) -> Launched {
    launch_with(period, &[])
}

/// `spawn-ring` with `extra` arguments, with recovery on and checkpoints every
/// `period`, or off without one.
fn launch_with(period: Option<&str>, extra: &[&str]) -> Launched {
    launch_args_env(period, extra, &[])
}

/// `spawn-ring` with recovery on and checkpoints every `period`, with `env` set.
fn launch_env(period: Option<&str>, env: &[(&str, &str)]) -> Launched {
    launch_args_env(period, &[], env)
}

fn launch_args_env(period: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.envs(env.iter().copied());
    cmd.args(["run", "-n", "3"]);
    if let Some(period) = period {
        cmd.args(["--ft", "on", "--checkpoint-every", period]);
    }
    cmd.arg("--")
        .arg(bin("spawn-ring"))
        .args(["--rounds", ROUNDS, "--work", WORK])
        .args(extra);
    Launched::spawn(cmd, 3)
}

/// The answer of the same run without failures and without recovery.
fn reference() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| {
        let f = launch(false).finish();
        assert_eq!(f.verified()["verified"], "true");
        f.checksum()
    })
}

/// SIGKILLs `victims` together once each has committed its second checkpoint and a
/// survivor has committed one after that.
fn kill_mid_run(victims: &[u16]) -> Finished {
    let mut run = launch(true);
    run.wait_started();
    run.wait_for_checkpoints(victims, 2);
    run.wait_for_a_survivors_checkpoint(victims);
    for &v in victims {
        run.kill(v);
    }
    run.finish()
}

/// How many actors node `rank`'s replacement restored from its checkpoint.
fn restored_actors(f: &Finished, rank: u16) -> u64 {
    event_count(f, rank, "actors restored")
}

/// How many actor images the checkpoint node `rank`'s replacement loaded held.
fn loaded_images(f: &Finished, rank: u16) -> u64 {
    event_count(f, rank, "loaded its checkpoint")
}

/// The `actors=` of node `rank`'s first timeline line containing `what`.
fn event_count(f: &Finished, rank: u16, what: &str) -> u64 {
    f.lines
        .iter()
        .filter(|l| l.contains(&format!("node {rank}: ")) && l.contains(what))
        .filter_map(|l| l.split(" actors=").nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("node {rank} was not restored:\n{}", f.lines.join("\n")))
}

fn assert_recovered(f: &Finished, killed: &[u16]) {
    assert_eq!(
        f.checksum(),
        reference(),
        "the recovered rings end with the failure-free digests"
    );
    assert_eq!(
        f.verified()["verified"],
        "true",
        "and those equal the rings computed sequentially"
    );
    assert!(
        !f.has("restore-error") && !f.has("its state is lost"),
        "every actor of the checkpoints came back; output:\n{}",
        f.lines.join("\n")
    );
    assert_only_restarted(f, killed);
    for &k in killed {
        assert_eq!(
            restored_actors(f, k),
            ACTORS_PER_NODE[usize::from(k)],
            "node {k}'s replacement restored the actors its handlers had spawned too"
        );
    }
}

#[test]
fn workers_and_tallies_spawned_by_handlers_come_back_after_their_node_is_sigkilled() {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[1]);
    assert_recovered(&f, &[1]);
    let finals = f.finals();
    assert!(
        finals[&0]["replayed"] > 0,
        "node 0 resent its logged values to the rebuilt workers: {:?}",
        finals[&0]
    );
    assert!(
        finals[&1]["suppressed"] > 0,
        "the rebuilt workers' regenerated values were not delivered twice: {:?}",
        finals[&1]
    );
}

#[test]
fn the_collectors_node_and_its_downstream_killed_together_rebuild_their_spawned_actors() {
    let _one = support::one_at_a_time();
    let f = kill_mid_run(&[0, 1]);
    assert_recovered(&f, &[0, 1]);
}

#[test]
fn workers_spawned_again_by_a_replaying_handler_get_the_messages_that_came_before_them() {
    let _one = support::one_at_a_time();
    // No checkpoint in the run: the restarted node re-executes its foreman's `start`,
    // which spawns the workers again. Node 0's logged values for them are deliverable as
    // soon as `start` is in the foreman's mailbox, before the handler runs: they wait
    // for their addressees instead of being dropped as undeliverable (the run would
    // hang).
    // Node 1 stalls before its first value from node 0 is handled: that value is in
    // node 0's log, for a worker the restarted node has to spawn again.
    let mut run = launch_env(
        Some("60s"),
        &[("LAZARUS_FAILPOINT", "stall-on:1:Step:60000")],
    );
    run.wait_started();
    run.wait_for("node 1 stalling on its first value", |l| {
        l.contains("failpoint: node 1 stalls")
    });
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), reference());
    assert_eq!(f.verified()["verified"], "true");
    assert!(
        !f.has("undeliverable"),
        "no logged message was dropped; output:\n{}",
        f.lines.join("\n")
    );
    assert_only_restarted(&f, &[1]);
    assert!(f.finals()[&0]["replayed"] > 0, "node 0 resent its log");
}

#[test]
fn actors_that_exited_before_the_checkpoint_stay_exited_and_references_to_them_still_restore() {
    let _one = support::one_at_a_time();
    // Ring 0 goes around a quarter as often as ring 3: its workers stop (and their
    // tallies, once they reported) while the others run on. Node 1's foreman still holds
    // a reference to its worker of ring 0 when the node is killed.
    let failure_free = launch_with(None, &["--uneven"]).finish();
    assert_eq!(failure_free.verified()["verified"], "true");
    let mut run = launch_with(Some("300ms"), &["--uneven"]);
    run.wait_started();
    run.wait_for("node 1's worker of ring 0 finishing", |l| {
        l.contains("worker 1:0 finished")
    });
    for n in ["first", "second"] {
        run.wait_for(&format!("the {n} checkpoint of node 1 after that"), |l| {
            l.contains("node 1: checkpoint committed")
        });
    }
    run.kill(1);
    let f = run.finish();
    assert_eq!(
        f.checksum(),
        failure_free.checksum(),
        "the recovered uneven rings end with the failure-free digests"
    );
    assert_eq!(f.verified()["verified"], "true");
    assert!(
        !f.has("restore-error") && !f.has("its state is lost"),
        "the foreman's reference to its exited worker restored as a stopped one; output:\n{}",
        f.lines.join("\n")
    );
    // Which other rings had ended by the checkpoint depends on timing; ring 0's worker
    // and tally had.
    let imaged = loaded_images(&f, 1);
    assert!(
        imaged <= ACTORS_PER_NODE[1] - 2,
        "the exited worker and tally are not in the checkpoint ({imaged} actors are)"
    );
    assert_eq!(
        restored_actors(&f, 1),
        imaged,
        "the exited actors did not come back; every actor of the checkpoint did"
    );
    assert_only_restarted(&f, &[1]);
    assert!(f.finals()[&0]["replayed"] > 0, "node 0 resent its log");
}
