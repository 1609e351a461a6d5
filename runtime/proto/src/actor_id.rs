//! Stable, global actor identities.
//!
//! An [`ActorId`] names an actor across the whole cluster and across restarts: it is the
//! node's rank plus the actor's spawn sequence number on that node. Spawning the same actors
//! in the same order therefore yields the same ids, which is what lets a restarted node take
//! over the identities of the actors it replaces.
//!
//! That holds for the actors `main` spawns. Actors spawned from inside a handler or hook
//! are named after their parent instead ([`ActorId::child`]): the order in which handlers
//! on different cores spawn is timing, but the `n`-th child of a given actor is the same
//! actor in every execution, so a replay re-spawns it under the id its peers know.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bits of an [`ActorId`] that hold the per-node spawn sequence number.
const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
/// Set in the sequence part of timer channels (`timer::source_of`): an actor's timer
/// channel is its id with this bit set. No actor id has it.
const TIMER_BIT: u64 = 1 << (SEQ_BITS - 1);
/// Set in the sequence part of ids derived from a parent ([`ActorId::child`]).
const CHILD_BIT: u64 = 1 << (SEQ_BITS - 2);
/// The spawn counter of `main`'s actors stays below this (2^46 spawns per node).
#[doc(hidden)]
pub const SPAWN_SEQ_LIMIT: u64 = CHILD_BIT;

/// Globally unique, stable identity of an actor: `(node rank, spawn sequence)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ActorId(u64);

impl ActorId {
    /// The id of the `seq`-th actor spawned on node `rank`, or `None` if `seq` does not fit
    /// in 48 bits.
    pub fn new(rank: u16, seq: u64) -> Option<Self> {
        (seq <= SEQ_MASK).then(|| ActorId((u64::from(rank) << SEQ_BITS) | seq))
    }

    /// The pseudo-actor that stands for the app's `main` on node `rank`: the sender of
    /// its tells and asks, the addressee of the replies to its asks.
    pub fn main_of(rank: u16) -> Self {
        ActorId((u64::from(rank) << SEQ_BITS) | SEQ_MASK)
    }

    /// Rank of the node the actor was spawned on.
    pub fn rank(self) -> u16 {
        (self.0 >> SEQ_BITS) as u16
    }

    /// Spawn sequence number of the actor on its node.
    pub fn seq(self) -> u64 {
        self.0 & SEQ_MASK
    }

    /// The raw 64-bit encoding (rank in the top 16 bits).
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// Rebuilds an id from [`ActorId::as_u64`].
    pub fn from_u64(raw: u64) -> Self {
        ActorId(raw)
    }

    /// The id of the `n`-th actor (from 0) that actor `parent` spawns, on `parent`'s node:
    /// a 46-bit mix of the two, so it does not depend on what other actors spawn
    /// meanwhile. Distinct `(parent, n)` pairs can collide (about one chance in 2^46 per
    /// pair of actors); a spawn onto a live actor's id then fails rather than reuse it.
    /// Never the sequence of an actor `main` spawned, of a timer channel, or of `main`
    /// itself (all ones).
    pub fn child(parent: ActorId, n: u64) -> Self {
        // splitmix64's finalizer over the parent and the child's number.
        let mut z = parent.0 ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let seq = CHILD_BIT | (z & (CHILD_BIT - 1));
        ActorId((u64::from(parent.rank()) << SEQ_BITS) | seq)
    }

    /// Whether this id was derived from a parent's ([`ActorId::child`]): the actor was
    /// spawned from inside a handler or hook.
    pub fn is_child(self) -> bool {
        self.seq() & (TIMER_BIT | CHILD_BIT) == CHILD_BIT
    }
}

impl fmt::Debug for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ActorId({}:{})", self.rank(), self.seq())
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.rank(), self.seq())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_round_trips_rank_and_sequence() {
        let id = ActorId::new(7, 123_456).unwrap();
        assert_eq!((id.rank(), id.seq()), (7, 123_456));
        assert_eq!(ActorId::from_u64(id.as_u64()), id);
        assert_eq!(id.to_string(), "7:123456");
    }

    #[test]
    fn sequence_overflow_is_refused_not_wrapped() {
        assert!(ActorId::new(1, 1 << 48).is_none());
        assert!(ActorId::new(1, (1 << 48) - 1).is_some());
    }

    #[test]
    fn a_child_id_depends_only_on_its_parent_and_number_and_stays_on_the_parents_node() {
        let parent = ActorId::new(3, 5).unwrap();
        let first = ActorId::child(parent, 0);
        assert_eq!(first, ActorId::child(parent, 0));
        assert_ne!(first, ActorId::child(parent, 1));
        assert_ne!(first, ActorId::child(ActorId::new(3, 6).unwrap(), 0));
        assert_eq!(first.rank(), 3);
        assert!(first.is_child() && !parent.is_child());
        // Grandchildren are children too, and distinct from their parent.
        let grandchild = ActorId::child(first, 0);
        assert!(grandchild.is_child() && grandchild != first);
    }

    #[test]
    fn child_ids_do_not_collide_with_spawn_order_ids_or_each_other_in_practice() {
        let mut seen = std::collections::HashSet::new();
        for p in 0..200 {
            let parent = ActorId::new(0, p).unwrap();
            for n in 0..200 {
                let c = ActorId::child(parent, n);
                assert!(
                    c.seq() >= SPAWN_SEQ_LIMIT,
                    "above main's spawn counter range"
                );
                assert!(c.seq() & TIMER_BIT == 0, "not a timer channel: {c}");
                assert!(seen.insert(c), "collision at parent {p} child {n}");
            }
        }
    }
}
