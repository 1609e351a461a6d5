//! Logger nodes (`lazarus run --log-quota Q --loggers N`): what a node's sender-based log
//! holds over three quarters of its quota goes, in blocks, to dedicated logger processes;
//! a node that must resend such messages to a peer that rolled back fetches them from
//! there; a logger that dies costs checkpoints, not answers.
//!
//! The workload is the worst case for a log: 1 MiB ping-pong between two nodes, with no
//! periodic checkpoints (`--checkpoint-every 0`), so nothing but the loggers bounds the
//! nodes' memory.

use crate::support;

use std::process::Command;
use support::launched::{assert_only_restarted, Finished, Launched};
use support::{bin, pingpong_mib_args, NO_PERIOD_16MIB_QUOTA};

const MIB: u64 = 1 << 20;

fn pingpong(round_trips: u64, ft: bool, loggers: u16) -> Launched {
    pingpong_with_copies(round_trips, ft, loggers, 1)
}

/// With `copies` loggers keeping each block (`--logger-copies`).
fn pingpong_with_copies(round_trips: u64, ft: bool, loggers: u16, copies: u16) -> Launched {
    pingpong_with_failpoint(round_trips, ft, loggers, copies, None)
}

/// [`pingpong_with_copies`] with `LAZARUS_FAILPOINT` set to `failpoint`.
fn pingpong_with_failpoint(
    round_trips: u64,
    ft: bool,
    loggers: u16,
    copies: u16,
    failpoint: Option<&str>,
) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    if let Some(point) = failpoint {
        cmd.env("LAZARUS_FAILPOINT", point);
    }
    cmd.args(["run", "-n", "2"]);
    if ft {
        cmd.args(NO_PERIOD_16MIB_QUOTA);
        cmd.args(["--loggers", &loggers.to_string()]);
        cmd.args(["--logger-copies", &copies.to_string()]);
        // Every logger keeps a copy of everything over the quota (with the quota's
        // backpressure, that is nearly all of the 1 MiB messages): room for it, so that
        // no logger is full and no node falls back to checkpoint requests.
        cmd.args(["--logger-memory", "2GiB"]);
    }
    cmd.arg("--")
        .arg(bin("pingpong"))
        .args(pingpong_mib_args(round_trips));
    Launched::spawn(cmd, 2)
}

fn total(f: &Finished, rank: u16, key: &str) -> u64 {
    f.finals()[&rank][key]
}

#[test]
fn a_logger_node_keeps_what_is_over_the_quota_and_the_answer_is_unchanged() {
    let _one = support::one_at_a_time();
    const ROUND_TRIPS: u64 = 300;
    let expected = pingpong(ROUND_TRIPS, false, 0).finish().checksum();
    let f = pingpong(ROUND_TRIPS, true, 1).finish();
    assert_eq!(
        f.checksum(),
        expected,
        "the same answer as without recovery"
    );
    for rank in 0..2 {
        let peak = total(&f, rank, "log_peak_bytes");
        let dumped = total(&f, rank, "bytes_dumped");
        eprintln!(
            "node {rank}: log peak {} MiB in memory, {} MiB dumped in {} blocks",
            peak / MIB,
            dumped / MIB,
            total(&f, rank, "blocks_dumped")
        );
        assert_eq!(total(&f, rank, "checkpoints"), 0, "no checkpoint at all");
        // Without loggers (or checkpoints) the log would keep all 300 MiB it sent in
        // memory. The dump ships one 4 MiB block at a time (as in the paper); a sender
        // that gets ahead of it waits (the quota's backpressure), so the log stays near
        // its quota (before the backpressure: 40-50 MiB over it on this 2-core machine).
        assert!(
            dumped >= 200 * MIB,
            "node {rank} dumped what was over its threshold: {dumped} bytes"
        );
        assert!(
            peak < 48 * MIB,
            "node {rank}: {} MiB in memory with a 16 MiB quota",
            peak / MIB
        );
        assert_eq!(
            total(&f, rank, "checkpoint_requests_sent"),
            0,
            "the logger took the excess: no checkpoint was asked for"
        );
    }
    assert!(
        f.has("logger 0 blocks="),
        "the logger reported what it holds; output:\n{}",
        f.lines.join("\n")
    );
}

#[test]
fn many_small_messages_keep_the_log_at_its_quota_by_checkpoint_requests_without_holding_senders_back(
) {
    let _one = support::one_at_a_time();
    // 8-byte payloads: the entries' dependency vectors, which no dump can move, soon hold
    // more than the 64 KiB quota. Holding each sender back until the dump brings the log
    // under its quota would stall every send (it cannot); instead the vectors' share is
    // released by checkpoint requests.
    let run = |ft: bool| {
        let mut cmd = Command::new(bin("lazarus"));
        cmd.args(["run", "-n", "2"]);
        if ft {
            cmd.args([
                "--ft",
                "on",
                "--checkpoint-every",
                "0",
                "--log-quota",
                "64KiB",
            ]);
            cmd.args(["--loggers", "1"]);
        }
        cmd.arg("--").arg(bin("pingpong"));
        cmd.args(["--min-size", "8", "--max-size", "8", "--iters", "30000"]);
        Launched::spawn(cmd, 2).finish()
    };
    let expected = run(false).checksum();
    let started = std::time::Instant::now();
    let f = run(true);
    let took = started.elapsed();
    assert_eq!(f.checksum(), expected);
    for rank in 0..2 {
        let peak = total(&f, rank, "log_peak_bytes");
        eprintln!(
            "node {rank}: log peak {peak} bytes, {} checkpoint requests, {} blocks dumped",
            total(&f, rank, "checkpoint_requests_sent"),
            total(&f, rank, "blocks_dumped")
        );
        assert!(
            total(&f, rank, "checkpoint_requests_sent") > 0,
            "node {rank} asked its peer to checkpoint: {:?}",
            f.finals()[&rank]
        );
        // 30,000 entries of about 10 bytes of vector each would be 300 KB.
        assert!(peak < 256 << 10, "node {rank}: log peak {peak} bytes");
        // Each block carries at least an eighth of the quota (8 KiB) of the ~300 KB of
        // payloads; a dump of the few bytes that came during the last store, block after
        // block, would be hundreds (CI at 02473bf: 663).
        assert!(
            total(&f, rank, "blocks_dumped") < 64,
            "node {rank} dumped tiny blocks: {:?}",
            f.finals()[&rank]
        );
    }
    // Held back 100 ms a send, the run would take most of an hour; it takes 2-3 s.
    assert!(took.as_secs() < 60, "the run took {took:?}");
}

#[test]
fn a_node_killed_mid_run_is_resent_its_messages_from_the_logger() {
    let _one = support::one_at_a_time();
    const ROUND_TRIPS: u64 = 600;
    let expected = pingpong(ROUND_TRIPS, false, 0).finish().checksum();
    let mut run = pingpong(ROUND_TRIPS, true, 1);
    run.wait_started();
    // Node 1 has no checkpoint: it restarts from the beginning, and everything node 0
    // sent it, most of it at the logger by then, is resent.
    run.wait_for_logger_blocks(0, 20);
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected);
    assert_only_restarted(&f, &[1]);
    assert!(
        total(&f, 0, "blocks_fetched") > 0,
        "node 0 fetched its dumped messages back: {:?}",
        f.finals()[&0]
    );
    assert!(total(&f, 0, "replayed") > 0);
    assert_eq!(total(&f, 0, "resends_lost"), 0);
}

#[test]
fn a_logger_killed_mid_run_is_restarted_and_costs_checkpoints_not_the_answer() {
    let _one = support::one_at_a_time();
    const ROUND_TRIPS: u64 = 1000;
    let expected = pingpong(ROUND_TRIPS, false, 0).finish().checksum();
    let mut run = pingpong(ROUND_TRIPS, true, 1);
    run.wait_started();
    run.wait_for_logger_blocks(0, 1);
    let first = run.kill_logger(0);
    // The launcher starts it again, empty, at its address. The nodes find it restarted
    // at their next dump and ask each other to checkpoint, which releases what only the
    // dead logger held; a node killed after that checkpoint restores it, and what it
    // needs again is in its peer's memory or at the new logger.
    run.wait_for("the logger's restart", |l| {
        l.starts_with("logger 0 pid ") && l.ends_with("incarnation 1")
    });
    run.wait_for("node 1's checkpoint after the loss", |l| {
        l.contains("node 1: checkpoint committed")
    });
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected);
    assert_only_restarted(&f, &[1]);
    let output = f.lines.join("\n");
    assert!(
        f.has("logger-restarted") || f.has("logger-lost"),
        "a node reported the loss; output:\n{output}"
    );
    assert!(
        f.has(&format!("logger 0 pid {first}")),
        "the first logger's pid"
    );
    // The restarted logger took blocks again (its own count starts from zero).
    let restart = f
        .lines
        .iter()
        .position(|l| l.starts_with("logger 0 pid ") && l.ends_with("incarnation 1"))
        .expect("restart line");
    let stored_after: u64 = f.lines[restart..]
        .iter()
        .filter_map(|l| {
            l.split(" stored=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0);
    assert!(
        stored_after > 0,
        "the restarted logger stored blocks; output:\n{output}"
    );
    assert_eq!(total(&f, 0, "resends_lost"), 0);
}

/// The failure-free checksum of 600 round trips, and a run of them with two loggers
/// keeping every block, logger 0 SIGKILLed once it holds 10 blocks.
fn two_copies_and_logger_0_killed() -> (String, Launched) {
    const ROUND_TRIPS: u64 = 600;
    let expected = pingpong(ROUND_TRIPS, false, 0).finish().checksum();
    let mut run = pingpong_with_copies(ROUND_TRIPS, true, 2, 2);
    run.wait_started();
    run.wait_for_logger_blocks(0, 10);
    run.kill_logger(0);
    (expected, run)
}

#[test]
fn with_two_copies_of_every_block_a_lost_logger_loses_nothing() {
    let _one = support::one_at_a_time();
    let (expected, mut run) = two_copies_and_logger_0_killed();
    // No checkpoint at all: node 1 restarts from the beginning and node 0 resends
    // everything, the blocks logger 0 kept from their copies at logger 1.
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected);
    assert_only_restarted(&f, &[1]);
    let node0 = &f.finals()[&0];
    assert!(node0["blocks_fetched"] > 0, "{node0:?}");
    assert_eq!(node0["resends_lost"], 0);
    assert_eq!(node0["checkpoints"], 0);
    assert_eq!(
        node0["checkpoint_requests_sent"],
        0,
        "every block had a copy: nothing to release in a hurry; output:\n{}",
        f.lines.join("\n")
    );
}

#[test]
fn a_restarted_logger_gets_its_copies_back_so_a_second_loss_loses_nothing() {
    let _one = support::one_at_a_time();
    let (expected, mut run) = two_copies_and_logger_0_killed();
    // Each node copies the blocks logger 0 lost back to its restarted process, from
    // logger 1.
    for rank in 0..2 {
        run.wait_for_seen(&format!("node {rank}'s refill of logger 0"), |l| {
            l.contains(&format!("node {rank}: logger-refilled"))
        });
    }
    // Then logger 1 dies too, and node 1: node 0 resends everything, what logger 1
    // kept from logger 0.
    let f = second_logger_loss_loses_nothing(run, &expected);
    let node0 = &f.finals()[&0];
    assert!(node0["blocks_refilled"] > 0, "{node0:?}");
    assert!(node0["blocks_fetched"] > 0, "{node0:?}");
}

/// Kills logger 1 and node 1 (which has no checkpoint at all): node 0 resends
/// everything node 1 was sent, from the blocks' other copies, with none lost and no
/// checkpoint asked for, and the answer is `expected`.
fn second_logger_loss_loses_nothing(mut run: Launched, expected: &str) -> Finished {
    run.kill_logger(1);
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected);
    assert_only_restarted(&f, &[1]);
    let node0 = &f.finals()[&0];
    assert_eq!(node0["resends_lost"], 0, "{node0:?}");
    assert_eq!(
        node0["checkpoint_requests_sent"], 0,
        "every block was at two loggers again when the second one died: {node0:?}"
    );
    f
}

#[test]
fn a_restarted_logger_without_room_has_its_lost_blocks_copied_to_a_third_logger() {
    let _one = support::one_at_a_time();
    const ROUND_TRIPS: u64 = 600;
    let expected = pingpong(ROUND_TRIPS, false, 0).finish().checksum();
    // Three loggers, each block at two of them; logger 0's second process declines
    // every block, as a logger that filled up with new blocks before the refill would.
    let mut run = pingpong_with_failpoint(ROUND_TRIPS, true, 3, 2, Some("logger-full:0:1"));
    run.wait_started();
    run.wait_for_logger_blocks(0, 10);
    run.kill_logger(0);
    // Node 0 (its blocks go to loggers 0 and 1 first) copies what logger 0 lost from
    // logger 1 to logger 2.
    run.wait_for_seen("node 0's refill of logger 0", |l| {
        l.contains("node 0: logger-refilled")
    });
    // Then logger 1 dies too, and node 1: node 0 resends everything, from logger 2.
    let f = second_logger_loss_loses_nothing(run, &expected);
    let node0 = &f.finals()[&0];
    assert!(node0["blocks_relocated"] > 0, "{node0:?}");
    assert!(
        f.has("failpoint: logger 0 declines every block"),
        "the restarted logger was full; output:\n{}",
        f.lines.join("\n")
    );
}
