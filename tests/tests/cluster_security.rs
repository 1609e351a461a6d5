//! Bad input from the network: unauthenticated processes cannot connect, and malformed,
//! mistyped or misaddressed frames from a member are rejected with a metric while the
//! node keeps running and loses nothing else. (One test per binary: the metrics recorder
//! is process-global.)

use lazarus::cluster::{ClusterSpec, Launcher};
use lazarus::transport::credentials::{self, Credentials};
use lazarus::transport::frame::{self, Envelope, FrameBody};
use lazarus::{messages, Actor, ActorId, AskError, Cluster, Node};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

#[derive(Actor, Serialize, Deserialize, Default)]
struct Counter {
    total: u64,
}

#[messages]
impl Counter {
    #[message]
    fn add(&mut self, n: u64) -> u64 {
        self.total += n;
        self.total
    }
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Other;

#[messages]
impl Other {
    #[message]
    fn poke(&mut self) {}
}

const SECRET: &[u8] = b"this is the cluster secret, 32 b";

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    socks.iter().map(|s| s.local_addr().unwrap()).collect()
}

fn spec(rank: u16, addrs: &[SocketAddr]) -> ClusterSpec {
    ClusterSpec {
        metrics_addr: None,
        per_actor_metrics: false,
        launcher: Launcher::Lazarus,
        rank,
        addrs: addrs.to_vec(),
        secret: SECRET.to_vec(),
        cores: Some(1),
        core_offset: rank as usize,
        idle_spin: Some(Duration::ZERO),
        net: None,
        data_path: lazarus::transport::shm::DataPath::default(),
        shm_ring_bytes: lazarus::transport::shm::DEFAULT_RING_BYTES,
        failure_timeout: None,
        recovery: None,
    }
}

fn quic_client(secret: &[u8], rank: u16) -> quinn::Endpoint {
    let creds = Credentials::for_node(secret, rank).unwrap();
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(creds.client_config().unwrap()).unwrap();
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    ep
}

fn encoded(body: &FrameBody) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(body, &mut out).unwrap();
    out
}

/// A test-controlled third member: authenticates with the real secret, says Hello, and
/// then writes whatever bytes the test wants to node 0.
struct FakeMember {
    _endpoint: quinn::Endpoint,
    to_node0: quinn::SendStream,
    _conns: Vec<quinn::Connection>,
}

async fn fake_member(addrs: &[SocketAddr]) -> FakeMember {
    let ep = quic_client(SECRET, 2);
    let mut streams = Vec::new();
    let mut conns = Vec::new();
    for (peer, addr) in addrs.iter().enumerate().take(2) {
        let conn = loop {
            match ep
                .connect(*addr, &credentials::server_name(peer as u16))
                .unwrap()
                .await
            {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let mut send = conn.open_uni().await.unwrap();
        send.write_all(&encoded(&FrameBody::Hello {
            rank: 2,
            size: 3,
            incarnation: 0,
            shm: None,
            rdma: None,
        }))
        .await
        .unwrap();
        // Drain what the node sends us so its stream never stalls.
        let c = conn.clone();
        tokio::spawn(async move {
            if let Ok(mut recv) = c.accept_uni().await {
                while let Ok(Some(_)) = recv.read_chunk(usize::MAX, true).await {}
            }
        });
        streams.push(send);
        conns.push(conn);
    }
    FakeMember {
        _endpoint: ep,
        to_node0: streams.swap_remove(0),
        _conns: conns,
    }
}

/// One metric: name, labels, value.
type Sample = (String, Vec<(String, String)>, DebugValue);

fn counter_value(snapshot: &[Sample], name: &str, label: (&str, &str)) -> u64 {
    snapshot
        .iter()
        .filter(|(n, labels, _)| {
            n == name && labels.iter().any(|(k, v)| k == label.0 && v == label.1)
        })
        .map(|(_, _, v)| match v {
            DebugValue::Counter(c) => *c,
            _ => 0,
        })
        .sum()
}

#[test]
fn the_cluster_rejects_outsiders_and_bad_frames_and_keeps_running() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    let addrs = free_addrs(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();

    // Nodes 0 and 1 are real; node 2 is the fake member, which must join for the cluster to
    // finish forming.
    let a0 = addrs.clone();
    let a1 = addrs.clone();
    let n0 =
        std::thread::spawn(move || Cluster::start_with(spec(0, &a0), Node::builder()).unwrap());
    let n1 =
        std::thread::spawn(move || Cluster::start_with(spec(1, &a1), Node::builder()).unwrap());
    let mut fake = rt.block_on(fake_member(&addrs));
    let node0 = n0.join().unwrap();
    let node1 = n1.join().unwrap();
    let counter = node0.spawn(Counter::default()).unwrap();
    assert_eq!(counter.id(), ActorId::new(0, 0).unwrap());
    let remote = node1.handle().actor_ref::<Counter>(counter.id()).unwrap();
    assert_eq!(node1.block_on(remote.ask(Add { n: 1 })).unwrap(), 1);

    // 1. An outsider with another secret cannot complete a handshake.
    let outsider = quic_client(b"a different secret, not the one!", 2);
    let attempt = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            outsider
                .connect(addrs[0], &credentials::server_name(0))
                .unwrap(),
        )
        .await
    });
    assert!(matches!(attempt, Ok(Err(_))), "handshake must fail");

    // 2. A member's malformed body, unknown actor and wrong type are rejected one by one.
    rt.block_on(async {
        let s = &mut fake.to_node0;
        s.write_all(&[b'L', b'Z', frame::VERSION, 0, 3, 0, 0, 0, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        let stray = Envelope {
            to: ActorId::new(0, 99).unwrap(),
            from: ActorId::new(1, 0).unwrap(),
            type_tag: 0,
            request: None,
            payload: vec![].into(),
        };
        s.write_all(&encoded(&FrameBody::Envelope(stray)))
            .await
            .unwrap();
        let mistyped = Envelope {
            to: counter.id(),
            from: ActorId::new(1, 0).unwrap(),
            type_tag: 12345,
            request: None,
            payload: vec![1, 2, 3].into(),
        };
        s.write_all(&encoded(&FrameBody::Envelope(mistyped)))
            .await
            .unwrap();
        // Well-formed frames this member may not send: a barrier release (only rank 0
        // releases) and an arrival in another node's name.
        s.write_all(&encoded(&FrameBody::BarrierRelease { epoch: 0 }))
            .await
            .unwrap();
        s.write_all(&encoded(&FrameBody::BarrierArrive {
            epoch: u64::MAX,
            rank: 1,
        }))
        .await
        .unwrap();
    });
    // Nothing else is lost: a member's valid message still arrives and counts.
    assert_eq!(node1.block_on(remote.ask(Add { n: 10 })).unwrap(), 11);

    // 3. Asking for things that do not exist is a clear error, not a hang.
    let ghost = node1
        .handle()
        .actor_ref::<Counter>(ActorId::new(0, 99).unwrap())
        .unwrap();
    let err = node1
        .block_on(ghost.ask(Add { n: 1 }).timeout(Duration::from_secs(5)))
        .unwrap_err();
    assert!(
        matches!(&err, AskError::Rejected { reason, .. } if reason.contains("no actor")),
        "{err:?}"
    );
    let wrong = node1.handle().actor_ref::<Other>(counter.id()).unwrap();
    let err = node1
        .block_on(wrong.ask(Poke).timeout(Duration::from_secs(5)))
        .unwrap_err();
    assert!(
        matches!(&err, AskError::Rejected { reason, .. } if reason.contains("does not accept")),
        "{err:?}"
    );

    // 4. A stream in another protocol version is cut off; the node keeps serving others.
    rt.block_on(async {
        let mut bad = encoded(&FrameBody::Heartbeat);
        bad[2] = frame::VERSION + 1;
        let _ = fake.to_node0.write_all(&bad).await;
    });
    assert_eq!(node1.block_on(remote.ask(Add { n: 100 })).unwrap(), 111);

    use lazarus::transport::{BAD_FRAMES, HANDSHAKE_FAILURES, UNDELIVERABLE};
    let take_snapshot = || -> Vec<_> {
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, _, _, v)| {
                let key = k.key().clone();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                (key.name().to_string(), labels, v)
            })
            .collect()
    };
    // The ask above went over another connection than the bad frame: node 0 reads that
    // stream in its own time.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut snapshot = take_snapshot();
    while counter_value(&snapshot, BAD_FRAMES, ("kind", "version")) == 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
        snapshot = take_snapshot();
    }
    let handshakes: u64 = snapshot
        .iter()
        .filter(|(n, _, _)| n == HANDSHAKE_FAILURES)
        .map(|(_, _, v)| {
            if let DebugValue::Counter(c) = v {
                *c
            } else {
                0
            }
        })
        .sum();
    assert!(handshakes >= 1, "handshake failure counted");
    assert_eq!(
        counter_value(&snapshot, BAD_FRAMES, ("kind", "malformed")),
        1
    );
    assert_eq!(counter_value(&snapshot, BAD_FRAMES, ("kind", "version")), 1);
    assert_eq!(
        counter_value(&snapshot, BAD_FRAMES, ("kind", "barrier_release")),
        1
    );
    assert_eq!(
        counter_value(&snapshot, BAD_FRAMES, ("kind", "barrier_arrive")),
        1
    );
    assert_eq!(
        counter_value(&snapshot, UNDELIVERABLE, ("reason", "unknown_actor")),
        2
    );
    assert_eq!(
        counter_value(&snapshot, UNDELIVERABLE, ("reason", "wrong_type")),
        2
    );

    drop(fake);
    node1.shutdown();
    node0.shutdown();
}
