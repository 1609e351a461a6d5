//! Names used by the recovery protocol: correlated sets, channels, incarnations, checkpoints.

use crate::actor_id::ActorId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A correlated set: the actors that fail, checkpoint and roll back together. By default
/// one node (OS process), so the id is the node's rank. It is the "process" of the causal
/// logging protocol: dependency vectors have one entry per set, not per actor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SetId(pub u16);

impl SetId {
    /// The id as a vector index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Debug for SetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0)
    }
}

impl fmt::Display for SetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0)
    }
}

/// A channel: the FIFO stream of messages from one actor to another. Send indices are
/// counted per channel (1, 2, 3, ...), and so are delivery indices on the receiving side.
///
/// Channels, not set pairs, carry the indices because only a channel's sequence is the same
/// in every execution of a send-deterministic program: the interleaving of several actors'
/// sends towards one set depends on thread scheduling, so a per-set-pair index would name
/// different messages before and after a rollback.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChannelId {
    /// The sending actor.
    pub from: ActorId,
    /// The receiving actor.
    pub to: ActorId,
}

impl ChannelId {
    /// The channel from `from` to `to`.
    pub fn new(from: ActorId, to: ActorId) -> Self {
        ChannelId { from, to }
    }
}

impl fmt::Debug for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}->{}", self.from, self.to)
    }
}

/// How many times a set has been restarted from a checkpoint: 0 for the original process,
/// then 1, 2, ... The driver (supervisor) hands a strictly larger number to every restore;
/// it lets peers tell a current recovery exchange from a stale one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Incarnation(pub u32);

impl Incarnation {
    /// The incarnation of a set that has never been restarted.
    pub const ORIGINAL: Incarnation = Incarnation(0);
}

/// Sequence number of a set checkpoint, increasing within a set's history.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CheckpointId(pub u64);
