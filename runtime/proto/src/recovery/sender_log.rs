//! The sending side of a set: per outgoing channel, the send index, the sender-based log of
//! messages not yet covered by the receiver's checkpoint (payload, index, dependency
//! vector), the release on CHECKPOINT_ADVANCE, the suppression of regenerated messages the
//! receiver already has, and the byte accounting of the log. Moving payloads out to
//! logger nodes is [`log_dump`](super::log_dump)'s.
//!
//! Every send is logged, also a suppressed one: if its receiver later rolls back behind
//! it, the log is the only place it can come from. Entries of one channel are therefore
//! contiguous, from `released + 1` to `last_send`, and live in a `VecDeque`: append,
//! release and "resend everything after index i" are O(1) per entry.

use super::dep_vector::DepVector;
use super::error::ProtocolError;
use super::ids::{ChannelId, Incarnation, SetId};
use super::log_dump::{BlockId, Held};
use super::messages::{ChannelIndices, MessageMeta};
use super::replay_check::{DeliveredDigests, DigestWindow};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A payload the log can keep: cloneable (a resend hands out a copy) and measurable.
///
/// With `bytes::Bytes` a clone is a reference count, with `Vec<u8>` a copy.
pub trait LogPayload: Clone {
    /// Bytes of payload the log holds for this value.
    fn byte_len(&self) -> usize;

    /// Digest of the content, equal for equal messages: what a receiver keeps of a
    /// delivered message to check its regeneration (see [`replay_check`](super::replay_check)).
    /// [`UNCOMPARABLE`](super::replay_check::UNCOMPARABLE) for a message whose
    /// regeneration may legitimately differ.
    fn digest(&self) -> u32;
}

impl LogPayload for Vec<u8> {
    fn byte_len(&self) -> usize {
        self.len()
    }

    fn digest(&self) -> u32 {
        super::replay_check::digest(0, self)
    }
}

impl LogPayload for bytes::Bytes {
    fn byte_len(&self) -> usize {
        self.len()
    }

    fn digest(&self) -> u32 {
        super::replay_check::digest(0, self)
    }
}

/// One logged message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry<P> {
    /// Its index on its channel.
    pub send_index: u64,
    /// The sender's incarnation when it was sent.
    pub sender_incarnation: Incarnation,
    /// The sender's dependency vector when it was sent.
    pub depend: DepVector,
    /// The message, or where a logger node keeps it.
    pub payload: Held<P>,
}

/// The state of one outgoing channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutChannel<P> {
    /// Index of the last message sent (`last_send_index`).
    pub last_send: u64,
    /// Every index up to this one is covered by the receiver's committed checkpoint: never
    /// needed again, not logged.
    pub released: u64,
    /// Logged messages, indices `released + 1 ..= last_send` (fewer if `released` is
    /// ahead of `last_send`, as after a restore behind the receiver's checkpoint).
    pub entries: VecDeque<LogEntry<P>>,
    /// Indices up to this one were delivered by the receiver (its RESPONSE or ROLLBACK
    /// said so): a regenerated message with such an index is not transmitted. Volatile.
    #[serde(skip)]
    pub suppress_upto: u64,
    /// Digests of the messages the receiver delivered from this set's lost incarnation
    /// after the checkpoint (its RESPONSE carried them): a regeneration that is not
    /// transmitted is compared with them. Volatile.
    #[serde(skip)]
    pub expected: DigestWindow,
    /// Digests of regenerations not transmitted before that RESPONSE arrived, to compare
    /// when it does. Volatile.
    #[serde(skip)]
    pub regenerated: DigestWindow,
}

impl<P> Default for OutChannel<P> {
    fn default() -> Self {
        OutChannel {
            last_send: 0,
            released: 0,
            entries: VecDeque::new(),
            suppress_upto: 0,
            expected: DigestWindow::default(),
            regenerated: DigestWindow::default(),
        }
    }
}

/// Size of the log, for metrics and quotas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Messages held.
    pub entries: usize,
    /// Payload bytes held.
    pub payload_bytes: usize,
    /// Bytes of the dependency vectors held (encoded size).
    pub vector_bytes: usize,
    /// Largest `entries` seen.
    pub peak_entries: usize,
    /// Largest `payload_bytes + vector_bytes` seen.
    pub peak_bytes: usize,
    /// Entries released so far.
    pub released_entries: u64,
    /// Entries whose payload a logger node keeps (not counted in `payload_bytes`).
    pub dumped_entries: usize,
    /// Payload bytes logger nodes keep for this log.
    pub dumped_bytes: usize,
}

impl LogStats {
    /// Bytes held: payloads plus vectors.
    pub fn bytes(&self) -> usize {
        self.payload_bytes + self.vector_bytes
    }
}

/// What [`SenderLog::record_send`] decided.
#[derive(Debug)]
pub struct Recorded<P> {
    /// The metadata to attach.
    pub meta: MessageMeta,
    /// The payload to transmit, or `None` when the receiver already has the message.
    pub transmit: Option<P>,
    /// For a message not transmitted (a regeneration): its digest, to compare with the
    /// copy the receiver delivered.
    pub digest: Option<u32>,
}

/// The sending side of one set: all its outgoing channels, grouped by destination set.
#[derive(Clone, Debug)]
pub struct SenderLog<P> {
    peers: Vec<BTreeMap<ChannelId, OutChannel<P>>>,
    /// Bytes held in memory (payloads plus vectors) per destination set.
    pub(super) peer_bytes: Vec<usize>,
    /// Per block at a logger node (with the logger's number): entries still pointing
    /// into it.
    pub(super) blocks: BTreeMap<(u16, BlockId), usize>,
    /// Blocks no entry points into any more, for the driver to let go of.
    pub(super) released_blocks: Vec<(u16, BlockId)>,
    /// Number of the next block this incarnation dumps.
    pub(super) next_block: u64,
    pub(super) stats: LogStats,
}

impl<P: LogPayload> SenderLog<P> {
    /// An empty log for a cluster of `n` sets.
    pub fn new(n: u16) -> Self {
        SenderLog {
            peers: (0..n).map(|_| BTreeMap::new()).collect(),
            peer_bytes: vec![0; usize::from(n)],
            blocks: BTreeMap::new(),
            released_blocks: Vec::new(),
            next_block: 0,
            stats: LogStats::default(),
        }
    }

    /// Rebuilds a log from checkpointed channels (suppression starts empty).
    pub fn from_channels(n: u16, channels: Vec<(SetId, ChannelId, OutChannel<P>)>) -> Self {
        let mut log = SenderLog::new(n);
        for (dst, channel, out) in channels {
            if dst.index() >= log.peers.len() {
                continue;
            }
            for e in &out.entries {
                log.account_add(dst, &e.payload, e.depend.encoded_len());
            }
            log.peers[dst.index()].insert(channel, out);
        }
        log
    }

    /// Copies of every channel's durable state, for a checkpoint.
    pub fn channels(&self) -> Vec<(SetId, ChannelId, OutChannel<P>)> {
        let mut out = Vec::new();
        for (dst, peer) in self.peers.iter().enumerate() {
            for (channel, state) in peer {
                let durable = OutChannel {
                    last_send: state.last_send,
                    released: state.released,
                    entries: state.entries.clone(),
                    ..OutChannel::default()
                };
                out.push((SetId(dst as u16), *channel, durable));
            }
        }
        out
    }

    /// Assigns the next index on `channel` to `payload`, logs it (unless the receiver's
    /// checkpoint already covers that index) and decides whether to transmit it.
    pub fn record_send(
        &mut self,
        dst: SetId,
        channel: ChannelId,
        incarnation: Incarnation,
        depend: &DepVector,
        payload: P,
    ) -> Result<Recorded<P>, ProtocolError> {
        let out = self.peers[dst.index()].entry(channel).or_default();
        let send_index = out
            .last_send
            .checked_add(1)
            // `u64::MAX` is never an index: indices from peers and images above it are
            // refused, so none can be pushed up to it.
            .filter(|i| *i < u64::MAX)
            .ok_or(ProtocolError::IndexOverflow(dst))?;
        out.last_send = send_index;
        let meta = MessageMeta {
            channel,
            send_index,
            sender_incarnation: incarnation,
            depend: depend.clone(),
        };
        let suppress = send_index <= out.suppress_upto.max(out.released);
        let digest = suppress.then(|| payload.digest());
        let transmit = if send_index > out.released {
            let transmit = (!suppress).then(|| payload.clone());
            let (pb, vb) = (payload.byte_len(), depend.encoded_len());
            out.entries.push_back(LogEntry {
                send_index,
                sender_incarnation: incarnation,
                depend: depend.clone(),
                payload: Held::Here(payload),
            });
            self.account_new(dst, pb, vb);
            transmit
        } else {
            (!suppress).then_some(payload)
        };
        Ok(Recorded {
            meta,
            transmit,
            digest,
        })
    }

    /// Releases the entries of `channel` to `dst` up to index `upto`; returns how many.
    pub fn release(&mut self, dst: SetId, channel: &ChannelId, upto: u64) -> usize {
        let Some(out) = self.peers[dst.index()].get_mut(channel) else {
            return 0;
        };
        out.released = out.released.max(upto);
        let mut freed = Vec::new();
        while out
            .entries
            .front()
            .is_some_and(|e| e.send_index <= out.released)
        {
            freed.extend(out.entries.pop_front());
        }
        for e in &freed {
            self.account_remove(dst, &e.payload, e.depend.encoded_len());
        }
        freed.len()
    }

    /// Releases, for every channel to `dst`, the entries covered by `checkpointed`.
    pub fn release_all(&mut self, dst: SetId, checkpointed: &ChannelIndices) -> usize {
        let mut n = 0;
        for (channel, upto) in checkpointed.iter() {
            // A channel we have no state for: remember the release for later sends.
            self.peers[dst.index()].entry(channel).or_default();
            n += self.release(dst, &channel, upto);
        }
        n
    }

    /// Replaces the suppression thresholds of every channel to `dst` by `delivered`
    /// (channels it does not list get 0: the receiver has delivered nothing on them).
    pub fn set_suppression(&mut self, dst: SetId, delivered: &ChannelIndices) {
        let peer = &mut self.peers[dst.index()];
        for out in peer.values_mut() {
            out.suppress_upto = 0;
        }
        for (channel, upto) in delivered.iter() {
            peer.entry(channel).or_default().suppress_upto = upto;
        }
    }

    /// Replaces the digests the regenerations to `dst` are compared with (from `dst`'s
    /// RESPONSE to this set's ROLLBACK), and compares the regenerations held until then:
    /// returns `(channel, index, matches)` for each that has a delivered copy's digest.
    pub fn set_expected(
        &mut self,
        dst: SetId,
        digests: &DeliveredDigests,
    ) -> Vec<(ChannelId, u64, bool)> {
        let peer = &mut self.peers[dst.index()];
        for out in peer.values_mut() {
            out.expected = DigestWindow::default();
        }
        for run in digests.runs() {
            peer.entry(run.channel).or_default().expected = run.window();
        }
        let mut checked = Vec::new();
        for (channel, out) in peer.iter_mut() {
            let held = std::mem::take(&mut out.regenerated);
            for (index, digest) in held.iter() {
                if let Some(matches) = out.expected.matches(index, digest) {
                    checked.push((*channel, index, matches));
                }
            }
        }
        checked
    }

    /// The regenerations to `dst` held for comparison (see
    /// [`SenderLog::hold_regeneration`]), for a checkpoint.
    pub fn held_regenerations(&self, dst: SetId) -> DeliveredDigests {
        self.peers
            .get(dst.index())
            .map(|p| DeliveredDigests::collect(p.iter().map(|(c, o)| (*c, &o.regenerated))))
            .unwrap_or_default()
    }

    /// Holds again the regenerations a checkpoint kept (see
    /// [`SenderLog::held_regenerations`]).
    pub fn restore_held(&mut self, dst: SetId, held: &DeliveredDigests) {
        for run in held.runs() {
            for (index, digest) in run.window().iter() {
                self.hold_regeneration(dst, run.channel, index, digest);
            }
        }
    }

    /// Compares the regeneration `index` on `channel` to `dst` (digest `digest`) with the
    /// delivered copy's digest from `dst`'s RESPONSE: `None` when it has none.
    pub fn check_regeneration(
        &mut self,
        dst: SetId,
        channel: &ChannelId,
        index: u64,
        digest: u32,
    ) -> Option<bool> {
        let out = self.peers.get_mut(dst.index())?.get_mut(channel)?;
        let matches = out.expected.matches(index, digest);
        out.expected.forget_upto(index);
        matches
    }

    /// Keeps the digest of regeneration `index` on `channel` to `dst` until `dst`'s
    /// RESPONSE says what it delivered (see [`SenderLog::set_expected`]).
    pub fn hold_regeneration(&mut self, dst: SetId, channel: ChannelId, index: u64, digest: u32) {
        if let Some(peer) = self.peers.get_mut(dst.index()) {
            peer.entry(channel)
                .or_default()
                .regenerated
                .push(index, digest);
        }
    }

    /// The index of the last message sent on each channel to `dst`.
    pub fn sent_to(&self, dst: SetId) -> ChannelIndices {
        self.peers
            .get(dst.index())
            .map(|p| p.iter().map(|(c, o)| (*c, o.last_send)).collect())
            .unwrap_or_default()
    }

    /// Copies of the logged messages to `dst` after the indices in `delivered`, channel by
    /// channel in index order, with their logged metadata (a payload a logger node keeps
    /// as where it is).
    pub fn entries_after(
        &self,
        dst: SetId,
        delivered: &ChannelIndices,
    ) -> Vec<(MessageMeta, Held<P>)> {
        let mut out = Vec::new();
        for (channel, state) in &self.peers[dst.index()] {
            let after = delivered.get(channel);
            let skip = state.entries.partition_point(|e| e.send_index <= after);
            for e in state.entries.iter().skip(skip) {
                out.push((
                    MessageMeta {
                        channel: *channel,
                        send_index: e.send_index,
                        sender_incarnation: e.sender_incarnation,
                        depend: e.depend.clone(),
                    },
                    e.payload.clone(),
                ));
            }
        }
        out
    }

    /// The state of one channel, if it has any.
    pub fn channel(&self, dst: SetId, channel: &ChannelId) -> Option<&OutChannel<P>> {
        self.peers.get(dst.index())?.get(channel)
    }

    /// The channels to `dst` whose log was released past what `dst` reports it has
    /// delivered (`delivered`, from its ROLLBACK): `(channel, released, delivered)`.
    /// The entries in between are gone, so they cannot be resent: `dst` restored an older
    /// state than the checkpoint it had committed (that one was lost or damaged). Empty
    /// when every message `dst` lacks is still logged. Read-only.
    pub fn released_past(
        &self,
        dst: SetId,
        delivered: &ChannelIndices,
    ) -> Vec<(ChannelId, u64, u64)> {
        let Some(peer) = self.peers.get(dst.index()) else {
            return Vec::new();
        };
        peer.iter()
            .filter_map(|(channel, out)| {
                let have = delivered.get(channel);
                (out.released > have).then_some((*channel, out.released, have))
            })
            .collect()
    }

    /// Current size of the log.
    pub fn stats(&self) -> LogStats {
        self.stats
    }

    /// Bytes held (payloads plus vectors) for each destination set, indexed by set.
    pub fn bytes_per_peer(&self) -> &[usize] {
        &self.peer_bytes
    }

    /// Counts an entry to `dst` with `payload` and `vector` bytes of vector in.
    fn account_add(&mut self, dst: SetId, payload: &Held<P>, vector: usize) {
        self.stats.entries += 1;
        self.stats.vector_bytes += vector;
        self.peer_bytes[dst.index()] += vector;
        self.count_payload_in(dst, payload);
        self.note_peak();
    }

    /// Counts a new entry to `dst` (its payload in memory) in.
    fn account_new(&mut self, dst: SetId, payload: usize, vector: usize) {
        self.stats.entries += 1;
        self.stats.vector_bytes += vector;
        self.stats.payload_bytes += payload;
        self.peer_bytes[dst.index()] += payload + vector;
        self.note_peak();
    }

    /// Counts a released entry to `dst` out.
    fn account_remove(&mut self, dst: SetId, payload: &Held<P>, vector: usize) {
        self.stats.entries -= 1;
        self.stats.vector_bytes -= vector;
        self.stats.released_entries += 1;
        self.peer_bytes[dst.index()] -= vector;
        self.count_payload_out(dst, payload);
    }

    /// Counts a payload in: its bytes in memory, or its reference into a dumped block.
    pub(super) fn count_payload_in(&mut self, dst: SetId, payload: &Held<P>) {
        match payload {
            Held::Here(p) => {
                self.stats.payload_bytes += p.byte_len();
                self.peer_bytes[dst.index()] += p.byte_len();
            }
            Held::Dumped(at) => {
                self.stats.dumped_entries += 1;
                self.stats.dumped_bytes += at.bytes as usize;
                for logger in at.locations() {
                    *self.blocks.entry((logger, at.block)).or_insert(0) += 1;
                }
            }
        }
    }

    /// Counts a payload out; a block nothing points into any more is released.
    pub(super) fn count_payload_out(&mut self, dst: SetId, payload: &Held<P>) {
        match payload {
            Held::Here(p) => {
                self.stats.payload_bytes -= p.byte_len();
                self.peer_bytes[dst.index()] -= p.byte_len();
            }
            Held::Dumped(at) => {
                self.stats.dumped_entries -= 1;
                self.stats.dumped_bytes -= at.bytes as usize;
                for logger in at.locations() {
                    let key = (logger, at.block);
                    if let Some(n) = self.blocks.get_mut(&key) {
                        *n -= 1;
                        if *n == 0 {
                            self.blocks.remove(&key);
                            self.released_blocks.push(key);
                        }
                    }
                }
            }
        }
    }

    /// The channels to `dst`.
    pub(super) fn peer_channels(&self, dst: SetId) -> Option<&BTreeMap<ChannelId, OutChannel<P>>> {
        self.peers.get(dst.index())
    }

    /// Mutable access to the channels to `dst`, for the dump.
    pub(super) fn peer_channels_mut(
        &mut self,
        dst: SetId,
    ) -> Option<&mut BTreeMap<ChannelId, OutChannel<P>>> {
        self.peers.get_mut(dst.index())
    }

    fn note_peak(&mut self) {
        self.stats.peak_entries = self.stats.peak_entries.max(self.stats.entries);
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;

    const T: SetId = SetId(1);

    fn ch(a: u64) -> ChannelId {
        ChannelId::new(ActorId::new(0, a).unwrap(), ActorId::new(1, 0).unwrap())
    }

    fn send(log: &mut SenderLog<Vec<u8>>, c: ChannelId, len: usize) -> Recorded<Vec<u8>> {
        log.record_send(T, c, Incarnation(0), &DepVector::new(), vec![7; len])
            .unwrap()
    }

    fn idx(pairs: &[(ChannelId, u64)]) -> ChannelIndices {
        pairs.iter().copied().collect()
    }

    #[test]
    fn indices_are_per_channel_and_every_send_is_logged() {
        let mut log = SenderLog::new(2);
        assert_eq!(send(&mut log, ch(1), 10).meta.send_index, 1);
        assert_eq!(send(&mut log, ch(1), 10).meta.send_index, 2);
        assert_eq!(send(&mut log, ch(2), 5).meta.send_index, 1);
        let s = log.stats();
        assert_eq!((s.entries, s.payload_bytes), (3, 25));
        assert_eq!(s.vector_bytes, 3, "an empty vector costs its length byte");
    }

    #[test]
    fn a_receiver_reporting_less_than_was_released_is_told_apart_from_one_that_can_be_served() {
        let mut log = SenderLog::new(2);
        for _ in 0..5 {
            send(&mut log, ch(1), 10);
        }
        send(&mut log, ch(2), 10);
        // The receiver's committed checkpoint covered 3 messages of ch(1), 1 of ch(2).
        log.release_all(T, &idx(&[(ch(1), 3), (ch(2), 1)]));
        // Restored from that checkpoint (or a newer one): everything it lacks is logged.
        assert!(log
            .released_past(T, &idx(&[(ch(1), 3), (ch(2), 1)]))
            .is_empty());
        assert!(log
            .released_past(T, &idx(&[(ch(1), 5), (ch(2), 1)]))
            .is_empty());
        // Restored from an older state: 2 and 3 of ch(1) are gone; from the beginning,
        // ch(2) too (a channel it does not report counts as nothing delivered).
        assert_eq!(
            log.released_past(T, &idx(&[(ch(1), 1), (ch(2), 1)])),
            vec![(ch(1), 3, 1)]
        );
        assert_eq!(
            log.released_past(T, &ChannelIndices::default()),
            vec![(ch(1), 3, 0), (ch(2), 1, 0)]
        );
        // Nothing released to another set, or to a set that is not in the cluster.
        assert!(log
            .released_past(SetId(0), &ChannelIndices::default())
            .is_empty());
        assert!(log
            .released_past(SetId(9), &ChannelIndices::default())
            .is_empty());
    }

    #[test]
    fn checkpoint_advance_releases_up_to_the_index_and_accounts_bytes() {
        let mut log = SenderLog::new(2);
        for _ in 0..5 {
            send(&mut log, ch(1), 100);
        }
        assert_eq!(log.release(T, &ch(1), 3), 3);
        assert_eq!(log.stats().entries, 2);
        assert_eq!(log.stats().payload_bytes, 200);
        assert_eq!(log.stats().released_entries, 3);
        assert_eq!(log.stats().peak_entries, 5);
        // Release is monotone: an older advance arriving late changes nothing.
        assert_eq!(log.release(T, &ch(1), 2), 0);
        assert_eq!(log.release(T, &ch(1), 5), 2);
        assert_eq!(
            log.stats(),
            LogStats {
                peak_entries: 5,
                peak_bytes: 505,
                released_entries: 5,
                ..LogStats::default()
            }
        );
    }

    #[test]
    fn suppressed_sends_are_still_logged_and_can_be_resent() {
        let mut log = SenderLog::new(2);
        log.set_suppression(T, &idx(&[(ch(1), 2)]));
        assert!(send(&mut log, ch(1), 1).transmit.is_none());
        assert!(send(&mut log, ch(1), 1).transmit.is_none());
        assert!(send(&mut log, ch(1), 1).transmit.is_some());
        assert_eq!(log.stats().entries, 3);
        // The receiver rolls back behind what it had: everything after 0 is resent.
        let again = log.entries_after(T, &ChannelIndices::default());
        assert_eq!(
            again.iter().map(|(m, _)| m.send_index).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // New thresholds replace old ones entirely.
        log.set_suppression(T, &ChannelIndices::default());
        assert!(send(&mut log, ch(1), 1).transmit.is_some());
    }

    #[test]
    fn sends_covered_by_the_receivers_checkpoint_are_neither_logged_nor_sent() {
        let mut log = SenderLog::new(2);
        // After a restore behind the receiver: it checkpointed index 2 of a channel that
        // this incarnation has not re-sent yet.
        log.release_all(T, &idx(&[(ch(1), 2)]));
        assert!(send(&mut log, ch(1), 1).transmit.is_none());
        assert!(send(&mut log, ch(1), 1).transmit.is_none());
        assert_eq!(log.stats().entries, 0);
        assert!(send(&mut log, ch(1), 1).transmit.is_some());
        assert_eq!(log.stats().entries, 1);
    }

    #[test]
    fn entries_after_resends_only_the_tail_with_logged_metadata() {
        let mut log = SenderLog::new(2);
        let mut d = DepVector::new();
        for i in 1..=4u64 {
            d.set(SetId(0), i * 10);
            log.record_send(T, ch(1), Incarnation(0), &d, vec![i as u8])
                .unwrap();
        }
        send(&mut log, ch(2), 1);
        let tail = log.entries_after(T, &idx(&[(ch(1), 2), (ch(2), 1)]));
        assert_eq!(tail.len(), 2);
        assert_eq!(tail[0].0.send_index, 3);
        assert_eq!(tail[0].0.depend.get(SetId(0)), 30);
        assert_eq!(tail[1].1, Held::Here(vec![4]));
    }

    #[test]
    fn channels_round_trip_through_a_checkpoint() {
        let mut log = SenderLog::new(2);
        for _ in 0..3 {
            send(&mut log, ch(1), 4);
        }
        log.release(T, &ch(1), 1);
        log.set_suppression(T, &idx(&[(ch(1), 3)]));
        let restored = SenderLog::from_channels(2, log.channels());
        let c = restored.channel(T, &ch(1)).unwrap();
        assert_eq!((c.last_send, c.released, c.entries.len()), (3, 1, 2));
        assert_eq!(restored.stats().entries, 2);
        let bytes = postcard::to_allocvec(&log.channels()).unwrap();
        let back: Vec<(SetId, ChannelId, OutChannel<Vec<u8>>)> =
            postcard::from_bytes(&bytes).unwrap();
        assert_eq!(
            back[0].2.suppress_upto, 0,
            "suppression is not checkpointed"
        );
        assert_eq!(back[0].2.entries, c.entries);
    }
}
