//! An actor's mailbox: an unbounded FIFO of messages and control signals, plus the
//! actor's status as seen by senders.
//!
//! The queue holds the actor's [`MessageSet`](crate::MessageSet) enum by value, so a local
//! send is a move of the message into the queue: no box, no serialization, no copy of any
//! heap payload the message owns.

use crate::actor_id::ActorId;
use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// What travels through a mailbox.
pub(crate) enum Signal<M> {
    /// An application message.
    Msg(M),
    /// Stop after everything enqueued before this signal.
    Stop,
    /// Answer with the number of messages delivered so far once everything enqueued before
    /// this signal has been handled (used to detect quiescence at shutdown).
    Barrier(oneshot::Sender<u64>),
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

/// The sending side of a mailbox, shared by every `ActorRef` to the actor.
pub(crate) struct Mailbox<M> {
    pub(crate) id: ActorId,
    pub(crate) type_name: &'static str,
    pub(crate) ask_timeout: Duration,
    tx: mpsc::UnboundedSender<Signal<M>>,
    status: AtomicU8,
}

pub(crate) type Inbox<M> = mpsc::UnboundedReceiver<Signal<M>>;

impl<M: Send + 'static> Mailbox<M> {
    pub(crate) fn new(
        id: ActorId,
        type_name: &'static str,
        ask_timeout: Duration,
    ) -> (Arc<Self>, Inbox<M>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mailbox = Mailbox {
            id,
            type_name,
            ask_timeout,
            tx,
            status: AtomicU8::new(Status::Running as u8),
        };
        (Arc::new(mailbox), rx)
    }

    pub(crate) fn status(&self) -> Status {
        Status::from_u8(self.status.load(Ordering::Acquire))
    }

    pub(crate) fn set_status(&self, status: Status) {
        self.status.store(status as u8, Ordering::Release);
    }

    /// Enqueues `msg`, or hands it back with the reason the actor cannot take it.
    #[inline]
    pub(crate) fn send(&self, msg: M) -> Result<(), (M, Status)> {
        let status = self.status();
        if status != Status::Running {
            return Err((msg, status));
        }
        match self.tx.send(Signal::Msg(msg)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::SendError(Signal::Msg(msg))) => Err((msg, self.status())),
            Err(_) => unreachable!("send returns the signal it was given"),
        }
    }
}

/// Type-erased control of one actor, kept in the node's registry.
pub(crate) trait Control: Send + Sync {
    fn id(&self) -> ActorId;
    /// Graceful stop: messages already enqueued are handled first; new sends fail.
    fn request_stop(&self);
    /// See [`Signal::Barrier`]; `None` if the actor no longer runs.
    fn barrier(&self) -> Option<oneshot::Receiver<u64>>;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<M: Send + 'static> Control for Mailbox<M> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn request_stop(&self) {
        if self
            .status
            .compare_exchange(
                Status::Running as u8,
                Status::Stopping as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            // If the inbox is already gone the actor has exited; nothing to stop.
            let _ = self.tx.send(Signal::Stop);
        }
    }

    fn barrier(&self) -> Option<oneshot::Receiver<u64>> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Signal::Barrier(tx)).ok().map(|_| rx)
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}
