//! The README's main command, `lazarus demo`: a failure-free jacobi2d run on 4 nodes, then
//! the same run with recovery on while a node is SIGKILLed mid-run. It must narrate the
//! recovery as it happens and end with the verdict that both answers are identical.

mod support;

use std::process::Command;
use support::bin;

#[test]
fn the_demo_kills_a_node_narrates_its_recovery_and_ends_with_the_failure_free_answer() {
    // A smaller grid than the default and a kill early in the run (at a fifth of its
    // 2.5-3.5 s, when the killed node may not have checkpointed yet: the demo then waits
    // for its first checkpoint), so that several checkpoints follow the kill.
    let out = support::output(Command::new(bin("lazarus")).args([
        "demo",
        "--n",
        "256",
        "--iters",
        "20000",
        "--kill-at",
        "0.2",
    ]))
    .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shown = || format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the demo failed:\n{}", shown());
    // The timeline, in the order a user sees it (restore and replay end concurrently):
    // the killed node restores a checkpoint, not the beginning.
    let steps = [
        "node 2: checkpoint committed",
        "node 2: SIGKILL (pid",
        "node 2: died (was killed by SIGKILL)",
        "node 2: restarted node loaded its checkpoint source=",
        "IDENTICAL: the killed node was restored and replayed",
    ];
    for concurrent in [
        "node 2: actors restored, node resumed",
        "node 2: every peer answered: replay complete",
    ] {
        assert!(
            stdout.contains(concurrent),
            "no \"{concurrent}\":\n{}",
            shown()
        );
    }
    let mut from = 0;
    for step in steps {
        let at = stdout[from..]
            .find(step)
            .unwrap_or_else(|| panic!("no \"{step}\" after the earlier steps:\n{}", shown()));
        from += at + step.len();
    }
    assert!(
        !stdout.contains("loaded its checkpoint source=beginning"),
        "the killed node had a checkpoint to restore:\n{}",
        shown()
    );
    // The verdict's two checksums are the same string.
    let checksum = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no \"{prefix}\" line:\n{}", shown()))
            .to_string()
    };
    assert_eq!(
        checksum("failure-free checksum: "),
        checksum("with a SIGKILL:        ")
    );
    assert!(
        stdout.contains(", 0 differed"),
        "no regenerated message differed:\n{}",
        shown()
    );
}
