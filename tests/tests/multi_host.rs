//! Nodes on separate hosts: `lazarus run --hosts` over the network namespaces that
//! `scripts/netns-setup.sh` creates (`lzh0`..`lzh4` at 10.77.0.1-5, each with a network of
//! its own), every host with its own checkpoint directory, as with host-local disks. A
//! node SIGKILLed by PID from outside is restarted on the spare host, at another address,
//! from the copy of its checkpoint that its buddy keeps in memory (the spare host's disk
//! has none), and the answer is the failure-free one.
//!
//! Needs root; `scripts/test.sh` runs the setup and sets `LAZARUS_TEST_NETNS=1`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::launched::{assert_only_restarted, assert_peers_reached_replacement, Launched};
use support::{bin, pingpong_mib_args, NO_PERIOD_16MIB_QUOTA};

fn netns_available() -> bool {
    if std::env::var("LAZARUS_TEST_NETNS").as_deref() == Ok("1") {
        return true;
    }
    // scripts/test.sh runs everything: there a missing set-up is a failure, not a skip.
    assert!(
        std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
        "LAZARUS_TEST_REQUIRE_ALL=1 but LAZARUS_TEST_NETNS is not 1"
    );
    eprintln!("skipping: run scripts/netns-setup.sh as root and set LAZARUS_TEST_NETNS=1 (scripts/test.sh does both)");
    false
}

const HOSTS: &str = "lzh0=10.77.0.1,lzh1=10.77.0.2,lzh2=10.77.0.3,lzh3=10.77.0.4";
const SPARE_HOST: &str = "lzh4=10.77.0.5";
/// About 3 s of work with recovery on: kills after the second checkpoint land mid-run.
const ITERS: &str = "20000";

/// jacobi2d on the four hosts, one node each; with recovery on, each host keeps its
/// checkpoints under `dir/HOST` and `lzh4` is the spare.
fn launch(ft: bool, dir: &Path) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4", "--hosts", HOSTS]).args([
        "--remote",
        "ip netns exec {host}",
        "--cores-per-node",
        "1",
    ]);
    if ft {
        cmd.args(["--ft", "on", "--checkpoint-every", "500ms"])
            .args(["--spare-hosts", SPARE_HOST, "--checkpoint-dir"])
            .arg(dir.join("{host}"));
    }
    cmd.arg("--")
        .arg(bin("jacobi2d"))
        .args(["--n", "256", "--iters", ITERS, "--check", "bounds"])
        // Four single-core nodes share this machine's two cores.
        .env("LAZARUS_IDLE_SPIN_US", "0");
    Launched::spawn(cmd, 4)
}

fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("lazarus-multi-host-{}", std::process::id()))
}

#[test]
fn a_node_killed_on_its_host_restarts_on_the_spare_host_from_its_buddys_copy_and_the_answer_is_exact(
) {
    if !netns_available() {
        return;
    }
    let dir = scratch();
    let expected = launch(false, &dir).finish().checksum();

    let mut run = launch(true, &dir);
    run.wait_started();
    run.wait_for("node 2's second checkpoint", |l| {
        l.contains("node 2: checkpoint committed id=2")
    });
    run.kill(2);
    let f = run.finish();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(f.checksum(), expected, "the answer is the failure-free one");
    assert!(
        f.has("node 2: died (was killed by SIGKILL), restarting as incarnation 1 on spare host lzh4 at 10.77.0.5:"),
        "node 2 was not restarted on the spare host"
    );
    assert!(
        f.has("node 2: restarted node loaded its checkpoint source=buddy:"),
        "the spare host's disk has no checkpoint of node 2: it must come from the buddy"
    );
    assert_peers_reached_replacement(&f, 2, "10.77.0.5:");
    assert_only_restarted(&f, &[2]);
}

/// 1 MiB ping-pong between nodes on `lzh0` and `lzh1` with recovery on, no periodic
/// checkpoint and a 16 MiB log quota, its excess going to a logger node on its own host,
/// `lzh2`.
fn pingpong_with_a_logger_host(ft: bool) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "2", "--hosts", "lzh0=10.77.0.1,lzh1=10.77.0.2"])
        .args(["--remote", "ip netns exec {host}", "--cores-per-node", "1"]);
    if ft {
        cmd.args(NO_PERIOD_16MIB_QUOTA).args([
            "--loggers",
            "1",
            "--logger-hosts",
            "lzh2=10.77.0.3",
        ]);
    }
    cmd.arg("--")
        .arg(bin("pingpong"))
        .args(pingpong_mib_args(600));
    Launched::spawn(cmd, 2)
}

#[test]
fn a_logger_node_on_its_own_host_serves_back_what_a_killed_nodes_peer_must_resend() {
    if !netns_available() {
        return;
    }
    let expected = pingpong_with_a_logger_host(false).finish().checksum();
    let mut run = pingpong_with_a_logger_host(true);
    run.wait_started();
    run.wait_for_logger_blocks(0, 10);
    run.kill(1);
    let f = run.finish();
    assert_eq!(f.checksum(), expected, "the answer is the failure-free one");
    assert!(
        f.has("logger 0 pid ") && f.has(" at 10.77.0.3:"),
        "the logger ran on lzh2; output:\n{}",
        f.lines.join("\n")
    );
    assert!(
        f.finals()[&0]["blocks_fetched"] > 0,
        "node 0 fetched its dumped messages back over the network: {:?}",
        f.finals()[&0]
    );
    assert_only_restarted(&f, &[1]);
}
