//! The local actors that have exited, kept for the whole run (and in every checkpoint):
//! a reference to one resolves to a stopped actor rather than failing to decode, and a
//! restarted node does not bring one back.
//!
//! Sized for runs that spawn and retire actors all along: the actors `main` spawns have
//! consecutive ids, so those that exited take a few ranges, not an entry each. Actors
//! spawned by handlers have hashed ids ([`ActorId::child`]), kept one by one.

use crate::actor_id::ActorId;
use crate::range_set::RangeSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A set of exited actor ids.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ExitedActors {
    /// Ids of actors `main` spawned (and any other id that is not a child's), raw.
    spawned: RangeSet,
    /// Ids of actors spawned by handlers or hooks.
    children: BTreeSet<ActorId>,
}

impl ExitedActors {
    /// Records `id` as exited.
    pub(crate) fn insert(&mut self, id: ActorId) {
        if id.is_child() {
            self.children.insert(id);
        } else {
            self.spawned.insert(id.as_u64());
        }
    }

    /// Whether `id` has exited.
    pub(crate) fn contains(&self, id: ActorId) -> bool {
        if id.is_child() {
            self.children.contains(&id)
        } else {
            self.spawned.contains(id.as_u64())
        }
    }

    /// Adds every actor of `other`.
    pub(crate) fn merge(&mut self, other: &ExitedActors) {
        for (start, end) in other.spawned.ranges() {
            self.spawned.insert_range(start, end);
        }
        self.children.extend(other.children.iter().copied());
    }

    /// How many entries hold the set: one per range of `main`'s actors, one per child.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.spawned.range_count() + self.children.len()
    }
}

impl FromIterator<ActorId> for ExitedActors {
    fn from_iter<I: IntoIterator<Item = ActorId>>(ids: I) -> Self {
        let mut set = ExitedActors::default();
        for id in ids {
            set.insert(id);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_retires_a_million_of_mains_actors_keeps_one_entry_for_them() {
        let mut exited = ExitedActors::default();
        // Retired out of order within a window, as actors on several cores end.
        for block in (0..1_000_000u64).collect::<Vec<_>>().chunks(8) {
            for seq in block.iter().rev() {
                exited.insert(ActorId::new(3, *seq).unwrap());
            }
        }
        assert_eq!(exited.entries(), 1);
        assert!(exited.contains(ActorId::new(3, 999_999).unwrap()));
        assert!(!exited.contains(ActorId::new(3, 1_000_000).unwrap()));
        assert!(
            !exited.contains(ActorId::new(2, 5).unwrap()),
            "another node's"
        );
        let encoded = postcard::to_allocvec(&exited).unwrap();
        assert!(
            encoded.len() < 32,
            "{} bytes in a checkpoint",
            encoded.len()
        );
    }

    #[test]
    fn children_are_kept_by_id_and_not_confused_with_mains_actors() {
        let parent = ActorId::new(1, 0).unwrap();
        let exited: ExitedActors = [ActorId::child(parent, 0), ActorId::new(1, 4).unwrap()]
            .into_iter()
            .collect();
        assert!(exited.contains(ActorId::child(parent, 0)));
        assert!(!exited.contains(ActorId::child(parent, 1)));
        assert!(!exited.contains(parent));
        let mut restored = ExitedActors::default();
        restored.insert(ActorId::new(1, 5).unwrap());
        restored.merge(&exited);
        assert_eq!(restored.entries(), 2, "4 and 5 merge into one range");
        assert!(restored.contains(ActorId::child(parent, 0)));
    }
}
