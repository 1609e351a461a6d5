//! The node's table of live actors, by id: what shutdown walks and what deserialized
//! `ActorRef`s resolve against.

use crate::actor::lifecycle::{ActorCell, Control};
use crate::actor::Actor;
use crate::actor_id::ActorId;
use dashmap::DashMap;
use std::sync::Arc;

#[derive(Default)]
pub(crate) struct Registry {
    actors: DashMap<ActorId, Arc<dyn Control>>,
}

impl Registry {
    pub(crate) fn insert(&self, control: Arc<dyn Control>) {
        self.actors.insert(control.id(), control);
    }

    pub(crate) fn remove(&self, id: ActorId) -> bool {
        self.actors.remove(&id).is_some()
    }

    pub(crate) fn len(&self) -> usize {
        self.actors.len()
    }

    /// The mailbox of actor `id` if it is live and of type `A`.
    pub(crate) fn lookup<A: Actor>(&self, id: ActorId) -> Option<Arc<ActorCell<A>>> {
        let control = Arc::clone(self.actors.get(&id)?.value());
        control.into_any().downcast::<ActorCell<A>>().ok()
    }

    /// The control handle of live actor `id`.
    pub(crate) fn get(&self, id: ActorId) -> Option<Arc<dyn Control>> {
        self.actors.get(&id).map(|e| Arc::clone(e.value()))
    }

    /// A snapshot of every live actor's control handle.
    pub(crate) fn snapshot(&self) -> Vec<Arc<dyn Control>> {
        self.actors.iter().map(|e| Arc::clone(e.value())).collect()
    }
}
