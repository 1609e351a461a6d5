//! The shared-memory data path between two nodes on one host.
//!
//! QUIC keeps what needs it: every pair of nodes still connects over QUIC with mutual TLS
//! (membership, incarnations, the failure of a connection). In its Hello the dialer offers
//! a segment it created for the pair (`segment`); an acceptor on the same host maps it,
//! checks it and answers with an accept. From then on the pair's frames (messages,
//! replies, heartbeats, barriers, recovery frames) travel through the segment's two rings
//! (`ring`) instead of the QUIC streams, in the same order, with the same
//! back-pressure (a full ring holds the writer like a closed flow-control window) and the
//! same fault rules: a connection that ends (a peer declared failed or replaced by its
//! next incarnation) ends the segment's use, what it held is lost as a QUIC stream's
//! bytes would be, and recovery resends what the peer's next incarnation needs. A new
//! incarnation gets a new segment; nothing of a dead one's is read after its connection
//! is closed.
//!
//! A sleeping side is woken through its node's doorbell (`doorbell`).
//!
//! `LAZARUS_TRANSPORT` chooses: `auto` (default) uses shared memory with every peer that
//! can map the segment and QUIC with the others; `shm` requires it (a peer that cannot is
//! refused, with the reason); `quic` never offers or accepts it.

pub(crate) mod doorbell;
pub(crate) mod ring;
pub(crate) mod segment;

pub use segment::{MAX_RING_BYTES, MIN_RING_BYTES};

use super::frame::{FrameDecoder, SharedMemoryHello, SplitFrame};
use doorbell::{Bell, Doorbell};
use metrics::counter;
use segment::{Pair, Segment, Side};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// Pairs of nodes that set up a shared-memory path (label `outcome`: `up`, `declined`).
pub const SHM_LINKS: &str = "lazarus_transport_shm_links_total";
/// Segments left in `/dev/shm` by dialers that died before their peer opened them,
/// removed by the next node that starts on the host.
pub const SHM_SWEPT: &str = "lazarus_transport_shm_swept_total";
/// Rings whose positions a peer damaged (the connection is closed).
pub const SHM_CORRUPT: &str = "lazarus_transport_shm_corrupt_total";

/// Which data path a node uses with its peers (`LAZARUS_TRANSPORT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPath {
    /// Shared memory where the peer can map the segment, RDMA with other peers where
    /// both have a device (and the `rdma` feature), QUIC elsewhere.
    #[default]
    Auto,
    /// Shared memory with every peer; a peer that cannot is refused.
    Shm,
    /// RDMA with every peer (`rdma` feature and a device required); a peer that cannot
    /// is refused.
    Rdma,
    /// QUIC only (the baseline of the benchmarks).
    Quic,
}

impl std::str::FromStr for DataPath {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" | "" => Ok(DataPath::Auto),
            "shm" => Ok(DataPath::Shm),
            "rdma" => Ok(DataPath::Rdma),
            "quic" => Ok(DataPath::Quic),
            other => Err(format!(
                "LAZARUS_TRANSPORT={other}: expected `auto`, `shm`, `rdma` or `quic`"
            )),
        }
    }
}

/// The largest piece a writer commits at once (see `ShmLink::write_all`).
const COMMIT_PIECE: usize = 16 << 10;

/// Default size of each direction's ring.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;

/// A node's shared-memory data path: present unless the node uses QUIC only.
pub struct SharedMemory {
    rank: u16,
    incarnation: u32,
    required: bool,
    /// The readers' core polls their rings while it spins ([`SharedMemory::poll`]): the
    /// network runs on an executor core (`NetMode::Core0`).
    polled: bool,
    /// That core spins now: a reader that goes to sleep need not be rung. Only that core's
    /// thread, which also runs the readers, reads and writes it.
    spinning: std::sync::atomic::AtomicBool,
    ring_bytes: usize,
    dir: PathBuf,
    key: ::ring::hmac::Key,
    doorbell_name: String,
    /// Taken by the network runtime, which polls it.
    doorbell: Mutex<Option<Doorbell>>,
    /// The live link to each peer, for the doorbell to wake.
    links: Mutex<HashMap<u16, Arc<ShmLink>>>,
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory")
            .field("rank", &self.rank)
            .field("required", &self.required)
            .field("ring_bytes", &self.ring_bytes)
            .finish_non_exhaustive()
    }
}

/// What a dialer holds between its offer and the acceptor's answer.
#[derive(Debug)]
pub struct Offer {
    segment: Segment,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn nonce() -> [u8; 16] {
    use ::ring::rand::SecureRandom;
    let mut n = [0u8; 16];
    if ::ring::rand::SystemRandom::new().fill(&mut n).is_err() {
        // No system randomness: the time and process still make the name unique on
        // this host (the nonce guards against mix-ups, the secret against strangers).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        n[..8].copy_from_slice(&(t as u64).to_le_bytes());
        n[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    n
}

impl SharedMemory {
    /// The data path of node `rank` (incarnation `incarnation`) for `choice`, with rings of
    /// `ring_bytes`; `None` for [`DataPath::Quic`] and [`DataPath::Rdma`], or for `Auto` when this host offers no
    /// shared memory (the reason is logged). An error when `Shm` is required and cannot be.
    /// `polled`: the network runs on an executor core, which polls the rings while idle.
    pub fn new(
        choice: DataPath,
        rank: u16,
        incarnation: u32,
        secret: &[u8],
        ring_bytes: usize,
        polled: bool,
    ) -> Result<Option<SharedMemory>, String> {
        let required = match choice {
            DataPath::Quic | DataPath::Rdma => return Ok(None),
            DataPath::Auto => false,
            DataPath::Shm => true,
        };
        let key = ::ring::hmac::Key::new(::ring::hmac::HMAC_SHA256, secret);
        let tag = ::ring::hmac::sign(
            &key,
            &[
                b"doorbell".as_slice(),
                &rank.to_le_bytes(),
                &incarnation.to_le_bytes(),
                &std::process::id().to_le_bytes(),
                &nonce(),
            ]
            .concat(),
        );
        let doorbell_name = format!("lazarus-{}", hex(&tag.as_ref()[..16]));
        let dir = PathBuf::from(segment::SHM_DIR);
        let unusable = |why: String| {
            if required {
                Err(format!(
                    "LAZARUS_TRANSPORT=shm, but this node cannot use shared memory: {why}"
                ))
            } else {
                tracing::info!("shared memory unavailable, peers use QUIC: {why}");
                Ok(None)
            }
        };
        if !dir.is_dir() {
            return unusable(format!("{} does not exist", dir.display()));
        }
        let swept = segment::sweep_stale(&dir);
        if swept > 0 {
            counter!(SHM_SWEPT).increment(swept as u64);
            tracing::info!("removed {swept} shared segments left by nodes that died");
        }
        let doorbell = match Doorbell::bind(&doorbell_name) {
            Ok(d) => d,
            Err(e) => return unusable(format!("cannot bind a doorbell socket: {e}")),
        };
        Ok(Some(SharedMemory {
            rank,
            incarnation,
            required,
            polled,
            spinning: std::sync::atomic::AtomicBool::new(false),
            ring_bytes,
            dir,
            key,
            doorbell_name,
            doorbell: Mutex::new(Some(doorbell)),
            links: Mutex::new(HashMap::new()),
        }))
    }

    /// Whether a reader going to sleep now will be polled by its spinning core rather
    /// than rung.
    pub(crate) fn polled_now(&self) -> bool {
        self.polled && self.spinning.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a peer that cannot use shared memory is refused.
    pub fn required(&self) -> bool {
        self.required
    }

    /// The doorbell, for the network runtime to poll (once).
    pub(crate) fn take_doorbell(&self) -> Option<Doorbell> {
        self.doorbell
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    fn pair(&self, acceptor: u16, nonce: [u8; 16]) -> Pair {
        Pair {
            dialer: self.rank,
            dialer_incarnation: self.incarnation,
            acceptor,
            nonce,
        }
    }

    /// Dialer: creates a segment for `peer` and the Hello part that offers it.
    pub(crate) fn offer(&self, peer: u16) -> Result<(Offer, SharedMemoryHello), String> {
        let nonce = nonce();
        let tag = ::ring::hmac::sign(
            &self.key,
            &[
                b"segment".as_slice(),
                &self.rank.to_le_bytes(),
                &peer.to_le_bytes(),
                &self.incarnation.to_le_bytes(),
                &nonce,
            ]
            .concat(),
        );
        let name = segment::segment_name(std::process::id(), &hex(&tag.as_ref()[..16]));
        let segment = Segment::create(&self.dir, &name, self.ring_bytes, self.pair(peer, nonce))
            .map_err(|e| e.to_string())?;
        Ok((
            Offer { segment },
            SharedMemoryHello::Offer {
                segment: name,
                doorbell: self.doorbell_name.clone(),
                nonce,
            },
        ))
    }

    /// Acceptor: maps the segment `offer` names for dialer `peer` (incarnation
    /// `incarnation`) and connects to its doorbell. The answer to put in this node's Hello,
    /// and the link if it was accepted.
    pub(crate) fn answer(
        &self,
        peer: u16,
        incarnation: u32,
        offer: &SharedMemoryHello,
    ) -> (SharedMemoryHello, Option<Arc<ShmLink>>) {
        let SharedMemoryHello::Offer {
            segment,
            doorbell,
            nonce,
        } = offer
        else {
            return (
                SharedMemoryHello::Decline {
                    reason: "a dialer's Hello must offer, not answer".into(),
                },
                None,
            );
        };
        let pair = Pair {
            dialer: peer,
            dialer_incarnation: incarnation,
            acceptor: self.rank,
            nonce: *nonce,
        };
        let linked = Segment::open(&self.dir, segment, pair)
            .map_err(|e| e.to_string())
            .and_then(|seg| {
                let bell = Bell::connect(doorbell, self.rank, self.incarnation)
                    .map_err(|e| format!("cannot reach node {peer}'s doorbell: {e}"))?;
                Ok(ShmLink::new(seg, Side::Acceptor, bell, peer, incarnation))
            });
        match linked {
            Ok(link) => {
                counter!(SHM_LINKS, "outcome" => "up").increment(1);
                (
                    SharedMemoryHello::Accept {
                        doorbell: self.doorbell_name.clone(),
                    },
                    Some(link),
                )
            }
            Err(reason) => {
                counter!(SHM_LINKS, "outcome" => "declined").increment(1);
                (SharedMemoryHello::Decline { reason }, None)
            }
        }
    }

    /// Dialer: the acceptor `peer` (incarnation `incarnation`) took `offer`; connects to its
    /// doorbell `doorbell`.
    pub(crate) fn accepted(
        &self,
        offer: Offer,
        doorbell: &str,
        peer: u16,
        incarnation: u32,
    ) -> Result<Arc<ShmLink>, String> {
        // The acceptor unlinked it already; this covers an acceptor that did not.
        offer.segment.unlink();
        let bell = Bell::connect(doorbell, self.rank, self.incarnation)
            .map_err(|e| format!("cannot reach node {peer}'s doorbell: {e}"))?;
        counter!(SHM_LINKS, "outcome" => "up").increment(1);
        Ok(ShmLink::new(
            offer.segment,
            Side::Dialer,
            bell,
            peer,
            incarnation,
        ))
    }

    /// How many peers have a live link.
    pub fn links(&self) -> usize {
        self.links.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Makes `link` the one the doorbell wakes for its peer.
    pub(crate) fn register(&self, link: &Arc<ShmLink>) {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(link.peer, Arc::clone(link));
    }

    /// Forgets `link` if it is still its peer's.
    pub(crate) fn unregister(&self, link: &Arc<ShmLink>) {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if links.get(&link.peer).is_some_and(|l| Arc::ptr_eq(l, link)) {
            links.remove(&link.peer);
        }
    }

    /// A doorbell rang: wakes the reader and writer of the link to `peer`'s `incarnation`.
    pub(crate) fn wake(&self, peer: u16, incarnation: u32) {
        let link = self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&peer)
            .cloned();
        if let Some(link) = link.filter(|l| l.peer_incarnation == incarnation) {
            link.reader_wake.notify_one();
            link.writer_wake.notify_one();
        }
    }

    /// The executor core that runs the network, spinning: wakes the reader of every ring
    /// with unread bytes. True if one had some. No system call: this is how a spinning
    /// core takes a message in a microsecond instead of a doorbell's wake-up.
    pub(crate) fn poll(&self) -> bool {
        let Ok(links) = self.links.try_lock() else {
            return false;
        };
        let mut found = false;
        for link in links.values() {
            // A reader that is awake (dispatching, or paused for a full mailbox) reads
            // without help: counting its bytes as news would keep the core from blocking.
            if link.parked.load(std::sync::atomic::Ordering::Acquire) {
                let (_, inbound) = link.segment.rings(link.side);
                if inbound.poll() {
                    link.reader_wake.notify_one();
                    found = true;
                }
            }
        }
        found
    }

    /// Whether any peer is reached through shared memory (else nothing is worth polling).
    pub(crate) fn active(&self) -> bool {
        self.links.try_lock().map(|l| !l.is_empty()).unwrap_or(true)
    }

    /// After a doorbell: wakes every parked reader with bytes waiting and every writer
    /// waiting with room. A doorbell that could not be sent (the socket's queue was full)
    /// is not repeated, but the datagrams that filled the queue lead here.
    pub(crate) fn sweep(&self) {
        let links: Vec<Arc<ShmLink>> = self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for link in links {
            let (outbound, inbound) = link.segment.rings(link.side);
            if link.parked.load(std::sync::atomic::Ordering::Acquire) && inbound.poll() {
                link.reader_wake.notify_one();
            }
            if outbound.has_room() {
                link.writer_wake.notify_one();
            }
        }
    }

    /// That core starts spinning: readers going to sleep from now on are polled.
    pub(crate) fn spins(&self) {
        self.spinning
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// That core stops spinning (to block, or to run actors): its sleeping readers must be
    /// rung from now on. True if bytes wait already (their readers were woken).
    pub(crate) fn before_block(&self) -> bool {
        self.spinning
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = false;
        for link in links.values() {
            let (_, inbound) = link.segment.rings(link.side);
            if inbound.reader_blocks() && link.parked.load(std::sync::atomic::Ordering::Acquire) {
                link.reader_wake.notify_one();
                found = true;
            }
        }
        found
    }
}

impl crate::executor::IdleProbe for SharedMemory {
    fn active(&self) -> bool {
        SharedMemory::active(self)
    }

    fn spins(&self) {
        SharedMemory::spins(self)
    }

    fn poll(&self) -> bool {
        SharedMemory::poll(self)
    }

    fn stops_spinning(&self) -> bool {
        SharedMemory::before_block(self)
    }
}

/// One pair's shared-memory path, as one of its two nodes holds it.
#[derive(Debug)]
pub struct ShmLink {
    segment: Segment,
    side: Side,
    bell: Bell,
    peer: u16,
    peer_incarnation: u32,
    reader_wake: Notify,
    writer_wake: Notify,
    /// The reader waits for bytes (set before it sleeps, cleared when it wakes).
    parked: std::sync::atomic::AtomicBool,
}

/// What one wait of the reader ended with.
pub(crate) enum Pulled {
    /// Bytes were fed to the decoder.
    Bytes,
    /// The peer finished its stream and everything was read.
    Finished,
    /// The ring's positions are damaged.
    Corrupt(ring::RingCorrupt),
}

impl ShmLink {
    fn new(
        segment: Segment,
        side: Side,
        bell: Bell,
        peer: u16,
        peer_incarnation: u32,
    ) -> Arc<Self> {
        Arc::new(ShmLink {
            segment,
            side,
            bell,
            peer,
            peer_incarnation,
            reader_wake: Notify::new(),
            writer_wake: Notify::new(),
            parked: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Waits for bytes from the peer and feeds all of them to `decoder`. `polled` says
    /// whether a sleep now is watched by this node's spinning core.
    pub(crate) async fn pull(
        &self,
        decoder: &mut FrameDecoder,
        polled: impl Fn() -> bool,
    ) -> Pulled {
        let (_, mut inbound) = self.segment.rings(self.side);
        loop {
            match inbound.pull(|bytes| decoder.push(bytes)) {
                Err(e) => return Pulled::Corrupt(e),
                Ok(0) => {}
                Ok(_) => {
                    if inbound.take_sleeping_writer() {
                        self.bell.ring();
                    }
                    return Pulled::Bytes;
                }
            }
            if inbound.finished() && inbound.drained() {
                return Pulled::Finished;
            }
            let woken = self.reader_wake.notified();
            self.parked
                .store(true, std::sync::atomic::Ordering::Release);
            if !inbound.reader_sleeps(polled()) {
                woken.await;
            }
            self.parked
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Writes `bytes` into the ring to the peer, waiting for room as often as needed.
    /// A large write is committed in pieces of [`COMMIT_PIECE`], each announced to a
    /// sleeping reader: the reader copies one piece out while the writer copies the next
    /// in, instead of both copies of a large message running one after the other.
    async fn write_all(&self, mut bytes: &[u8]) -> Result<(), ring::RingCorrupt> {
        let (mut outbound, _) = self.segment.rings(self.side);
        while !bytes.is_empty() {
            let n = outbound.push(&bytes[..bytes.len().min(COMMIT_PIECE)])?;
            bytes = &bytes[n..];
            if n > 0 {
                if !bytes.is_empty() && outbound.take_sleeping_reader() {
                    self.bell.ring();
                }
                continue;
            }
            // Full: let a sleeping reader know what is there, then sleep for room.
            if outbound.take_sleeping_reader() {
                self.bell.ring();
            }
            let woken = self.writer_wake.notified();
            if !outbound.writer_sleeps() {
                woken.await;
            }
        }
        Ok(())
    }

    /// After a batch: wakes the reader if it sleeps.
    fn committed(&self) {
        let (outbound, _) = self.segment.rings(self.side);
        if outbound.take_sleeping_reader() {
            self.bell.ring();
        }
    }

    /// Ends the stream and waits (up to `patience`) for the peer to read it all.
    async fn finish(&self, patience: Duration) {
        let (outbound, _) = self.segment.rings(self.side);
        outbound.finish();
        self.bell.ring();
        let deadline = tokio::time::Instant::now() + patience;
        while !outbound.drained() {
            let woken = self.writer_wake.notified();
            if outbound.writer_sleeps() {
                // Room, but not drained yet: look again shortly.
                tokio::time::sleep(Duration::from_micros(200)).await;
            } else if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
        }
    }
}

/// The `shm-write` failpoint: commits the first half of `frame`, then the process dies.
async fn tear(link: &ShmLink, frame: &SplitFrame) -> Result<(), ring::RingCorrupt> {
    let half = frame.len() / 2;
    let head = half.min(frame.head.len());
    link.write_all(&frame.head[..head]).await?;
    link.write_all(&frame.tail[..half - head]).await?;
    link.committed();
    crate::failpoint::die_halfway(frame.len(), link.peer);
    Ok(())
}

/// Writes `outbox` to the peer through `link` until `closed` (the pair's QUIC connection
/// ended) or the stream is finished. Returns the queue if the connection ended (it serves
/// the peer's next incarnation), `None` once the stream was finished on purpose.
/// `corrupt` is called (and the queue returned) if the peer damaged the ring.
pub(crate) async fn write_loop(
    link: Arc<ShmLink>,
    mut outbox: mpsc::Receiver<SplitFrame>,
    closed: impl std::future::Future<Output = ()>,
    corrupt: impl FnOnce(),
) -> Option<mpsc::Receiver<SplitFrame>> {
    tokio::pin!(closed);
    let mut frames: Vec<SplitFrame> = Vec::with_capacity(64);
    loop {
        let first = tokio::select! {
            f = outbox.recv() => f,
            () = &mut closed => return Some(outbox),
        };
        // The queue closed: the transport is gone.
        let finished = super::gather(first?, &mut outbox, &mut frames);
        let write = async {
            for f in frames.drain(..) {
                if crate::failpoint::torn_shm_write(f.len()) {
                    tear(&link, &f).await?;
                }
                link.write_all(&f.head).await?;
                if !f.tail.is_empty() {
                    link.write_all(&f.tail).await?;
                }
            }
            Ok::<(), ring::RingCorrupt>(())
        };
        let written = tokio::select! {
            w = write => w,
            // What the ring held is lost with the connection, as a QUIC stream's bytes
            // would be; recovery resends what the peer's next incarnation needs.
            () = &mut closed => return Some(outbox),
        };
        frames.clear();
        if let Err(e) = written {
            counter!(SHM_CORRUPT).increment(1);
            tracing::error!(
                peer = link.peer,
                "the ring to node {}: {e}; its connection is dropped",
                link.peer
            );
            corrupt();
            return Some(outbox);
        }
        link.committed();
        if finished {
            tokio::select! {
                () = link.finish(Duration::from_secs(2)) => {}
                () = &mut closed => {}
            }
            return None;
        }
    }
}
