//! The RDMA data path between nodes on different hosts (`--features rdma`).
//!
//! As with shared memory, QUIC keeps membership: every pair connects over QUIC with
//! mutual TLS first. In its Hello the dialer offers a reliable-connected queue pair
//! (its number, first packet sequence number, the port's LID and GID, the path MTU) and
//! a receive ring it registered for remote writes (address, remote key, size) with a
//! credit word (`exchange`). An acceptor with a device connects a queue pair of its own
//! to it, answers with the same description of its side, and from then on the pair's
//! frames travel as RDMA writes into the other side's ring (`flow`): the writer copies a
//! batch of frames into a registered staging ring (`registry`) at the offset it will
//! have in the reader's ring and posts writes (`wr`) whose last carries the byte count
//! as its immediate value; the reader learns of bytes only from that completion, feeds
//! them to the same frame decoder as QUIC's bytes, and returns credit with a write with
//! immediate into the writer's credit word.
//!
//! Fault rules are those of the other paths: a completion with an error status (the
//! peer died, its queue pair was destroyed) ends the link and closes the pair's QUIC
//! connection, which is what declares a failure and what recovery answers; a new
//! incarnation connects a new queue pair with new rings. A writer killed in the middle
//! of a batch leaves bytes without a completion: the reader never sees them.
//!
//! A node without a device (or without the feature) says so once and uses the next
//! path: shared memory with peers on its host, QUIC with the others.
//!
//! What has run where: the parts that need no device (the exchange format and its
//! checks, the ring accounting, the registry, work-request and queue-pair attribute
//! construction, the fall-back) are tested in CI; the posting of work requests to an
//! adapter has not run on hardware.

pub(crate) mod exchange;
pub(crate) mod flow;
pub(crate) mod registry;
pub(crate) mod verbs;
pub(crate) mod wr;

use super::frame::{FrameDecoder, RdmaEndpoint, RdmaHello, SplitFrame};
pub use exchange::Settings;
use flow::{Imm, Place, RecvCursor, SendWindow};
use memmap2::MmapMut;
use metrics::counter;
use rdma_sys::{ibv_wc, ibv_wc_opcode, ibv_wc_status};
use registry::{Access, Keys, Registry};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{mpsc, Notify};
use verbs::{CompletionQueue, Device, PdRegister, QueuePair};

/// Pairs of nodes that set up an RDMA path (label `outcome`: `up`, `declined`).
pub const RDMA_LINKS: &str = "lazarus_transport_rdma_links_total";
/// Nodes built with RDMA that found no usable device (they use the next path).
pub const RDMA_UNAVAILABLE: &str = "lazarus_transport_rdma_unavailable_total";
/// Links ended by a failed work request or a broken credit (the connection is closed).
pub const RDMA_BROKEN: &str = "lazarus_transport_rdma_broken_total";

/// Outstanding sends and posted receives per queue pair.
const QUEUE_DEPTH: u32 = 256;
/// Sends a writer leaves free for its reader's credit writes and its finish.
const CREDIT_RESERVE: u32 = 8;
/// The `wr_id` bit of the credit and finish writes; a batch's last write carries the
/// position its bytes end at instead, which its completion frees in the staging ring.
const CONTROL_WR: u64 = 1 << 63;

/// A node's RDMA data path: an opened device and the memory registered with it.
pub struct Rdma {
    device: Arc<Device>,
    registry: Arc<Mutex<Registry<PdRegister>>>,
    ring_bytes: usize,
    required: bool,
}

impl std::fmt::Debug for Rdma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rdma")
            .field("device", &self.device.name)
            .field("port", &self.device.port)
            .field("ring_bytes", &self.ring_bytes)
            .finish()
    }
}

/// The dialer's half of a link, between its offer and the acceptor's answer.
pub(crate) struct Pending(Half);

/// A region registered for one link, deregistered when it drops.
struct Registered {
    map: MmapMut,
    keys: Keys,
    registry: Arc<Mutex<Registry<PdRegister>>>,
}

impl Registered {
    fn new(
        registry: &Arc<Mutex<Registry<PdRegister>>>,
        len: usize,
        access: Access,
    ) -> Result<Registered, String> {
        let map = MmapMut::map_anon(len).map_err(|e| format!("{len} B of memory: {e}"))?;
        let keys = registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .register(map.as_ptr() as usize, map.len(), access)?;
        Ok(Registered {
            map,
            keys,
            registry: Arc::clone(registry),
        })
    }

    fn addr(&self) -> u64 {
        self.map.as_ptr() as u64
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deregister(self.map.as_ptr() as usize);
    }
}

/// One side's queue pair and registered memory. Fields drop in order: the queue pair
/// first (nothing reads or writes the memory after it), then its completion queue, then
/// the registrations.
struct Half {
    qp: QueuePair,
    cq: CompletionQueue,
    /// The ring the peer writes into.
    ring: Registered,
    /// Word 0: the peer's credit (how far it read our frames); word 2: where its finish
    /// lands. Word 1, our credit's source, goes inline and needs no registration.
    words: Registered,
    psn: u32,
}

impl Rdma {
    /// The node's RDMA path for data path `auto` or `rdma` (`required`) on the device
    /// `settings` choose, with receive rings of `ring_bytes`; `Ok(None)` when the node
    /// has no device and may use the next path (it says why, once).
    pub fn new(
        required: bool,
        ring_bytes: usize,
        settings: &Settings,
    ) -> Result<Option<Rdma>, String> {
        match Device::open(settings) {
            Ok(device) => {
                let device = Arc::new(device);
                tracing::info!(
                    device = device.name.as_str(),
                    "RDMA on {} port {} (GID index {}): peers on other hosts over queue pairs",
                    device.name,
                    device.port,
                    device.gid_index
                );
                Ok(Some(Rdma {
                    registry: Arc::new(Mutex::new(Registry::new(PdRegister(Arc::clone(&device))))),
                    device,
                    ring_bytes,
                    required,
                }))
            }
            Err(e) if required => Err(format!("LAZARUS_TRANSPORT=rdma: {e}")),
            Err(e) => {
                counter!(RDMA_UNAVAILABLE).increment(1);
                tracing::warn!("{e}: this node uses shared memory and QUIC instead of RDMA");
                Ok(None)
            }
        }
    }

    /// RDMA is required with every peer (`LAZARUS_TRANSPORT=rdma`).
    pub fn required(&self) -> bool {
        self.required
    }

    fn half(&self) -> Result<Half, String> {
        // Sends and receives complete on one queue; room for both and some slack.
        let cq = CompletionQueue::new(&self.device, (2 * QUEUE_DEPTH + 64) as i32)?;
        let qp = QueuePair::new(&self.device, &cq, QUEUE_DEPTH)?;
        let (a, m) = wr::to_init(self.device.port);
        qp.modify(a, m)?;
        let ring = Registered::new(&self.registry, self.ring_bytes, Access::RemoteWrite)?;
        let words = Registered::new(&self.registry, 4096, Access::RemoteWrite)?;
        for i in 0..u64::from(QUEUE_DEPTH) {
            qp.post_recv(wr::empty_recv(i))?;
        }
        let mut random = [0u8; 4];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
            .map_err(|_| "no randomness for a sequence number".to_string())?;
        Ok(Half {
            qp,
            cq,
            ring,
            words,
            psn: exchange::first_psn(random),
        })
    }

    fn endpoint(&self, h: &Half) -> RdmaEndpoint {
        RdmaEndpoint {
            lid: self.device.lid,
            gid: self.device.gid,
            qpn: h.qp.qpn(),
            psn: h.psn,
            mtu: self.device.mtu,
            ring_addr: h.ring.addr(),
            ring_rkey: h.ring.keys.rkey,
            ring_bytes: h.ring.map.len() as u32,
            credit_addr: h.words.addr(),
            credit_rkey: h.words.keys.rkey,
        }
    }

    /// The dialer's offer for a new connection.
    pub(crate) fn offer(&self) -> Result<(Pending, RdmaHello), String> {
        let h = self.half()?;
        let hello = RdmaHello::Offer(self.endpoint(&h));
        Ok((Pending(h), hello))
    }

    /// The acceptor's answer to `offer`, with the link if it accepted. The acceptor's
    /// writer waits for the dialer's first credit write before it writes: until then the
    /// dialer's queue pair may not be ready to receive.
    pub(crate) fn answer(
        &self,
        peer: u16,
        offer: &RdmaEndpoint,
    ) -> (RdmaHello, Option<Arc<RdmaLink>>) {
        let linked = self.half().and_then(|h| {
            let ours = self.endpoint(&h);
            self.connect(peer, h, offer, false).map(|link| (ours, link))
        });
        match linked {
            Ok((ours, link)) => (RdmaHello::Accept(ours), Some(link)),
            Err(reason) => {
                counter!(RDMA_LINKS, "outcome" => "declined").increment(1);
                (RdmaHello::Decline { reason }, None)
            }
        }
    }

    /// The dialer's link once the acceptor accepted with `answer`: it tells the
    /// acceptor it is ready with a credit write of nothing read.
    pub(crate) fn accepted(
        &self,
        peer: u16,
        pending: Pending,
        answer: &RdmaEndpoint,
    ) -> Result<Arc<RdmaLink>, String> {
        let link = self.connect(peer, pending.0, answer, true)?;
        let mut s = link.state();
        link.post_credit(&mut s, 0)?;
        drop(s);
        Ok(link)
    }

    /// Connects `h`'s queue pair to `remote`'s. `ready`: the peer's queue pair is ready
    /// to receive (it connected first).
    fn connect(
        &self,
        peer: u16,
        h: Half,
        remote: &RdmaEndpoint,
        ready: bool,
    ) -> Result<Arc<RdmaLink>, String> {
        let mtu = exchange::check(remote, self.device.mtu)?;
        let d = &self.device;
        let global = d.ethernet || remote.lid == 0;
        let (a, m) = wr::to_rtr(remote, mtu, d.port, d.gid_index, global);
        h.qp.modify(a, m)?;
        let (a, m) = wr::to_rts(h.psn);
        h.qp.modify(a, m)?;
        let staging = Registered::new(&self.registry, remote.ring_bytes as usize, Access::Local)?;
        // SAFETY: the channel's descriptor stays open until the completion queue drops,
        // after this `AsyncFd` (the link declares `fd` before `half`).
        let registered = unsafe { AsyncFd::register_with_interest(h.cq.fd(), Interest::READABLE) };
        let fd = registered.map_err(|e| format!("cannot watch the completion channel: {e}"))?;
        Ok(Arc::new(RdmaLink {
            peer,
            state: Mutex::new(State {
                send: SendWindow::new(remote.ring_bytes as usize),
                recv: RecvCursor::new(h.ring.map.len()),
                outstanding: 0,
                completed: 0,
                ready,
                owed: None,
                finished: false,
                broken: None,
            }),
            news: Notify::new(),
            fd,
            remote: *remote,
            half: h,
            staging,
        }))
    }
}

/// What a link's completions changed.
struct State {
    send: SendWindow,
    recv: RecvCursor,
    /// Posted sends not completed yet.
    outstanding: u32,
    /// The position up to which batch writes completed: staging bytes before it may be
    /// overwritten (a retransmission re-reads them until then).
    completed: u64,
    /// The peer's queue pair receives (the dialer's first credit write arrived).
    ready: bool,
    /// A credit position due but not yet posted (the send queue was full).
    owed: Option<u64>,
    /// The peer finished its stream.
    finished: bool,
    /// Why the link cannot go on.
    broken: Option<String>,
}

/// A connected queue pair to one peer and the memory it reads and writes.
pub struct RdmaLink {
    pub(crate) peer: u16,
    state: Mutex<State>,
    /// Completions changed the state (for a waiting writer or reader).
    news: Notify,
    // Dropped in this order: the channel's watcher, the queue pair, its completion
    // queue (and channel), the memory.
    fd: AsyncFd<RawFd>,
    remote: RdmaEndpoint,
    half: Half,
    staging: Registered,
}

/// What a read of the link brought.
pub(crate) enum Pulled {
    /// Bytes for the decoder.
    Bytes,
    /// The peer finished its stream and everything before was read.
    Finished,
    /// The link failed (a work request failed, the peer broke the ring's rules).
    Broken(String),
}

impl RdmaLink {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The peer's credit: how far it read this node's frames.
    fn credit(&self) -> u64 {
        // SAFETY: the words page is mapped for the link's life and 8-aligned; the peer's
        // adapter writes word 0 with one aligned 8-byte write.
        let word = unsafe { &*(self.half.words.map.as_ptr() as *const AtomicU64) };
        word.load(Ordering::Acquire)
    }

    /// Takes the completions the queue holds and applies them to `s`; then posts a
    /// credit still owed if the send queue has room again.
    fn pump(&self, s: &mut State) {
        if s.broken.is_some() {
            return;
        }
        // SAFETY: all-zero is a valid `ibv_wc`.
        let mut wcs: [ibv_wc; 32] = unsafe { std::mem::zeroed() };
        loop {
            let n = match self.half.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    s.broken = Some(e);
                    return;
                }
            };
            for wc in &wcs[..n] {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    s.broken = Some(format!(
                        "a work request failed with status {} (vendor error {:#x})",
                        wc.status, wc.vendor_err
                    ));
                    return;
                }
                if wc.opcode & ibv_wc_opcode::IBV_WC_RECV == 0 {
                    // A send: its slot is free; a batch's bytes may be overwritten.
                    s.outstanding = s.outstanding.saturating_sub(1);
                    if wc.wr_id & CONTROL_WR == 0 {
                        s.completed = s.completed.max(wc.wr_id);
                    }
                    continue;
                }
                if wc.opcode != ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
                    s.broken = Some(format!("node {} sent a message, not a write", self.peer));
                    return;
                }
                if let Err(e) = self.half.qp.post_recv(wr::empty_recv(wc.wr_id)) {
                    s.broken = Some(e);
                    return;
                }
                s.ready = true;
                // SAFETY: a receive with immediate sets `imm_data`.
                let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
                match Imm::decode(imm) {
                    Imm::Data(n) if !s.recv.announced(n) => {
                        s.broken =
                            Some(format!("node {} wrote {n} B beyond its credit", self.peer));
                        return;
                    }
                    Imm::Data(_) | Imm::Credit => {}
                    Imm::Finish => s.finished = true,
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        if let Some(position) = s.owed {
            if let Err(e) = self.post_credit(s, position) {
                s.broken = Some(e);
            }
        }
    }

    /// The local key of `len` bytes at `addr`: an entry outside every registration is
    /// an error here rather than a protection fault on the adapter.
    fn lkey(&self, addr: u64, len: usize) -> Result<u32, String> {
        let registry = self
            .staging
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        registry
            .keys(addr as usize, len)
            .map(|k| k.lkey)
            .ok_or_else(|| format!("{len} B at {addr:#x} are not registered"))
    }

    /// Posts the writes of staged `chunks` of a batch ending at position `end`, the
    /// last with `imm`.
    fn post(&self, chunks: &[flow::Chunk], end: u64, imm: u32) -> Result<(), String> {
        let base = self.staging.addr();
        for (i, c) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let addr = base + c.offset as u64;
            let mut w = wr::SendWr::write(
                // A first chunk's completion frees nothing yet: the batch's last does.
                if last { end } else { 0 },
                (addr, c.len as u32, self.lkey(addr, c.len)?),
                (
                    self.remote.ring_addr + c.offset as u64,
                    self.remote.ring_rkey,
                ),
                last.then_some(imm),
            );
            self.half.qp.post_send(&mut w)?;
        }
        Ok(())
    }

    /// Posts an 8-byte control write (inline) of `value` into word `word` of the peer's
    /// credit page, with immediate `imm`.
    fn post_control(&self, s: &mut State, value: u64, word: u64, imm: Imm) -> Result<(), String> {
        let bytes = value.to_ne_bytes();
        let mut w = wr::SendWr::write(
            CONTROL_WR,
            (bytes.as_ptr() as u64, 8, 0),
            (self.remote.credit_addr + 8 * word, self.remote.credit_rkey),
            Some(imm.encode()),
        )
        .inline();
        s.outstanding += 1;
        self.half.qp.post_send(&mut w)
    }

    /// Writes read position `position` into the peer's credit word, or keeps it owed
    /// while the send queue is full.
    fn post_credit(&self, s: &mut State, position: u64) -> Result<(), String> {
        if s.outstanding >= QUEUE_DEPTH {
            s.owed = Some(position);
            return Ok(());
        }
        s.owed = None;
        self.post_control(s, position, 0, Imm::Credit)
    }

    /// Writes `parts` (a batch of frames, in order) into the peer's ring, waiting for
    /// the peer's readiness, credit and send-queue room as needed.
    pub(crate) async fn write_all(&self, parts: &[&[u8]]) -> Result<(), String> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (mut part, mut at, mut left) = (0usize, 0usize, total);
        while left > 0 {
            let (chunks, k, n, end) = loop {
                {
                    let mut s = self.state();
                    self.pump(&mut s);
                    if let Some(e) = &s.broken {
                        return Err(e.clone());
                    }
                    // Room is what the peer read and this side's adapter finished
                    // reading from the staging ring.
                    let free_to = self.credit().min(s.completed);
                    let room = match s.send.room(free_to) {
                        Ok(room) => room,
                        Err(_) => {
                            let e = format!("node {} sent a credit beyond what it got", self.peer);
                            s.broken = Some(e.clone());
                            return Err(e);
                        }
                    };
                    // Not a trickle of tiny writes: each costs the peer a receive and a
                    // credit write back.
                    let worth = left.min(s.send.max_batch() / 8).max(1);
                    let n = left.min(room).min(s.send.max_batch());
                    if s.ready && n >= worth && s.outstanding + 2 + CREDIT_RESERVE <= QUEUE_DEPTH {
                        match s.send.place(n, free_to) {
                            Ok((chunks, k)) => {
                                s.outstanding += k as u32;
                                break (chunks, k, n, s.send.end());
                            }
                            Err(Place::Wait) => {}
                            Err(Place::BadCredit) => {
                                return Err(format!("node {} broke its credit", self.peer))
                            }
                        }
                    }
                }
                // The reader's completions (credit, finished sends) wake us; the
                // timeout covers completions this task pumps itself.
                let _ = tokio::time::timeout(Duration::from_millis(1), self.news.notified()).await;
            };
            let base = self.staging.map.as_ptr() as *mut u8;
            let mut copied = 0;
            for c in &chunks[..k] {
                // SAFETY: `c` lies inside the staging ring (placed by the window), and
                // no posted write reads it: `completed` passed it.
                let mut dst = unsafe { std::slice::from_raw_parts_mut(base.add(c.offset), c.len) };
                while !dst.is_empty() {
                    let src = &parts[part][at..];
                    let m = src.len().min(dst.len());
                    dst[..m].copy_from_slice(&src[..m]);
                    dst = &mut dst[m..];
                    at += m;
                    copied += m;
                    if at == parts[part].len() {
                        part += 1;
                        at = 0;
                    }
                }
            }
            debug_assert_eq!(copied, n);
            self.post(&chunks[..k], end, Imm::Data(n as u32).encode())?;
            left -= n;
        }
        Ok(())
    }

    /// Tells the reader the stream is finished and waits (up to `patience`) until every
    /// write completed: the peer has the last frames before the link drops.
    pub(crate) async fn finish(&self, patience: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut posted = false;
        loop {
            {
                let mut s = self.state();
                self.pump(&mut s);
                if let Some(e) = &s.broken {
                    return Err(e.clone());
                }
                if !posted && s.outstanding < QUEUE_DEPTH {
                    self.post_control(&mut s, 0, 2, Imm::Finish)?;
                    posted = true;
                }
                if posted && s.outstanding == 0 {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    /// Moves announced bytes into `decoder`, waiting for completions if there are none.
    pub(crate) async fn pull(&self, decoder: &mut FrameDecoder) -> Pulled {
        loop {
            {
                let mut s = self.state();
                self.pump(&mut s);
                if let Some(e) = &s.broken {
                    return Pulled::Broken(e.clone());
                }
                let pending = s.recv.pending();
                if pending > 0 {
                    let base = self.half.ring.map.as_ptr();
                    for c in s.recv.readable() {
                        // SAFETY: announced bytes inside the ring; the peer writes there
                        // again only after this side's credit passes them.
                        decoder
                            .push(unsafe { std::slice::from_raw_parts(base.add(c.offset), c.len) });
                    }
                    s.recv.consume(pending);
                    if let Some(position) = s.recv.credit_due() {
                        if let Err(e) = self.post_credit(&mut s, position) {
                            s.broken = Some(e.clone());
                            return Pulled::Broken(e);
                        }
                    }
                    drop(s);
                    self.news.notify_waiters();
                    return Pulled::Bytes;
                }
                if s.finished {
                    return Pulled::Finished;
                }
            }
            self.news.notify_waiters();
            let mut ready = match self.fd.readable().await {
                Ok(r) => r,
                Err(e) => return Pulled::Broken(format!("completion channel: {e}")),
            };
            if !self.half.cq.take_events() {
                ready.clear_ready();
                continue;
            }
            if let Err(e) = self.half.cq.arm() {
                return Pulled::Broken(e);
            }
        }
    }
}

/// Writes `outbox` to the peer through `link` until `closed` or the stream is finished;
/// the same contract as the shared-memory writer. `broken` is called (and the queue
/// returned) if the link fails.
pub(crate) async fn write_loop(
    link: Arc<RdmaLink>,
    mut outbox: mpsc::Receiver<SplitFrame>,
    closed: impl std::future::Future<Output = ()>,
    broken: impl FnOnce(),
) -> Option<mpsc::Receiver<SplitFrame>> {
    tokio::pin!(closed);
    let mut frames: Vec<SplitFrame> = Vec::with_capacity(64);
    loop {
        let first = tokio::select! {
            f = outbox.recv() => f,
            () = &mut closed => return Some(outbox),
        };
        let finished = super::gather(first?, &mut outbox, &mut frames);
        let written = {
            let parts: Vec<&[u8]> = frames
                .iter()
                .flat_map(|f| [&f.head[..], &f.tail[..]])
                .filter(|p| !p.is_empty())
                .collect();
            tokio::select! {
                w = async {
                    link.write_all(&parts).await?;
                    if finished {
                        link.finish(Duration::from_secs(2)).await?;
                    }
                    Ok::<(), String>(())
                } => w,
                () = &mut closed => return Some(outbox),
            }
        };
        frames.clear();
        if let Err(e) = written {
            counter!(RDMA_BROKEN).increment(1);
            tracing::error!(
                peer = link.peer,
                "the RDMA link to node {}: {e}; its connection is dropped",
                link.peer
            );
            broken();
            return Some(outbox);
        }
        if finished {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Cluster, ClusterSpec, Launcher};
    use crate::transport::shm::{DataPath, DEFAULT_RING_BYTES};
    use crate::Node;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// A device name no host has: the same answer on a machine with an adapter.
    fn no_such_device() -> Settings {
        Settings {
            device: Some("lazarus-no-such-device".into()),
            port: 1,
            gid_index: 0,
        }
    }

    #[test]
    fn required_rdma_without_a_device_is_refused_with_the_reason() {
        let e = Rdma::new(true, DEFAULT_RING_BYTES, &no_such_device()).unwrap_err();
        assert!(e.contains("LAZARUS_TRANSPORT=rdma"), "{e}");
        assert!(e.contains("no RDMA device"), "{e}");
    }

    #[test]
    fn without_a_device_auto_has_no_rdma_path_and_counts_it_once() {
        let recorder = DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        let rdma = metrics::with_local_recorder(&recorder, || {
            Rdma::new(false, DEFAULT_RING_BYTES, &no_such_device())
        });
        assert!(rdma.unwrap().is_none());
        let unavailable: Vec<_> = snapshots
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == RDMA_UNAVAILABLE)
            .map(|(.., value)| value)
            .collect();
        assert_eq!(unavailable, vec![DebugValue::Counter(1)]);
    }

    /// Starts `n` nodes of one cluster in this process with `LAZARUS_TRANSPORT=auto`.
    fn cluster(n: u16) -> Vec<Cluster> {
        let addrs: Vec<_> = (0..n)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect::<Vec<_>>()
            .iter()
            .map(|s| s.local_addr().unwrap())
            .collect();
        let spec = |rank: u16| ClusterSpec {
            metrics_addr: None,
            per_actor_metrics: false,
            launcher: Launcher::Lazarus,
            rank,
            addrs: addrs.clone(),
            secret: b"an in-process test secret, 32 B!".to_vec(),
            cores: Some(1),
            core_offset: rank as usize % 2,
            idle_spin: None,
            net: None,
            data_path: DataPath::Auto,
            shm_ring_bytes: DEFAULT_RING_BYTES,
            failure_timeout: None,
            recovery: None,
        };
        let started: Vec<_> = (0..n)
            .map(|rank| {
                let s = spec(rank);
                std::thread::spawn(move || Cluster::start_with(s, Node::builder()).unwrap())
            })
            .collect();
        started.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn nodes_built_with_rdma_on_a_host_without_a_device_use_shared_memory() {
        // This machine has no RDMA device: each node finds none, says so, and reaches
        // its peers on this host through shared memory. (With a device the same holds:
        // shared memory wins between nodes of one host.)
        let nodes = cluster(3);
        for node in &nodes {
            let t = node.handle().transport().expect("a cluster node");
            assert_eq!(t.shared_memory_peers(), 2, "node {}", node.rank());
            assert_eq!(t.rdma_peers(), 0, "node {}", node.rank());
        }
        // Frames flow: every node reaches the barrier through its peers' rings.
        let done: Vec<_> = nodes
            .into_iter()
            .map(|node| {
                std::thread::spawn(move || {
                    node.barrier().expect("barrier over shared memory");
                    node.shutdown();
                })
            })
            .collect();
        for d in done {
            d.join().unwrap();
        }
    }
}
