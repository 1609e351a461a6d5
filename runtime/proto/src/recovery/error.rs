//! Why the protocol core refused an event. Input from the network or from storage never
//! panics the core: it is checked and refused with one of these, and the core's state is
//! left unchanged.

use super::ids::{CheckpointId, Incarnation, SetId};

/// An event the protocol core refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A set id outside `0..n`.
    #[error("unknown set {set} (the cluster has {n} sets)")]
    UnknownSet {
        /// The offending id.
        set: SetId,
        /// Number of sets.
        n: u16,
    },
    /// A message or control message that claims to come from this very set, or a send
    /// addressed to it: messages inside a set never go through the protocol.
    #[error("{0} cannot exchange protocol messages with itself")]
    SelfAddressed(SetId),
    /// A message with send index 0 (indices start at 1).
    #[error("send index 0 on a channel from {0} (indices start at 1)")]
    ZeroSendIndex(SetId),
    /// A dependency vector naming a set outside `0..n`.
    #[error("dependency vector from {from} names set {set}, but the cluster has {n} sets")]
    VectorOutOfRange {
        /// Who sent it.
        from: SetId,
        /// The out-of-range entry.
        set: SetId,
        /// Number of sets.
        n: u16,
    },
    /// A recovery report whose checkpointed index exceeds its delivered index.
    #[error("recovery report from {0} has a checkpointed index above its delivered index")]
    InconsistentReport(SetId),
    /// A channel exhausted its 64-bit index space.
    #[error("send index overflow on a channel to {0}")]
    IndexOverflow(SetId),
    /// `restore` was given an incarnation not newer than the snapshot's.
    #[error("restore needs an incarnation newer than {snapshot:?}, got {given:?}")]
    IncarnationNotNewer {
        /// The snapshot's incarnation.
        snapshot: Incarnation,
        /// The one given.
        given: Incarnation,
    },
    /// A snapshot that does not belong to this set or is internally inconsistent.
    #[error("invalid snapshot: {0}")]
    InvalidSnapshot(String),
    /// A commit for a checkpoint this incarnation did not take (or already superseded).
    #[error("no pending checkpoint {0:?}")]
    UnknownCheckpoint(CheckpointId),
}
