//! Nodes on one host move their frames through shared memory: `lazarus run` uses it by
//! default (`LAZARUS_TRANSPORT=auto`), `quic` forces the QUIC path, and both give the same
//! answer. A run leaves no segment behind in `/dev/shm`.

mod support;

use std::collections::HashMap;
use std::process::Command;
use support::{bin, shm_segments as segments};

/// Runs a 2-node ping-pong up to 1 MiB with `transport`; its output and RESULT.
fn pingpong(transport: &str) -> (String, HashMap<String, String>) {
    support::verified_run(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--"])
            .arg(bin("pingpong"))
            .args(["--max-size", "1048576", "--iters", "300"])
            .env("LAZARUS_TRANSPORT", transport),
    )
}

#[test]
fn nodes_of_one_host_use_shared_memory_by_default_quic_when_told_and_agree() {
    let _one = support::one_at_a_time();
    let before = segments();
    let (out, shm) = pingpong("auto");
    for rank in 0..2 {
        assert!(
            out.contains(&format!(
                "node {rank}: connected to every peer (how many over shared memory): \
                 peers=1 shared_memory=1"
            )),
            "node {rank} uses shared memory:\n{out}"
        );
    }
    let (out, quic) = pingpong("quic");
    assert!(
        out.contains("peers=1 shared_memory=0"),
        "LAZARUS_TRANSPORT=quic keeps QUIC:\n{out}"
    );
    assert_eq!(
        shm["checksum"], quic["checksum"],
        "same payloads either way"
    );
    assert_eq!(
        segments(),
        before,
        "every segment was unlinked once both nodes had mapped it"
    );
}

/// Runs a small ping-pong under `lazarus run -n 2` with `LAZARUS_TRANSPORT=transport`,
/// expecting it to fail: what the launcher and the nodes printed.
fn refused_with(transport: &str) -> String {
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--"])
            .arg(bin("pingpong"))
            .args(["--max-size", "8", "--iters", "10"])
            .env("LAZARUS_TRANSPORT", transport),
    )
    .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    all
}

#[test]
fn a_bad_transport_choice_is_refused_with_the_choices() {
    let all = refused_with("carrier-pigeon");
    assert!(
        all.contains("LAZARUS_TRANSPORT=carrier-pigeon: expected `auto`, `shm`, `rdma` or `quic`"),
        "{all}"
    );
}

#[test]
fn rdma_required_on_a_host_without_a_device_is_refused_with_the_reason() {
    // The test binaries are built with the `rdma` feature (tests/Cargo.toml); this host
    // has no RDMA device.
    let all = refused_with("rdma");
    assert!(
        all.contains("LAZARUS_TRANSPORT=rdma: no RDMA device"),
        "{all}"
    );
}
