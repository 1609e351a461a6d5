//! Errors returned to callers of the actor API.

use crate::actor_id::ActorId;
use thiserror::Error;

/// Why a message could not be enqueued. The message is handed back so nothing is lost
/// silently.
#[derive(Error)]
pub enum SendError<M> {
    /// The actor has stopped (or was asked to stop) and accepts no more messages.
    #[error("actor {id} has stopped; message not delivered")]
    ActorStopped {
        /// The addressee.
        id: ActorId,
        /// The undelivered message.
        message: M,
    },
    /// The actor's handler panicked; it accepts no more messages.
    #[error("actor {id} has failed; message not delivered")]
    ActorFailed {
        /// The addressee.
        id: ActorId,
        /// The undelivered message.
        message: M,
    },
    /// The actor's node cannot be reached (failed, departed, or not in this cluster), or
    /// the message could not be encoded for it.
    #[error("actor {id} is unreachable: {reason}")]
    Unreachable {
        /// The addressee.
        id: ActorId,
        /// Why.
        reason: String,
        /// The undelivered message.
        message: M,
    },
}

impl<M> SendError<M> {
    /// The message that was not delivered.
    pub fn into_message(self) -> M {
        match self {
            SendError::ActorStopped { message, .. }
            | SendError::ActorFailed { message, .. }
            | SendError::Unreachable { message, .. } => message,
        }
    }
}

impl<M> std::fmt::Debug for SendError<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Messages need not be Debug; the Display text says everything useful.
        write!(f, "SendError({self})")
    }
}

/// Why an `ask` produced no reply.
#[derive(Debug, Error, PartialEq, Eq, Clone, serde::Serialize, serde::Deserialize)]
pub enum AskError {
    /// The actor had stopped before the request could be handled.
    #[error("actor {0} has stopped; request not handled")]
    ActorStopped(ActorId),
    /// The actor failed (its handler panicked) before replying.
    #[error("actor {0} failed before replying")]
    ActorFailed(ActorId),
    /// The handler dropped its reply handle without replying.
    #[error("actor {0} dropped the request without replying")]
    NoReply(ActorId),
    /// No reply arrived within the timeout.
    #[error("no reply from actor {id} within {timeout:?}")]
    Timeout {
        /// The addressee.
        id: ActorId,
        /// The timeout that expired.
        timeout: std::time::Duration,
    },
    /// The actor's node is unreachable or failed while the request was pending.
    #[error("actor {id} is unreachable: {reason}")]
    Unreachable {
        /// The addressee.
        id: ActorId,
        /// Why.
        reason: String,
    },
    /// The receiving node refused the request (unknown actor, wrong type, bad encoding).
    #[error("actor {id} refused the request: {reason}")]
    Rejected {
        /// The addressee.
        id: ActorId,
        /// Why.
        reason: String,
    },
    /// `ask` was awaited outside a Tokio runtime with timers enabled, so the timeout could
    /// not be armed.
    #[error("ask needs a Tokio runtime with timers (use Node::block_on or an actor context)")]
    NoTimer,
}

/// Why a selective receive ([`crate::Context::receive_only_from`]) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    /// Only order-sensitive actors know the sender of each message they receive.
    #[error(
        "actor type {0} is not order-sensitive: its messages do not carry their sender \
         (declare it with #[actor(order_sensitive)] to receive selectively)"
    )]
    NotOrderSensitive(&'static str),
}

/// Why an actor could not be spawned.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SpawnError {
    /// The requested core does not exist on this node.
    #[error("core {requested} does not exist: this node has cores 0..{available}")]
    NoSuchCore {
        /// The core that was asked for.
        requested: usize,
        /// How many cores the node runs.
        available: usize,
    },
    /// The node is shutting down and accepts no new actors.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The node ran out of actor ids (2^46 spawns by `main`).
    #[error("actor id space exhausted on this node")]
    IdsExhausted,
    /// The id a child actor is named by ([`crate::ActorId::child`]) belongs to a live
    /// actor already (two parents' children collided).
    #[error("actor id {0} is taken by a live actor")]
    IdTaken(crate::ActorId),
}

/// Why a node could not start.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NodeError {
    /// hwloc could not describe the machine.
    #[error("topology discovery failed: {0}")]
    Topology(String),
    /// Zero cores were requested.
    #[error("a node needs at least one core (0 requested)")]
    NoCores,
    /// More cores were requested than the process may use.
    #[error("{requested} cores requested but only {available} are available to this process")]
    NotEnoughCores {
        /// Cores asked for.
        requested: usize,
        /// Cores available.
        available: usize,
    },
    /// Binding an executor thread to its core failed.
    #[error("could not pin an executor thread to core {core}: {reason}")]
    Pinning {
        /// hwloc logical index of the core.
        core: u32,
        /// The OS error.
        reason: String,
    },
    /// The OS refused to start a thread or a runtime.
    #[error("could not start executor: {0}")]
    Executor(String),
}
