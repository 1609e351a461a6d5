//! One-sided windows between nodes: puts, gets, accumulates and fetch-and-ops complete at
//! the fence, bad operations are refused before they touch memory, and the `histogram`
//! app's totals check out under `lazarus run`.

mod support;

use lazarus::{ReduceOp, WindowError};
use std::collections::HashMap;
use std::process::Command;
use support::bin;

#[test]
fn operations_of_an_epoch_are_complete_on_every_node_after_the_fence() {
    let (a, b) = support::in_process::two_nodes("windows-epoch", false);
    let wa = a.window::<u64>(8).unwrap();
    let other = std::thread::spawn(move || {
        let wb = b.window::<u64>(8).unwrap();
        // Node 1 puts into node 0, accumulates into both and takes a ticket from node 0.
        wb.put(0, 4, &[40, 41]).unwrap();
        wb.accumulate(0, 0, &[5], ReduceOp::Sum).unwrap();
        wb.accumulate(1, 0, &[5], ReduceOp::Sum).unwrap();
        let ticket = wb.fetch_and_op(0, 7, 1, ReduceOp::Sum).unwrap();
        wb.fence().unwrap();
        // After the fence node 0's puts of the epoch are here.
        let mine = wb.read().unwrap();
        // Epoch 1: read node 0's part (written in epoch 0), nothing writes it now.
        let theirs = wb.get(0, 0, 8).unwrap();
        wb.fence().unwrap();
        (ticket, mine, theirs, b)
    });
    wa.put(1, 2, &[20, 21, 22]).unwrap();
    wa.accumulate(0, 0, &[7], ReduceOp::Sum).unwrap();
    wa.accumulate(1, 0, &[7], ReduceOp::Sum).unwrap();
    let ticket = wa.fetch_and_op(0, 7, 1, ReduceOp::Sum).unwrap();
    wa.fence().unwrap();
    let mine = wa.read().unwrap();
    wa.fence().unwrap();
    let (their_ticket, theirs, read_of_mine, b) = other.join().unwrap();
    assert_eq!(mine, [12, 0, 0, 0, 40, 41, 0, 2], "node 0 after the fence");
    assert_eq!(
        theirs,
        [12, 0, 20, 21, 22, 0, 0, 0],
        "node 1 after the fence"
    );
    assert_eq!(
        read_of_mine, mine,
        "a get of the next epoch reads the fenced values"
    );
    let mut tickets = [ticket, their_ticket];
    tickets.sort();
    assert_eq!(tickets, [0, 1], "each fetch-and-op saw the other's or none");
    drop((wa, a, b));
}

#[test]
fn bad_operations_are_refused_before_they_touch_memory() {
    let (a, b) = support::in_process::two_nodes("windows-refused", false);
    let wa = a.window::<i32>(4).unwrap();
    let other = std::thread::spawn(move || {
        let wb = b.window::<i32>(4).unwrap();
        wb.fence().unwrap();
        (wb.read().unwrap(), b)
    });
    let refused = |r: Result<(), WindowError>| match r {
        Err(WindowError::Refused(e)) => e.to_string(),
        other => panic!("not refused: {other:?}"),
    };
    let out_of_range = refused(wa.put(1, 3, &[1, 2]));
    assert!(
        out_of_range.contains("outside node 1's part"),
        "{out_of_range}"
    );
    let no_node = refused(wa.put(9, 0, &[1]));
    assert!(no_node.contains("not a member"), "{no_node}");
    assert!(matches!(
        wa.accumulate(0, 0, &[1], ReduceOp::BitXor),
        Ok(())
    ));
    let local = refused(wa.write(4, &[1]));
    assert!(local.contains("outside"), "{local}");
    // The window keeps working: the refused operations were never counted.
    wa.put(1, 0, &[9]).unwrap();
    wa.fence().unwrap();
    let (theirs, b) = other.join().unwrap();
    assert_eq!(theirs, [9, 0, 0, 0]);
    assert_eq!(wa.read().unwrap(), [1, 0, 0, 0]);
    drop((a, b));
}

#[test]
fn with_recovery_on_a_call_from_another_thread_than_mains_is_refused_with_the_reason() {
    // A restarted `main` replays its window calls in its order; another thread's calls
    // would interleave with them differently in every run.
    let (a, b) = support::in_process::two_nodes("windows-threads", true);
    let wa = a.window::<u64>(4).unwrap();
    let other = std::thread::spawn(move || {
        let wb = b.window::<u64>(4).unwrap();
        (wb.fence(), b)
    });
    let helper = wa.clone();
    let refused = std::thread::spawn(move || helper.put(1, 0, &[1]))
        .join()
        .unwrap();
    match refused {
        Err(WindowError::Unsupported(why)) => assert!(why.contains("thread of main"), "{why}"),
        other => panic!("{other:?}"),
    }
    // `main` itself goes on.
    wa.put(1, 0, &[2]).unwrap();
    wa.fence().unwrap();
    let (fenced, b) = other.join().unwrap();
    fenced.unwrap();
    drop((a, b));
    let _ = std::fs::remove_dir_all(support::in_process::checkpoint_dir("windows-threads", true));
}

#[test]
fn with_recovery_on_main_writes_and_reads_its_own_part_in_epochs() {
    // `main`'s local reads and writes are operations on its own part with recovery on
    // (a restarted `main` reads again what it read): the same results as without.
    for recovery in [false, true] {
        let (a, b) = support::in_process::two_nodes("windows-recovery", recovery);
        let wa = a.window::<u32>(4).unwrap();
        let other = std::thread::spawn(move || {
            let wb = b.window::<u32>(4).unwrap();
            wb.put(0, 2, &[7, 8]).unwrap();
            wb.fence().unwrap();
            (wb.fence(), b)
        });
        wa.write(0, &[1, 2]).unwrap();
        wa.fence().unwrap();
        assert_eq!(wa.read().unwrap(), [1, 2, 7, 8], "recovery {recovery}");
        wa.write(3, &[9]).unwrap();
        wa.fence().unwrap();
        assert_eq!(wa.read().unwrap(), [1, 2, 7, 9], "recovery {recovery}");
        let (fenced, b) = other.join().unwrap();
        fenced.unwrap();
        drop((a, b));
        let _ = std::fs::remove_dir_all(support::in_process::checkpoint_dir(
            "windows-recovery",
            recovery,
        ));
    }
}

#[test]
fn epochs_of_puts_through_shared_memory_complete_while_both_nodes_checkpoint() {
    // With recovery on, node 0 first reads node 1's part with many small gets (their
    // records fill node 1's records ring: later ones take the message path until node 1
    // reads the ring), then puts a block into it every epoch while both fence and both
    // nodes checkpoint every 20 ms: each checkpoint closes its node's gate, so some puts
    // find it closed and take the message path. Every epoch completes, and node 1's part
    // ends with the last epoch's block. `LAZARUS_TEST_EPOCHS` and
    // `LAZARUS_TEST_CHECKPOINT_MS` make it a longer stress run.
    let epochs = support::env_u64("LAZARUS_TEST_EPOCHS").unwrap_or(1500);
    let every = support::env_u64("LAZARUS_TEST_CHECKPOINT_MS").unwrap_or(20);
    const LEN: usize = 4096;
    let (a, b) = support::in_process::two_nodes_checkpointing("windows-gate", every);
    let wa = a.window::<u64>(LEN).unwrap();
    let other = std::thread::spawn(move || {
        let wb = b.window::<u64>(LEN).unwrap();
        for _ in 0..epochs {
            wb.fence().unwrap();
        }
        (wb.read().unwrap(), b)
    });
    for _ in 0..60_000 {
        assert_eq!(wa.get(1, 0, 1).unwrap(), [0]);
    }
    for e in 0..epochs {
        wa.put(1, 0, &vec![e; LEN]).unwrap();
        wa.fence().unwrap();
    }
    let (theirs, b) = other.join().unwrap();
    assert!(
        theirs.iter().all(|v| *v == epochs - 1),
        "{:?}",
        &theirs[..4]
    );
    drop((wa, a, b));
    let _ = std::fs::remove_dir_all(support::in_process::checkpoint_dir("windows-gate", true));
}

/// Runs `histogram` on `nodes` nodes; its output and RESULT.
fn histogram(nodes: &str, transport: &str) -> (String, HashMap<String, String>) {
    support::verified_run(
        Command::new(bin("lazarus"))
            .args(["run", "-n", nodes, "--"])
            .arg(bin("histogram"))
            .args(["--keys", "50000", "--rounds", "6", "--bins", "1000"])
            .env("LAZARUS_TRANSPORT", transport),
    )
}

/// The `direct=` count of each node's `window 0 closed` timeline line.
fn direct_counts(output: &str) -> Vec<u64> {
    output
        .lines()
        .filter(|l| l.contains("window 0 closed"))
        .filter_map(|l| {
            l.split("direct=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn a_histogram_built_with_accumulates_counts_every_key_once() {
    // Segments of other processes than this test binary's (whose in-process tests make
    // windows of their own meanwhile).
    let others = || {
        let mine = format!("lazarus-{}-", std::process::id());
        let mut all = support::shm_segments();
        all.retain(|n| !n.starts_with(&mine));
        all
    };
    let before = others();
    let (out, three) = histogram("3", "auto");
    assert_eq!(
        others(),
        before,
        "the window's segments are removed when the nodes leave"
    );
    assert_eq!(three["keys"], (50_000 * 6 * 3).to_string());
    assert_eq!(three["tickets"], "18");
    // Its gets (the peeks, node 0's reads of every part at the end) go through shared
    // memory unless their target is still in its fence (then over messages): of about
    // twenty, some went direct.
    let direct = direct_counts(&out);
    assert_eq!(direct.len(), 3, "{out}");
    assert!(direct.iter().sum::<u64>() >= 1, "{out}");
    let (out, quic) = histogram("3", "quic");
    assert_eq!(
        quic["checksum"], three["checksum"],
        "the same counts over QUIC"
    );
    assert_eq!(quic["peeks"], three["peeks"], "the same peeks over QUIC");
    assert_eq!(direct_counts(&out), vec![0, 0, 0], "{out}");
}

#[test]
fn a_frame_its_target_refuses_fails_both_nodes_waits_with_the_reason() {
    // The nodes disagree on the window's element type: a contract broken by the app.
    let (a, b) = support::in_process::two_nodes("windows-mismatch", false);
    let wa = a.window::<u64>(4).unwrap();
    let other = std::thread::spawn(move || {
        let wb = b.window::<f64>(4).unwrap();
        (wb.fence(), b)
    });
    wa.put(1, 0, &[1]).unwrap();
    // The origin's fence may complete before the refusal comes back (it waits for what
    // others issued to it, not for its own operations); its next call fails.
    let started = std::time::Instant::now();
    let mine = loop {
        match wa.fence().and_then(|()| wa.put(1, 0, &[1])) {
            Err(e) => break e,
            Ok(()) => assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the origin never heard of the refusal"
            ),
        }
    };
    let (theirs, b) = other.join().unwrap();
    for (who, result) in [("origin", Err(mine)), ("target", theirs)] {
        match result {
            Err(WindowError::Failed { reason, .. }) => {
                assert!(reason.contains("the window holds f64"), "{who}: {reason}")
            }
            other => panic!("{who}: {other:?}"),
        }
    }
    drop((a, b));
}
