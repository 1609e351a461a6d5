//! What a handler can reach besides its own state: its own reference, its node, its core,
//! and the means to stop itself.

use crate::actor::Actor;
use crate::actor_id::ActorId;
use crate::actor_ref::ActorRef;
use crate::node::{CoreId, NodeHandle};

/// Passed to handlers and lifecycle hooks of actor `A`.
pub struct Context<A: Actor> {
    myself: ActorRef<A>,
    node: NodeHandle,
    core: CoreId,
    stop_requested: bool,
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(myself: ActorRef<A>, node: NodeHandle, core: CoreId) -> Self {
        Context {
            myself,
            node,
            core,
            stop_requested: false,
        }
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.myself.id()
    }

    /// A reference to this actor, to hand to others.
    pub fn myself(&self) -> &ActorRef<A> {
        &self.myself
    }

    /// The core this actor runs on (it never moves).
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// The node this actor runs on, to spawn or look up actors.
    pub fn node(&self) -> &NodeHandle {
        &self.node
    }

    /// Stops this actor after the current handler returns. Messages still in its mailbox
    /// are not handled: they are counted and logged as dead letters, and their askers get
    /// [`crate::AskError::ActorStopped`].
    pub fn stop(&mut self) {
        self.stop_requested = true;
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.stop_requested
    }
}
