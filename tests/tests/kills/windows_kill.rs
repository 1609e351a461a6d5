//! Exact recovery of one-sided windows with real processes: `histogram` on 4 nodes under
//! `lazarus run --ft on`, its `main` accumulating into every node's part, taking tickets
//! with fetch-and-ops and peeking at a neighbour's bin with a get every round. Nodes are
//! SIGKILLed by PID from outside mid-run, or kill themselves at a failpoint: a target
//! while a get crosses its checkpoint on the message path, an origin inside a target's
//! gate on the shared-memory path. Every run must end with the histogram, the ticket
//! count and the peeks of the failure-free run, with only the killed nodes restarted.
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use std::sync::OnceLock;
use support::launched::{assert_only_restarted, four_nodes_recovering, Finished, Launched};

/// About 3 s of work on this machine with recovery on: 800 rounds of two fences.
const ARGS: &[&str] = &["--keys", "50000", "--rounds", "800", "--bins", "4096"];

/// The failure-free run's histogram checksum and peeks (recovery off).
fn reference() -> &'static (String, String) {
    static REFERENCE: OnceLock<(String, String)> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let (_, result) = support::verified_run(
            std::process::Command::new(support::bin("lazarus"))
                .args(["run", "-n", "4", "--"])
                .arg(support::bin("histogram"))
                .args(ARGS),
        );
        (result["checksum"].clone(), result["peeks"].clone())
    })
}

fn launch(env: &[(&str, &str)]) -> Launched {
    let mut cmd = four_nodes_recovering("histogram", ARGS);
    cmd.envs(env.iter().copied());
    Launched::spawn(cmd, 4)
}

/// Once each of `victims` is at work and has committed a checkpoint since, and 300 ms
/// later (rounds whose operations the restarted node must get back), SIGKILLs them.
fn kill_mid_run(run: &mut Launched, victims: &[u16]) {
    kill_at_work(run, victims, |v| {
        format!("histogram: node {v}: rounds started")
    });
}

/// [`kill_mid_run`] for any app: node `v` is at work once it prints `at_work(v)`.
fn kill_at_work(run: &mut Launched, victims: &[u16], at_work: impl Fn(u16) -> String) {
    run.wait_started();
    for &v in victims {
        let line = at_work(v);
        run.wait_for_seen(&format!("node {v} at work"), |l| l.contains(&line));
        run.wait_for(&format!("a checkpoint of node {v} after that"), |l| {
            l.contains(&format!("node {v}: checkpoint committed"))
        });
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    for &v in victims {
        run.kill(v);
    }
}

/// The run ended with the failure-free histogram, tickets and peeks, only the killed
/// nodes restarted.
fn assert_same_answers(f: &Finished, killed: &[u16]) {
    let result = f.verified();
    let (checksum, peeks) = reference();
    assert_eq!(&result["checksum"], checksum, "{result:?}");
    assert_eq!(&result["peeks"], peeks, "{result:?}");
    assert_eq!(result["tickets"], "3200", "one ticket per node and round");
    assert_only_restarted(f, killed);
}

/// The same, the killed nodes' windows restored from their checkpoints.
fn assert_exact(f: &Finished, killed: &[u16]) {
    assert_same_answers(f, killed);
    for v in killed {
        assert!(
            f.has(&format!("node {v}: window 0 restored from the checkpoint")),
            "node {v}'s window came back from its image:\n{}",
            f.lines.join("\n")
        );
    }
}

#[test]
fn a_node_sigkilled_mid_run_gets_back_every_accumulate_into_its_part() {
    let _one = support::one_at_a_time();
    let mut run = launch(&[]);
    kill_mid_run(&mut run, &[2]);
    assert_exact(&run.finish(), &[2]);
}

#[test]
fn two_nodes_sigkilled_together_with_rank_0_read_again_what_they_read_before() {
    let _one = support::one_at_a_time();
    // Node 0 hands out the tickets and reports the peeks: its re-executed `main` gets
    // its tickets and peeks back from the answers node 1 kept, while node 2's part gets
    // back the accumulates applied to it after its checkpoint.
    let mut run = launch(&[]);
    kill_mid_run(&mut run, &[0, 2]);
    assert_exact(&run.finish(), &[0, 2]);
}

#[test]
fn a_target_killed_while_a_get_crosses_its_checkpoint_answers_it_again() {
    let _one = support::one_at_a_time();
    // Node 1 holds node 0's 100th get across its next checkpoint, applies it after the
    // commit and dies before the answer leaves: node 0 still waits for it, and node 1's
    // image does not have it. Over QUIC, as between hosts: every get takes the message
    // path (in shared memory the gate keeps gets off a checkpoint's cut).
    let run = launch(&[
        ("LAZARUS_FAILPOINT", "window-get:1:100"),
        ("LAZARUS_TRANSPORT", "quic"),
    ]);
    let f = run.finish();
    assert!(
        f.has("failpoint: node 1 answered the held get after checkpoint"),
        "{}",
        f.lines.join("\n")
    );
    assert_exact(&f, &[1]);
}

#[test]
fn an_origin_killed_inside_a_targets_gate_holds_up_none_of_its_checkpoints() {
    let _one = support::one_at_a_time();
    // Node 1 dies in the middle of its 50th direct get, a peek at node 2's part through
    // shared memory: its counter at node 2's gate stays raised. Its next incarnation
    // joins 1.5 s later, so nothing of it enters node 2's gate meanwhile: node 2 must
    // clear the dead incarnation's counter itself when it hears of the death, or its
    // checkpoints, which wait for the gate to drain, fail until then.
    let run = launch(&[(
        "LAZARUS_FAILPOINT",
        "window-direct:1:50,slow-start:1:1:1500",
    )]);
    let f = run.finish();
    let at = |needle: &str| {
        f.lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` line:\n{}", f.lines.join("\n")))
    };
    let died = at("failpoint: node 1 SIGKILL inside node 2's window gate");
    let back = at("failpoint: node 1 incarnation 1 joins now");
    assert!(
        f.lines[died..back]
            .iter()
            .any(|l| l.contains("node 2: checkpoint committed")),
        "node 2 committed no checkpoint while node 1 was away:\n{}",
        f.lines.join("\n")
    );
    assert!(
        !f.has("node 2: checkpoint-failed reason=window_gate"),
        "node 2's gate waited for the dead origin:\n{}",
        f.lines.join("\n")
    );
    // It may die before its first checkpoint: its window then starts again empty.
    assert_same_answers(&f, &[1]);
}

/// `jacobi2d --halo put`: 10,000 steps, each two puts of a 256-value row into the
/// neighbours' parts and a fence (about 3 s with recovery on).
const JACOBI_PUT: &[&str] = &["--n", "256", "--iters", "10000", "--halo", "put"];

#[test]
fn a_node_of_jacobi2d_with_put_halos_sigkilled_mid_run_ends_bit_identical_to_message_halos() {
    let _one = support::one_at_a_time();
    // The failure-free answer comes from the other data path: tile actors exchanging
    // halos as messages, recovery off.
    let (_, expected) = support::verified_run(
        std::process::Command::new(support::bin("lazarus"))
            .args(["run", "-n", "4", "--"])
            .arg(support::bin("jacobi2d"))
            .args(&JACOBI_PUT[..4]),
    );
    let mut run = Launched::spawn(four_nodes_recovering("jacobi2d", JACOBI_PUT), 4);
    kill_at_work(&mut run, &[2], |v| {
        format!("jacobi2d: node {v}: steps started")
    });
    let f = run.finish();
    let result = f.verified();
    assert_eq!(result["halo"], "put");
    assert_eq!(result["checksum"], expected["checksum"], "{result:?}");
    assert_eq!(result["sum"], expected["sum"], "{result:?}");
    assert_only_restarted(&f, &[2]);
    assert!(
        f.has("node 2: window 0 restored from the checkpoint"),
        "node 2's halo window came back from its image:\n{}",
        f.lines.join("\n")
    );
}
