//! The actor types a restarted node can rebuild from a checkpoint image alone.
//!
//! `main` runs again after a restart and spawns its own actors again, which says what
//! type each one is. Actors spawned from inside handlers have nobody to do that: the
//! handler that spawned them ran before the checkpoint and does not run again. So
//! `#[derive(Actor)]` registers every actor type here at link time (`inventory`), and
//! the restore builds a vacant cell of the image's type for each such child, under its
//! id, before it puts the states back. A type that implements [`Actor`] by hand is
//! registered with [`register_actor!`](crate::register_actor); a child of a type that
//! is not gets a warning when it is spawned with recovery on, since its state could not
//! come back after a failure.

use crate::actor::lifecycle::Control;
use crate::actor::{type_tag, Actor};
use crate::actor_id::ActorId;
use crate::error::SpawnError;
use crate::node::{CoreId, NodeHandle};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Builds a vacant cell of one actor type ([`ActorKind::vacant`]).
type VacantFn = fn(&NodeHandle, ActorId, CoreId) -> Result<Arc<dyn Control>, SpawnError>;

/// One actor type, as the restore needs it. Built by `#[derive(Actor)]` or
/// [`register_actor!`](crate::register_actor); not meant to be written by hand.
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

/// Registers actor types that implement [`Actor`] by hand (without `#[derive(Actor)]`,
/// which registers its type itself), so that a restarted node can rebuild their
/// instances spawned from handlers and hooks:
///
/// ```
/// use lazarus::{messages, Actor};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Default)]
/// struct Counter {
///     n: u64,
/// }
///
/// impl Actor for Counter {
///     const NAME: &'static str = "Counter";
/// }
///
/// #[messages]
/// impl Counter {
///     #[message]
///     fn bump(&mut self) -> u64 {
///         self.n += 1;
///         self.n
///     }
/// }
///
/// lazarus::register_actor!(Counter);
/// ```
#[macro_export]
macro_rules! register_actor {
    ($($actor:ty),+ $(,)?) => {
        $(
            ::lazarus::__private::inventory::submit! {
                ::lazarus::__private::ActorKind::of::<$actor>()
            }
        )+
    };
}

fn vacant<A: Actor>(
    node: &NodeHandle,
    id: ActorId,
    core: CoreId,
) -> Result<Arc<dyn Control>, SpawnError> {
    let cell: Arc<dyn Control> = node.spawn_cell::<A>(core, id, None)?;
    Ok(cell)
}

/// Whether actor type `A` is registered. Warns, once per type, and counts
/// (`lazarus_spawn_unregistered_total`) when it is not: called when a handler or hook
/// spawns an `A` with recovery on.
pub(crate) fn check_registered<A: Actor>() -> bool {
    if find(type_tag::<A>()).is_some() {
        return true;
    }
    static WARNED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    metrics::counter!(crate::telemetry::SPAWN_UNREGISTERED, "actor" => A::NAME).increment(1);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.contains(&A::NAME) {
        warned.push(A::NAME);
        tracing::warn!(
            actor = A::NAME,
            "an actor of a type that is not registered was spawned by an actor: a restart \
             cannot rebuild it, and its state would be lost. Use #[derive(Actor)], or \
             lazarus::register_actor!({}) next to a hand-written `impl Actor`",
            A::NAME
        );
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages;
    use serde::{Deserialize, Serialize};

    /// An actor implemented by hand, as most Rust actor frameworks have users write them.
    #[derive(Serialize, Deserialize, Default)]
    struct ByHand {
        n: u64,
    }

    impl Actor for ByHand {
        const NAME: &'static str = "ByHand";
    }

    #[messages]
    impl ByHand {
        #[message]
        fn bump(&mut self) -> u64 {
            self.n += 1;
            self.n
        }
    }

    crate::register_actor!(ByHand);

    /// The same, never registered.
    #[derive(Serialize, Deserialize, Default)]
    struct Unregistered;

    impl Actor for Unregistered {
        const NAME: &'static str = "Unregistered";
    }

    #[messages]
    impl Unregistered {
        #[message]
        fn ping(&mut self) {}
    }

    #[derive(crate::Actor, Serialize, Deserialize, Default)]
    struct Derived;

    #[messages]
    impl Derived {
        #[message]
        fn poke(&mut self) {}
    }

    #[test]
    fn a_restart_can_rebuild_derived_and_registered_hand_written_actor_types_only() {
        assert_eq!(
            find(type_tag::<Derived>()).map(ActorKind::name),
            Some("Derived")
        );
        assert_eq!(
            find(type_tag::<ByHand>()).map(ActorKind::name),
            Some("ByHand")
        );
        assert!(find(type_tag::<Unregistered>()).is_none());
        assert!(check_registered::<ByHand>());
        assert!(
            !check_registered::<Unregistered>(),
            "spawning one from a handler is reported"
        );
    }
}
