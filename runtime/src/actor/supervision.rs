//! Failure reports: what the runtime tells the supervision hook when an actor fails.
//!
//! A panicking handler never takes its node down. The actor is marked failed, its pending
//! requests are answered with an error, and a [`SupervisionEvent`] goes to the hook set with
//! [`crate::NodeBuilder::on_failure`]. Rollback recovery plugs in at this hook.

use crate::actor_id::ActorId;
use crate::node::CoreId;
use std::sync::Arc;

/// Where in its life an actor failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// A message handler panicked.
    HandlerPanicked {
        /// The type of the message being handled.
        message_type: &'static str,
    },
    /// The `on_start` hook panicked; the actor never handled a message.
    StartPanicked,
    /// The `on_stop` hook panicked.
    StopPanicked,
}

/// An actor failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisionEvent {
    /// The failed actor.
    pub actor: ActorId,
    /// Its type's name.
    pub actor_type: &'static str,
    /// The core it ran on.
    pub core: CoreId,
    /// What it was doing.
    pub kind: FailureKind,
    /// The panic payload, when it was a string.
    pub panic_message: String,
}

impl std::fmt::Display for SupervisionEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.kind {
            FailureKind::HandlerPanicked { message_type } => {
                format!("handler for {message_type} panicked")
            }
            FailureKind::StartPanicked => "on_start panicked".to_string(),
            FailureKind::StopPanicked => "on_stop panicked".to_string(),
        };
        write!(
            f,
            "actor {} ({}) on core {}: {what}: {}",
            self.actor, self.actor_type, self.core.0, self.panic_message
        )
    }
}

/// The supervision hook.
pub(crate) type FailureHook = Arc<dyn Fn(&SupervisionEvent) + Send + Sync>;

/// Turns a panic payload into text.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}
