//! What the one-sided and inter-node benches share: two nodes in one process over
//! loopback ([`free_addrs`], [`node_spec`]), the round trips they measure against, an
//! actor ping-pong between the nodes (`Ping` on one, `Pong` on the other, a payload of `n`
//! bytes each way) and plain copies of the payload there and back.

// The message structs `#[messages]` generates from the handlers' parameters have fields
// without doc comments; the handlers say what they carry.
#![allow(missing_docs)]

use lazarus::cluster::{ClusterSpec, Launcher};
use lazarus::transport::shm::DataPath;
use lazarus::{messages, Actor, ActorRef, Payload, ReplyTo};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

/// `n` loopback addresses free a moment ago.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("a loopback port"))
        .collect();
    socks
        .iter()
        .map(|s| s.local_addr().expect("a bound address"))
        .collect()
}

/// Node `rank` of a cluster at `addrs` in this process: one core each (node `r` on core
/// `r`), `data_path` between them, cores spinning `idle_spin` before they sleep (`None`:
/// the runtime's default). With `checkpoints` (a directory), recovery on with the
/// launcher's settings (a checkpoint every second) and the runtime's defaults for
/// everything else, read the way a node reads them.
pub fn node_spec(
    rank: u16,
    addrs: &[SocketAddr],
    secret: &[u8],
    data_path: DataPath,
    idle_spin: Option<Duration>,
    checkpoints: Option<&Path>,
) -> ClusterSpec {
    ClusterSpec {
        metrics_addr: None,
        per_actor_metrics: false,
        launcher: Launcher::Lazarus,
        rank,
        addrs: addrs.to_vec(),
        secret: secret.to_vec(),
        cores: Some(1),
        core_offset: rank as usize,
        idle_spin,
        net: None,
        data_path,
        shm_ring_bytes: lazarus::transport::shm::DEFAULT_RING_BYTES,
        // No supervisor restarts a node of these in-process pairs: a node suspected
        // while the other pauses for a large checkpoint (seconds, with 1 MiB puts logged
        // for a second) would lose its connection for good.
        failure_timeout: Some(Duration::from_secs(120)),
        recovery: checkpoints.and_then(|dir| {
            lazarus::recovery::layer::RecoveryConfig::from_vars(|k| match k {
                "LAZARUS_FT" => Some("on".into()),
                "LAZARUS_CHECKPOINT_EVERY_MS" => Some("1000".into()),
                "LAZARUS_CHECKPOINT_DIR" => Some(dir.display().to_string()),
                _ => None,
            })
            .expect("valid recovery settings")
        }),
    }
}

/// Sends every ball back to its `Ping`.
#[derive(Actor, Serialize, Deserialize, Default)]
pub struct Pong;

#[messages]
impl Pong {
    /// A ball from `back`: sent back to it.
    #[message]
    pub fn ball(&mut self, payload: Payload, back: ActorRef<Ping>) {
        let _ = back.tell(Returned { payload });
    }
}

/// Plays `iters` round trips with a `Pong` and replies with the nanoseconds they took.
#[derive(Actor, Serialize, Deserialize, Default)]
pub struct Ping {
    pong: Option<ActorRef<Pong>>,
    left: u64,
    #[serde(skip)]
    started: Option<Instant>,
    done: ReplyTo<u64>,
}

#[messages]
impl Ping {
    /// `iters` round trips of `size` bytes; replies with the elapsed nanoseconds.
    #[message]
    pub fn run(
        &mut self,
        pong: ActorRef<Pong>,
        size: usize,
        iters: u64,
        ctx: &mut lazarus::Context<Self>,
        reply: ReplyTo<u64>,
    ) {
        self.done = reply;
        self.left = iters;
        self.started = Some(Instant::now());
        let _ = pong.tell(Ball {
            payload: Payload(vec![1; size]),
            back: ctx.myself().clone(),
        });
        self.pong = Some(pong);
    }

    /// The ball came back: sent again, or the round trips are over.
    #[message]
    pub fn returned(&mut self, payload: Payload, ctx: &mut lazarus::Context<Self>) {
        self.left -= 1;
        if self.left == 0 {
            let ns = self.started.map_or(0, |s| s.elapsed().as_nanos() as u64);
            self.done.take().send(ns);
        } else if let Some(p) = &self.pong {
            let _ = p.tell(Ball {
                payload,
                back: ctx.myself().clone(),
            });
        }
    }
}

/// `iters` "round trips" of plain copies: the payload copied from one buffer to another
/// and back, what a round trip through shared memory cannot beat.
pub fn memcpy_round_trips(size: usize, iters: u64) -> Duration {
    let mut a = vec![1u8; size];
    let mut b = vec![0u8; size];
    let start = Instant::now();
    for _ in 0..iters {
        b.copy_from_slice(std::hint::black_box(&a));
        a.copy_from_slice(std::hint::black_box(&b));
    }
    std::hint::black_box((&a, &b));
    start.elapsed()
}
