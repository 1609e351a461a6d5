//! The actor types a restarted node can rebuild from a checkpoint image alone.
//!
//! `main` runs again after a restart and spawns its own actors again, which says what
//! type each one is. Actors spawned from inside handlers have nobody to do that: the
//! handler that spawned them ran before the checkpoint and does not run again. So
//! `#[derive(Actor)]` registers every actor type here at link time (`inventory`), and
//! the restore builds a vacant cell of the image's type for each such child, under its
//! id, before it puts the states back.

use crate::actor::{type_tag, Actor};
use crate::actor_id::ActorId;
use crate::error::SpawnError;
use crate::lifecycle::Control;
use crate::node::{CoreId, NodeHandle};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Builds a vacant cell of one actor type ([`ActorKind::vacant`]).
type VacantFn = fn(&NodeHandle, ActorId, CoreId) -> Result<Arc<dyn Control>, SpawnError>;

/// One actor type, as the restore needs it. Built by `#[derive(Actor)]`; not meant to be
/// written by hand.
pub struct ActorKind {
    tag: fn() -> u64,
    name: &'static str,
    vacant: VacantFn,
}

impl ActorKind {
    /// The kind of actor type `A`.
    pub const fn of<A: Actor>() -> Self {
        ActorKind {
            tag: type_tag::<A>,
            name: A::NAME,
            vacant: vacant::<A>,
        }
    }

    /// The type's name ([`Actor::NAME`]).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// A vacant cell of this type for actor `id` on core `core`, registered and deferred
    /// (the node is being restored); its image fills it.
    pub(crate) fn vacant(
        &self,
        node: &NodeHandle,
        id: ActorId,
        core: CoreId,
    ) -> Result<Arc<dyn Control>, SpawnError> {
        (self.vacant)(node, id, core)
    }
}

inventory::collect!(ActorKind);

fn vacant<A: Actor>(
    node: &NodeHandle,
    id: ActorId,
    core: CoreId,
) -> Result<Arc<dyn Control>, SpawnError> {
    let cell: Arc<dyn Control> = node.spawn_cell::<A>(core, id, None)?;
    Ok(cell)
}

/// The registered kind whose messages have type tag `tag` (the tag an image records).
pub(crate) fn find(tag: u64) -> Option<&'static ActorKind> {
    static BY_TAG: OnceLock<HashMap<u64, &'static ActorKind>> = OnceLock::new();
    BY_TAG
        .get_or_init(|| {
            inventory::iter::<ActorKind>
                .into_iter()
                .map(|k| ((k.tag)(), k))
                .collect()
        })
        .get(&tag)
        .copied()
}
