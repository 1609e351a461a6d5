//! A slow receiver slows its remote senders instead of growing memory without bound: the
//! receiving node stops reading from the sender when the addressee's mailbox passes a
//! high-water mark, QUIC flow control stalls the stream, the sender's bounded queue fills
//! and `tell` waits. Every message still arrives, in order.

use lazarus::cluster::{ClusterSpec, Launcher};
use lazarus::transport::{NetMode, INBOUND_HIGH_WATER};
use lazarus::{messages, Actor, ActorId, Cluster, Node, Payload};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Slow {
    received: u64,
    in_order: bool,
}

#[messages]
impl Slow {
    #[message]
    fn item(&mut self, seq: u64, _data: Payload) {
        if seq == 0 {
            self.in_order = true;
        }
        self.in_order &= seq == self.received;
        self.received += 1;
        // A consumer much slower than the network.
        let until = Instant::now() + Duration::from_micros(400);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    #[message]
    fn report(&mut self) -> (u64, bool) {
        (self.received, self.in_order)
    }
}

fn spec(rank: u16, addrs: &[SocketAddr], net: NetMode) -> ClusterSpec {
    ClusterSpec {
        metrics_addr: None,
        per_actor_metrics: false,
        launcher: Launcher::Lazarus,
        rank,
        addrs: addrs.to_vec(),
        secret: b"backpressure test cluster secret".to_vec(),
        cores: Some(1),
        core_offset: rank as usize,
        idle_spin: Some(Duration::ZERO),
        net: Some(net),
        data_path: lazarus::transport::shm::DataPath::default(),
        shm_ring_bytes: lazarus::transport::shm::DEFAULT_RING_BYTES,
        failure_timeout: None,
        recovery: None,
    }
}

#[test]
fn a_slow_remote_receiver_bounds_its_mailbox_and_loses_nothing_with_a_network_thread() {
    flood(NetMode::Thread);
}

#[test]
fn a_slow_remote_receiver_bounds_its_mailbox_and_loses_nothing_with_the_network_on_core_0() {
    flood(NetMode::Core0);
}

fn flood(net: NetMode) {
    let socks: Vec<UdpSocket> = (0..2)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    drop(socks);
    let a1 = addrs.clone();
    let n1 = std::thread::spawn(move || {
        Cluster::start_with(spec(1, &a1, net), Node::builder()).unwrap()
    });
    let node0 = Cluster::start_with(spec(0, &addrs, net), Node::builder()).unwrap();
    let node1 = n1.join().unwrap();

    let slow = node1.spawn(Slow::default()).unwrap();
    let remote = node0
        .handle()
        .actor_ref::<Slow>(ActorId::new(1, 0).unwrap())
        .unwrap();

    // Watch the receiver's mailbox while the sender floods it.
    let max_depth = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (slow, max_depth, done) = (slow.clone(), Arc::clone(&max_depth), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let depth = slow.queued().expect("the receiver is a local actor");
                max_depth.fetch_max(depth, Ordering::AcqRel);
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    const N: u64 = 7_000;
    for seq in 0..N {
        remote
            .tell(Item {
                seq,
                _data: Payload(vec![0xab; 4096]),
            })
            .unwrap();
    }
    let (received, in_order) = node0
        .block_on(remote.ask(Report).timeout(Duration::from_secs(60)))
        .unwrap();
    done.store(true, Ordering::Release);
    watcher.join().unwrap();

    assert_eq!(received, N, "every message arrived");
    assert!(in_order, "in send order");
    let max = max_depth.load(Ordering::Acquire);
    assert!(
        max <= INBOUND_HIGH_WATER + 64,
        "receiver mailbox peaked at {max}, above the high-water mark {INBOUND_HIGH_WATER}"
    );
    if net == NetMode::Thread {
        // With its own thread the network reads as fast as it can: only the high-water
        // pause keeps the mailbox bounded. (On core 0 the busy core itself paces reading.)
        assert!(
            max >= INBOUND_HIGH_WATER / 2,
            "the flood did reach the mark ({max})"
        );
    }
    node1.shutdown();
    node0.shutdown();
}
