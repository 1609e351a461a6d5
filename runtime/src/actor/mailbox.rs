//! An actor's mailbox: a lock-free FIFO of messages and control signals, plus the actor's
//! status as senders see it.
//!
//! The queue holds the actor's [`MessageEnum`](crate::MessageEnum) enum by value, so a local
//! send is a move of the message into the queue: no box, no serialization, no copy of any
//! heap payload the message owns.

use crate::actor_id::ActorId;
use crossbeam_queue::SegQueue;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;

/// Who sent a message to an order-sensitive actor, and its index on that channel: what a
/// delivery determinant names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Stamp {
    /// The sending actor (or the node's driver pseudo-actor for `main`).
    pub(crate) from: ActorId,
    /// The message's send index on the channel from `from` to the receiver.
    pub(crate) index: u64,
}

/// What travels through a mailbox.
pub(crate) enum Signal<M> {
    /// An application message.
    Msg(M),
    /// An application message to an order-sensitive actor, with its sender (for selective
    /// receive) and, with recovery on, its channel send index (0 with recovery off).
    Stamped(M, Stamp),
    /// Stop after everything enqueued before this signal.
    Stop,
    /// Answer with the number of messages delivered so far once everything enqueued before
    /// this signal has been handled (used to detect quiescence at shutdown).
    Barrier(oneshot::Sender<u64>),
    /// The result of an await of the actor's async handler; with its channel stamp when
    /// the actor is order-sensitive with recovery on (its delivery is then a determinant,
    /// like a message's). A result without one is handed to the awaits as it comes.
    Result(crate::actor::awaits::Awaited, Option<Stamp>),
}

/// Life stage of an actor, as senders see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Running = 0,
    Stopping = 1,
    Stopped = 2,
    Failed = 3,
}

impl Status {
    fn from_u8(v: u8) -> Status {
        match v {
            0 => Status::Running,
            1 => Status::Stopping,
            2 => Status::Stopped,
            _ => Status::Failed,
        }
    }
}

/// The queue and status of one actor, shared by every sender.
pub(crate) struct Mailbox<M> {
    pub(crate) id: ActorId,
    pub(crate) ask_timeout: Duration,
    queue: SegQueue<Signal<M>>,
    status: AtomicU8,
    /// Whether the actor's node runs with recovery on: read with `status` on every push,
    /// so a tell with recovery off touches nothing else of the node.
    pub(crate) recovers: bool,
    /// Control signals ever pushed (so metrics can tell messages from signals).
    signals_pushed: AtomicU64,
}

impl<M> Mailbox<M> {
    pub(crate) fn new(id: ActorId, ask_timeout: Duration, recovers: bool) -> Self {
        Mailbox {
            id,
            ask_timeout,
            queue: SegQueue::new(),
            status: AtomicU8::new(Status::Running as u8),
            recovers,
            signals_pushed: AtomicU64::new(0),
        }
    }

    pub(crate) fn status(&self) -> Status {
        Status::from_u8(self.status.load(Ordering::Acquire))
    }

    pub(crate) fn set_status(&self, status: Status) {
        self.status.store(status as u8, Ordering::Release);
    }

    /// Moves from `Running` to `Stopping`; false if the actor was not running.
    pub(crate) fn begin_stop(&self) -> bool {
        self.status
            .compare_exchange(
                Status::Running as u8,
                Status::Stopping as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Enqueues `msg` if the actor accepts messages, or hands it back with the reason.
    #[inline]
    pub(crate) fn push_msg(&self, msg: M) -> Result<(), (M, Status)> {
        match self.status() {
            Status::Running => {
                self.queue.push(Signal::Msg(msg));
                Ok(())
            }
            status => Err((msg, status)),
        }
    }

    /// [`Mailbox::push_msg`] with the channel stamp an order-sensitive actor needs.
    pub(crate) fn push_stamped(&self, msg: M, stamp: Stamp) -> Result<(), (M, Status)> {
        match self.status() {
            Status::Running => {
                self.queue.push(Signal::Stamped(msg, stamp));
                Ok(())
            }
            status => Err((msg, status)),
        }
    }

    /// Enqueues the result of an await unless the actor has stopped (a stopping actor
    /// still completes its suspended handler).
    pub(crate) fn push_result(
        &self,
        result: crate::actor::awaits::Awaited,
        stamp: Option<Stamp>,
    ) -> bool {
        match self.status() {
            Status::Running | Status::Stopping => {
                self.queue.push(Signal::Result(result, stamp));
                true
            }
            _ => false,
        }
    }

    /// Enqueues a control signal regardless of status.
    pub(crate) fn push_signal(&self, signal: Signal<M>) {
        self.signals_pushed.fetch_add(1, Ordering::AcqRel);
        self.queue.push(signal);
    }

    /// Puts back a signal taken out to read the mailbox for a checkpoint (not a new send:
    /// not counted).
    pub(crate) fn requeue(&self, signal: Signal<M>) {
        self.queue.push(signal);
    }

    /// Control signals ever pushed.
    pub(crate) fn signals_pushed(&self) -> u64 {
        self.signals_pushed.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn pop(&self) -> Option<Signal<M>> {
        self.queue.pop()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}
