//! The determinism contract's checker: a regenerated message is compared with the copy the
//! receiver delivered before the failure.
//!
//! Recovery is exact only for send-deterministic actors (docs/recovery.md, "The
//! contract"). A restored set runs its actors again from its checkpoint and regenerates
//! the messages they had sent after it; those the receivers already delivered are not
//! delivered again. If an actor breaks the contract (a clock read, a random number, a
//! `HashMap`'s iteration order in what it sends), a regenerated message differs from the
//! delivered one, and the rest of the run follows a history no failure-free run has. This
//! module makes that visible instead of silent:
//!
//! - Every receiver keeps a [`digest`] of each message it delivers from another set
//!   ([`DigestWindow`], per incoming channel), until the sender's committed checkpoint
//!   covers the message (the sender's CHECKPOINT_ADVANCE says up to which send index):
//!   only messages after the sender's checkpoint can be regenerated.
//! - A regenerated message that reaches the receiver is a duplicate; the receiver compares
//!   it with its digest.
//! - A regenerated message the restored sender does not transmit (the receiver's RESPONSE
//!   said it was delivered) is compared by the sender, against the digests that RESPONSE
//!   carried ([`DeliveredDigests`]).
//!
//! Either way a mismatch is a [`ContractViolation`]: the driver reports it (metric, error
//! naming both actors and the index). The delivered copy stays delivered; the check only
//! tells. Digests are CRC-32C, so a difference goes unnoticed with probability 2^-32, and
//! a message above [`FULL_DIGEST_LIMIT`] bytes is sampled, not read whole (see [`digest`]).

use super::ids::ChannelId;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The digest of a message whose regeneration may legitimately differ (an `ask`: its
/// reply route holds a per-process request number). Never compared; [`digest`] never
/// returns it.
pub const UNCOMPARABLE: u32 = 0;

/// Messages up to this many bytes are digested whole; larger ones are sampled.
pub const FULL_DIGEST_LIMIT: usize = 16 << 10;

/// Bytes of each sample of a large message.
const SAMPLE_LEN: usize = 256;

/// Samples of a large message (besides its first and last [`SAMPLE_LEN`] bytes).
const SAMPLES: usize = 30;

/// Digests a receiver keeps per channel at most: the oldest go first. Bounds the memory
/// of a channel whose sender never checkpoints, and the size of a RESPONSE.
pub const WINDOW_LIMIT: usize = 1 << 16;

/// Digests one RESPONSE (or one peer's part of a checkpoint) carries at most, over all
/// channels: at most 20 MiB encoded (a digest takes 1-5 bytes), well under the frame
/// limit. Checked while decoding, so a forged RESPONSE cannot make a node allocate more.
pub const RESPONSE_LIMIT: usize = 1 << 22;

/// Channels one RESPONSE carries digests for at most (later channels go unchecked).
pub const RUN_LIMIT: usize = 1 << 16;

/// The digest of a message's content: CRC-32C of `tag` (the message type) and the bytes,
/// read whole up to [`FULL_DIGEST_LIMIT`] bytes. Above that, the length and 32 samples
/// of 256 bytes spread evenly from the first byte to the last (8 KiB read, whatever the
/// size): the check must not cost a receiver of 1 MiB messages its bandwidth.
pub fn digest(tag: u64, bytes: &[u8]) -> u32 {
    let crc = sampled_crc(tag, bytes);
    if crc == UNCOMPARABLE {
        1
    } else {
        crc
    }
}

fn sampled_crc(tag: u64, bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&tag.to_le_bytes());
    if bytes.len() <= FULL_DIGEST_LIMIT {
        return crc32c::crc32c_append(crc, bytes);
    }
    let mut crc = crc32c::crc32c_append(crc, &(bytes.len() as u64).to_le_bytes());
    let last = bytes.len() - SAMPLE_LEN;
    for k in 0..=SAMPLES + 1 {
        let at = last * k / (SAMPLES + 1);
        crc = crc32c::crc32c_append(crc, &bytes[at..at + SAMPLE_LEN]);
    }
    crc
}

/// A mismatch between a regenerated message and the copy delivered before a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContractViolation {
    /// The channel of the message.
    pub channel: ChannelId,
    /// Its index on the channel.
    pub send_index: u64,
    /// Who noticed: the receiver (the regeneration arrived as a duplicate) or the
    /// restored sender (it did not transmit it, the receiver's RESPONSE had its digest).
    pub found_by: FoundBy,
}

/// Which side of a channel noticed a [`ContractViolation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    /// The receiving set, comparing a duplicate with its digest.
    Receiver,
    /// The restored sending set, comparing a suppressed regeneration with the digest its
    /// receiver's RESPONSE carried.
    Sender,
}

/// Consecutive digests of one channel: those of indices `first ..`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DigestWindow {
    first: u64,
    digests: VecDeque<u32>,
}

impl DigestWindow {
    /// An empty window whose next digest is that of index `next`.
    pub fn starting_at(next: u64) -> Self {
        DigestWindow {
            first: next,
            digests: VecDeque::new(),
        }
    }

    /// Appends the digest of index `index`. An index the window was told to forget (the
    /// sender's checkpoint covered it before it was delivered) is not kept; one that
    /// does not follow the window (a restore moved the channel) starts it afresh there.
    pub fn push(&mut self, index: u64, digest: u32) {
        if self.digests.is_empty() && index < self.first {
            return;
        }
        if index != self.next() {
            *self = DigestWindow::starting_at(index);
        }
        if self.digests.len() == WINDOW_LIMIT {
            self.digests.pop_front();
            self.first += 1;
        }
        self.digests.push_back(digest);
    }

    /// Forgets the digests of indices up to `upto`.
    pub fn forget_upto(&mut self, upto: u64) {
        while self.first <= upto && self.digests.pop_front().is_some() {
            self.first += 1;
        }
        self.first = self.first.max(upto.saturating_add(1));
    }

    /// The digest of `index`, if the window holds it.
    pub fn get(&self, index: u64) -> Option<u32> {
        let offset = usize::try_from(index.checked_sub(self.first)?).ok()?;
        self.digests.get(offset).copied()
    }

    /// Compares a copy of `index` with digest `digest`: `Some(false)` when they differ,
    /// `None` when the window does not hold the index or either side is
    /// [`UNCOMPARABLE`].
    pub fn matches(&self, index: u64, digest: u32) -> Option<bool> {
        self.get(index)
            .filter(|&d| d != UNCOMPARABLE && digest != UNCOMPARABLE)
            .map(|d| d == digest)
    }

    /// The digests held, with their indices.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        (self.first..).zip(self.digests.iter().copied())
    }

    /// The index the next pushed digest should have.
    pub fn next(&self) -> u64 {
        self.first + self.digests.len() as u64
    }

    /// Number of digests held.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether the window holds no digest.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }
}

/// What a RESPONSE tells a restored sender about the messages its lost incarnation sent:
/// per channel, the digests of the delivered ones its checkpoint does not cover, so it
/// can compare what it regenerates. Canonical: channels in strictly increasing order,
/// runs not empty, first index at least 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(into = "Vec<DigestRun>")]
pub struct DeliveredDigests {
    runs: Vec<DigestRun>,
}

/// The digests of indices `first ..` of one channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestRun {
    /// The channel.
    pub channel: ChannelId,
    /// Index of the first digest.
    pub first: u64,
    /// The digests of `first, first + 1, ...`.
    pub digests: Vec<u32>,
}

/// [`DeliveredDigests`] that are not in canonical form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliveredDigestsError {
    /// Channels must be listed in strictly increasing order.
    #[error("digest runs are not in strictly increasing channel order")]
    Unordered,
    /// A run without digests, or starting at index 0.
    #[error("a digest run is empty or starts at index 0")]
    EmptyRun,
    /// More digests (or channels) than a RESPONSE may carry.
    #[error("more than {RESPONSE_LIMIT} digests or {RUN_LIMIT} channels")]
    TooMany,
}

/// Decoding counts digests and runs as they come, so that input over the limits is
/// refused before it is allocated.
impl<'de> Deserialize<'de> for DeliveredDigests {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, SeqAccess, Visitor};

        struct Runs;
        impl<'de> Visitor<'de> for Runs {
            type Value = DeliveredDigests;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence of digest runs")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut runs = Vec::new();
                let mut left = RESPONSE_LIMIT;
                while let Some(run) = seq.next_element_seed(Run { left })? {
                    if runs.len() == RUN_LIMIT {
                        return Err(A::Error::custom(DeliveredDigestsError::TooMany));
                    }
                    left -= run.digests.len();
                    runs.push(run);
                }
                DeliveredDigests::try_from(runs).map_err(A::Error::custom)
            }
        }

        /// One run, its digests counted against what is `left`.
        struct Run {
            left: usize,
        }
        impl<'de> serde::de::DeserializeSeed<'de> for Run {
            type Value = DigestRun;

            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<DigestRun, D::Error> {
                d.deserialize_tuple(3, self)
            }
        }
        impl<'de> Visitor<'de> for Run {
            type Value = DigestRun;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a digest run (channel, first index, digests)")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DigestRun, A::Error> {
                let missing = || A::Error::custom("truncated digest run");
                let channel = seq.next_element()?.ok_or_else(missing)?;
                let first = seq.next_element()?.ok_or_else(missing)?;
                let digests = seq
                    .next_element_seed(Digests { left: self.left })?
                    .ok_or_else(missing)?;
                Ok(DigestRun {
                    channel,
                    first,
                    digests,
                })
            }
        }

        /// A run's digests, at most `left` of them.
        struct Digests {
            left: usize,
        }
        impl<'de> serde::de::DeserializeSeed<'de> for Digests {
            type Value = Vec<u32>;

            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<u32>, D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de> Visitor<'de> for Digests {
            type Value = Vec<u32>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("digests")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u32>, A::Error> {
                let mut out = Vec::new();
                while let Some(d) = seq.next_element()? {
                    if out.len() == self.left {
                        return Err(A::Error::custom(DeliveredDigestsError::TooMany));
                    }
                    out.push(d);
                }
                Ok(out)
            }
        }

        d.deserialize_seq(Runs)
    }
}

impl TryFrom<Vec<DigestRun>> for DeliveredDigests {
    type Error = DeliveredDigestsError;

    fn try_from(runs: Vec<DigestRun>) -> Result<Self, DeliveredDigestsError> {
        let mut total = 0usize;
        for (i, run) in runs.iter().enumerate() {
            if run.digests.is_empty() || run.first == 0 {
                return Err(DeliveredDigestsError::EmptyRun);
            }
            if i > 0 && runs[i - 1].channel >= run.channel {
                return Err(DeliveredDigestsError::Unordered);
            }
            total += run.digests.len();
        }
        if total > RESPONSE_LIMIT {
            return Err(DeliveredDigestsError::TooMany);
        }
        Ok(DeliveredDigests { runs })
    }
}

impl From<DeliveredDigests> for Vec<DigestRun> {
    fn from(d: DeliveredDigests) -> Self {
        d.runs
    }
}

impl DeliveredDigests {
    /// Collects the non-empty windows, in channel order, up to [`RESPONSE_LIMIT`] digests
    /// in all (later channels are left out: their regenerations go unchecked).
    pub fn collect<'a>(windows: impl Iterator<Item = (ChannelId, &'a DigestWindow)>) -> Self {
        let mut runs: Vec<DigestRun> = windows
            .filter(|(_, w)| !w.is_empty() && w.first > 0)
            .map(|(channel, w)| DigestRun {
                channel,
                first: w.first,
                digests: w.digests.iter().copied().collect(),
            })
            .collect();
        runs.sort_unstable_by_key(|r| r.channel);
        let mut total = 0usize;
        runs.retain(|r| {
            total += r.digests.len();
            total <= RESPONSE_LIMIT
        });
        runs.truncate(RUN_LIMIT);
        DeliveredDigests { runs }
    }

    /// The runs, in channel order.
    pub fn runs(&self) -> &[DigestRun] {
        &self.runs
    }

    /// Whether no digest is carried.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Number of digests carried.
    pub fn len(&self) -> usize {
        self.runs.iter().map(|r| r.digests.len()).sum()
    }
}

impl DigestRun {
    /// The run as a window.
    pub fn window(&self) -> DigestWindow {
        DigestWindow {
            first: self.first,
            digests: self.digests.iter().copied().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;

    fn ch(a: u64) -> ChannelId {
        ChannelId::new(ActorId::new(0, a).unwrap(), ActorId::new(1, 0).unwrap())
    }

    #[test]
    fn the_digest_sees_the_type_and_every_byte_of_a_small_message() {
        let msg = vec![7u8; FULL_DIGEST_LIMIT];
        assert_eq!(digest(1, &msg), digest(1, &msg.clone()));
        assert_ne!(digest(1, &msg), digest(2, &msg), "another message type");
        for at in [0, 100, FULL_DIGEST_LIMIT - 1] {
            let mut other = msg.clone();
            other[at] ^= 1;
            assert_ne!(digest(1, &msg), digest(1, &other), "byte {at} changed");
        }
    }

    #[test]
    fn a_large_message_is_sampled_from_its_first_byte_to_its_last() {
        let msg: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        for at in [0, msg.len() - 1] {
            let mut other = msg.clone();
            other[at] ^= 1;
            assert_ne!(digest(9, &msg), digest(9, &other), "byte {at} changed");
        }
        assert_ne!(digest(9, &msg), digest(9, &msg[..msg.len() - 1]), "length");
        let mut every_page = msg.clone();
        every_page
            .iter_mut()
            .skip(1)
            .step_by(SAMPLE_LEN)
            .for_each(|b| *b ^= 1);
        assert_ne!(
            digest(9, &msg),
            digest(9, &every_page),
            "one byte in every 256, not the first"
        );
        let mut unsampled = msg.clone();
        unsampled[msg.len() / 2] ^= 1;
        assert_eq!(
            digest(9, &msg),
            digest(9, &unsampled),
            "the limit of sampling: one byte between two samples goes unnoticed"
        );
    }

    #[test]
    fn a_window_holds_consecutive_digests_until_the_sender_checkpoints_past_them() {
        let mut w = DigestWindow::starting_at(1);
        for i in 1..=5 {
            w.push(i, i as u32 * 10);
        }
        assert_eq!(w.matches(3, 30), Some(true));
        assert_eq!(w.matches(3, 31), Some(false));
        w.forget_upto(3);
        assert_eq!(w.get(3), None);
        assert_eq!(w.get(4), Some(40));
        assert_eq!(w.next(), 6);
        w.forget_upto(9);
        assert!(w.is_empty());
        assert_eq!(w.next(), 10, "the next delivery after the checkpoint");
        w.push(7, 70);
        assert!(
            w.is_empty(),
            "covered by the sender's checkpoint before its delivery"
        );
        w.push(12, 1);
        assert_eq!(
            (w.get(12), w.next()),
            (Some(1), 13),
            "a restore moved the channel"
        );
        w.push(13, UNCOMPARABLE);
        assert_eq!(w.matches(13, 5), None, "an ask is not compared");
        assert_eq!(w.matches(12, UNCOMPARABLE), None);
    }

    #[test]
    fn a_window_keeps_only_the_newest_digests_past_its_limit() {
        let mut w = DigestWindow::starting_at(1);
        for i in 1..=(WINDOW_LIMIT as u64 + 2) {
            w.push(i, i as u32);
        }
        assert_eq!(w.len(), WINDOW_LIMIT);
        assert_eq!(w.get(2), None);
        assert_eq!(w.get(3), Some(3));
    }

    #[test]
    fn delivered_digests_round_trip_and_bad_ones_are_refused() {
        let mut a = DigestWindow::starting_at(4);
        a.push(4, 1);
        a.push(5, 2);
        let empty = DigestWindow::starting_at(1);
        let d = DeliveredDigests::collect([(ch(2), &a), (ch(1), &empty)].into_iter());
        assert_eq!(d.len(), 2);
        let bytes = postcard::to_allocvec(&d).unwrap();
        assert_eq!(postcard::from_bytes::<DeliveredDigests>(&bytes).unwrap(), d);
        assert_eq!(d.runs()[0].window().get(5), Some(2));

        let run = |c, first, n| DigestRun {
            channel: ch(c),
            first,
            digests: vec![0; n],
        };
        for (bad, why) in [
            (vec![run(2, 1, 1), run(1, 1, 1)], "unordered"),
            (vec![run(1, 1, 0)], "empty run"),
            (vec![run(1, 0, 1)], "index 0"),
            (vec![run(1, 1, RESPONSE_LIMIT + 1)], "too many digests"),
            (
                vec![
                    run(1, 1, RESPONSE_LIMIT / 2),
                    run(2, 1, RESPONSE_LIMIT / 2 + 1),
                ],
                "too many digests over two runs",
            ),
            (
                (1..=RUN_LIMIT as u64 + 1).map(|c| run(c, 1, 1)).collect(),
                "too many channels",
            ),
        ] {
            let bytes = postcard::to_allocvec(&bad).unwrap();
            assert!(
                postcard::from_bytes::<DeliveredDigests>(&bytes).is_err(),
                "{why}"
            );
        }
    }
}
