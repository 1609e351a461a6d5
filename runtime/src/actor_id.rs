//! Stable, global actor identities.
//!
//! An [`ActorId`] names an actor across the whole cluster and across restarts: it is the
//! node's rank plus the actor's spawn sequence number on that node. Spawning the same actors
//! in the same order therefore yields the same ids, which is what lets a restarted node take
//! over the identities of the actors it replaces.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bits of an [`ActorId`] that hold the per-node spawn sequence number.
const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// Globally unique, stable identity of an actor: `(node rank, spawn sequence)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ActorId(u64);

impl ActorId {
    /// The id of the `seq`-th actor spawned on node `rank`, or `None` if `seq` does not fit
    /// in 48 bits.
    pub fn new(rank: u16, seq: u64) -> Option<Self> {
        (seq <= SEQ_MASK).then(|| ActorId((u64::from(rank) << SEQ_BITS) | seq))
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
}
