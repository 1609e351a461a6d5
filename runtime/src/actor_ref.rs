//! Typed references to actors, and the two ways to message them: `tell` and `ask`.
//!
//! An [`ActorRef`] names a stable [`ActorId`]; it is `Clone + Send + Sync` and serializes
//! as that id alone, so it can be stored in actor state (and so in checkpoints) and sent in
//! messages. Deserializing it looks the id up on the node doing the deserializing.

use crate::actor::{Actor, Message};
use crate::actor_id::ActorId;
use crate::error::{AskError, SendError};
use crate::lifecycle::{ActorCell, Control};
use crate::mailbox::Status;
use crate::node::NodeHandle;
use crate::reply::ReplyTo;
use crate::telemetry;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// A typed, location-independent reference to an actor of type `A`.
pub struct ActorRef<A: Actor> {
    cell: Arc<ActorCell<A>>,
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        ActorRef {
            cell: Arc::clone(&self.cell),
        }
    }
}

impl<A: Actor> std::fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ActorRef<{}>({})",
            self.cell.mailbox.type_name, self.cell.mailbox.id
        )
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}
impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> ActorRef<A> {
    pub(crate) fn from_cell(cell: Arc<ActorCell<A>>) -> Self {
        ActorRef { cell }
    }

    /// The actor's stable identity.
    pub fn id(&self) -> ActorId {
        self.cell.mailbox.id
    }

    /// Whether the actor still accepts messages.
    pub fn is_alive(&self) -> bool {
        self.cell.mailbox.status() == Status::Running
    }

    /// Sends `msg` without waiting for it to be handled.
    ///
    /// Messages from one sender to one actor are handled in the order they were sent.
    /// Fails, handing the message back, if the actor has stopped or failed.
    #[inline]
    pub fn tell<M: Message<A>>(&self, msg: M) -> Result<(), SendError<M>> {
        self.cell
            .send(msg.into_set(ReplyTo::none()))
            .map_err(|(set, status)| self.send_error(set, status))
    }

    /// Sends `msg` and returns a future of the handler's reply.
    ///
    /// The request times out after the node's default ask timeout unless
    /// [`Ask::timeout`] sets another. The future needs a Tokio runtime with timers, which
    /// every Lazarus executor and [`crate::Node::block_on`] provide.
    pub fn ask<M: Message<A>>(&self, msg: M) -> Ask<A, M::Reply> {
        let (reply, rx) = ReplyTo::channel();
        let state = match self.cell.send(msg.into_set(reply)) {
            Ok(()) => AskState::Waiting(rx),
            Err((_, status)) => {
                telemetry::send_error(self.cell.mailbox.type_name);
                AskState::Failed(Some(self.status_error(status)))
            }
        };
        Ask {
            cell: Arc::clone(&self.cell),
            timeout: Some(self.cell.mailbox.ask_timeout),
            state,
            sleep: None,
        }
    }

    /// Asks the actor to stop once it has handled every message already in its mailbox.
    /// Sends made after this call fail.
    pub fn stop(&self) {
        Control::request_stop(Arc::clone(&self.cell));
    }

    fn send_error<M: Message<A>>(&self, set: A::Msg, status: Status) -> SendError<M> {
        telemetry::send_error(self.cell.mailbox.type_name);
        let id = self.id();
        let message = match M::from_set(set) {
            Some(m) => m,
            None => unreachable!("a message set built from M converts back to M"),
        };
        match status {
            Status::Failed => SendError::ActorFailed { id, message },
            _ => SendError::ActorStopped { id, message },
        }
    }

    fn status_error(&self, status: Status) -> AskError {
        match status {
            Status::Failed => AskError::ActorFailed(self.id()),
            _ => AskError::ActorStopped(self.id()),
        }
    }
}

impl<A: Actor> Serialize for ActorRef<A> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.id().serialize(serializer)
    }
}

impl<'de, A: Actor> Deserialize<'de> for ActorRef<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = ActorId::deserialize(deserializer)?;
        let node = NodeHandle::current().ok_or_else(|| {
            serde::de::Error::custom(format!(
                "cannot resolve actor {id}: deserialized outside a Lazarus node"
            ))
        })?;
        node.lookup::<A>(id).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown actor {id} (or not an actor of type {})",
                std::any::type_name::<A>()
            ))
        })
    }
}

enum AskState<R> {
    Waiting(oneshot::Receiver<R>),
    Failed(Option<AskError>),
}

/// A pending request: await it for the reply.
#[must_use = "an Ask does nothing unless awaited"]
pub struct Ask<A: Actor, R> {
    cell: Arc<ActorCell<A>>,
    timeout: Option<Duration>,
    state: AskState<R>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<A: Actor, R> Ask<A, R> {
    /// Waits at most `timeout` for the reply instead of the node's default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Waits for the reply for as long as it takes.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }

    fn closed_error(&self) -> AskError {
        let id = self.cell.mailbox.id;
        match self.cell.mailbox.status() {
            Status::Failed => AskError::ActorFailed(id),
            Status::Stopped => AskError::ActorStopped(id),
            // The actor is alive, so its handler dropped the ReplyTo.
            _ => AskError::NoReply(id),
        }
    }
}

impl<A: Actor, R> Unpin for Ask<A, R> {}

impl<A: Actor, R> Future for Ask<A, R> {
    type Output = Result<R, AskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let rx = match &mut this.state {
            AskState::Failed(err) => {
                return Poll::Ready(Err(err
                    .take()
                    .unwrap_or(AskError::NoReply(this.cell.mailbox.id))))
            }
            AskState::Waiting(rx) => rx,
        };
        if let Poll::Ready(res) = Pin::new(rx).poll(cx) {
            return Poll::Ready(res.map_err(|_| this.closed_error()));
        }
        let Some(timeout) = this.timeout else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            // Arm the timer only when the reply is not immediately there.
            if tokio::runtime::Handle::try_current().is_err() {
                return Poll::Ready(Err(AskError::NoTimer));
            }
            this.sleep = Some(Box::pin(tokio::time::sleep(timeout)));
        }
        if let Some(sleep) = this.sleep.as_mut() {
            ready!(sleep.as_mut().poll(cx));
        }
        telemetry::ask_timeout(this.cell.mailbox.type_name);
        Poll::Ready(Err(AskError::Timeout {
            id: this.cell.mailbox.id,
            timeout,
        }))
    }
}
