//! The layer's locked state: the node's `NodeRecovery` and everything that must change
//! atomically with it, and the guard that holds the lock (replies to `main` made while it
//! is held are deferred to its release).

use super::events;
use super::local_counts::LocalDeliveries;
use super::main_replay;
use super::RecoveryLayer;
use crate::actor::lifecycle::ActorImage;
use crate::actor::lifecycle::Control;
use crate::actor_id::ActorId;
use crate::recovery::{ChannelId, NodeRecovery};
use crate::transport::frame::{Envelope, FrameBody};
use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

thread_local! {
    /// How many recovery layers' locks this thread holds ([`StateGuard`]; more than one
    /// only with several nodes in one process).
    static HOLDS_STATE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A recovery layer's lock, held. While it is, the thread is marked: a reply to `main`
/// made meanwhile (a message with a reply slot dropped inside a delivery, the error
/// answer to an undeliverable ask) needs the lock itself, so it is deferred
/// ([`main_replay::defer`]) and settled when the guard is released, *before* the lock is:
/// kept in the locked state (a reply from this node) or logged and queued without
/// blocking (to another node), so the next holder of the lock, a checkpoint included,
/// sees it together with what caused it.
pub(crate) struct StateGuard<'a> {
    layer: &'a RecoveryLayer,
    guard: std::mem::ManuallyDrop<MutexGuard<'a, LayerState>>,
    /// Settled replies from this node, handed to their asks once the lock is released.
    answered: Vec<(u64, main_replay::Outcome)>,
    /// Settled replies to other nodes, queued once the lock is released.
    frames: Vec<(u16, FrameBody)>,
}

impl<'a> StateGuard<'a> {
    pub(crate) fn new(layer: &'a RecoveryLayer, guard: MutexGuard<'a, LayerState>) -> Self {
        HOLDS_STATE.with(|h| h.set(h.get() + 1));
        StateGuard {
            layer,
            guard: std::mem::ManuallyDrop::new(guard),
            answered: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// Settles the replies to `main` deferred so far, in the locked state (a checkpoint
    /// does this before it reads the state, so a reply made by its own delivery is in
    /// the image with its cause).
    pub(crate) fn settle_deferred_replies(&mut self) {
        let layer = self.layer;
        // Settling one reply may defer another (logging delivers what it lets through).
        loop {
            let replies = main_replay::take_deferred(layer);
            if replies.is_empty() {
                break;
            }
            for reply in replies {
                layer.settle_deferred(&mut self.guard, reply, &mut self.answered, &mut self.frames);
            }
        }
    }
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = LayerState;
    fn deref(&self) -> &LayerState {
        &self.guard
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut LayerState {
        &mut self.guard
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let layer = self.layer;
        self.settle_deferred_replies();
        let answered = std::mem::take(&mut self.answered);
        let frames = std::mem::take(&mut self.frames);
        // SAFETY: the inner guard is dropped exactly once, here, and `self.guard` is not
        // used after this line.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.guard) };
        let still_held = HOLDS_STATE.with(|h| {
            h.set(h.get().saturating_sub(1));
            h.get() > 0
        });
        if !answered.is_empty() {
            if let Some(tr) = layer.transport() {
                for (request, outcome) in answered {
                    tr.complete_request(request, outcome);
                }
            }
        }
        if !frames.is_empty() {
            layer.emit(frames);
        }
        if !still_held {
            // Replies for a layer whose lock this thread did not hold (none expected).
            main_replay::send_deferred();
        }
    }
}

/// Whether this thread holds a recovery layer's lock.
pub(crate) fn holds_state() -> bool {
    HOLDS_STATE.with(|h| h.get() > 0)
}

/// Runs `f`, which may block, letting a multi-threaded Tokio runtime's other tasks run
/// on another worker meanwhile (`block_in_place`); elsewhere (a core thread, a
/// current-thread runtime) runs it as it is.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// The protocol and everything that must change atomically with it.
pub(crate) struct LayerState {
    /// The node's recovery machine: its protocol (none while a restarted node is still
    /// loading its checkpoint), event logging, logger store, send gate and the deliveries
    /// that wait for children to be spawned again.
    pub(crate) recovery: NodeRecovery<Envelope>,
    /// False in a restarted node until its actors are restored: nothing is delivered.
    pub(crate) ready: bool,
    /// The app's main: its sends so far, those to skip, the replies to its asks.
    pub(crate) main_replay: main_replay::MainReplay,
    /// Actors spawned while the node is being restored, not started yet.
    pub(crate) deferred: Vec<Arc<dyn Control>>,
    /// Actor images of the checkpoint being restored, by actor.
    pub(crate) images: HashMap<ActorId, ActorImage>,
    /// Every actor that had exited at the checkpoint being restored.
    pub(crate) exited: crate::actor::exited_actors::ExitedActors,
    /// The logger processes the node knew at the checkpoint being restored.
    pub(crate) logger_instances: Vec<Option<u64>>,
    /// When the rollback was sent (for the replay phase's duration).
    pub(crate) rollback_at: Option<Instant>,
    /// The replay phase's tracing span, from the rollback until the replay completes.
    pub(crate) replay_span: Option<tracing::Span>,
    /// Measurement mode only: messages inside the node, logged as if they crossed sets.
    pub(crate) forced_log: ForcedLog,
    /// Determinants: this node's, and other nodes' it keeps as their logger.
    pub(crate) events: events::Events,
    /// Messages the node's actors put into the node's own mailboxes, not yet in the
    /// protocol's interval.
    pub(crate) local: Arc<LocalDeliveries>,
}

/// The log of messages inside the node in the log-everything measurement mode: payload,
/// index and vector kept like the sender-based log's, released at each checkpoint.
#[derive(Default)]
pub(crate) struct ForcedLog {
    entries: Vec<(ChannelId, u64, bytes::Bytes)>,
    bytes: usize,
    /// Most bytes held at once.
    pub(crate) peak_bytes: usize,
    /// Messages logged in total.
    pub(crate) logged: u64,
    next_index: HashMap<ChannelId, u64>,
}

impl ForcedLog {
    pub(crate) fn push(&mut self, channel: ChannelId, payload: bytes::Bytes, vector_len: usize) {
        let index = self.next_index.entry(channel).or_insert(0);
        *index += 1;
        self.bytes += payload.len() + vector_len;
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        self.logged += 1;
        self.entries.push((channel, *index, payload));
    }

    /// A checkpoint covers everything logged so far.
    pub(crate) fn release(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}
