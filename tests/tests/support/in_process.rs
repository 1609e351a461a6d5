//! Clusters of several nodes inside the test process, over loopback QUIC.

use lazarus::cluster::{ClusterSpec, Launcher};
use lazarus::recovery::layer::RecoveryConfig;
use lazarus::{Cluster, Node};
use std::net::UdpSocket;
use std::path::PathBuf;

/// Where the nodes of [`two_nodes`] started under `name` keep checkpoints and event
/// journals (remove it when done).
pub fn checkpoint_dir(name: &str, recovery: bool) -> PathBuf {
    std::env::temp_dir().join(format!("lazarus-{name}-{}-{recovery}", std::process::id()))
}

/// Two nodes in this process over loopback QUIC, recovery on (no periodic checkpoints) or
/// off. The calling thread is both nodes' `main`.
pub fn two_nodes(name: &str, recovery: bool) -> (Cluster, Cluster) {
    two_nodes_declared_failed_after(name, recovery, None)
}

/// [`two_nodes`], declaring a silent peer failed after `failure_timeout` instead of the
/// default: for tests whose handlers are slow on purpose (building tens of MB), where
/// an oversubscribed machine can delay heartbeats past the default second.
pub fn two_nodes_declared_failed_after(
    name: &str,
    recovery: bool,
    failure_timeout: Option<std::time::Duration>,
) -> (Cluster, Cluster) {
    two_nodes_with(name, recovery, failure_timeout, 0)
}

/// Two nodes in this process with recovery on, each checkpointing every `every_ms`.
pub fn two_nodes_checkpointing(name: &str, every_ms: u64) -> (Cluster, Cluster) {
    two_nodes_with(name, true, None, every_ms)
}

fn two_nodes_with(
    name: &str,
    recovery: bool,
    failure_timeout: Option<std::time::Duration>,
    every_ms: u64,
) -> (Cluster, Cluster) {
    let addrs: Vec<_> = (0..2)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|s| s.local_addr().unwrap())
        .collect();
    let dir = checkpoint_dir(name, recovery);
    let spec = |rank: u16| ClusterSpec {
        metrics_addr: None,
        per_actor_metrics: false,
        launcher: Launcher::Lazarus,
        rank,
        addrs: addrs.clone(),
        secret: b"an in-process test secret, 32 B!".to_vec(),
        cores: Some(1),
        core_offset: rank as usize,
        idle_spin: None,
        net: None,
        data_path: lazarus::transport::shm::DataPath::default(),
        shm_ring_bytes: lazarus::transport::shm::DEFAULT_RING_BYTES,
        failure_timeout,
        recovery: recovery
            .then(|| {
                RecoveryConfig::from_vars(|k| match k {
                    "LAZARUS_FT" => Some("on".into()),
                    "LAZARUS_CHECKPOINT_EVERY_MS" => Some(every_ms.to_string()),
                    "LAZARUS_CHECKPOINT_DIR" => Some(dir.display().to_string()),
                    _ => None,
                })
                .expect("valid recovery settings")
            })
            .flatten(),
    };
    let s1 = spec(1);
    let t = std::thread::spawn(move || Cluster::start_with(s1, Node::builder()).unwrap());
    let node0 = Cluster::start_with(spec(0), Node::builder()).unwrap();
    (node0, t.join().unwrap())
}
