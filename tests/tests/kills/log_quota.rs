//! The sender-based log's memory quota (`lazarus run --log-quota`): a node whose log
//! outgrows it asks the nodes it logged messages for to checkpoint early, so the log
//! stays near the quota however long the checkpoint period, and a node killed in such a
//! run restores a checkpoint that was taken on request.
//!
//! The workload is the worst case for a log: 1 MiB ping-pong between two nodes, every
//! message crossing nodes, with no periodic checkpoints at all (`--checkpoint-every 0`).

use crate::support;

use std::process::Command;
use support::launched::{assert_only_restarted, Finished, Launched};
use support::{bin, pingpong_mib_args};

const MIB: u64 = 1 << 20;
/// Round trips of 1 MiB each way: unreleased, each node's log would end at this many MiB.
const ROUND_TRIPS: u64 = 400;

fn pingpong(ft: bool, quota: Option<&str>) -> Launched {
    pingpong_for(ROUND_TRIPS, ft, quota)
}

fn pingpong_for(round_trips: u64, ft: bool, quota: Option<&str>) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "2"]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "0"]);
    }
    if let Some(q) = quota {
        cmd.args(["--log-quota", q]);
    }
    cmd.arg("--")
        .arg(bin("pingpong"))
        .args(pingpong_mib_args(round_trips));
    Launched::spawn(cmd, 2)
}

fn log_peak(f: &Finished, rank: u16) -> u64 {
    f.finals()[&rank]["log_peak_bytes"]
}

#[test]
fn without_a_quota_or_periodic_checkpoints_the_log_keeps_every_message() {
    let _one = support::one_at_a_time();
    let f = pingpong(true, None).finish();
    f.checksum();
    for rank in 0..2 {
        let finals = &f.finals()[&rank];
        assert_eq!(
            finals["checkpoints"], 0,
            "node {rank}: no checkpoint at all"
        );
        assert!(
            log_peak(&f, rank) >= ROUND_TRIPS * MIB,
            "node {rank} logged every message: peak {} bytes",
            log_peak(&f, rank)
        );
    }
}

#[test]
fn a_log_quota_keeps_each_log_near_it_through_requested_checkpoints() {
    let _one = support::one_at_a_time();
    let expected = pingpong(false, None).finish().checksum();
    // How far the log overshoots is what the node sends while its peer writes an image:
    // on this VM's disk, right after the other kill suites' writes, one run saw 4
    // checkpoints instead of 15-21 and a 185 MiB peak. The mechanism is what is tested
    // here, so the images go to memory (tmpfs) when the host has one.
    let dir = support::tmpfs_checkpoint_dir("log-quota");
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "2", "--ft", "on", "--checkpoint-every", "0"]);
    cmd.args(["--log-quota", "16MiB"]);
    if let Some(dir) = &dir {
        cmd.arg("--checkpoint-dir").arg(dir);
    }
    // The bound below was measured at QUIC's bandwidth. The overshoot is what the node
    // sends while its peer checkpoints, so it grows with the data path's bandwidth: over
    // shared memory (about 5x QUIC's here) one run peaked at 106 MiB.
    cmd.env("LAZARUS_TRANSPORT", "quic");
    cmd.arg("--")
        .arg(bin("pingpong"))
        .args(pingpong_mib_args(ROUND_TRIPS));
    let f = Launched::spawn(cmd, 2).finish();
    if let Some(dir) = &dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert_eq!(
        f.checksum(),
        expected,
        "the same answer as without recovery"
    );
    for rank in 0..2 {
        let finals = &f.finals()[&rank];
        eprintln!(
            "node {rank}: log peak {} MiB, {} checkpoints, {} requests sent",
            log_peak(&f, rank) / MIB,
            finals["checkpoints"],
            finals["checkpoint_requests_sent"]
        );
        assert!(
            finals["checkpoint_requests_sent"] >= 2 && finals["checkpoint_requests_received"] >= 2,
            "node {rank} asked and was asked for checkpoints: {finals:?}"
        );
        assert!(
            finals["checkpoints"] >= 2,
            "node {rank} checkpointed on request without any period: {finals:?}"
        );
        // The log outgrows its quota by what the node sends until its peer has
        // checkpointed (the peer's image holds its own log): 29-42 MiB in the runs
        // docs/recovery.md cites, at about 450 MB/s, on disk; 23-25 MiB on tmpfs.
        // Unreleased it would reach 400 MiB.
        let bound = if dir.is_some() { 64 * MIB } else { 160 * MIB };
        assert!(
            log_peak(&f, rank) < bound,
            "node {rank}: log peak {} MiB with a 16 MiB quota",
            log_peak(&f, rank) / MIB
        );
    }
}

#[test]
fn a_node_killed_under_a_log_quota_restores_a_requested_checkpoint_with_the_failure_free_answer() {
    let _one = support::one_at_a_time();
    // Long enough (2-4 s) for the kill to land mid-run.
    const LONG: u64 = 1500;
    let expected = pingpong_for(LONG, false, None).finish().checksum();
    let mut run = pingpong_for(LONG, true, Some("16MiB"));
    run.wait_started();
    // With no period, every checkpoint of node 1 is one that node 0 asked for.
    run.wait_for("node 1's second checkpoint", |l| {
        l.contains("node 1: checkpoint committed id=2")
    });
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected);
    assert!(
        f.lines.iter().any(
            |l| l.contains("node 1: restarted node loaded its checkpoint source=")
                && !l.contains("source=beginning")
        ),
        "node 1 restored a checkpoint, not the beginning; output:\n{}",
        f.lines.join("\n")
    );
    assert_only_restarted(&f, &[1]);
}
