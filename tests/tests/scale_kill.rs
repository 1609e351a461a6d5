//! Recovery with many more nodes than cores: 16 jacobi2d nodes (32 tiles) on this
//! machine, nodes SIGKILLed from outside by the PIDs the launcher prints — two at the
//! same moment, then one of them again during the run — and the answer is the
//! failure-free run's, only the killed nodes restart, and the dependency vector each
//! message carries stays within a few bytes per node.

mod support;

use std::process::Command;
use support::bin;
use support::launched::{assert_only_restarted, Launched};

const NODES: u16 = 16;
const GRID: &str = "512";
/// About 10 s with recovery on here (nodes of one host talk through shared memory):
/// room for two kills, their recoveries and a checkpoint of a restarted node in between.
const ITERS: &str = "12000";

fn launch(ft: bool) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", &NODES.to_string()]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "1s"]);
    }
    cmd.arg("--")
        .arg(bin("jacobi2d"))
        .args(["--n", GRID, "--iters", ITERS, "--check", "bounds"]);
    Launched::spawn(cmd, NODES)
}

#[test]
fn sixteen_nodes_with_two_killed_together_and_one_again_end_with_the_failure_free_answer() {
    let expected = launch(false).finish().checksum();

    let mut run = launch(true);
    run.wait_started();
    run.wait_for_checkpoints(&[5, 11], 2);
    run.kill(5);
    run.kill(11);
    // Node 5 again, once its replacement has replayed and checkpointed: a second failure
    // restarts from the replacement's own checkpoint.
    run.wait_for("node 5's replay", |l| {
        l.contains("node 5: every peer answered: replay complete")
    });
    run.wait_for("a checkpoint of the restarted node 5", |l| {
        l.contains("node 5: checkpoint committed")
    });
    run.kill(5);
    let f = run.finish();

    assert_eq!(f.checksum(), expected, "the failure-free answer");
    assert_only_restarted(&f, &[5, 11]);
    let finals = f.finals();
    assert_eq!(finals[&5]["incarnation"], 2, "node 5 restarted twice");
    let resent: u64 = (0..NODES)
        .filter(|r| ![5, 11].contains(r))
        .map(|r| finals[&r]["replayed"])
        .sum();
    assert!(resent > 0, "the survivors resent logged halos");
    // Sparse: one (rank, interval) pair of varints per node the sender depends on, so
    // the piggyback is bounded by the node count, never by tiles or messages.
    for (rank, fin) in &finals {
        assert!(
            fin["max_piggyback"] <= 8 * u64::from(NODES),
            "node {rank}: a {} B piggyback for {NODES} nodes",
            fin["max_piggyback"]
        );
    }
}
