//! What waits for determinants, with real processes: `pingpong --busy-neighbour` on 2
//! nodes under `lazarus run --ft on`. The pong (deterministic) shares node 1 with an
//! order-sensitive chatter whose every delivery is a determinant, and whose answers wait
//! for two loggers' acknowledgements. The pong's answers depend on nothing of it, so they
//! must leave at once; only the chatter's wait.

mod support;

use std::collections::HashMap;
use std::process::Command;
use support::bin;
use support::launched::{Finished, Launched};

const ITERS: u64 = 1500;

fn busy_neighbour(gate: &str) -> Finished {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "2", "--ft", "on", "--checkpoint-every", "1s"])
        .arg("--")
        .arg(bin("pingpong"))
        .args(["--min-size", "8", "--max-size", "8", "--busy-neighbour"])
        .args(["--iters", &ITERS.to_string()])
        .env("LAZARUS_SEND_GATE", gate);
    Launched::spawn(cmd, 2).finish()
}

/// Node 1's held frames and the chatter's answers.
fn held_and_chatter(f: &Finished) -> (u64, u64) {
    let finals: HashMap<u16, HashMap<String, u64>> = f.finals();
    let held = finals[&1]["gated_sends"];
    let chatter: u64 = f.verified()["chatter_msgs"]
        .parse()
        .expect("chatter_msgs is a number");
    (held, chatter)
}

#[test]
fn a_deterministic_actors_answers_never_wait_for_its_order_sensitive_neighbours_determinants() {
    let f = busy_neighbour("actor");
    let (held, chatter) = held_and_chatter(&f);
    assert!(chatter > 0, "the chatter ran");
    // Every held frame is one of the chatter's answers (each may be held once), except
    // a few that depend on everything: `main`'s frames, and the pong's first answer (it
    // was spawned by `main`, so it starts depending on every determinant so far).
    assert!(
        held <= chatter + 4,
        "{held} frames held for {chatter} chatter answers: the pong's answers waited"
    );
    // And the gate is not simply open: the chatter's answers, which do depend on its
    // determinants, waited for their acknowledgements.
    assert!(
        held >= chatter / 2,
        "{held} frames held for {chatter} chatter answers: answers left before their \
         determinants were logged"
    );
}

#[test]
fn under_the_whole_node_rule_the_same_answers_wait() {
    // The baseline the per-actor rule improves on, so the test above can fail: with every
    // frame of the node behind its determinants, the pong's answers are held too.
    let f = busy_neighbour("set");
    let (held, chatter) = held_and_chatter(&f);
    // A ball is held only when a chatter's determinant is unacknowledged as it leaves,
    // a matter of scheduling; a quarter of them is still far from the 4 above.
    assert!(
        held > chatter + ITERS / 4,
        "{held} frames held for {chatter} chatter answers and {ITERS} balls"
    );
}
