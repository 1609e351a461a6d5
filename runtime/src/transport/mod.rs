//! Node-to-node transport over QUIC (quinn), authenticated by mutual TLS.
//!
//! One `lazarus-net` thread per node runs a Tokio runtime with the quinn endpoint. Every
//! pair of nodes shares one connection; each side sends on one unidirectional stream, so
//! all messages from one node to another, and therefore every actor-to-actor channel
//! between them, arrive in send order. Senders (any thread) encode their frame themselves
//! and hand it to a bounded per-peer queue: when a peer is slow the queue fills and the
//! sender blocks until there is room, so memory stays bounded. The net thread decodes
//! inbound frames and pushes messages into actor mailboxes.
//!
//! Liveness: every node sends heartbeats; the [`FailureDetector`] turns silence into a
//! node-failure report (log line, metric, failure hook), and requests waiting on the dead
//! node fail instead of hanging. With recovery on, a peer's death is usually known sooner:
//! its supervisor says which incarnation died ([`Transport::peer_died`]), or its restarted
//! process's Hello names a newer incarnation.

pub mod credentials;
pub use lazarus_proto::frame;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod shm;
pub mod udp_socket;

use crate::actor_id::ActorId;
use crate::failure_detector::{FailureDetector, PeerLiveness};
use crate::node::NodeHandle;
use bytes::Bytes;
use credentials::Credentials;
use dashmap::DashMap;
use frame::{
    Envelope, FrameBody, FrameDecoder, RdmaHello, RemoteError, SharedMemoryHello, SplitFrame,
};
use metrics::counter;
use shm::{DataPath, SharedMemory};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

/// Frames that could not be read, by `kind` (bad_magic, version, oversized, malformed).
pub const BAD_FRAMES: &str = "lazarus_transport_bad_frames_total";
/// Connection attempts refused during the TLS handshake (unauthenticated peers).
pub const HANDSHAKE_FAILURES: &str = "lazarus_transport_handshake_failures_total";
/// Connections refused because both nodes dialed each other at once (the higher rank's
/// dial is kept).
pub const CROSSED_DIALS: &str = "lazarus_transport_crossed_dials_total";
/// Envelopes for actors that do not exist here or have another type, by `reason`.
pub const UNDELIVERABLE: &str = "lazarus_transport_undeliverable_total";
/// Frames and bytes sent and received.
pub const FRAMES_SENT: &str = "lazarus_transport_frames_sent_total";
/// Bytes written to peers.
pub const BYTES_SENT: &str = "lazarus_transport_bytes_sent_total";
/// Frames received from peers.
pub const FRAMES_RECEIVED: &str = "lazarus_transport_frames_received_total";
/// Sends that had to wait for room in a full peer queue.
pub const BACKPRESSURE_WAITS: &str = "lazarus_transport_backpressure_waits_total";
/// Nodes declared failed.
pub const NODE_FAILURES: &str = "lazarus_node_failures_total";
/// Times this node's heartbeat loop found it had not run for half the failure timeout
/// (its process or network thread was paused) and suspected nobody for it.
pub const LOCAL_PAUSES: &str = "lazarus_local_pauses_total";
/// Times reading from a peer paused because an addressee's mailbox was too deep.
pub const INBOUND_PAUSES: &str = "lazarus_transport_inbound_pauses_total";
/// Messages and replies refused before sending because no peer would accept their size
/// (label `kind`: `message`, `reply`).
pub const OVERSIZED: &str = "lazarus_transport_oversized_total";

/// A message or reply refused before sending: no peer would accept its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {kind} encodes to {bytes} bytes, over the {max} bytes a message between nodes may \
     have (split it, or keep such data on one node)"
)]
pub struct TooLarge {
    /// `message` or `reply`.
    pub kind: &'static str,
    /// Its encoded size.
    pub bytes: usize,
    /// The largest a frame carries.
    pub max: usize,
}

impl TooLarge {
    /// The same refusal as the outcome an asker gets.
    pub fn outcome(&self) -> frame::RemoteError {
        frame::RemoteError::TooLarge {
            bytes: self.bytes as u64,
            max: self.max as u64,
        }
    }
}

/// Counts a send waiting for queue room in [`Transport::sends_waiting`] while it lives.
struct SendWaiting<'a>(&'a AtomicUsize);

impl<'a> SendWaiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        SendWaiting(count)
    }
}

impl Drop for SendWaiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Mailbox depth above which the transport stops reading from the sending peer.
pub const INBOUND_HIGH_WATER: usize = 4096;
/// Depth below which reading resumes.
pub const INBOUND_LOW_WATER: usize = 1024;

/// How this node takes part in a cluster.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// This node's rank.
    pub rank: u16,
    /// Every node's address, indexed by rank.
    pub addrs: Vec<SocketAddr>,
    /// The cluster secret every node shares.
    pub secret: Vec<u8>,
    /// Largest accepted frame body.
    pub max_frame: usize,
    /// Frames queued per peer before senders block.
    pub queue_frames: usize,
    /// Interval between heartbeats.
    pub heartbeat_interval: Duration,
    /// Silence after which a peer is declared failed.
    pub failure_timeout: Duration,
    /// How long to wait for every peer to be connected at start.
    pub connect_timeout: Duration,
    /// Where the network runs.
    pub net_mode: NetMode,
    /// This node's incarnation (0 at launch, +1 per restart of the rank).
    pub incarnation: u32,
    /// Recovery is on: a failed peer is expected back (its connection is re-established
    /// when its new incarnation appears) and a failure does not break barriers.
    pub reconnect: bool,
    /// Shared memory, RDMA or QUIC (`LAZARUS_TRANSPORT`).
    pub data_path: DataPath,
    /// Size of each direction's shared-memory ring (a power of two, at least 64 KiB).
    pub shm_ring_bytes: usize,
}

/// Where a node's network progress runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMode {
    /// A dedicated `lazarus-net` thread: network progress never waits for handlers. Costs
    /// a thread hand-off per remote message.
    Thread,
    /// On core 0's executor thread, between and instead of idle waits: no hand-off, the
    /// lowest latency. Handlers on core 0 must return within the failure timeout, or the
    /// node's heartbeats stop while they run.
    Core0,
}

impl NetMode {
    /// The default for a node with `cores` cores: `Core0` for single-core nodes (nothing
    /// else competes for that core), `Thread` otherwise.
    pub fn default_for(cores: usize) -> NetMode {
        if cores == 1 {
            NetMode::Core0
        } else {
            NetMode::Thread
        }
    }
}

impl std::str::FromStr for NetMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread" => Ok(NetMode::Thread),
            "core0" => Ok(NetMode::Core0),
            other => Err(format!(
                "network mode `{other}`: expected `thread` or `core0`"
            )),
        }
    }
}

impl TransportConfig {
    /// Defaults for a cluster of `addrs.len()` nodes.
    pub fn new(rank: u16, addrs: Vec<SocketAddr>, secret: Vec<u8>) -> Self {
        TransportConfig {
            rank,
            addrs,
            secret,
            max_frame: frame::DEFAULT_MAX_BODY,
            queue_frames: 1024,
            heartbeat_interval: Duration::from_millis(100),
            failure_timeout: Duration::from_millis(1000),
            connect_timeout: Duration::from_secs(30),
            net_mode: NetMode::Thread,
            incarnation: 0,
            reconnect: false,
            data_path: DataPath::Auto,
            shm_ring_bytes: shm::DEFAULT_RING_BYTES,
        }
    }

    fn size(&self) -> usize {
        self.addrs.len()
    }
}

/// The transport could not start or a send could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Credentials or TLS setup failed.
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialError),
    /// The endpoint could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not every peer connected in time.
    #[error("timed out after {timeout:?} waiting for nodes {missing:?} to connect")]
    ConnectTimeout {
        /// Ranks that never connected.
        missing: Vec<u16>,
        /// The timeout.
        timeout: Duration,
    },
    /// The peer is down or departed.
    #[error("node {0} is not reachable (failed or departed)")]
    PeerDown(u16),
    /// No such rank in this cluster.
    #[error("no node {rank} in a cluster of {size}")]
    NoSuchRank {
        /// The rank asked for.
        rank: u16,
        /// Cluster size.
        size: usize,
    },
    /// A value could not be encoded.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// The runtime thread could not start.
    #[error("network thread: {0}")]
    Runtime(String),
    /// Shared memory is required (`LAZARUS_TRANSPORT=shm`) and cannot be set up.
    #[error("{0}")]
    SharedMemory(String),
    /// RDMA is required (`LAZARUS_TRANSPORT=rdma`) and cannot be set up.
    #[error("{0}")]
    Rdma(String),
    /// Cluster barrier broken by a failed node.
    #[error("barrier {epoch} broken: node {rank} failed")]
    BarrierBroken {
        /// Barrier number.
        epoch: u64,
        /// The failed node.
        rank: u16,
    },
}

const LINK_CONNECTING: u8 = 0;
const LINK_UP: u8 = 1;
const LINK_DOWN: u8 = 2;

struct PeerLink {
    tx: mpsc::Sender<SplitFrame>,
    state: AtomicU8,
}

struct Pending {
    rank: u16,
    tx: oneshot::Sender<Result<Vec<u8>, RemoteError>>,
}

#[derive(Default)]
struct BarrierState {
    arrivals: HashMap<u64, HashSet<u16>>,
    waiters: HashMap<u64, oneshot::Sender<Result<(), TransportError>>>,
    released: HashSet<u64>,
    /// Rank 0: barriers below this number have been released (they complete in order).
    released_below: u64,
}

/// A node failure as reported to the cluster's failure hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFailure {
    /// The failed node's rank.
    pub rank: u16,
    /// How long it had been silent (zero when its connection broke).
    pub silent_for: Duration,
    /// Wall-clock time of detection.
    pub detected_at: std::time::SystemTime,
    /// The incarnation that failed, when this node knew it (every earlier one is dead
    /// too).
    pub incarnation: Option<u32>,
}

/// How a peer came to be declared failed (what its error line says).
#[derive(Clone, Copy, Debug)]
enum FailedBecause {
    /// It was silent for this long.
    Silence(Duration),
    /// A newer incarnation of it connected: its supervisor restarted it.
    Replaced {
        /// The incarnation that connected.
        incarnation: u32,
    },
    /// Its supervisor said this incarnation's process died (`died RANK INCARNATION` on
    /// the node's standard input).
    Died {
        /// The incarnation whose connection this node held.
        incarnation: u32,
    },
}

/// What this node knows of a peer's incarnations beyond its live connection.
#[derive(Clone, Copy, Debug, Default)]
struct PeerIncarnations {
    /// The newest incarnation its supervisor said died: it and every earlier one are
    /// dead, and a connection from one of them is refused.
    dead: Option<u32>,
    /// The newest incarnation that said Hello: a connection of an older one, still
    /// being set up, gives way to it.
    newest: Option<u32>,
}

impl PeerIncarnations {
    /// Whether a connection of `incarnation` is out of date: that process died, or a
    /// newer one has already said Hello.
    fn outdated(&self, incarnation: u32) -> bool {
        self.dead.is_some_and(|d| incarnation <= d) || self.newest.is_some_and(|n| incarnation < n)
    }
}

/// Hook called on the net thread for each detected node failure.
pub type NodeFailureHook = Arc<dyn Fn(&NodeFailure) + Send + Sync>;

/// What runs `net_main`, for shutting it down.
enum NetDriver {
    Thread(std::thread::JoinHandle<()>),
    /// Signalled when `net_main` has finished on the engine core.
    Engine(std::sync::mpsc::Receiver<()>),
}

/// The running transport of one node.
pub struct Transport {
    rank: u16,
    size: usize,
    links: Vec<Option<PeerLink>>,
    pending: DashMap<u64, Pending>,
    next_request: AtomicU64,
    next_barrier: AtomicU64,
    /// Sends of this node waiting for room in a peer's queue. While one waits, the
    /// readers do not pause for full mailboxes: the handler that would drain a mailbox
    /// may be the one waiting, and the peer it waits for may be waiting for us in turn.
    sends_waiting: AtomicUsize,
    barrier: Mutex<BarrierState>,
    detector: Mutex<FailureDetector<Instant>>,
    on_failure: Mutex<Vec<NodeFailureHook>>,
    shutdown: Notify,
    stop: Mutex<Option<NetDriver>>,
    writers: Mutex<Vec<(u16, tokio::task::JoinHandle<()>)>>,
    /// Peers that died after the supervisor let every node leave and will not come back
    /// (`gone`): leaving does not wait for them.
    gone: Mutex<std::collections::HashSet<u16>>,
    /// Signalled when a peer is declared gone.
    gone_changed: Notify,
    endpoint: Mutex<Option<quinn::Endpoint>>,
    reconnect: bool,
    /// The network runs on a multi-threaded runtime (recovery on, `NetMode::Thread`).
    multi_threaded: bool,
    /// The live connection to each peer and the incarnation it belongs to.
    conns: Mutex<HashMap<u16, (u32, quinn::Connection)>>,
    /// Each peer's dead and newest incarnations. Locked only while `conns` is (after it):
    /// a connection is entered in `conns` only if it is not outdated at that moment.
    incarnations: Mutex<HashMap<u16, PeerIncarnations>>,
    /// Where each peer listens. A supervisor that restarts a rank on a spare slot says
    /// where it went ([`Transport::peer_moved`]); dials read it at every attempt.
    addrs: Mutex<Vec<SocketAddr>>,
    /// Woken when a peer moves: a dial to its old address is abandoned at once (a handshake
    /// with a dead or stopped host only ends at its timeout).
    moved: Notify,
    /// The largest frame body the peers accept (they run with the same configuration).
    max_frame: usize,
    /// The shared-memory data path to peers on this host (`None`: QUIC only).
    shm: Option<Arc<SharedMemory>>,
    /// The RDMA data path to peers on other hosts (`None`: no device, or not chosen).
    #[cfg(feature = "rdma")]
    rdma: Option<Arc<rdma::Rdma>>,
    /// Peers whose frames travel over RDMA now.
    rdma_links: AtomicUsize,
    /// This node's incarnation.
    incarnation: u32,
}

impl Transport {
    /// Binds, connects to every peer and returns once the cluster is fully connected.
    pub fn start(
        config: TransportConfig,
        node: NodeHandle,
    ) -> Result<Arc<Transport>, TransportError> {
        let size = config.size();
        let rank = config.rank;
        if rank as usize >= size {
            return Err(TransportError::NoSuchRank { rank, size });
        }
        let creds = Credentials::for_node(&config.secret, rank)?;
        let shm = SharedMemory::new(
            config.data_path,
            rank,
            config.incarnation,
            &config.secret,
            config.shm_ring_bytes,
            config.net_mode == NetMode::Core0,
        )
        .map_err(TransportError::SharedMemory)?
        .map(Arc::new);
        #[cfg(feature = "rdma")]
        let rdma = match config.data_path {
            DataPath::Auto | DataPath::Rdma => {
                let settings = rdma::Settings::from_vars(|k| std::env::var(k).ok())
                    .map_err(TransportError::Rdma)?;
                let required = config.data_path == DataPath::Rdma;
                rdma::Rdma::new(required, config.shm_ring_bytes, &settings)
                    .map_err(TransportError::Rdma)?
                    .map(Arc::new)
            }
            DataPath::Shm | DataPath::Quic => None,
        };
        #[cfg(not(feature = "rdma"))]
        if config.data_path == DataPath::Rdma {
            return Err(TransportError::Rdma(
                "LAZARUS_TRANSPORT=rdma: this build has no RDMA data path (build with the \
                 `rdma` feature)"
                    .into(),
            ));
        }
        let mut links = Vec::with_capacity(size);
        let mut outboxes = Vec::with_capacity(size);
        for r in 0..size {
            if r == rank as usize {
                links.push(None);
                outboxes.push(None);
            } else {
                let (tx, rx) = mpsc::channel(config.queue_frames);
                links.push(Some(PeerLink {
                    tx,
                    state: AtomicU8::new(LINK_CONNECTING),
                }));
                outboxes.push(Some(rx));
            }
        }
        let transport = Arc::new(Transport {
            rank,
            size,
            links,
            pending: DashMap::new(),
            next_request: AtomicU64::new(1),
            next_barrier: AtomicU64::new(0),
            sends_waiting: AtomicUsize::new(0),
            barrier: Mutex::new(BarrierState::default()),
            detector: Mutex::new(FailureDetector::new(size, config.failure_timeout)),
            on_failure: Mutex::new(Vec::new()),
            shutdown: Notify::new(),
            stop: Mutex::new(None),
            writers: Mutex::new(Vec::new()),
            gone: Mutex::default(),
            gone_changed: Notify::new(),
            endpoint: Mutex::new(None),
            reconnect: config.reconnect,
            multi_threaded: config.reconnect && config.net_mode == NetMode::Thread,
            conns: Mutex::new(HashMap::new()),
            incarnations: Mutex::new(HashMap::new()),
            addrs: Mutex::new(config.addrs.clone()),
            moved: Notify::new(),
            max_frame: config.max_frame,
            shm,
            #[cfg(feature = "rdma")]
            rdma,
            rdma_links: AtomicUsize::new(0),
            incarnation: config.incarnation,
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), TransportError>>();
        let t = Arc::clone(&transport);
        let multi_threaded = transport.multi_threaded;
        let worker_node = node.clone();
        let build_rt = move || {
            let mut builder = if multi_threaded {
                // One worker; `block_in_place` around the recovery layer's lock hands the
                // other tasks to a fresh worker while a checkpoint holds it. Every worker
                // knows its node: decoding a message resolves the actor refs in it.
                let mut b = tokio::runtime::Builder::new_multi_thread();
                let node = worker_node.clone();
                b.worker_threads(1)
                    .thread_name("lazarus-net")
                    .on_thread_start(move || {
                        NodeHandle::set_current(Some(node.clone()));
                    });
                b
            } else {
                tokio::runtime::Builder::new_current_thread()
            };
            builder
                .enable_all()
                .build()
                .map_err(|e| TransportError::Runtime(e.to_string()))
        };
        let probe = transport
            .shm
            .as_ref()
            .map(|s| Arc::clone(s) as Arc<dyn crate::executor::IdleProbe>);
        let driver = match config.net_mode {
            NetMode::Thread => {
                let thread = std::thread::Builder::new()
                    .name("lazarus-net".into())
                    .spawn(move || {
                        let rt = match build_rt() {
                            Ok(rt) => rt,
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        };
                        NodeHandle::set_current(Some(node.clone()));
                        rt.block_on(net_main(t, config, creds, outboxes, node, ready_tx));
                        NodeHandle::set_current(None);
                    })
                    .map_err(|e| TransportError::Runtime(e.to_string()))?;
                NetDriver::Thread(thread)
            }
            NetMode::Core0 => {
                let rt = build_rt()?;
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                let engine_node = node.clone();
                rt.spawn(async move {
                    net_main(t, config, creds, outboxes, node, ready_tx).await;
                    let _ = done_tx.send(());
                });
                if !engine_node.install_engine(crate::node::CoreId(0), rt, probe) {
                    return Err(TransportError::Runtime("node has no core 0".into()));
                }
                NetDriver::Engine(done_rx)
            }
        };
        *transport.stop.lock().unwrap_or_else(|e| e.into_inner()) = Some(driver);
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(transport),
            Ok(Err(e)) => {
                transport.close();
                Err(e)
            }
            Err(_) => Err(TransportError::Runtime(
                "network thread died while starting".into(),
            )),
        }
    }

    /// This node's rank.
    pub fn rank(&self) -> u16 {
        self.rank
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// How many peers this node talks to through shared memory now.
    pub fn shared_memory_peers(&self) -> usize {
        self.shm.as_ref().map_or(0, |s| s.links())
    }

    /// This node's incarnation (0 at launch, +1 per restart of its rank).
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Whether this node may share memory with peers of its host (not `LAZARUS_TRANSPORT=quic`
    /// or `rdma`, and the host has `/dev/shm`): windows then put and get there directly.
    pub(crate) fn shares_memory(&self) -> bool {
        self.shm.is_some()
    }

    /// How many peers this node reaches over RDMA now.
    pub fn rdma_peers(&self) -> usize {
        self.rdma_links.load(Ordering::Acquire)
    }

    /// The largest encoded message or reply another node accepts.
    pub fn max_payload(&self) -> usize {
        frame::max_payload(self.max_frame)
    }

    /// Refuses a payload of `len` bytes that no peer would accept (it would be skipped
    /// on arrival, and with recovery on its channel would wait for it for ever), counting
    /// it in [`OVERSIZED`] under `kind`.
    pub(crate) fn check_fits(&self, len: usize, kind: &'static str) -> Result<(), TooLarge> {
        let max = self.max_payload();
        if len <= max {
            return Ok(());
        }
        counter!(OVERSIZED, "kind" => kind).increment(1);
        Err(TooLarge {
            kind,
            bytes: len,
            max,
        })
    }

    /// Registers a hook for node failures.
    pub fn on_node_failure(&self, hook: NodeFailureHook) {
        self.on_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hook);
    }

    /// Liveness of `rank` as this node sees it.
    pub fn liveness(&self, rank: u16) -> PeerLiveness {
        self.detector
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .liveness(rank)
    }

    fn link(&self, rank: u16) -> Result<&PeerLink, TransportError> {
        match self.links.get(rank as usize) {
            Some(Some(link)) => Ok(link),
            _ => Err(TransportError::NoSuchRank {
                rank,
                size: self.size,
            }),
        }
    }

    /// Queues an encoded frame for `rank`, waiting for room if its queue is full.
    pub(crate) fn send_frame(&self, rank: u16, frame: SplitFrame) -> Result<(), TransportError> {
        let link = self.link(rank)?;
        match Self::try_queue(rank, link, frame)? {
            None => Ok(()),
            Some(frame) => {
                counter!(BACKPRESSURE_WAITS).increment(1);
                let _waiting = SendWaiting::new(&self.sends_waiting);
                // Backpressure: the sender waits for room. On the engine core, waiting must
                // keep driving the engine (it is what drains the queue); elsewhere the
                // network progresses on its own. Network tasks never get here: their own
                // sends use `try_send_frame`.
                let sent = match crate::executor::block_on_engine(link.tx.send(frame)) {
                    Ok(sent) => sent,
                    Err(_) if crate::executor::has_engine() => {
                        return Err(TransportError::Runtime(
                            "queue full inside the network engine".into(),
                        ))
                    }
                    Err(fut) => futures::executor::block_on(fut),
                };
                sent.map_err(|_| TransportError::PeerDown(rank))
            }
        }
    }

    /// Queues `frame` on `link` if its queue has room; gives it back if the queue is full.
    fn try_queue(
        rank: u16,
        link: &PeerLink,
        frame: SplitFrame,
    ) -> Result<Option<SplitFrame>, TransportError> {
        if link.state.load(Ordering::Acquire) == LINK_DOWN {
            return Err(TransportError::PeerDown(rank));
        }
        match crate::executor::in_engine_context(|| link.tx.try_send(frame)) {
            Ok(()) => Ok(None),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(TransportError::PeerDown(rank)),
            Err(mpsc::error::TrySendError::Full(frame)) => Ok(Some(frame)),
        }
    }

    /// Encodes and queues `body` for `rank` if the peer's queue has room, without ever
    /// waiting: `Ok(true)` when queued, `Ok(false)` when the queue is full (nothing was
    /// queued).
    pub(crate) fn offer_body(&self, rank: u16, body: &FrameBody) -> Result<bool, TransportError> {
        let frame = frame::encode_split(body).map_err(|e| TransportError::Encode(e.to_string()))?;
        let link = self.link(rank)?;
        Ok(Self::try_queue(rank, link, frame)?.is_none())
    }

    /// Queues a frame without waiting; drops it (returning false) if the queue is full.
    fn try_send_frame(&self, rank: u16, frame: SplitFrame) -> bool {
        self.link(rank)
            .map(|l| l.tx.try_send(frame).is_ok())
            .unwrap_or(false)
    }

    /// Encodes and queues `body` for `rank` without waiting (for the network's own tasks,
    /// which must never block); false if it could not be queued.
    pub(crate) fn try_send_body(&self, rank: u16, body: &FrameBody) -> bool {
        let mut buf = Vec::new();
        frame::encode(body, &mut buf).is_ok()
            && self.try_send_frame(rank, SplitFrame::whole(Bytes::from(buf)))
    }

    /// Encodes and queues `body` for `rank`.
    pub(crate) fn send_body(&self, rank: u16, body: &FrameBody) -> Result<(), TransportError> {
        // Large payloads go out as their own buffer: no copy into the frame.
        let frame = frame::encode_split(body).map_err(|e| TransportError::Encode(e.to_string()))?;
        self.send_frame(rank, frame)
    }

    /// Sends an application envelope to the node that hosts `env.to`.
    pub(crate) fn send_envelope(&self, env: Envelope) -> Result<(), TransportError> {
        let rank = env.to.rank();
        self.send_body(rank, &FrameBody::Envelope(env))
    }

    /// Allocates a request number whose reply (or failure) arrives on the receiver.
    pub(crate) fn new_request(
        &self,
        rank: u16,
    ) -> (u64, oneshot::Receiver<Result<Vec<u8>, RemoteError>>) {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id, Pending { rank, tx });
        (id, rx)
    }

    /// Waits for the reply to request `request`, numbered by the caller (an ask of the
    /// app's `main` with recovery on, whose number is the same in every incarnation).
    pub(crate) fn expect_reply(
        &self,
        request: u64,
        rank: u16,
    ) -> oneshot::Receiver<Result<Vec<u8>, RemoteError>> {
        let (tx, rx) = oneshot::channel();
        self.pending.insert(request, Pending { rank, tx });
        rx
    }

    /// Hands `outcome` to whoever waits for request `request`; false if nobody does.
    pub(crate) fn complete_request(
        &self,
        request: u64,
        outcome: Result<Vec<u8>, RemoteError>,
    ) -> bool {
        self.pending
            .remove(&request)
            .is_some_and(|(_, p)| p.tx.send(outcome).is_ok())
    }

    /// Forgets a request (its asker gave up).
    pub(crate) fn cancel_request(&self, id: u64) {
        self.pending.remove(&id);
    }

    /// Sends the reply to request `request` of node `rank`.
    pub(crate) fn send_reply(
        &self,
        rank: u16,
        request: u64,
        outcome: Result<Vec<u8>, RemoteError>,
    ) -> Result<(), TransportError> {
        self.send_body(rank, &FrameBody::Reply { request, outcome })
    }

    /// Waits until every node has called `barrier` the same number of times.
    pub async fn barrier(&self) -> Result<(), TransportError> {
        let epoch = self.next_barrier.fetch_add(1, Ordering::AcqRel);
        let (tx, rx) = oneshot::channel();
        {
            let mut b = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
            if b.released.remove(&epoch) {
                return Ok(());
            }
            b.waiters.insert(epoch, tx);
        }
        if self.rank == 0 {
            self.barrier_arrive(epoch, 0);
        } else {
            self.send_body(
                0,
                &FrameBody::BarrierArrive {
                    epoch,
                    rank: self.rank,
                },
            )?;
        }
        rx.await.unwrap_or(Err(TransportError::PeerDown(0)))
    }

    /// Sends `rank` the release of barrier `epoch` without blocking the caller (a network
    /// task, or rank 0's main). The release must not be lost: a restarted node's main
    /// waits for it, and its queue may be full of the logged messages its peers resend
    /// at the same moment (seen: a master-worker node restarted from the beginning hung
    /// in its first barrier). When the queue is full a task waits for room.
    fn send_barrier_release(&self, rank: u16, epoch: u64) {
        let mut buf = Vec::new();
        if frame::encode(&FrameBody::BarrierRelease { epoch }, &mut buf).is_err() {
            return;
        }
        let Ok(link) = self.link(rank) else {
            return;
        };
        let frame = SplitFrame::whole(Bytes::from(buf));
        match Self::try_queue(rank, link, frame) {
            Ok(None) => {}
            Ok(Some(frame)) => {
                counter!(BACKPRESSURE_WAITS).increment(1);
                let tx = link.tx.clone();
                let wait = async move {
                    let _ = tx.send(frame).await;
                };
                match tokio::runtime::Handle::try_current() {
                    Ok(h) => drop(h.spawn(wait)),
                    // Rank 0's main, outside the runtime: a helper thread waits instead.
                    Err(_) => {
                        let spawned = std::thread::Builder::new()
                            .name("lazarus-barrier".into())
                            .spawn(move || futures::executor::block_on(wait));
                        if spawned.is_err() {
                            tracing::warn!(rank, epoch, "barrier release not queued");
                        }
                    }
                }
            }
            // The peer is gone; a replacement arrives at the barrier again.
            Err(_) => {}
        }
    }

    fn barrier_arrive(&self, epoch: u64, rank: u16) {
        let complete = {
            let mut b = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
            if epoch < b.released_below {
                // A restarted node re-running its main passes barriers the cluster has
                // already passed.
                if rank != self.rank {
                    self.send_barrier_release(rank, epoch);
                }
                drop(b);
                if rank == self.rank {
                    self.barrier_release(epoch);
                }
                return;
            }
            let set = b.arrivals.entry(epoch).or_default();
            set.insert(rank);
            let complete = set.len() == self.size;
            if complete {
                b.released_below = b.released_below.max(epoch.saturating_add(1));
            }
            complete
        };
        if complete {
            for r in (0..self.size as u16).filter(|r| *r != self.rank) {
                self.send_barrier_release(r, epoch);
            }
            self.barrier_release(epoch);
        }
    }

    /// A well-formed frame that node `from` had no business sending (`what`): counted
    /// and logged, and otherwise ignored.
    fn misdirected(&self, from: u16, what: &'static str) {
        counter!(BAD_FRAMES, "kind" => what).increment(1);
        tracing::warn!(from, "refused a {what} frame from node {from}");
    }

    fn barrier_release(&self, epoch: u64) {
        let mut b = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
        b.arrivals.remove(&epoch);
        match b.waiters.remove(&epoch) {
            Some(w) => {
                let _ = w.send(Ok(()));
            }
            None => {
                b.released.insert(epoch);
            }
        }
    }

    /// Declares `rank` failed: fail its pending requests and barriers, run the hooks.
    /// With recovery on, barriers wait for the replacement instead of breaking, and the
    /// dead connection is closed so its queue can serve the next incarnation.
    fn node_failed(&self, rank: u16, why: FailedBecause) {
        let silent_for = match why {
            FailedBecause::Silence(d) => d,
            FailedBecause::Replaced { .. } | FailedBecause::Died { .. } => Duration::ZERO,
        };
        // A death notice marked the link down and closed the dead incarnation's
        // connection itself, under the connection lock (and only that one: a newer
        // incarnation's may be up by now).
        let noticed = matches!(why, FailedBecause::Died { .. });
        let mut failed_incarnation = match why {
            FailedBecause::Silence(_) => None,
            FailedBecause::Replaced { incarnation } => incarnation.checked_sub(1),
            FailedBecause::Died { incarnation } => Some(incarnation),
        };
        if let (false, Ok(link)) = (noticed, self.link(rank)) {
            link.state.store(LINK_DOWN, Ordering::Release);
        }
        if self.reconnect && !noticed {
            if let Some((incarnation, conn)) = self
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&rank)
            {
                conn.close(2u32.into(), b"declared failed");
                failed_incarnation = failed_incarnation.or(Some(incarnation));
                if !silent_for.is_zero() {
                    // Declared failed by silence: if its process is in fact alive (frozen,
                    // overloaded), the supervisor kills it so that it restarts. A node this
                    // node has given up on must not come back with its old state.
                    crate::cluster::supervisor_channel::event(
                        self.rank,
                        &format!(
                            "suspected peer={rank} incarnation={incarnation} silent_ms={}",
                            silent_for.as_millis()
                        ),
                    );
                }
            }
        }
        counter!(NODE_FAILURES, "rank" => rank.to_string()).increment(1);
        let failure = NodeFailure {
            rank,
            silent_for,
            detected_at: std::time::SystemTime::now(),
            incarnation: failed_incarnation,
        };
        match why {
            FailedBecause::Silence(d) => tracing::error!(
                rank,
                silent_ms = d.as_millis() as u64,
                "node {rank} failed (no heartbeat for {} ms)",
                d.as_millis()
            ),
            // Its supervisor restarted it: the process this node knew died without a word.
            FailedBecause::Replaced { incarnation } => tracing::error!(
                rank,
                incarnation,
                "node {rank} failed (its restarted process, incarnation {incarnation}, connected)"
            ),
            FailedBecause::Died { incarnation } => tracing::error!(
                rank,
                incarnation,
                "node {rank} failed (its supervisor says incarnation {incarnation} died)"
            ),
        }
        // With recovery on, `main`'s asks wait for the replacement: their replies are
        // logged messages, which a restarted node sends again.
        let failed: Vec<u64> = self
            .pending
            .iter()
            .filter(|p| {
                p.rank == rank
                    && !(self.reconnect && crate::recovery::hooks::is_main_request(*p.key()))
            })
            .map(|p| *p.key())
            .collect();
        for id in failed {
            if let Some((_, p)) = self.pending.remove(&id) {
                let _ = p.tx.send(Err(RemoteError::ActorGone(
                    ActorId::new(rank, 0).unwrap_or(ActorId::from_u64(0)),
                )));
            }
        }
        if !self.reconnect {
            let mut b = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
            for (epoch, w) in b.waiters.drain() {
                let _ = w.send(Err(TransportError::BarrierBroken { epoch, rank }));
            }
        }
        let hooks = self
            .on_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for h in hooks {
            h(&failure);
        }
    }

    /// Where `peer` listens (its latest address). `peer` must be a rank of the cluster:
    /// only the transport's own dials ask.
    pub(crate) fn peer_addr(&self, peer: u16) -> SocketAddr {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner())[usize::from(peer)]
    }

    /// Where every node of the cluster listens now (this node's own slot included): what
    /// a node rolling back in place hands to its next image.
    pub(crate) fn peer_addrs(&self) -> Vec<SocketAddr> {
        self.addrs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `peer`'s next incarnation listens at `addr` (a supervisor restarted it on a spare
    /// slot). Dials from now on go there; the live connection, if any, is untouched.
    /// Returns `false` for a rank outside the cluster or this node's own.
    pub fn peer_moved(&self, peer: u16, addr: SocketAddr) -> bool {
        if peer == self.rank || usize::from(peer) >= self.size {
            return false;
        }
        self.addrs.lock().unwrap_or_else(|e| e.into_inner())[usize::from(peer)] = addr;
        self.moved.notify_waiters();
        true
    }

    /// `peer` died after every node was let leave and will not be restarted: leaving
    /// does not say goodbye to it or wait for its acknowledgement (up to 2 s otherwise).
    /// Returns `false` for a rank outside the cluster or this node's own.
    pub fn peer_gone(&self, peer: u16) -> bool {
        if peer == self.rank || usize::from(peer) >= self.size {
            return false;
        }
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer);
        self.gone_changed.notify_waiters();
        crate::cluster::supervisor_channel::event(self.rank, &format!("peer-gone peer={peer}"));
        true
    }

    /// `peer`'s incarnation `incarnation` died: its supervisor saw the process end (the
    /// `died` line of [`crate::cluster::supervisor_channel`]). That incarnation and every
    /// earlier one are dead whether or not this node ever saw their connections: a
    /// connection to one of them is closed now, without waiting for its silence to last
    /// the failure timeout, and one that comes up later (its packets were in flight) is
    /// refused. A newer incarnation's connection is left alone. Returns `false` for a
    /// rank outside the cluster or this node's own.
    pub fn peer_died(&self, peer: u16, incarnation: u32) -> bool {
        if peer == self.rank || usize::from(peer) >= self.size {
            return false;
        }
        // Decided under the connection lock: a newer incarnation's connection is entered
        // under it too, so it is never the one closed or marked down here.
        let closed = {
            let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
            {
                let mut known = self.incarnations.lock().unwrap_or_else(|e| e.into_inner());
                let fate = known.entry(peer).or_default();
                fate.dead = Some(fate.dead.map_or(incarnation, |d| d.max(incarnation)));
            }
            let dead = conns
                .get(&peer)
                .is_some_and(|(held, _)| *held <= incarnation);
            dead.then(|| conns.remove(&peer))
                .flatten()
                .map(|(held, conn)| {
                    if let Ok(link) = self.link(peer) {
                        link.state.store(LINK_DOWN, Ordering::Release);
                    }
                    let declared = self
                        .detector
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .failed(peer);
                    conn.close(2u32.into(), b"died");
                    (held, declared)
                })
        };
        match closed {
            Some((held, true)) => self.node_failed(peer, FailedBecause::Died { incarnation: held }),
            Some((held, false)) => tracing::info!(
                peer,
                incarnation = held,
                "closed the connection of node {peer}'s dead incarnation {held}"
            ),
            None => tracing::debug!(
                peer,
                incarnation,
                "node {peer}'s incarnation {incarnation} died; no connection of it here"
            ),
        }
        true
    }

    /// Notes that `peer`'s `incarnation` said Hello; false if that connection is out of
    /// date (see [`PeerIncarnations::outdated`]).
    fn hello_from(&self, peer: u16, incarnation: u32) -> bool {
        let mut known = self.incarnations.lock().unwrap_or_else(|e| e.into_inner());
        let fate = known.entry(peer).or_default();
        fate.newest = Some(fate.newest.map_or(incarnation, |n| n.max(incarnation)));
        !fate.outdated(incarnation)
    }

    /// Whether a connection of `peer`'s `incarnation` is out of date (call with `conns`
    /// locked).
    fn outdated(&self, peer: u16, incarnation: u32) -> bool {
        self.incarnations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&peer)
            .is_some_and(|f| f.outdated(incarnation))
    }

    fn is_gone(&self, peer: u16) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&peer)
    }

    /// Says goodbye to every peer, flushes and stops the network thread.
    pub fn close(&self) {
        let mut goodbye = Vec::new();
        if frame::encode(&FrameBody::Goodbye, &mut goodbye).is_ok() {
            let goodbye = SplitFrame::whole(Bytes::from(goodbye));
            for r in 0..self.size as u16 {
                if r != self.rank && !self.is_gone(r) {
                    // Goodbye, then the end-of-stream marker: the writer finishes the
                    // stream once everything queued before it has been written.
                    let _ = self.send_frame(r, goodbye.clone());
                    let _ = self.send_frame(r, SplitFrame::default());
                }
            }
        }
        self.shutdown.notify_one();
        let driver = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        match driver {
            Some(NetDriver::Thread(t)) => {
                let _ = t.join();
            }
            Some(NetDriver::Engine(done)) => {
                let _ = done.recv_timeout(Duration::from_secs(5));
            }
            None => {}
        }
    }

    /// Handles one inbound frame from `rank`. Returns the addressee of a delivered message
    /// whose mailbox is above the high-water mark: the caller stops reading from that peer
    /// until it drains, which pushes back through QUIC flow control to the sender.
    /// `via` is the incarnation of `from` whose connection carried the frame.
    fn dispatch(
        self: &Arc<Self>,
        from: u16,
        via: u32,
        body: FrameBody,
        node: &NodeHandle,
    ) -> Option<ActorId> {
        counter!(FRAMES_RECEIVED).increment(1);
        match body {
            FrameBody::Envelope(env) => {
                let request = env.request;
                let to = env.to;
                match node.deliver_remote(env, from, None) {
                    Ok(depth) if depth > INBOUND_HIGH_WATER => return Some(to),
                    Ok(_) => {}
                    Err(err) => {
                        counter!(UNDELIVERABLE, "reason" => reason(&err)).increment(1);
                        tracing::warn!(from, actor = %to, "undeliverable message: {err}");
                        if let Some(request) = request {
                            let outcome = Err(err);
                            self.try_send_body(from, &FrameBody::Reply { request, outcome });
                        }
                    }
                }
            }
            FrameBody::Reply { request, outcome } => {
                if crate::recovery::hooks::is_main_request(request) && node.recovers() {
                    // Replies to `main` travel logged (a re-executed `main` needs them
                    // again): an unlogged one is not taken.
                    counter!(UNDELIVERABLE, "reason" => "unlogged_driver_reply").increment(1);
                    tracing::warn!(
                        from,
                        "unlogged reply to main's request from node {from} refused"
                    );
                } else if let Some((_, p)) = self.pending.remove(&request) {
                    // Any node may answer: a reply slot travels in messages.
                    let _ = p.tx.send(outcome);
                }
            }
            FrameBody::BarrierArrive { epoch, rank } => {
                // Only rank 0 counts arrivals, and each node arrives for itself.
                if self.rank == 0 && rank == from {
                    self.barrier_arrive(epoch, rank);
                } else {
                    self.misdirected(from, "barrier_arrive");
                }
            }
            // Only rank 0 releases barriers.
            FrameBody::BarrierRelease { epoch } if from == 0 => self.barrier_release(epoch),
            FrameBody::BarrierRelease { .. } => self.misdirected(from, "barrier_release"),
            FrameBody::Goodbye => {
                self.detector
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .departed(from);
                if let Ok(link) = self.link(from) {
                    link.state.store(LINK_DOWN, Ordering::Release);
                }
            }
            FrameBody::Recovery(frame) => match node.recovery() {
                Some(layer) => {
                    if let Some((to, depth)) = layer.on_frame(node, from, via, frame) {
                        if depth > INBOUND_HIGH_WATER {
                            return Some(to);
                        }
                    }
                }
                None => {
                    counter!(UNDELIVERABLE, "reason" => "recovery_off").increment(1);
                    tracing::warn!(
                        from,
                        "a recovery frame from node {from}, but recovery is off here"
                    );
                }
            },
            FrameBody::Window { window, frame } => node.windows().handle_frame(from, window, frame),
            FrameBody::WindowSegment {
                window,
                segment,
                incarnation,
                nonce,
            } => node
                .windows()
                .handle_segment(from, window, segment, incarnation, nonce),
            FrameBody::Heartbeat | FrameBody::Hello { .. } => {}
        }
        None
    }
}

fn reason(err: &RemoteError) -> &'static str {
    match err {
        RemoteError::UnknownActor(_) => "unknown_actor",
        RemoteError::WrongType(_) => "wrong_type",
        RemoteError::Undecodable(..) => "undecodable",
        RemoteError::ActorGone(_) => "actor_gone",
        RemoteError::NoReply(_) => "no_reply",
        RemoteError::TimedOut(_) => "timed_out",
        RemoteError::TooLarge { .. } => "too_large",
    }
}

/// The RTT a new connection assumes until it has measured one. quinn's default (333 ms,
/// for the Internet) puts the first retransmission of a connection's first packet about
/// 1 s out: a node that dialed a peer whose process had not bound its socket yet (the
/// packet lost) joined the cluster 1 s late, in about 1 start in 6 of 4 nodes on one
/// host. On cluster links 10 ms retries within ~60 ms and backs off exponentially.
const INITIAL_RTT: Duration = Duration::from_millis(10);

fn quic_transport_config() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    // Large windows so one stream can fill the pipe with big messages.
    t.stream_receive_window(quinn::VarInt::from_u32(32 << 20));
    t.receive_window(quinn::VarInt::from_u32(64 << 20));
    t.send_window(64 << 20);
    t.max_concurrent_uni_streams(quinn::VarInt::from_u32(16));
    t.keep_alive_interval(Some(Duration::from_secs(1)));
    t.initial_rtt(INITIAL_RTT);
    t.max_idle_timeout(Some(quinn::VarInt::from_u32(60_000).into()));
    Arc::new(t)
}

async fn net_main(
    t: Arc<Transport>,
    config: TransportConfig,
    creds: Credentials,
    outboxes: Vec<Option<mpsc::Receiver<SplitFrame>>>,
    node: NodeHandle,
    ready: std::sync::mpsc::Sender<Result<(), TransportError>>,
) {
    let setup = || -> Result<quinn::Endpoint, TransportError> {
        let server_tls = creds.server_config()?;
        let client_tls = creds.client_config()?;
        let server_crypto = quinn::crypto::rustls::QuicServerConfig::try_from(server_tls)
            .map_err(|e| TransportError::Runtime(e.to_string()))?;
        let client_crypto = quinn::crypto::rustls::QuicClientConfig::try_from(client_tls)
            .map_err(|e| TransportError::Runtime(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_crypto));
        server.transport_config(quic_transport_config());
        let mut client = quinn::ClientConfig::new(Arc::new(client_crypto));
        client.transport_config(quic_transport_config());
        let addr = config.addrs[config.rank as usize];
        let (mut endpoint, _) = udp_socket::endpoint(addr, Some(server))
            .map_err(|source| TransportError::Bind { addr, source })?;
        endpoint.set_default_client_config(client);
        Ok(endpoint)
    };
    let endpoint = match setup() {
        Ok(e) => e,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    *t.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(endpoint.clone());
    if let Some(doorbell) = t.shm.as_ref().and_then(|s| s.take_doorbell()) {
        match doorbell.into_tokio() {
            Ok(socket) => {
                let t = Arc::clone(&t);
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    loop {
                        match socket.recv(&mut buf).await {
                            Ok(n) => match shm::doorbell::decode(&buf[..n]) {
                                Some((peer, incarnation)) => {
                                    if let Some(shm) = &t.shm {
                                        shm.wake(peer, incarnation);
                                        // A doorbell dropped on a full socket queue is
                                        // made up for here: look at every link.
                                        shm.sweep();
                                    }
                                }
                                None => {
                                    counter!(BAD_FRAMES, "kind" => "doorbell").increment(1);
                                }
                            },
                            Err(e) => {
                                tracing::warn!("shared-memory doorbell: {e}");
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                });
            }
            Err(e) => {
                let _ = ready.send(Err(TransportError::SharedMemory(format!(
                    "cannot poll the shared-memory doorbell: {e}"
                ))));
                return;
            }
        }
    }

    let size = config.size();
    let rank = config.rank;
    let (conn_tx, mut conn_rx) = mpsc::unbounded_channel::<(u16, quinn::Connection)>();

    // Accept connections from higher ranks.
    {
        let endpoint = endpoint.clone();
        let conn_tx = conn_tx.clone();
        tokio::spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let conn_tx = conn_tx.clone();
                tokio::spawn(async move {
                    match incoming.await {
                        Ok(conn) => {
                            // The peer's rank is in its certificate name; the Hello on its
                            // stream confirms it. Here we only need the connection.
                            let _ = conn_tx.send((u16::MAX, conn));
                        }
                        Err(e) => {
                            counter!(HANDSHAKE_FAILURES).increment(1);
                            tracing::warn!("refused a connection: {e}");
                        }
                    }
                });
            }
        });
    }
    // Connect to lower ranks, retrying until they listen. A restarted node also dials the
    // higher ranks: its Hello tells them at once that its previous incarnation is dead,
    // instead of after their heartbeat timeout.
    let dial_upto = if config.reconnect && config.incarnation > 0 {
        size as u16
    } else {
        rank
    };
    // Every connection: open our outbound stream (Hello first), read theirs.
    let rv = Arc::new(Rendezvous {
        t: Arc::clone(&t),
        node: node.clone(),
        size,
        rank,
        max_frame: config.max_frame,
        incarnation: config.incarnation,
        inbound_ready: Mutex::new(HashSet::new()),
        inbound_notify: Notify::new(),
        outbox_returned: Notify::new(),
        outbox_slots: Mutex::new(
            outboxes
                .into_iter()
                .enumerate()
                .filter_map(|(r, o)| o.map(|rx| (r as u16, rx)))
                .collect(),
        ),
        dialing: Mutex::new(HashSet::new()),
    });
    for peer in (0..dial_upto).filter(|p| *p != rank) {
        rv.begin_dial(peer);
        tokio::spawn(dial(
            Arc::clone(&rv),
            endpoint.clone(),
            conn_tx.clone(),
            peer,
            config.connect_timeout,
        ));
    }
    {
        let rv = Arc::clone(&rv);
        tokio::spawn(async move {
            while let Some((dialed, conn)) = conn_rx.recv().await {
                tokio::spawn(serve_connection(Arc::clone(&rv), conn, dialed));
            }
        });
    }

    // Heartbeats go out from the start, so peers that connected early do not time out
    // while the rest of the cluster forms; suspicion starts once everyone is connected.
    let mut hb = Vec::new();
    let _ = frame::encode(&FrameBody::Heartbeat, &mut hb);
    let hb = SplitFrame::whole(Bytes::from(hb));
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let endpoint_for_redial = endpoint.clone();
    let conn_tx_for_redial = conn_tx.clone();
    let rv_for_redial = Arc::clone(&rv);
    drop(conn_tx);
    {
        let t = Arc::clone(&t);
        let watching = Arc::clone(&watching);
        let interval = config.heartbeat_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                for r in 0..size as u16 {
                    if r != rank {
                        t.try_send_frame(r, hb.clone());
                    }
                }
                if watching.load(Ordering::Acquire) {
                    let (suspects, pause) = {
                        let mut d = t.detector.lock().unwrap_or_else(|e| e.into_inner());
                        (d.poll(Instant::now()), d.take_pause())
                    };
                    if let Some(pause) = pause {
                        // Our own silence, not the peers': their heartbeats wait unread.
                        counter!(LOCAL_PAUSES).increment(1);
                        tracing::warn!(
                            paused_ms = pause.as_millis() as u64,
                            "this node did not run for {} ms (an overloaded or stopped \
                             process); its peers get a whole failure timeout again",
                            pause.as_millis()
                        );
                        crate::cluster::supervisor_channel::event(
                            rank,
                            &format!("paused ms={}", pause.as_millis()),
                        );
                    }
                    for s in suspects {
                        t.node_failed(s.rank, FailedBecause::Silence(s.silent_for));
                        // With recovery on the rank comes back: the higher rank dials.
                        if t.reconnect && s.rank < rank {
                            rv_for_redial.begin_dial(s.rank);
                            tokio::spawn(dial(
                                Arc::clone(&rv_for_redial),
                                endpoint_for_redial.clone(),
                                conn_tx_for_redial.clone(),
                                s.rank,
                                Duration::from_secs(3600),
                            ));
                        }
                    }
                }
            }
        });
    }

    // Wait until every peer's stream said Hello.
    let all_in = async {
        loop {
            let notified = rv.inbound_notify.notified();
            if rv
                .inbound_ready
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
                == size - 1
            {
                return;
            }
            notified.await;
        }
    };
    if tokio::time::timeout(config.connect_timeout, all_in)
        .await
        .is_err()
    {
        let have = rv
            .inbound_ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let missing = (0..size as u16)
            .filter(|r| *r != rank && !have.contains(r))
            .collect();
        let _ = ready.send(Err(TransportError::ConnectTimeout {
            missing,
            timeout: config.connect_timeout,
        }));
        endpoint.close(0u32.into(), b"startup failed");
        return;
    }
    {
        let now = Instant::now();
        let mut d = t.detector.lock().unwrap_or_else(|e| e.into_inner());
        for r in (0..size as u16).filter(|r| *r != rank) {
            d.observe(r, now);
        }
    }
    watching.store(true, Ordering::Release);
    let _ = ready.send(Ok(()));
    t.shutdown.notified().await;
    // Let every writer flush what was queued (Goodbye last) and see it acknowledged,
    // then close.
    let mut writers = std::mem::take(&mut *t.writers.lock().unwrap_or_else(|e| e.into_inner()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    loop {
        let changed = t.gone_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        // A peer that is gone (it died after every node was let leave, and the supervisor
        // said so, possibly while we wait here) will acknowledge nothing.
        writers.retain(|(peer, w)| {
            if t.is_gone(*peer) {
                w.abort();
            }
            !w.is_finished() && !t.is_gone(*peer)
        });
        if writers.is_empty() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = &mut changed => {}
            _ = futures::future::join_all(writers.iter_mut().map(|(_, w)| w)) => break,
        }
    }
    endpoint.close(0u32.into(), b"bye");
    let _ = tokio::time::timeout(Duration::from_millis(500), endpoint.wait_idle()).await;
}

/// Connects to `peer` at `addr`, retrying until it listens or `patience` runs out, and
/// hands the connection to the connection tasks.
async fn dial(
    rv: Arc<Rendezvous>,
    endpoint: quinn::Endpoint,
    conn_tx: mpsc::UnboundedSender<(u16, quinn::Connection)>,
    peer: u16,
    patience: Duration,
) {
    let deadline = Instant::now() + patience;
    loop {
        // Read at every attempt: the peer may have been restarted elsewhere meanwhile.
        let moved = rv.t.moved.notified();
        tokio::pin!(moved);
        moved.as_mut().enable();
        let addr = rv.t.peer_addr(peer);
        let attempt = match endpoint.connect(addr, &credentials::server_name(peer)) {
            Ok(connecting) => tokio::select! {
                done = connecting => done.map_err(|e| e.to_string()),
                // Some peer moved (a move of another one costs this attempt a retry).
                () = &mut moved => Err(format!("a peer moved; dialing node {peer} again")),
            },
            Err(e) => Err(e.to_string()),
        };
        match attempt {
            Ok(conn) => {
                // The dial ends when serve_connection has seen the peer's Hello (or not).
                if conn_tx.send((peer, conn)).is_err() {
                    rv.end_dial(peer);
                }
                return;
            }
            Err(e) if Instant::now() < deadline && !conn_tx.is_closed() => {
                tracing::debug!(peer, "connect failed, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                tracing::error!(peer, "could not connect to node {peer} at {addr}: {e}");
                rv.end_dial(peer);
                return;
            }
        }
    }
}

/// What every connection task of one node shares.
struct Rendezvous {
    t: Arc<Transport>,
    node: NodeHandle,
    size: usize,
    rank: u16,
    max_frame: usize,
    /// This node's incarnation, announced in every Hello.
    incarnation: u32,
    /// Peers whose Hello arrived.
    inbound_ready: Mutex<HashSet<u16>>,
    inbound_notify: Notify,
    /// Each peer's outbound queue, taken by the writer of its connection (and given back
    /// when that connection breaks, for the peer's next incarnation).
    outbox_slots: Mutex<HashMap<u16, mpsc::Receiver<SplitFrame>>>,
    outbox_returned: Notify,
    /// Peers this node is dialing and has not yet heard a Hello from on that dial. When
    /// two nodes dial each other at once (two restarted nodes; a restarted node and a
    /// survivor that saw it fail), both keep the connection dialed by the higher rank.
    dialing: Mutex<HashSet<u16>>,
}

impl Rendezvous {
    fn begin_dial(&self, peer: u16) {
        self.dialing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer);
    }

    fn end_dial(&self, peer: u16) {
        self.dialing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&peer);
    }

    /// Whether a connection dialed by `peer` loses against this node's own dial to it.
    fn crossed_dial_wins(&self, peer: u16) -> bool {
        self.rank > peer
            && self
                .dialing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&peer)
    }

    /// Takes `peer`'s outbound queue, waiting up to `wait` for a broken connection's
    /// writer to give it back.
    async fn take_outbox(&self, peer: u16, wait: Duration) -> Option<mpsc::Receiver<SplitFrame>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let returned = self.outbox_returned.notified();
            if let Some(rx) = self
                .outbox_slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer)
            {
                return Some(rx);
            }
            if tokio::time::timeout_at(deadline, returned).await.is_err() {
                return None;
            }
        }
    }

    /// Starts the writer of `peer`'s queue (`writing`, which returns the queue if its
    /// connection broke); with recovery on, the queue comes back to the slot then.
    fn start_writer(
        self: &Arc<Self>,
        peer: u16,
        writing: impl std::future::Future<Output = Option<mpsc::Receiver<SplitFrame>>> + Send + 'static,
    ) {
        let rv = Arc::clone(self);
        let w = tokio::spawn(async move {
            let back = writing.await;
            if let Some(rx) = back.filter(|_| rv.t.reconnect) {
                rv.outbox_slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(peer, rx);
                rv.outbox_returned.notify_waiters();
            }
        });
        self.t
            .writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((peer, w));
    }
}

async fn serve_connection(rv: Arc<Rendezvous>, conn: quinn::Connection, dialed: u16) {
    let (t, node, size, rank, max_frame) = (&rv.t, &rv.node, rv.size, rv.rank, rv.max_frame);
    let (inbound_ready, inbound_notify) = (&rv.inbound_ready, &rv.inbound_notify);
    // How long a new connection waits for the writer of a broken one to hand its queue
    // over (recovery on); without recovery a second connection is a duplicate.
    let handover = if t.reconnect {
        Duration::from_secs(5)
    } else {
        Duration::ZERO
    };
    // The dialer opens its stream with a Hello at once; the acceptor learns the peer's
    // rank from that Hello, decides whether to keep the connection, and only then opens
    // its own. Neither side hands its queued frames to a connection before it has the
    // other's Hello, so a connection refused as a duplicate loses no frame.
    let dial_guard = DialGuard {
        rv: Arc::clone(&rv),
        peer: dialed,
    };
    let mut dialer_stream = None;
    // The dialer offers a shared segment and a queue pair in its Hello (kept until the
    // answer comes).
    let mut offer = None;
    #[cfg(feature = "rdma")]
    let mut rdma_pending = None;
    #[cfg(not(feature = "rdma"))]
    let rdma_pending: Option<()> = None;
    if dialed != u16::MAX {
        let made = t.shm.as_ref().map(|s| (s.offer(dialed), s.required()));
        let Ok((kept, shm_hello)) = dialer_offer(made, "shm", dialed) else {
            conn.close(1u32.into(), b"no shared memory");
            return;
        };
        offer = kept;
        #[cfg(feature = "rdma")]
        let rdma_hello = {
            let made = t.rdma.as_ref().map(|r| (r.offer(), r.required()));
            let Ok((kept, hello)) = dialer_offer(made, "rdma", dialed) else {
                conn.close(1u32.into(), b"no rdma");
                return;
            };
            rdma_pending = kept;
            hello
        };
        #[cfg(not(feature = "rdma"))]
        let rdma_hello = None;
        match open_with_hello(&conn, rank, size, rv.incarnation, shm_hello, rdma_hello).await {
            Ok(send) => dialer_stream = Some(send),
            Err(e) => {
                tracing::debug!(peer = dialed, "cannot open stream: {e}");
                return;
            }
        }
    }
    let mut recv = match conn.accept_uni().await {
        Ok(r) => r,
        Err(e) => {
            // A refused crossed dial ends here too (the peer kept its own dial).
            tracing::debug!("peer closed before opening its stream: {e}");
            return;
        }
    };
    let mut decoder = FrameDecoder::new(max_frame);
    let (peer, incarnation, peer_shm, peer_rdma) = loop {
        match decoder.next_frame() {
            Ok(Some(FrameBody::Hello {
                rank: r,
                size: s,
                incarnation,
                shm,
                rdma,
            })) if (r as usize) < size && s as usize == size && r != rank => {
                break (r, incarnation, shm, rdma)
            }
            Ok(Some(other)) => {
                tracing::warn!("peer did not start with a valid Hello: {other:?}");
                counter!(BAD_FRAMES, "kind" => "no_hello").increment(1);
                conn.close(1u32.into(), b"expected hello");
                return;
            }
            Ok(None) => {}
            Err(e) => {
                counter!(BAD_FRAMES, "kind" => e.kind()).increment(1);
                tracing::warn!("bad first frame: {e}");
                conn.close(1u32.into(), b"bad frame");
                return;
            }
        }
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            _ => return,
        }
    };
    if dialed != u16::MAX && dialed != peer {
        tracing::warn!(dialed, peer, "peer identity mismatch");
        conn.close(1u32.into(), b"identity mismatch");
        return;
    }
    if t.reconnect && !t.hello_from(peer, incarnation) {
        // Its supervisor said it died, or its successor is here already: its packets were
        // still in flight.
        tracing::debug!(
            peer,
            incarnation,
            "refused a connection of node {peer}'s outdated incarnation {incarnation}"
        );
        conn.close(2u32.into(), b"outdated incarnation");
        return;
    }
    if dialed == u16::MAX && t.reconnect && rv.crossed_dial_wins(peer) {
        tracing::debug!(
            peer,
            "node {peer} dialed while this node dials it; keeping ours"
        );
        counter!(CROSSED_DIALS).increment(1);
        conn.close(1u32.into(), b"crossed dial");
        return;
    }
    // A newer incarnation of a peer we still think alive: the old one died (faster than
    // its heartbeats could tell).
    let previous = t
        .conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&peer)
        .map(|(inc, _)| *inc);
    match previous {
        Some(old) if t.reconnect && incarnation > old => {
            let declared = t
                .detector
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .failed(peer);
            if declared {
                t.node_failed(peer, FailedBecause::Replaced { incarnation });
            } else if let Some((_, c)) = t
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer)
            {
                c.close(2u32.into(), b"superseded");
            }
        }
        Some(_) if !t.reconnect || dialed == u16::MAX => {
            tracing::warn!(peer, "duplicate connection from node {peer}; closing it");
            conn.close(1u32.into(), b"duplicate");
            return;
        }
        _ => {}
    }
    let dialer = dialed != u16::MAX;
    let Some((shm_link, answer)) = shared_memory(t, dialer, peer, incarnation, offer, peer_shm)
    else {
        conn.close(1u32.into(), b"no shared memory");
        return;
    };
    let Some((link, rdma_answer)) = rdma_path(t, dialer, peer, shm_link, rdma_pending, peer_rdma)
    else {
        conn.close(1u32.into(), b"no rdma");
        return;
    };
    let Some(outbox) = rv.take_outbox(peer, handover).await else {
        tracing::warn!(peer, "duplicate connection from node {peer}; closing it");
        conn.close(1u32.into(), b"duplicate");
        return;
    };
    let send = match dialer_stream {
        Some(send) => send,
        None => match open_with_hello(&conn, rank, size, rv.incarnation, answer, rdma_answer).await
        {
            Ok(send) => send,
            Err(e) => {
                tracing::warn!(peer, "cannot open stream: {e}");
                rv.outbox_slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(peer, outbox);
                rv.outbox_returned.notify_waiters();
                return;
            }
        },
    };
    {
        let mut conns = t.conns.lock().unwrap_or_else(|e| e.into_inner());
        if t.reconnect && t.outdated(peer, incarnation) {
            // It died, or a newer incarnation said Hello, while this connection waited
            // for the queue: the queue is the newer one's.
            drop(conns);
            rv.outbox_slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(peer, outbox);
            rv.outbox_returned.notify_waiters();
            conn.close(2u32.into(), b"outdated incarnation");
            return;
        }
        match &link {
            #[cfg(feature = "rdma")]
            Some(PathLink::Rdma(link)) => {
                tracing::info!(peer, incarnation, "node {peer} over RDMA");
                t.rdma_links.fetch_add(1, Ordering::AcqRel);
                counter!(rdma::RDMA_LINKS, "outcome" => "up").increment(1);
                // The QUIC stream carried the Hello; it has nothing more to say.
                drop(send);
                let (link, c) = (Arc::clone(link), conn.clone());
                let closed = {
                    let c = conn.clone();
                    async move {
                        c.closed().await;
                    }
                };
                rv.start_writer(
                    peer,
                    rdma::write_loop(link, outbox, closed, move || {
                        c.close(1u32.into(), b"rdma link broken")
                    }),
                );
            }
            Some(PathLink::Shm(link)) => {
                tracing::info!(peer, incarnation, "node {peer} over shared memory");
                if let Some(shm) = &t.shm {
                    shm.register(link);
                }
                // The QUIC stream carried the Hello; it has nothing more to say.
                drop(send);
                let (link, c) = (Arc::clone(link), conn.clone());
                let closed = {
                    let c = conn.clone();
                    async move {
                        c.closed().await;
                    }
                };
                rv.start_writer(
                    peer,
                    shm::write_loop(link, outbox, closed, move || {
                        c.close(1u32.into(), b"corrupt ring")
                    }),
                );
            }
            None => rv.start_writer(peer, write_loop(send, outbox)),
        }
        conns.insert(peer, (incarnation, conn.clone()));
    }
    // From here a crossed connection from the peer meets this one in `conns`.
    drop(dial_guard);
    if let Ok(link) = t.link(peer) {
        link.state.store(LINK_UP, Ordering::Release);
    }
    {
        let mut d = t.detector.lock().unwrap_or_else(|e| e.into_inner());
        if d.liveness(peer) == PeerLiveness::Failed && t.reconnect {
            d.revived(peer, Instant::now());
            tracing::info!(
                peer,
                incarnation,
                "node {peer} is back (incarnation {incarnation})"
            );
        } else {
            d.observe(peer, Instant::now());
        }
    }
    if let Some(layer) = node.recovery() {
        layer.peer_connected(peer, incarnation, conn.remote_address());
    }
    if peer == 0 && incarnation > 0 && t.reconnect {
        // A restarted rank 0 lost the barrier state: tell it every barrier this node
        // has reached, so it can release them (again) in order.
        for epoch in 0..t.next_barrier.load(Ordering::Acquire) {
            t.try_send_body(0, &FrameBody::BarrierArrive { epoch, rank });
        }
    }
    inbound_ready
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(peer);
    inbound_notify.notify_waiters();

    match link {
        #[cfg(feature = "rdma")]
        Some(PathLink::Rdma(link)) => {
            read_rdma(t, node, peer, incarnation, &link, &conn, decoder).await;
            t.rdma_links.fetch_sub(1, Ordering::AcqRel);
        }
        Some(PathLink::Shm(link)) => {
            read_shm(t, node, peer, incarnation, &link, &conn, decoder).await;
            // After the peer's goodbye our writer may still use the link (and its
            // doorbell) until the connection closes.
            if conn.close_reason().is_some() {
                if let Some(shm) = &t.shm {
                    shm.unregister(&link);
                }
            }
        }
        None => read_quic(t, node, peer, incarnation, &conn, recv, decoder).await,
    }
}

/// A dialer's offer of data path `path` (`shm`, `rdma`) to `peer`: `made` is the offer's
/// outcome and whether `LAZARUS_TRANSPORT` requires the path (`None`: the node does not
/// use it). What to keep until the answer and what to put in the Hello; `Err` if the
/// path is required and no offer could be made (logged: the connection must close).
#[allow(clippy::type_complexity)]
fn dialer_offer<K, H>(
    made: Option<(Result<(K, H), String>, bool)>,
    path: &str,
    peer: u16,
) -> Result<(Option<K>, Option<H>), ()> {
    match made {
        None => Ok((None, None)),
        Some((Ok((kept, hello)), _)) => Ok((Some(kept), Some(hello))),
        Some((Err(e), true)) => {
            tracing::error!(
                peer,
                "LAZARUS_TRANSPORT={path}, but no {path} offer for node {peer}: {e}"
            );
            Err(())
        }
        Some((Err(e), false)) => {
            tracing::info!(peer, "node {peer} without {path}: {e}");
            Ok((None, None))
        }
    }
}

/// The path a connection's frames take instead of its QUIC streams.
enum PathLink {
    /// A shared segment with a peer on this host.
    Shm(Arc<shm::ShmLink>),
    /// A queue pair with a peer on another host.
    #[cfg(feature = "rdma")]
    Rdma(Arc<rdma::RdmaLink>),
}

/// Decides whether a connection without shared memory uses RDMA, from the Hellos (the
/// RDMA counterpart of [`shared_memory`]): `Some((link, answer))` with the link the pair
/// uses and, for an acceptor, the RDMA answer for its Hello; `None` if the connection
/// must be refused (RDMA required and impossible; the reason is logged). Shared memory,
/// when the pair has it, wins: an offered queue pair is then declined.
#[cfg(feature = "rdma")]
fn rdma_path(
    t: &Transport,
    dialer: bool,
    peer: u16,
    shm_link: Option<Arc<shm::ShmLink>>,
    pending: Option<rdma::Pending>,
    peer_rdma: Option<RdmaHello>,
) -> Option<(Option<PathLink>, Option<RdmaHello>)> {
    if let Some(link) = shm_link {
        let answer = (!dialer && matches!(peer_rdma, Some(RdmaHello::Offer(_)))).then(|| {
            RdmaHello::Decline {
                reason: "the pair uses shared memory".into(),
            }
        });
        return Some((Some(PathLink::Shm(link)), answer));
    }
    let required = t.rdma.as_ref().is_some_and(|r| r.required());
    let refuse = |why: &str| {
        tracing::error!(
            peer,
            "LAZARUS_TRANSPORT=rdma, but node {peer} cannot use RDMA with this node: {why}"
        );
        None
    };
    match (&t.rdma, pending, peer_rdma) {
        // Only a dialer offers, only an acceptor answers.
        (_, _, Some(RdmaHello::Offer(_))) if dialer => {
            tracing::warn!(
                peer,
                "node {peer} answered this node's dial with an RDMA offer"
            );
            None
        }
        (_, _, Some(RdmaHello::Accept(_) | RdmaHello::Decline { .. })) if !dialer => {
            tracing::warn!(
                peer,
                "node {peer} dialed with an RDMA answer instead of an offer"
            );
            None
        }
        // Dialer: the acceptor's answer.
        (Some(r), Some(pending), Some(RdmaHello::Accept(answer))) => {
            match r.accepted(peer, pending, &answer) {
                Ok(link) => Some((Some(PathLink::Rdma(link)), None)),
                // The acceptor's queue pair is connected already: this connection
                // cannot go on.
                Err(e) => {
                    tracing::warn!(peer, "RDMA with node {peer}: {e}");
                    None
                }
            }
        }
        (Some(_), Some(_), answer) => {
            let why = match answer {
                Some(RdmaHello::Decline { reason }) => reason,
                _ => "it did not answer the queue pair offer".into(),
            };
            if required {
                return refuse(&why);
            }
            tracing::info!(peer, "node {peer} without RDMA: {why}");
            Some((None, None))
        }
        // Acceptor: the dialer's offer.
        (Some(r), None, Some(RdmaHello::Offer(offer))) => match r.answer(peer, &offer) {
            (answer, Some(link)) => Some((Some(PathLink::Rdma(link)), Some(answer))),
            (RdmaHello::Decline { reason }, None) if required => refuse(&reason),
            (answer, None) => {
                tracing::info!(peer, "node {peer} without RDMA: {answer:?}");
                Some((None, Some(answer)))
            }
        },
        (None, _, Some(RdmaHello::Offer(_))) => Some((
            None,
            Some(RdmaHello::Decline {
                reason: "this node has no RDMA device or does not use RDMA".into(),
            }),
        )),
        (_, _, Some(RdmaHello::Accept(_))) => {
            tracing::warn!(
                peer,
                "node {peer} accepted a queue pair this node never offered"
            );
            None
        }
        (Some(_), None, _) if required => refuse("it offered no queue pair"),
        _ => Some((None, None)),
    }
}

/// Without the `rdma` feature: shared memory or QUIC; an offered queue pair is declined.
#[cfg(not(feature = "rdma"))]
fn rdma_path(
    _t: &Transport,
    dialer: bool,
    _peer: u16,
    shm_link: Option<Arc<shm::ShmLink>>,
    _pending: Option<()>,
    peer_rdma: Option<RdmaHello>,
) -> Option<(Option<PathLink>, Option<RdmaHello>)> {
    let answer =
        (!dialer && matches!(peer_rdma, Some(RdmaHello::Offer(_)))).then(|| RdmaHello::Decline {
            reason: "this node was built without RDMA (the `rdma` feature)".into(),
        });
    Some((shm_link.map(PathLink::Shm), answer))
}

/// Decides a connection's data path from the Hellos: `Some((link, answer))` with the
/// shared-memory link if the pair uses one and, for an acceptor, the answer to put in its
/// Hello; `None` if the connection must be refused (shared memory required and
/// impossible; the reason is logged).
fn shared_memory(
    t: &Transport,
    dialer: bool,
    peer: u16,
    incarnation: u32,
    offer: Option<shm::Offer>,
    peer_shm: Option<SharedMemoryHello>,
) -> Option<(Option<Arc<shm::ShmLink>>, Option<SharedMemoryHello>)> {
    let required = t.shm.as_ref().is_some_and(|s| s.required());
    let refuse = |why: &str| {
        tracing::error!(
            peer,
            "LAZARUS_TRANSPORT=shm, but node {peer} cannot use shared memory with this node: {why}"
        );
        None
    };
    match (&t.shm, offer, peer_shm) {
        // Only a dialer offers, only an acceptor answers.
        (_, _, Some(SharedMemoryHello::Offer { .. })) if dialer => {
            tracing::warn!(peer, "node {peer} answered this node's dial with an offer");
            None
        }
        (_, _, Some(SharedMemoryHello::Accept { .. } | SharedMemoryHello::Decline { .. }))
            if !dialer =>
        {
            tracing::warn!(
                peer,
                "node {peer} dialed with an answer instead of an offer"
            );
            None
        }
        // Dialer: the acceptor's answer.
        (Some(shm), Some(offer), Some(SharedMemoryHello::Accept { doorbell })) => {
            match shm.accepted(offer, &doorbell, peer, incarnation) {
                Ok(link) => Some((Some(link), None)),
                // The acceptor reads the segment already: this connection cannot go on.
                Err(e) => {
                    tracing::warn!(peer, "shared memory with node {peer}: {e}");
                    None
                }
            }
        }
        (Some(_), Some(_offer), answer) => {
            let why = match answer {
                Some(SharedMemoryHello::Decline { reason }) => reason,
                _ => "it did not answer the offer (LAZARUS_TRANSPORT=quic there?)".into(),
            };
            if required {
                return refuse(&why);
            }
            tracing::info!(peer, "node {peer} over QUIC: {why}");
            Some((None, None))
        }
        // Acceptor: the dialer's offer.
        (Some(shm), None, Some(offer @ SharedMemoryHello::Offer { .. })) => {
            let (answer, link) = shm.answer(peer, incarnation, &offer);
            match (&link, &answer) {
                (None, SharedMemoryHello::Decline { reason }) if required => refuse(reason),
                (None, SharedMemoryHello::Decline { reason }) => {
                    tracing::info!(peer, "node {peer} over QUIC: {reason}");
                    Some((None, Some(answer)))
                }
                _ => Some((link, Some(answer))),
            }
        }
        (None, _, Some(SharedMemoryHello::Offer { .. })) => Some((
            None,
            Some(SharedMemoryHello::Decline {
                reason: "this node uses QUIC only (LAZARUS_TRANSPORT=quic)".into(),
            }),
        )),
        (_, _, Some(SharedMemoryHello::Accept { .. })) => {
            tracing::warn!(
                peer,
                "node {peer} accepted a segment this node never offered"
            );
            None
        }
        (Some(_), None, _) if required => refuse("it offered no segment"),
        _ => Some((None, None)),
    }
}

/// Dispatches every complete frame `decoder` holds from `peer`. False if the stream must
/// be abandoned (it cannot be framed any more).
async fn dispatch_decoded(
    t: &Arc<Transport>,
    node: &NodeHandle,
    peer: u16,
    incarnation: u32,
    decoder: &mut FrameDecoder,
) -> bool {
    loop {
        match decoder.next_frame() {
            Ok(Some(body)) => {
                t.detector
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .observe(peer, Instant::now());
                if let Some(full) = t.dispatch(peer, incarnation, body, node) {
                    // Backpressure: stop reading this peer until the mailbox drains; QUIC
                    // flow control (or a full ring) then stalls the sender's stream and
                    // its queue. Not while a send of this node waits for room (see
                    // `sends_waiting`): two handlers bursting at each other would
                    // otherwise wait for each other for ever.
                    counter!(INBOUND_PAUSES).increment(1);
                    while t.sends_waiting.load(Ordering::Acquire) == 0
                        && node
                            .mailbox_depth(full)
                            .is_some_and(|d| d > INBOUND_LOW_WATER)
                    {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                        // Our own stalling is not the peer's silence.
                        t.detector
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .observe(peer, Instant::now());
                    }
                }
            }
            Ok(None) => return true,
            Err(e) => {
                counter!(BAD_FRAMES, "kind" => e.kind()).increment(1);
                tracing::warn!(peer, "rejected frame from node {peer}: {e}");
                if e.is_fatal() {
                    return false;
                }
            }
        }
    }
}

/// Reads `peer`'s QUIC stream: frames already buffered after the Hello, then the rest.
async fn read_quic(
    t: &Arc<Transport>,
    node: &NodeHandle,
    peer: u16,
    incarnation: u32,
    conn: &quinn::Connection,
    mut recv: quinn::RecvStream,
    mut decoder: FrameDecoder,
) {
    loop {
        if !dispatch_decoded(t, node, peer, incarnation, &mut decoder).await {
            conn.close(1u32.into(), b"bad stream");
            return;
        }
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            // Stream ended: if it was not a goodbye, heartbeats will tell.
            Ok(None) | Err(_) => return,
        }
    }
}

/// Reads `peer`'s ring of `link` until its connection closes or its stream finishes.
async fn read_shm(
    t: &Arc<Transport>,
    node: &NodeHandle,
    peer: u16,
    incarnation: u32,
    link: &shm::ShmLink,
    conn: &quinn::Connection,
    mut decoder: FrameDecoder,
) {
    let closed = conn.closed();
    tokio::pin!(closed);
    let polled = || t.shm.as_ref().is_some_and(|s| s.polled_now());
    loop {
        if !dispatch_decoded(t, node, peer, incarnation, &mut decoder).await {
            conn.close(1u32.into(), b"bad stream");
            return;
        }
        let pulled = tokio::select! {
            // A closed connection wins: nothing more of its incarnation is read.
            biased;
            _ = &mut closed => return,
            p = link.pull(&mut decoder, polled) => p,
        };
        match pulled {
            shm::Pulled::Bytes => {}
            shm::Pulled::Finished => return,
            shm::Pulled::Corrupt(e) => {
                counter!(shm::SHM_CORRUPT).increment(1);
                tracing::error!(
                    peer,
                    "the ring from node {peer}: {e}; its connection is dropped"
                );
                conn.close(1u32.into(), b"corrupt ring");
                return;
            }
        }
    }
}

/// Reads `peer`'s frames from its RDMA link until the connection closes, the peer
/// finishes its stream or the link breaks (the connection is then closed).
#[cfg(feature = "rdma")]
async fn read_rdma(
    t: &Arc<Transport>,
    node: &NodeHandle,
    peer: u16,
    incarnation: u32,
    link: &rdma::RdmaLink,
    conn: &quinn::Connection,
    mut decoder: FrameDecoder,
) {
    let closed = conn.closed();
    tokio::pin!(closed);
    loop {
        if !dispatch_decoded(t, node, peer, incarnation, &mut decoder).await {
            conn.close(1u32.into(), b"bad stream");
            return;
        }
        let pulled = tokio::select! {
            // A closed connection wins: nothing more of its incarnation is read.
            biased;
            _ = &mut closed => return,
            p = link.pull(&mut decoder) => p,
        };
        match pulled {
            rdma::Pulled::Bytes => {}
            rdma::Pulled::Finished => return,
            rdma::Pulled::Broken(e) => {
                counter!(rdma::RDMA_BROKEN).increment(1);
                tracing::error!(
                    peer,
                    "the RDMA link from node {peer}: {e}; its connection is dropped"
                );
                conn.close(1u32.into(), b"rdma link broken");
                return;
            }
        }
    }
}

/// A writer's next batch: `first` and whatever else is queued behind it (up to 64
/// frames), counted as sent. True if the end-of-stream marker (an empty frame, sent by
/// `Transport::close`) was among them: it and anything after it are left out, and the
/// writer finishes its stream after this batch.
fn gather(
    first: SplitFrame,
    outbox: &mut mpsc::Receiver<SplitFrame>,
    frames: &mut Vec<SplitFrame>,
) -> bool {
    frames.push(first);
    while frames.len() < 64 {
        match outbox.try_recv() {
            Ok(f) => frames.push(f),
            Err(_) => break,
        }
    }
    let mut finished = false;
    if let Some(end) = frames.iter().position(SplitFrame::is_empty) {
        frames.truncate(end);
        finished = true;
    }
    let bytes: usize = frames.iter().map(SplitFrame::len).sum();
    counter!(FRAMES_SENT).increment(frames.len() as u64);
    counter!(BYTES_SENT).increment(bytes as u64);
    finished
}

/// Opens this node's stream on `conn` and writes its Hello.
async fn open_with_hello(
    conn: &quinn::Connection,
    rank: u16,
    size: usize,
    incarnation: u32,
    shm: Option<SharedMemoryHello>,
    rdma: Option<RdmaHello>,
) -> Result<quinn::SendStream, String> {
    let mut send = conn.open_uni().await.map_err(|e| e.to_string())?;
    let mut hello = Vec::new();
    frame::encode(
        &FrameBody::Hello {
            rank,
            size: size as u16,
            incarnation,
            shm,
            rdma,
        },
        &mut hello,
    )
    .map_err(|e| e.to_string())?;
    send.write_all(&hello).await.map_err(|e| e.to_string())?;
    Ok(send)
}

/// Ends this node's dial to a peer when the connection task that took it over is done
/// with the handshake, however it ends.
struct DialGuard {
    rv: Arc<Rendezvous>,
    peer: u16,
}

impl Drop for DialGuard {
    fn drop(&mut self) {
        if self.peer != u16::MAX {
            self.rv.end_dial(self.peer);
        }
    }
}

/// Writes `outbox` to the peer's QUIC stream. Returns the queue if the connection broke
/// (it can serve the peer's next incarnation), `None` once the stream was finished on
/// purpose.
async fn write_loop(
    mut send: quinn::SendStream,
    mut outbox: mpsc::Receiver<SplitFrame>,
) -> Option<mpsc::Receiver<SplitFrame>> {
    let mut frames: Vec<SplitFrame> = Vec::with_capacity(64);
    let mut batch: Vec<Bytes> = Vec::with_capacity(128);
    let mut finished = false;
    while let Some(first) = outbox.recv().await {
        // One write call for many small frames.
        finished = gather(first, &mut outbox, &mut frames);
        for f in frames.drain(..) {
            batch.push(f.head);
            if !f.tail.is_empty() {
                batch.push(f.tail);
            }
        }
        if send.write_all_chunks(&mut batch).await.is_err() {
            // What was in `batch` is lost with the connection; recovery resends what the
            // peer's next incarnation needs from the sender-based log.
            return Some(outbox);
        }
        batch.clear();
        if finished {
            break;
        }
    }
    if finished {
        // Wait until the peer has read everything (or gave up on the stream).
        let _ = send.finish();
        let _ = tokio::time::timeout(Duration::from_secs(2), send.stopped()).await;
        return None;
    }
    let _ = send.finish();
    None
}
