//! What the protocol puts on the wire between sets: the metadata piggybacked on every
//! inter-set application message, and the control messages (ROLLBACK, RESPONSE,
//! CHECKPOINT_ADVANCE, CHECKPOINT_REQUEST). All are serde types with canonical, validated encodings.

use super::delivery::SendPositions;
use super::dep_vector::{varint_len, DepVector};
use super::ids::{ChannelId, Incarnation};
use super::replay_check::DeliveredDigests;
use serde::{Deserialize, Serialize};

/// Recovery metadata carried by an inter-set application message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageMeta {
    /// The actor-to-actor channel the message travels on.
    pub channel: ChannelId,
    /// Position of the message in its channel, from 1.
    pub send_index: u64,
    /// Incarnation of the sending set when the message was first sent (a resend from the
    /// log keeps the original value). Decides whether the dependency rule binds the
    /// message at a recovering receiver (see `delivery`).
    pub sender_incarnation: Incarnation,
    /// The sender's dependency vector when the message was sent.
    pub depend: DepVector,
}

impl MessageMeta {
    /// Bytes of the postcard encoding of this metadata.
    pub fn encoded_len(&self) -> usize {
        varint_len(self.channel.from.as_u64())
            + varint_len(self.channel.to.as_u64())
            + self.piggyback_len()
    }

    /// Bytes that recovery adds to a message that already names its channel (the envelope
    /// carries the addressee, and the sender's id is needed for replies anyway): the send
    /// index, the sender's incarnation and the dependency vector.
    pub fn piggyback_len(&self) -> usize {
        varint_len(self.send_index)
            + varint_len(u64::from(self.sender_incarnation.0))
            + self.depend.encoded_len()
    }
}

/// Per-channel indices, sorted by channel, without zero entries: a canonical sparse map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(ChannelId, u64)>", into = "Vec<(ChannelId, u64)>")]
pub struct ChannelIndices {
    entries: Vec<(ChannelId, u64)>,
}

/// Per-channel indices that are not in canonical form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelIndicesError {
    /// Channels must be listed in strictly increasing order.
    #[error("channel indices are not in strictly increasing channel order")]
    Unordered,
    /// Zero indices are implicit and must not be listed.
    #[error("channel indices list a zero index")]
    ZeroEntry,
    /// `u64::MAX` is never an index (sending stops before it): one in a peer's message
    /// would release a log for ever and poison every later checkpoint image.
    #[error("channel indices list the index u64::MAX")]
    Exhausted,
}

impl TryFrom<Vec<(ChannelId, u64)>> for ChannelIndices {
    type Error = ChannelIndicesError;

    fn try_from(entries: Vec<(ChannelId, u64)>) -> Result<Self, ChannelIndicesError> {
        for (i, &(channel, value)) in entries.iter().enumerate() {
            if value == 0 {
                return Err(ChannelIndicesError::ZeroEntry);
            }
            if value == u64::MAX {
                return Err(ChannelIndicesError::Exhausted);
            }
            if i > 0 && entries[i - 1].0 >= channel {
                return Err(ChannelIndicesError::Unordered);
            }
        }
        Ok(ChannelIndices { entries })
    }
}

impl From<ChannelIndices> for Vec<(ChannelId, u64)> {
    fn from(v: ChannelIndices) -> Self {
        v.entries
    }
}

impl FromIterator<(ChannelId, u64)> for ChannelIndices {
    /// Collects `(channel, index)` pairs; zero indices are dropped and a repeated channel
    /// keeps its largest index.
    fn from_iter<I: IntoIterator<Item = (ChannelId, u64)>>(iter: I) -> Self {
        let mut entries: Vec<_> = iter.into_iter().filter(|e| e.1 > 0).collect();
        entries.sort_unstable();
        let mut out: Vec<(ChannelId, u64)> = Vec::with_capacity(entries.len());
        for (c, v) in entries {
            match out.last_mut() {
                Some(last) if last.0 == c => last.1 = last.1.max(v),
                _ => out.push((c, v)),
            }
        }
        ChannelIndices { entries: out }
    }
}

impl ChannelIndices {
    /// The index for `channel` (0 when absent).
    pub fn get(&self, channel: &ChannelId) -> u64 {
        match self.entries.binary_search_by_key(channel, |e| e.0) {
            Ok(i) => self.entries[i].1,
            Err(_) => 0,
        }
    }

    /// The non-zero entries in channel order.
    pub fn iter(&self) -> impl Iterator<Item = (ChannelId, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// Number of non-zero entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether every index is zero.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One set's recovery-relevant view of its channels *from* the set it is sent to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryReport {
    /// The reporting set's incarnation.
    pub incarnation: Incarnation,
    /// Last delivered index per channel from the addressee: the addressee need not send
    /// (and suppresses) anything up to it, and resends what it logged after it.
    pub delivered: ChannelIndices,
    /// Last delivered index per channel covered by the reporting set's last committed
    /// checkpoint: the addressee may release its log up to it.
    pub checkpointed: ChannelIndices,
}

/// A protocol control message between two sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlMessage {
    /// ROLLBACK: the sender restarted from its last committed checkpoint (its report says
    /// what that checkpoint had delivered). The addressee answers with a RESPONSE and
    /// resends its logged messages after the reported indices.
    Rollback(RecoveryReport),
    /// RESPONSE to the ROLLBACK of the addressee's incarnation `to_incarnation`; it follows
    /// the resends on the same FIFO stream, so when it arrives the resends have arrived.
    Response {
        /// The incarnation of the addressee whose ROLLBACK this answers.
        to_incarnation: Incarnation,
        /// The responder's state.
        report: RecoveryReport,
        /// Digests of what the responder delivered from the addressee after the
        /// addressee's last checkpoint known to it: the addressee compares its
        /// regenerations with them (the determinism contract's check).
        digests: DeliveredDigests,
        /// Where in the addressee's history each of those messages was sent (its
        /// interval at the send): what its deliveries wait for until it has made them
        /// again.
        positions: Vec<SendPositions>,
    },
    /// CHECKPOINT_ADVANCE: the sender committed a checkpoint covering these deliveries
    /// from the addressee and these sends to it; the addressee releases its log entries
    /// up to the deliveries, and forgets the digests of the sends (they can no longer be
    /// regenerated).
    CheckpointAdvance {
        /// Last delivered index per channel covered by the committed checkpoint (only
        /// the channels that advanced).
        checkpointed: ChannelIndices,
        /// Last sent index per channel to the addressee covered by the committed
        /// checkpoint (only the channels that advanced).
        sent: ChannelIndices,
    },
    /// CHECKPOINT_REQUEST: the sender's log is over its memory quota, and the messages
    /// it holds for the addressee are among the largest part of it: a checkpoint of the
    /// addressee would let it release them. Only a hint; the addressee's CHECKPOINT_ADVANCE
    /// is what releases anything.
    CheckpointRequest,
}

impl ControlMessage {
    /// Short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ControlMessage::Rollback(_) => "rollback",
            ControlMessage::Response { .. } => "response",
            ControlMessage::CheckpointAdvance { .. } => "checkpoint_advance",
            ControlMessage::CheckpointRequest => "checkpoint_request",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;
    use crate::recovery::ids::SetId;

    fn ch(a: u64, b: u64) -> ChannelId {
        ChannelId::new(ActorId::new(0, a).unwrap(), ActorId::new(1, b).unwrap())
    }

    #[test]
    fn meta_encoded_len_matches_postcard() {
        let mut depend = DepVector::new();
        depend.set(SetId(0), 300);
        depend.set(SetId(4), 2);
        let meta = MessageMeta {
            channel: ch(1, 2),
            send_index: 1000,
            sender_incarnation: Incarnation(3),
            depend,
        };
        assert_eq!(
            postcard::to_allocvec(&meta).unwrap().len(),
            meta.encoded_len()
        );
        assert_eq!(meta.piggyback_len(), 2 + 1 + (1 + 1 + 2 + 1 + 1));
    }

    #[test]
    fn channel_indices_collect_canonically_and_reject_bad_input() {
        let c: ChannelIndices = [(ch(2, 0), 5), (ch(1, 0), 3), (ch(2, 0), 7), (ch(3, 0), 0)]
            .into_iter()
            .collect();
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            vec![(ch(1, 0), 3), (ch(2, 0), 7)]
        );
        assert_eq!(c.get(&ch(3, 0)), 0);
        let bytes = postcard::to_allocvec(&c).unwrap();
        assert_eq!(postcard::from_bytes::<ChannelIndices>(&bytes).unwrap(), c);

        let unordered = postcard::to_allocvec(&vec![(ch(2, 0), 1u64), (ch(1, 0), 1)]).unwrap();
        assert!(postcard::from_bytes::<ChannelIndices>(&unordered).is_err());
        let zero = postcard::to_allocvec(&vec![(ch(2, 0), 0u64)]).unwrap();
        assert!(postcard::from_bytes::<ChannelIndices>(&zero).is_err());
        // A peer's "checkpointed up to u64::MAX" would release a log for good.
        let top = postcard::to_allocvec(&vec![(ch(2, 0), u64::MAX)]).unwrap();
        assert!(postcard::from_bytes::<ChannelIndices>(&top).is_err());
    }

    #[test]
    fn control_messages_round_trip() {
        let report = RecoveryReport {
            incarnation: Incarnation(2),
            delivered: [(ch(1, 1), 9)].into_iter().collect(),
            checkpointed: [(ch(1, 1), 4)].into_iter().collect(),
        };
        for msg in [
            ControlMessage::Rollback(report.clone()),
            ControlMessage::Response {
                to_incarnation: Incarnation(1),
                report,
                digests: DeliveredDigests::default(),
                positions: vec![SendPositions {
                    channel: ch(1, 1),
                    first: 5,
                    at: vec![40, 41, 41],
                }],
            },
            ControlMessage::CheckpointAdvance {
                checkpointed: ChannelIndices::default(),
                sent: [(ch(1, 1), 3)].into_iter().collect(),
            },
            ControlMessage::CheckpointRequest,
        ] {
            let bytes = postcard::to_allocvec(&msg).unwrap();
            assert_eq!(postcard::from_bytes::<ControlMessage>(&bytes).unwrap(), msg);
        }
    }
}
