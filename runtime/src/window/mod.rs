//! One-sided windows in a running cluster: memory every node exposes to the others'
//! `put`, `get`, `accumulate` and fetch-and-op, synchronized by fences. The rules are the
//! sans-IO machine of [`lazarus_proto::window`] (one [`Member`] per node and window);
//! this module owns what drives it: the node's part of each window, the frames between
//! the members (over the node's transport, `FrameBody::Window`), the answers and fences
//! callers wait for, and the registry the transport hands incoming frames to.
//!
//! Two paths. Between nodes of one host a node's part lives in shared memory (`shm`):
//! an origin puts into and gets from it itself, through the target's gate, and leaves a
//! record that the target's machine reads when it next runs. Otherwise, and whenever
//! the gate refuses, the operation takes the message path: the target's network thread
//! applies it to its part. Accumulates and fetch-and-ops always take the message path
//! (the target applies each in one step). A window is created by every node's `main`,
//! in the same order on every node ([`crate::Cluster::window`]).
//!
//! With recovery on, each window's membership and part are in the node's set checkpoint
//! (`WindowImage`, taken under the window's lock in the checkpoint's paused instant);
//! a restarted node's `main` creates its windows again and gets them back from the image
//! (or fresh, if the image has none), and the machine's restart exchange brings back what
//! the image lacks. `main` itself is in no image: its operations and fences the image
//! had are replayed ([`lazarus_proto::window::Issued::replayed`],
//! [`lazarus_proto::window::MainFence`]), and its reads and writes of its own part are
//! operations too, so that a re-executed `main` reads what it read before.

mod element;
mod shm;

pub use element::Element;
pub use lazarus_proto::window::{ElementType, ReduceOp};

use crate::actor_id::ActorId;
use crate::node::NodeHandle;
use crate::transport::frame::FrameBody;
use lazarus_proto::window::{
    GateWord, MainFence, Member, MemberImage, Op, OpKind, OpMeta, Recovery, Reply, Shape,
    WindowError as RuleError, WindowFrame, WindowId,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a caller waits before it says, once per period, what it still waits for.
const STALL_REPORT: Duration = Duration::from_secs(10);

/// How long a checkpoint waits for the origins inside a closed gate to leave before it
/// gives up (and is tried again at the next period): a put or get inside takes
/// microseconds, so an origin still inside is frozen or dead.
const GATE_DRAIN: Duration = Duration::from_millis(200);

/// Why a window operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    /// The operation breaks the window's rules (range, element type, reduction): refused
    /// before it touched any memory.
    #[error(transparent)]
    Refused(#[from] RuleError),
    /// The node is not part of a cluster, or the cluster is gone.
    #[error("no cluster transport: {0}")]
    NoTransport(String),
    /// Windows are not available in this configuration.
    #[error("{0}")]
    Unsupported(String),
    /// A member refused a frame of this window: the window can no longer be trusted.
    #[error("window {window} failed: {reason}")]
    Failed {
        /// The window.
        window: u32,
        /// What went wrong, and where.
        reason: String,
    },
}

/// What a node's checkpoint keeps of one window: its membership and a copy of its part,
/// taken together under the window's lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WindowImage {
    member: MemberImage,
    #[serde(with = "lazarus_proto::wire::byte_string")]
    part: Vec<u8>,
}

/// One node's part of a window and its membership, behind one lock.
struct State {
    member: Member,
    part: Part,
    /// Answers that came, by (target, origin actor, index), until their caller takes them.
    answers: BTreeMap<(u16, ActorId, u64), Vec<u8>>,
    /// The first frame this window refused, which fails every later wait.
    failed: Option<String>,
    /// The segments of the targets on this host, mapped: operations there go direct.
    peers: BTreeMap<u16, Arc<shm::Segment>>,
}

/// Where a node's part is.
enum Part {
    /// In the process's memory: every operation takes the message path.
    Local(Vec<u8>),
    /// In a shared segment the node's host peers map.
    Shared(Arc<shm::Segment>),
}

impl Part {
    /// The part's bytes, for the machine (under the window's lock).
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Part::Local(v) => v,
            // SAFETY: only this node's machine and callers use this slice, under the
            // window's lock, for one call; origins write other elements meanwhile (the
            // window's contract: an epoch's operations touch distinct elements).
            Part::Shared(s) => unsafe { s.part_mut() },
        }
    }

    fn len(&self) -> usize {
        match self {
            Part::Local(v) => v.len(),
            Part::Shared(s) => s.identity().part_bytes,
        }
    }

    fn copy(&mut self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    fn segment(&self) -> Option<&Arc<shm::Segment>> {
        match self {
            Part::Local(_) => None,
            Part::Shared(s) => Some(s),
        }
    }
}

/// What every handle of one window shares.
pub(crate) struct Shared {
    id: WindowId,
    rank: u16,
    /// This node's incarnation (its inside counters at other nodes' gates carry it).
    incarnation: u32,
    /// Whether this node maps its host peers' segments.
    shares_memory: bool,
    /// This node's part's segment and its file name, if it is in shared memory.
    own_segment: Option<Arc<shm::Segment>>,
    segment_name: Option<String>,
    /// Operations this node applied to other nodes' parts itself.
    went_direct: AtomicU64,
    /// Direct attempts sent to the message path (gate closed or at another epoch).
    turned_back: AtomicU64,
    /// Records of other nodes' direct operations on this node's part.
    records_taken: AtomicU64,
    recovery: Recovery,
    /// The thread that created the window: `main`'s.
    main_thread: std::thread::ThreadId,
    state: Mutex<State>,
    changed: Condvar,
    out: Arc<Outbound>,
}

/// How a node's windows send frames. A frame is queued straight on the peer's link when
/// it has room and nothing waits before it (no thread hand-off on the way of a get);
/// otherwise it goes to the node's sender thread, which may wait for room (the network
/// thread that hands frames in must never wait), and the frames after it follow it there,
/// so frames to a peer keep their order.
pub(crate) struct Outbound {
    transport: Option<Arc<crate::transport::Transport>>,
    queue: mpsc::Sender<(u16, FrameBody)>,
    /// Frames handed to the sender thread and not sent yet.
    queued: Arc<AtomicUsize>,
}

impl Outbound {
    /// Sends `body` to node `to` (called with the window's lock held, which keeps one
    /// window's frames in order).
    fn send(&self, to: u16, body: FrameBody) {
        let Some(transport) = &self.transport else {
            // A node alone has no peer: its windows never send.
            return;
        };
        if self.queued.load(Ordering::Acquire) == 0 {
            match transport.offer_body(to, &body) {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(to, "a window frame for node {to} was not sent: {e}");
                    return;
                }
            }
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.queue.send((to, body)).is_err() {
            // The sender thread outlives every window; if it is gone, so is the node.
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends what the machine queued: frames to peers through the sender thread, answers
    /// to this node's own operations straight into the answers.
    fn flush(&self, state: &mut State) {
        let mut woke = false;
        while let Some(t) = state.member.poll_transmit() {
            if t.to == self.rank {
                if let WindowFrame::Answer {
                    origin,
                    index,
                    values,
                } = t.frame
                {
                    state.answers.insert((t.to, origin, index), values);
                    woke = true;
                }
                continue;
            }
            let body = FrameBody::Window {
                window: self.id,
                frame: t.frame,
            };
            self.out.send(t.to, body);
        }
        if woke {
            self.changed.notify_all();
        }
    }

    /// Catches the machine up with the records origins left in this node's segment.
    /// Called before the machine handles anything else: an origin's fence count comes
    /// after its records.
    fn drain(&self, state: &mut State) {
        let State {
            member,
            part,
            failed,
            ..
        } = state;
        let Some(seg) = part.segment() else {
            return;
        };
        let mut refused = None;
        let taken = seg.take_records(self.rank, |from, r| {
            self.records_taken.fetch_add(1, Ordering::Relaxed);
            if refused.is_none() {
                if let Err(e) = member.handle_direct(from, r.meta, r.kind, r.answer) {
                    refused = Some(format!("node {from}'s direct record refused: {e}"));
                }
            }
        });
        if let Some(why) = refused.or_else(|| taken.err().map(|e| e.to_string())) {
            metrics::counter!(crate::telemetry::WINDOW_REFUSED).increment(1);
            tracing::error!(window = self.id.0, "window {}: {why}", self.id.0);
            failed.get_or_insert(why);
        }
    }

    /// Runs the machine's fence and moves the gate word to the machine's epoch.
    fn poll_fence(&self, state: &mut State) -> Result<(), RuleError> {
        self.drain(state);
        let before = state.member.epoch();
        state.member.poll_fence(state.part.bytes())?;
        let epoch = state.member.epoch();
        if epoch != before {
            if let (Some(seg), Some(gate)) = (state.part.segment(), GateWord::open_at(epoch)) {
                seg.set_gate(gate);
            }
        }
        Ok(())
    }

    /// A frame from member `from`.
    fn handle(&self, from: u16, frame: WindowFrame) {
        let mut state = self.lock();
        let state = &mut *state;
        self.drain(state);
        let restarted = matches!(frame, WindowFrame::Restarted { .. });
        if restarted {
            // Its earlier incarnation's segment is dead memory: operations to it take the
            // message path until its new segment is announced.
            state.peers.remove(&from);
        }
        let result = state
            .member
            .handle_frame(from, frame, state.part.bytes())
            .and_then(|answer| {
                if let Some((origin, index, values)) = answer {
                    state.answers.insert((from, origin, index), values);
                }
                self.poll_fence(state)
            });
        if restarted {
            // The restarted node maps nothing of its earlier incarnation's.
            self.announce(state, Some(from));
        }
        if let Err(e) = result {
            if !matches!(e, RuleError::PeerRefused { .. }) {
                metrics::counter!(crate::telemetry::WINDOW_REFUSED).increment(1);
                tracing::error!(
                    window = self.id.0,
                    from,
                    "window frame from node {from} refused: {e}"
                );
                // Its sender's waits fail too, with the reason, instead of waiting for ever.
                self.out.send(
                    from,
                    FrameBody::Window {
                        window: self.id,
                        frame: WindowFrame::Refused {
                            reason: format!("node {}: {e}", self.rank),
                        },
                    },
                );
            }
            state.failed.get_or_insert_with(|| e.to_string());
        }
        self.flush(state);
        self.changed.notify_all();
    }

    /// Waits until `ready` holds, saying every [`STALL_REPORT`] what it waits for.
    fn wait<R>(
        &self,
        what: &str,
        mut ready: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<R, WindowError> {
        let mut state = self.lock();
        let mut next_report = Instant::now() + STALL_REPORT;
        loop {
            if let Some(reason) = &state.failed {
                return Err(WindowError::Failed {
                    window: self.id.0,
                    reason: reason.clone(),
                });
            }
            if let Some(r) = ready(&mut state) {
                return Ok(r);
            }
            let now = Instant::now();
            if now >= next_report {
                tracing::warn!(
                    window = self.id.0,
                    "window {} on node {} still waits for {what}: epoch {}, answers awaited {:?}",
                    self.id.0,
                    self.rank,
                    state.member.epoch(),
                    state.member.awaiting()
                );
                next_report = now + STALL_REPORT;
            }
            state = self
                .changed
                .wait_timeout(state, next_report.saturating_duration_since(now))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Shared {
    /// Tells member `to` (every other member if `None`) where this node's part is, if it
    /// is in shared memory.
    fn announce(&self, state: &State, to: Option<u16>) {
        let (Some(seg), Some(name)) = (state.part.segment(), &self.segment_name) else {
            return;
        };
        let id = seg.identity();
        for peer in (0..id.members).filter(|p| *p != self.rank && to.is_none_or(|t| t == *p)) {
            self.out.send(
                peer,
                FrameBody::WindowSegment {
                    window: self.id,
                    segment: name.clone(),
                    incarnation: id.incarnation,
                    nonce: id.nonce,
                },
            );
        }
    }

    /// Node `from` (incarnation `incarnation`) announced its part's segment: mapped if
    /// this node can (same host), else its operations there keep the message path.
    fn map_peer(&self, from: u16, segment: &str, incarnation: u32, nonce: [u8; 16]) {
        if !self.shares_memory || from == self.rank {
            return;
        }
        let mut state = self.lock();
        let shape = state.member.shape().clone();
        let Ok(part_bytes) = shape.bytes_of(from) else {
            return;
        };
        if state
            .peers
            .get(&from)
            .is_some_and(|s| s.identity().incarnation > incarnation)
        {
            return;
        }
        // A segment whose creator died is an earlier incarnation's dead memory.
        if !crate::transport::shm::segment::creator_alive(segment) {
            return;
        }
        let id = shm::Identity {
            window: self.id,
            rank: from,
            members: shape.members(),
            incarnation,
            part_bytes,
            shape: shm::shape_digest(&shape),
            nonce,
        };
        match shm::Segment::open(&shm::dir(), segment, id) {
            Ok(seg) => {
                tracing::debug!(
                    window = self.id.0,
                    from,
                    "window {}: node {from}'s part mapped",
                    self.id.0
                );
                state.peers.insert(from, Arc::new(seg));
            }
            Err(e) => {
                metrics::counter!(crate::telemetry::WINDOW_SEGMENTS_UNMAPPED).increment(1);
                tracing::debug!(
                    window = self.id.0,
                    from,
                    "window {}: node {from}'s part stays on the message path: {e}",
                    self.id.0
                );
            }
        }
    }

    /// Applies an issued put or get to `target`'s part in `seg` itself, through the
    /// target's gate; `None` if the gate (or a full records ring) sends it to the message
    /// path, else a get's values.
    fn direct(
        &self,
        seg: &shm::Segment,
        target: u16,
        meta: OpMeta,
        op: &Op,
        shape: &Shape,
    ) -> Option<Option<Vec<u8>>> {
        let range = op.check(shape, target).ok()?;
        let keep = self.recovery == Recovery::On && op.kind == OpKind::Get;
        // A record is its identity (at most 34 bytes encoded) and a kept get's values.
        let bound = 64 + if keep { range.len() } else { 0 };
        let refused = |reason: &'static str| {
            metrics::counter!(crate::telemetry::WINDOW_GATE_REFUSED, "reason" => reason)
                .increment(1);
            self.turned_back.fetch_add(1, Ordering::Relaxed);
            None
        };
        if !seg.has_room(self.rank, bound) {
            return refused("records_full");
        }
        let gate = seg.enter(self.rank, self.incarnation);
        if let Err(closed) = gate.admits(meta.epoch) {
            seg.leave(self.rank, self.incarnation);
            return refused(match closed {
                lazarus_proto::window::Closed::Checkpointing => "checkpoint",
                _ => "epoch",
            });
        }
        let values = match op.kind {
            OpKind::Put => {
                let half = range.len() / 2;
                // SAFETY: `range` is inside the target's part (checked against the shape
                // the segment's header matched); the gate admitted this origin, so no
                // checkpoint copies the part meanwhile, and the window's contract keeps
                // the epoch's other operations off these elements.
                unsafe {
                    let to = seg.part_ptr().add(range.start);
                    to.copy_from_nonoverlapping(op.operand.as_ptr(), half);
                    crate::failpoint::inside_window_gate(target, || {
                        format!("put {} of {}", meta.index, meta.origin)
                    });
                    to.add(half).copy_from_nonoverlapping(
                        op.operand.as_ptr().add(half),
                        range.len() - half,
                    );
                }
                None
            }
            OpKind::Get => {
                let mut v = vec![0u8; range.len()];
                crate::failpoint::inside_window_gate(target, || {
                    format!("get {} of {}", meta.index, meta.origin)
                });
                // SAFETY: as for a put; the elements are read, not written.
                unsafe {
                    v.as_mut_ptr()
                        .copy_from_nonoverlapping(seg.part_ptr().add(range.start), range.len());
                }
                Some(v)
            }
            _ => {
                seg.leave(self.rank, self.incarnation);
                return None;
            }
        };
        let record = shm::Record {
            meta,
            kind: op.kind,
            answer: values.clone().filter(|_| keep),
        };
        let pushed = postcard::to_allocvec(&record)
            .map(|bytes| seg.push_record(self.rank, &bytes))
            .unwrap_or(false);
        seg.leave(self.rank, self.incarnation);
        if !pushed {
            // Room was checked: only a broken encoder gets here. The operation goes over
            // the message path too, where the target applies it (again) and counts it.
            return refused("records_full");
        }
        let kind = if op.kind == OpKind::Put { "put" } else { "get" };
        metrics::counter!(crate::telemetry::WINDOW_DIRECT, "kind" => kind).increment(1);
        self.went_direct.fetch_add(1, Ordering::Relaxed);
        Some(values)
    }

    /// Node `rank`'s incarnations up to `dead` died: counters they left raised at this
    /// node's gate are cleared.
    fn origin_died(&self, rank: u16, dead: u32) {
        if let Some(seg) = &self.own_segment {
            seg.origin_died(rank, dead);
        }
    }
}

/// Something that came for a window this node's `main` has not created yet.
enum Early {
    Frame(WindowFrame),
    Segment {
        segment: String,
        incarnation: u32,
        nonce: [u8; 16],
    },
}

/// The windows of one node, by id, and the frames that came for a window its `main` has
/// not created yet.
#[derive(Default)]
pub(crate) struct Windows {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    windows: Vec<Arc<Shared>>,
    /// On a restarted node: the windows of its checkpoint image, taken back by the
    /// re-executed `main`'s creations.
    restarted: Option<BTreeMap<WindowId, WindowImage>>,
    /// What came for windows not created yet, in order.
    early: BTreeMap<WindowId, Vec<(u16, Early)>>,
    sender: Option<Arc<Outbound>>,
    /// A get the `window-get` failpoint holds across the node's next checkpoint.
    held: Option<(u16, WindowId, WindowFrame)>,
}

impl Windows {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The node restarted: its windows are created again from `images` (its checkpoint
    /// image's), or fresh where the image has none, and tell the other members.
    pub(crate) fn restart(&self, images: Vec<WindowImage>) {
        let images = images
            .into_iter()
            .map(|i| (i.member.shape().window, i))
            .collect();
        self.registry().restarted = Some(images);
    }

    /// Every window's image, for the node's checkpoint (its cores paused). Each window's
    /// gate is closed while its part is copied; an error if origins inside did not leave
    /// within [`GATE_DRAIN`] (the checkpoint is tried again later).
    pub(crate) fn images(&self) -> Result<Vec<WindowImage>, String> {
        let windows = self.registry().windows.clone();
        windows
            .iter()
            .map(|w| {
                let mut state = w.lock();
                let state = &mut *state;
                let gate = GateWord::open_at(state.member.epoch());
                if let (Some(seg), Some(gate)) = (state.part.segment(), gate) {
                    seg.set_gate(gate.close());
                    let started = Instant::now();
                    while !seg.drained() {
                        if started.elapsed() >= GATE_DRAIN {
                            seg.set_gate(gate);
                            return Err(format!(
                                "window {}: origins still inside its gate after {:?} \
                                 (node, incarnation+1 << 32 | count): {:?}",
                                w.id.0,
                                GATE_DRAIN,
                                seg.inside_now()
                            ));
                        }
                        std::thread::yield_now();
                    }
                }
                w.drain(state);
                let image = WindowImage {
                    member: state.member.image(),
                    part: state.part.copy(),
                };
                if let (Some(seg), Some(gate)) = (state.part.segment(), gate) {
                    seg.set_gate(gate);
                }
                Ok(image)
            })
            .collect()
    }

    /// The node leaves: its segments' files are removed (the mappings stay until exit),
    /// and the timeline says how each window's operations went.
    pub(crate) fn close(&self) {
        for w in self.registry().windows.iter() {
            if let Some(seg) = &w.own_segment {
                seg.unlink();
            }
            crate::cluster::supervisor_channel::event(
                w.rank,
                &format!(
                    "window {} closed: shared_memory={} direct={} turned_back={} \
                     direct_here={}",
                    w.id.0,
                    w.own_segment.is_some(),
                    w.went_direct.load(Ordering::Relaxed),
                    w.turned_back.load(Ordering::Relaxed),
                    w.records_taken.load(Ordering::Relaxed),
                ),
            );
        }
    }

    /// Node `from` announced where its part of window `window` is.
    pub(crate) fn handle_segment(
        &self,
        from: u16,
        window: WindowId,
        segment: String,
        incarnation: u32,
        nonce: [u8; 16],
    ) {
        let shared = {
            let mut reg = self.registry();
            match reg.windows.get(window.0 as usize) {
                Some(s) => Arc::clone(s),
                None => {
                    reg.early.entry(window).or_default().push((
                        from,
                        Early::Segment {
                            segment,
                            incarnation,
                            nonce,
                        },
                    ));
                    return;
                }
            }
        };
        shared.map_peer(from, &segment, incarnation, nonce);
    }

    /// Checkpoint `id` holding `images` is committed: each member tells its peers what
    /// they may drop.
    pub(crate) fn committed(&self, id: u64, images: &[WindowImage]) {
        let (windows, held) = {
            let mut reg = self.registry();
            (reg.windows.clone(), reg.held.take())
        };
        for (w, image) in windows.iter().zip(images) {
            let mut state = w.lock();
            state.member.checkpoint_committed(&image.member);
            w.flush(&mut state);
        }
        if let Some((from, window, frame)) = held {
            // The failpoint's get, applied after the cut; its answer stays in the outbox.
            if let Some(w) = windows.get(window.0 as usize) {
                let mut state = w.lock();
                let state = &mut *state;
                let _ = state.member.handle_frame(from, frame, state.part.bytes());
            }
            crate::failpoint::window_get_answered(id);
        }
    }

    /// A frame of window `window` from node `from` (the transport's network thread).
    pub(crate) fn handle_frame(&self, from: u16, window: WindowId, frame: WindowFrame) {
        let shared = {
            let mut reg = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if let WindowFrame::Op { meta, op, .. } = &frame {
                if op.kind == OpKind::Get
                    && reg.held.is_none()
                    && crate::failpoint::hold_window_get(from, meta.origin, meta.index)
                {
                    reg.held = Some((from, window, frame));
                    return;
                }
            }
            match reg.windows.get(window.0 as usize) {
                Some(s) => Arc::clone(s),
                None => {
                    // Its `main` has not created it yet: kept, handed over at creation.
                    reg.early
                        .entry(window)
                        .or_default()
                        .push((from, Early::Frame(frame)));
                    return;
                }
            }
        };
        shared.handle(from, frame);
    }

    fn sender(&self, reg: &mut Registry, node: &NodeHandle) -> Result<Arc<Outbound>, WindowError> {
        if let Some(s) = &reg.sender {
            return Ok(Arc::clone(s));
        }
        let (tx, rx) = mpsc::channel::<(u16, FrameBody)>();
        let queued = Arc::new(AtomicUsize::new(0));
        let transport = node.transport();
        if let Some(transport) = transport.clone() {
            let queued = Arc::clone(&queued);
            std::thread::Builder::new()
                .name("lazarus-windows".into())
                .spawn(move || {
                    let mut warned: BTreeMap<u16, Instant> = BTreeMap::new();
                    while let Ok((to, body)) = rx.recv() {
                        if let Err(e) = transport.send_body(to, &body) {
                            // A dead peer fails every frame until its replacement is up:
                            // said once per peer and period.
                            let now = Instant::now();
                            if warned.get(&to).is_none_or(|at| now >= *at + STALL_REPORT) {
                                tracing::warn!(to, "window frames for node {to} not sent: {e}");
                                warned.insert(to, now);
                            }
                        }
                        queued.fetch_sub(1, Ordering::AcqRel);
                    }
                })
                .map_err(|e| {
                    WindowError::NoTransport(format!("cannot start the window sender: {e}"))
                })?;
        }
        let out = Arc::new(Outbound {
            transport,
            queue: tx,
            queued,
        });
        reg.sender = Some(Arc::clone(&out));
        Ok(out)
    }

    /// Creates the node's next window: `len` elements of `elem` on every member.
    pub(crate) fn create(
        &self,
        node: &NodeHandle,
        members: u16,
        elem: ElementType,
        len: u64,
    ) -> Result<Arc<Shared>, WindowError> {
        let rank = node.rank();
        let mut reg = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let id = WindowId(u32::try_from(reg.windows.len()).map_err(|_| RuleError::Overflow)?);
        let shape = Shape {
            window: id,
            elem,
            lens: vec![len; usize::from(members)],
        };
        let bytes = shape.bytes_of(rank)?;
        let (member, part) = match reg.restarted.as_mut() {
            None if node.recovers() => (Member::new(shape, rank)?, vec![0; bytes]),
            None => (Member::without_recovery(shape, rank)?, vec![0; bytes]),
            // A restarted node: the window as its image had it, or as new; either way the
            // other members hear of the restart.
            Some(images) => match images.remove(&id) {
                Some(image) => {
                    if *image.member.shape() != shape || image.part.len() != bytes {
                        return Err(WindowError::Unsupported(format!(
                            "window {} is created with another shape than the checkpoint's \
                             ({:?}, {} bytes here, {:?}, {} bytes there): main must create \
                             its windows the same way in every run",
                            id.0,
                            shape,
                            bytes,
                            image.member.shape(),
                            image.part.len()
                        )));
                    }
                    crate::cluster::supervisor_channel::event(
                        rank,
                        &format!(
                            "window {} restored from the checkpoint epoch={} part_bytes={}",
                            id.0,
                            image.member.epoch(),
                            image.part.len()
                        ),
                    );
                    (Member::restore(image.member)?, image.part)
                }
                None => (
                    Member::restore(Member::new(shape, rank)?.image())?,
                    vec![0; bytes],
                ),
            },
        };
        let out = self.sender(&mut reg, node)?;
        let transport = node.transport();
        let shares_memory = members > 1 && transport.as_ref().is_some_and(|t| t.shares_memory());
        let incarnation = transport.as_ref().map_or(0, |t| t.incarnation());
        let (part, segment_name) = if shares_memory {
            let (name, nonce) = shm::fresh_name();
            let sid = shm::Identity {
                window: id,
                rank,
                members,
                incarnation,
                part_bytes: bytes,
                shape: shm::shape_digest(member.shape()),
                nonce,
            };
            match shm::Segment::create(&shm::dir(), &name, sid, &part, member.epoch()) {
                Ok(seg) => (Part::Shared(Arc::new(seg)), Some(name)),
                Err(e) => {
                    tracing::warn!(
                        window = id.0,
                        "window {}: its part stays in this process (operations on it take \
                         the message path): {e}",
                        id.0
                    );
                    (Part::Local(part), None)
                }
            }
        } else {
            (Part::Local(part), None)
        };
        let own_segment = part.segment().cloned();
        let shared = Arc::new(Shared {
            id,
            rank,
            incarnation,
            shares_memory,
            own_segment,
            segment_name,
            went_direct: AtomicU64::new(0),
            turned_back: AtomicU64::new(0),
            records_taken: AtomicU64::new(0),
            recovery: if node.recovers() {
                Recovery::On
            } else {
                Recovery::Off
            },
            main_thread: std::thread::current().id(),
            state: Mutex::new(State {
                member,
                part,
                answers: BTreeMap::new(),
                failed: None,
                peers: BTreeMap::new(),
            }),
            changed: Condvar::new(),
            out,
        });
        if let (Some(t), true) = (&transport, shared.own_segment.is_some()) {
            // A dead origin's raised counter would hold this node's checkpoints.
            let weak = Arc::downgrade(&shared);
            t.on_node_failure(Arc::new(move |f: &crate::transport::NodeFailure| {
                if let (Some(w), Some(dead)) = (weak.upgrade(), f.incarnation) {
                    w.origin_died(f.rank, dead);
                }
            }));
        }
        reg.windows.push(Arc::clone(&shared));
        let early = reg.early.remove(&id).unwrap_or_default();
        drop(reg);
        // A restored membership's restart frames first, then where this part is, then
        // what came early.
        {
            let mut state = shared.lock();
            shared.flush(&mut state);
            shared.announce(&state, None);
        }
        for (from, early) in early {
            match early {
                Early::Frame(frame) => shared.handle(from, frame),
                Early::Segment {
                    segment,
                    incarnation,
                    nonce,
                } => shared.map_peer(from, &segment, incarnation, nonce),
            }
        }
        Ok(shared)
    }
}

/// A window of `T` elements: every member node exposes a part of the same length.
///
/// Operations name a target node and an element offset in its part. Puts and accumulates
/// return at once; gets, fetch-and-ops and fences wait. Within an epoch (between two
/// fences) no two operations may touch the same element unless both are accumulates of
/// one commutative reduction, and a node reads or writes its own elements
/// ([`Window::read`], [`Window::write`]) only where no operation of the epoch does. After
/// its fence a node's part holds every operation of the epoch (docs/semantics.md).
pub struct Window<T: Element> {
    shared: Arc<Shared>,
    _elements: PhantomData<fn() -> T>,
}

impl<T: Element> Clone for Window<T> {
    fn clone(&self) -> Self {
        Window {
            shared: Arc::clone(&self.shared),
            _elements: PhantomData,
        }
    }
}

impl<T: Element> std::fmt::Debug for Window<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Window({}, node {})", self.shared.id.0, self.shared.rank)
    }
}

impl Shared {
    /// The actor whose channel the caller's operation goes on: the handler's actor, or
    /// `main`. With recovery on, a call outside handlers must come from the thread that
    /// created the window (`main`'s): a restarted `main` replays its calls in its own
    /// order, which another thread's calls would not keep.
    fn origin(&self) -> Result<ActorId, WindowError> {
        if let Some(actor) = crate::actor::lifecycle::current_actor() {
            return Ok(actor);
        }
        if self.recovery == Recovery::On && std::thread::current().id() != self.main_thread {
            return Err(WindowError::Unsupported(format!(
                "window {} on node {}: with recovery on, window calls outside handlers must \
                 come from the thread of main that created the window (a restarted main \
                 replays them in its order, which another thread's calls would not keep)",
                self.id.0, self.rank
            )));
        }
        Ok(ActorId::main_of(self.rank))
    }
}

impl<T: Element> Window<T> {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Window {
            shared,
            _elements: PhantomData,
        }
    }

    /// The window's number (its order of creation).
    pub fn id(&self) -> u32 {
        self.shared.id.0
    }

    /// Elements of each member's part.
    pub fn len(&self) -> usize {
        let state = self.shared.lock();
        state.part.len() / T::TYPE.size()
    }

    /// Whether the parts are empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The node's epoch: the number of fences it has completed.
    pub fn epoch(&self) -> u64 {
        self.shared.lock().member.epoch()
    }

    fn issue(&self, target: u16, op: Op) -> Result<(ActorId, u64), WindowError> {
        let shared = &self.shared;
        let mut state = shared.lock();
        let state = &mut *state;
        if let Some(reason) = &state.failed {
            return Err(WindowError::Failed {
                window: shared.id.0,
                reason: reason.clone(),
            });
        }
        let issued = state.member.issue(shared.origin()?, target, &op)?;
        if issued.replayed && !op.kind.answers() {
            // A restarted `main`'s write its image had: applied, or in the image's log.
            return Ok((issued.meta.origin, issued.meta.index));
        }
        if target == shared.rank {
            state
                .member
                .handle_op(target, issued.meta, op, Reply::Answer, state.part.bytes())?;
        } else {
            let direct = if issued.direct {
                state.peers.get(&target).and_then(|seg| {
                    shared.direct(seg, target, issued.meta, &op, state.member.shape())
                })
            } else {
                None
            };
            match direct {
                Some(Some(values)) => {
                    state
                        .answers
                        .insert((target, issued.meta.origin, issued.meta.index), values);
                }
                Some(None) => {}
                None => state.member.send_op(target, issued.meta, op),
            }
        }
        shared.flush(state);
        Ok((issued.meta.origin, issued.meta.index))
    }

    fn answer(&self, target: u16, key: (ActorId, u64)) -> Result<Vec<u8>, WindowError> {
        self.shared.wait("an answer", |state| {
            state.answers.remove(&(target, key.0, key.1))
        })
    }

    /// Writes `values` at element `offset` of node `target`'s part.
    pub fn put(&self, target: u16, offset: usize, values: &[T]) -> Result<(), WindowError> {
        self.issue(
            target,
            Op {
                kind: OpKind::Put,
                elem: T::TYPE,
                offset: offset as u64,
                count: values.len() as u64,
                operand: T::encode(values),
            },
        )
        .map(|_| ())
    }

    /// Combines `values` into the elements at `offset` of node `target`'s part.
    pub fn accumulate(
        &self,
        target: u16,
        offset: usize,
        values: &[T],
        op: ReduceOp,
    ) -> Result<(), WindowError> {
        self.issue(
            target,
            Op {
                kind: OpKind::Accumulate(op),
                elem: T::TYPE,
                offset: offset as u64,
                count: values.len() as u64,
                operand: T::encode(values),
            },
        )
        .map(|_| ())
    }

    /// Reads `count` elements at `offset` of node `target`'s part (waits for them).
    pub fn get(&self, target: u16, offset: usize, count: usize) -> Result<Vec<T>, WindowError> {
        let key = self.issue(
            target,
            Op {
                kind: OpKind::Get,
                elem: T::TYPE,
                offset: offset as u64,
                count: count as u64,
                operand: Vec::new(),
            },
        )?;
        self.answer(target, key).map(|b| T::decode(&b))
    }

    /// Combines `value` into the element at `offset` of node `target`'s part and returns
    /// the element from before, in one step at the target (waits for it).
    pub fn fetch_and_op(
        &self,
        target: u16,
        offset: usize,
        value: T,
        op: ReduceOp,
    ) -> Result<T, WindowError> {
        let key = self.issue(
            target,
            Op {
                kind: OpKind::FetchAndOp(op),
                elem: T::TYPE,
                offset: offset as u64,
                count: 1,
                operand: T::encode(&[value]),
            },
        )?;
        let values = T::decode(&self.answer(target, key)?);
        values.first().copied().ok_or_else(|| WindowError::Failed {
            window: self.shared.id.0,
            reason: "a fetch-and-op answered no element".into(),
        })
    }

    /// Ends the node's epoch: returns once every operation the other members issued to
    /// this node in the epoch is applied here and every answer this node awaits has come
    /// (this node's own puts are applied at a target by that target's fence).
    pub fn fence(&self) -> Result<(), WindowError> {
        let shared = &self.shared;
        let target = {
            let mut state = shared.lock();
            let state = &mut *state;
            let fence = if shared.origin()? == ActorId::main_of(shared.rank) {
                state.member.main_fence()
            } else {
                MainFence::New
            };
            match fence {
                MainFence::Done => return Ok(()),
                MainFence::Resume => {}
                MainFence::New => state.member.fence()?,
            }
            shared.poll_fence(state)?;
            shared.flush(state);
            state.member.epoch() + u64::from(state.member.is_fencing())
        };
        shared.wait("the fence's counts and operations", |state| {
            (!state.member.is_fencing() && state.member.epoch() >= target).then_some(())
        })
    }

    /// Whether the caller is `main` of a node with recovery on: its reads and writes of
    /// its own part are operations, which a re-executed `main` replays.
    fn main_replays(&self) -> bool {
        crate::actor::lifecycle::current_actor().is_none() && self.shared.recovery == Recovery::On
    }

    /// A copy of this node's own part.
    ///
    /// With recovery on, `main`'s read is a get of its whole part: its target keeps the
    /// answer for a restarted `main` for the whole run (read only what you need with
    /// [`Window::get`] if the part is large).
    pub fn read(&self) -> Result<Vec<T>, WindowError> {
        if self.main_replays() {
            let len = self.len();
            return self.get(self.shared.rank, 0, len);
        }
        Ok(T::decode(self.shared.lock().part.bytes()))
    }

    /// Writes `values` into this node's own part at `offset` (a local store; with
    /// recovery on, `main`'s is a put to its own part).
    pub fn write(&self, offset: usize, values: &[T]) -> Result<(), WindowError> {
        if self.main_replays() {
            return self.put(self.shared.rank, offset, values);
        }
        let mut state = self.shared.lock();
        let len = (state.part.len() / T::TYPE.size()) as u64;
        let range = lazarus_proto::window::element::byte_range(
            self.shared.rank,
            T::TYPE,
            len,
            offset as u64,
            values.len() as u64,
        )?;
        state.part.bytes()[range].copy_from_slice(&T::encode(values));
        Ok(())
    }
}
