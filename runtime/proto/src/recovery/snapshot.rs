//! The protocol state that goes into a set checkpoint, next to the actors' states: the
//! dependency vector, per-channel send and delivery indices, and the sender-based log
//! entries that the receivers' checkpoints do not cover yet (Algorithm 1, line 33).
//!
//! Queued undelivered messages are *not* part of it: their senders still log them and
//! resend them after a rollback. Suppression thresholds are not either: they describe
//! peers' states at the time, and a restored set relearns them from RESPONSEs.

use super::delivery::SendPositions;
use super::dep_vector::DepVector;
use super::error::ProtocolError;
use super::ids::{ChannelId, CheckpointId, Incarnation, SetId};
use super::messages::ChannelIndices;
use super::replay_check::DeliveredDigests;
use super::sender_log::OutChannel;
use serde::{Deserialize, Serialize};

/// Version of the snapshot layout; bumped on incompatible changes. 3: held
/// regenerations; 4: logged payloads may be at a logger node; 5: blocks lost with a
/// logger.
pub const SNAPSHOT_FORMAT: u16 = 6;

/// A set's protocol state at a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot<P> {
    /// [`SNAPSHOT_FORMAT`] when written.
    pub format: u16,
    /// The checkpoint's number in the set's history.
    pub id: CheckpointId,
    /// The set it belongs to.
    pub set: SetId,
    /// Number of sets in the cluster.
    pub sets: u16,
    /// The incarnation that took it.
    pub incarnation: Incarnation,
    /// The dependency vector (its own entry is the set's interval).
    pub depend: DepVector,
    /// Last delivered index per incoming channel, grouped by sending set.
    pub delivered: Vec<(SetId, ChannelIndices)>,
    /// Digests of the delivered messages the senders' checkpoints do not cover, grouped
    /// by sending set: a restored set still checks their regenerations (see
    /// [`replay_check`](super::replay_check)).
    pub digests: Vec<(SetId, DeliveredDigests)>,
    /// Where in each sender's history those messages were sent, grouped by sending set:
    /// a restored set still tells a restarted sender which of its sends to make again
    /// before it delivers (see [`SendPositions`]).
    pub positions: Vec<(SetId, Vec<SendPositions>)>,
    /// Every outgoing channel: last send index, release point and logged entries.
    pub sent: Vec<(SetId, ChannelId, OutChannel<P>)>,
    /// Digests of regenerations this set did not transmit and has not compared yet with
    /// the copies their receivers delivered (the receiver's RESPONSE had not come),
    /// grouped by receiving set: a set that fails again before it comes still compares
    /// them after its restore.
    pub held_regenerations: Vec<(SetId, DeliveredDigests)>,
    /// The latest incarnation known of every set (index = set id).
    pub known_incarnations: Vec<Incarnation>,
    /// Dumped blocks the log points into that their logger had lost when the snapshot
    /// was taken (by logger): a restored set still knows them lost, and copies them
    /// back when it can.
    pub lost_blocks: Vec<(u16, super::log_dump::BlockId)>,
}

impl<P> Snapshot<P> {
    /// Checks that the snapshot belongs to set `set` of a cluster of `sets` and is
    /// internally consistent (it may come from storage that was tampered with or is
    /// from another build).
    pub fn validate(&self, set: SetId, sets: u16) -> Result<(), ProtocolError> {
        let bad = |why: String| Err(ProtocolError::InvalidSnapshot(why));
        if self.format != SNAPSHOT_FORMAT {
            return bad(format!(
                "format {} (expected {SNAPSHOT_FORMAT})",
                self.format
            ));
        }
        if self.set != set || self.sets != sets {
            return bad(format!(
                "taken by {} of {} sets, restoring {} of {}",
                self.set, self.sets, set, sets
            ));
        }
        if self.depend.max_set().is_some_and(|s| s.0 >= sets) {
            return bad("dependency vector names a set outside the cluster".into());
        }
        // The set's own interval grows by one per delivery: at its limit there is none.
        if self.depend.get(set) == u64::MAX {
            return bad("the set's own interval at its limit".into());
        }
        if self.known_incarnations.len() != usize::from(sets) {
            return bad("known incarnations do not cover the cluster".into());
        }
        let peer_ok = |s: SetId| s.0 < sets && s != set;
        for (from, _) in &self.delivered {
            if !peer_ok(*from) {
                return bad(format!("delivery indices from {from}"));
            }
        }
        for (from, _) in &self.digests {
            if !peer_ok(*from) {
                return bad(format!("digests from {from}"));
            }
        }
        for (from, _) in &self.positions {
            if !peer_ok(*from) {
                return bad(format!("send positions from {from}"));
            }
        }
        for (to, _) in &self.held_regenerations {
            if !peer_ok(*to) {
                return bad(format!("held regenerations towards {to}"));
            }
        }
        let mut channels = std::collections::HashSet::with_capacity(self.sent.len());
        for (to, channel, out) in &self.sent {
            if !peer_ok(*to) {
                return bad(format!("send state towards {to}"));
            }
            // A channel listed twice would count its log twice (its bytes never return
            // to zero, its dumped blocks are never released).
            if !channels.insert((*to, *channel)) {
                return bad(format!("send state of channel {channel:?} listed twice"));
            }
            // Indices of u64::MAX leave no room for a next message: refused here, so the
            // sums below and in the restore cannot overflow.
            if out.released == u64::MAX || out.last_send == u64::MAX {
                return bad(format!("send index of channel {channel:?} at its limit"));
            }
            let mut expected = out.released + 1;
            for e in &out.entries {
                if e.send_index != expected || e.send_index > out.last_send {
                    return bad(format!(
                        "log of channel {channel:?} is not contiguous after {}",
                        out.released
                    ));
                }
                if e.depend.max_set().is_some_and(|s| s.0 >= sets) {
                    return bad(format!("log entry vector on {channel:?}"));
                }
                expected += 1;
            }
            if out.released < out.last_send && expected != out.last_send + 1 {
                return bad(format!("log of channel {channel:?} ends early"));
            }
        }
        Ok(())
    }

    /// Number of log entries the snapshot carries.
    pub fn log_entries(&self) -> usize {
        self.sent.iter().map(|(_, _, c)| c.entries.len()).sum()
    }
}
