//! One-sided windows in a running cluster: memory every node exposes to the others'
//! `put`, `get`, `accumulate` and fetch-and-op, synchronized by fences. The rules are the
//! sans-IO machine of [`lazarus_proto::window`] (one [`Member`] per node and window);
//! this module owns what drives it: the node's part of each window, the frames between
//! the members (over the node's transport, `FrameBody::Window`), the answers and fences
//! callers wait for, and the registry the transport hands incoming frames to.
//!
//! Operations here take the message path: the target's network thread applies each one
//! to its part. A window is created by every node's `main`, in the same order on every
//! node ([`crate::Cluster::window`]).
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

pub use element::Element;
pub use lazarus_proto::window::{ElementType, ReduceOp};

use crate::actor_id::ActorId;
use crate::node::NodeHandle;
use crate::transport::frame::FrameBody;
use lazarus_proto::window::{
    MainFence, Member, MemberImage, Op, OpKind, Recovery, Reply, Shape, WindowError as RuleError,
    WindowFrame, WindowId,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a caller waits before it says, once per period, what it still waits for.
const STALL_REPORT: Duration = Duration::from_secs(10);

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
    part: Vec<u8>,
    /// Answers that came, by (target, origin actor, index), until their caller takes them.
    answers: BTreeMap<(u16, ActorId, u64), Vec<u8>>,
    /// The first frame this window refused, which fails every later wait.
    failed: Option<String>,
}

/// What every handle of one window shares.
pub(crate) struct Shared {
    id: WindowId,
    rank: u16,
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

    /// A frame from member `from`.
    fn handle(&self, from: u16, frame: WindowFrame) {
        let mut state = self.lock();
        let state = &mut *state;
        let result = state
            .member
            .handle_frame(from, frame, &mut state.part)
            .and_then(|answer| {
                if let Some((origin, index, values)) = answer {
                    state.answers.insert((from, origin, index), values);
                }
                state.member.poll_fence(&mut state.part).map(|_| ())
            });
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
    early: BTreeMap<WindowId, Vec<(u16, WindowFrame)>>,
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

    /// Every window's image, for the node's checkpoint (its cores paused).
    pub(crate) fn images(&self) -> Vec<WindowImage> {
        let windows = self.registry().windows.clone();
        windows
            .iter()
            .map(|w| {
                let state = w.lock();
                WindowImage {
                    member: state.member.image(),
                    part: state.part.clone(),
                }
            })
            .collect()
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
                let _ = state.member.handle_frame(from, frame, &mut state.part);
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
                    reg.early.entry(window).or_default().push((from, frame));
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
        let shared = Arc::new(Shared {
            id,
            rank,
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
            }),
            changed: Condvar::new(),
            out,
        });
        reg.windows.push(Arc::clone(&shared));
        let early = reg.early.remove(&id).unwrap_or_default();
        drop(reg);
        // A restored membership's restart frames first, then what came early.
        shared.flush(&mut shared.lock());
        for (from, frame) in early {
            shared.handle(from, frame);
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
                .handle_op(target, issued.meta, op, Reply::Answer, &mut state.part)?;
        } else {
            state.member.send_op(target, issued.meta, op);
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
            state.member.poll_fence(&mut state.part)?;
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
        Ok(T::decode(&self.shared.lock().part))
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
        state.part[range].copy_from_slice(&T::encode(values));
        Ok(())
    }
}
