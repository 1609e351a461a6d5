//! Moving the sender-based log's payloads out to logger nodes (the logger-nodes paper's
//! proactive dump, Algorithm 1): which entries go, in what block, and what stays behind.
//!
//! The driver asks for a [`LogDump`] when the log is over its dump threshold, ships the
//! block to a logger process, and on its acknowledgement calls
//! [`SenderLog::mark_dumped`]: those entries keep their index and vector but their payload
//! becomes a [`DumpRef`] (where the block is), so the node's memory and its checkpoint
//! images no longer hold it. A resend of such an entry names the block
//! ([`Action::SendDumped`](super::protocol::Action::SendDumped)); the driver fetches it
//! from the logger. When the last entry pointing into a block is released, the block is
//! listed for the driver to let go of ([`SenderLog::take_released_blocks`]).
//!
//! Only one dump is in flight at a time (as in the paper): the entries of a dump stay in
//! memory until it is acknowledged, and one that was released meanwhile is skipped.

use super::ids::{ChannelId, Incarnation, SetId};
use super::sender_log::{LogPayload, SenderLog};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A block of dumped payloads: the incarnation that dumped it and its number in that
/// incarnation. Unique across restarts, so a restored set never reuses one its lost
/// incarnation wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BlockId {
    /// The incarnation that dumped it.
    pub incarnation: Incarnation,
    /// Its number among that incarnation's blocks.
    pub seq: u64,
}

impl BlockId {
    /// The smallest id.
    pub const MIN: BlockId = BlockId {
        incarnation: Incarnation(0),
        seq: 0,
    };
    /// The largest id.
    pub const MAX: BlockId = BlockId {
        incarnation: Incarnation(u32::MAX),
        seq: u64::MAX,
    };
}

/// Where a logger node keeps a dumped payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpRef {
    /// Which logger (the driver's numbering).
    pub logger: u16,
    /// A second logger that keeps a copy of the block, if any.
    pub copy: Option<u16>,
    /// The block.
    pub block: BlockId,
    /// The payload's position in the block.
    pub slot: u32,
    /// The payload's size.
    pub bytes: u32,
}

impl DumpRef {
    /// The loggers that keep the block.
    pub fn locations(&self) -> impl Iterator<Item = u16> {
        std::iter::once(self.logger).chain(self.copy)
    }
}

/// A logged payload: in this set's memory, or at a logger node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Held<P> {
    /// In memory.
    Here(P),
    /// Dumped to a logger node.
    Dumped(DumpRef),
}

/// Entries chosen for one block, with copies of their payloads (in slot order).
#[derive(Clone, Debug)]
pub struct LogDump<P> {
    /// The block's id.
    pub block: BlockId,
    /// The set the entries' messages went to.
    pub to: SetId,
    /// Each entry: channel and send index.
    pub entries: Vec<(ChannelId, u64)>,
    /// Their payloads, slot by slot.
    pub payloads: Vec<P>,
    /// Sum of the payloads' sizes.
    pub bytes: usize,
}

impl<P: LogPayload> SenderLog<P> {
    /// Chooses up to about `max_bytes` of payloads to dump in one block: the oldest
    /// in-memory entries to the set whose messages take the most memory (those are the
    /// ones already transmitted, so dropping them frees memory). `None` when nothing is
    /// in memory.
    pub fn take_dump(&mut self, incarnation: Incarnation, max_bytes: usize) -> Option<LogDump<P>> {
        let mut order: Vec<usize> = (0..self.peer_bytes.len())
            .filter(|&p| self.peer_bytes[p] > 0)
            .collect();
        // Heaviest first; ties by set number (the sort is stable).
        order.sort_by_key(|&p| std::cmp::Reverse(self.peer_bytes[p]));
        let block = BlockId {
            incarnation,
            seq: self.next_block,
        };
        for to in order {
            let to = SetId(u16::try_from(to).ok()?);
            let mut dump = LogDump {
                block,
                to,
                entries: Vec::new(),
                payloads: Vec::new(),
                bytes: 0,
            };
            for (channel, out) in self.peer_channels_mut(to)?.iter() {
                for e in &out.entries {
                    if dump.bytes >= max_bytes.max(1) {
                        break;
                    }
                    if let Held::Here(p) = &e.payload {
                        // A block stays within `max_bytes` unless one payload alone is
                        // larger (then it goes alone): a logger refuses blocks over its
                        // limit, and the same entries would be offered again for ever.
                        if !dump.entries.is_empty() && dump.bytes + p.byte_len() > max_bytes {
                            break;
                        }
                        dump.bytes += p.byte_len();
                        dump.entries.push((*channel, e.send_index));
                        dump.payloads.push(p.clone());
                    }
                }
            }
            if !dump.entries.is_empty() {
                self.next_block += 1;
                return Some(dump);
            }
        }
        None
    }

    /// Logger `logger` (and `copy`, if any, with a copy) acknowledged `dump`: its entries
    /// still in the log point into the block from now on and their payloads leave
    /// memory. Returns how many.
    pub fn mark_dumped(&mut self, dump: &LogDump<P>, logger: u16, copy: Option<u16>) -> usize {
        let mut changed = Vec::new();
        if let Some(peer) = self.peer_channels_mut(dump.to) {
            for (slot, (channel, index)) in dump.entries.iter().enumerate() {
                let Some(out) = peer.get_mut(channel) else {
                    continue;
                };
                let Ok(pos) = out.entries.binary_search_by_key(index, |e| e.send_index) else {
                    continue;
                };
                let e = &mut out.entries[pos];
                let Held::Here(p) = &e.payload else {
                    continue;
                };
                let at = DumpRef {
                    logger,
                    copy,
                    block: dump.block,
                    slot: slot as u32,
                    bytes: u32::try_from(p.byte_len()).unwrap_or(u32::MAX),
                };
                let old = std::mem::replace(&mut e.payload, Held::Dumped(at));
                changed.push((old, Held::Dumped(at)));
            }
        }
        // Counted once the channels are no longer borrowed.
        for (old, new) in &changed {
            self.count_payload_out(dump.to, old);
            self.count_payload_in(dump.to, new);
        }
        changed.len()
    }

    /// Block `block` moved from logger `from` to logger `to` (a restarted logger that
    /// lost it had no room for its copy, and a third logger took it): the entries that
    /// pointed into it at `from` point into it at `to`. Block `(from, block)` is then
    /// released like any block nothing points into. Returns how many entries moved.
    pub fn relocate_block(&mut self, block: BlockId, from: u16, to: u16) -> usize {
        let mut changed = Vec::new();
        for dst in 0..self.peer_bytes.len() as u16 {
            let dst = SetId(dst);
            let Some(peer) = self.peer_channels_mut(dst) else {
                continue;
            };
            for out in peer.values_mut() {
                for e in out.entries.iter_mut() {
                    let Held::Dumped(at) = &mut e.payload else {
                        continue;
                    };
                    if at.block != block || at.locations().any(|l| l == to) {
                        continue;
                    }
                    let old = *at;
                    if at.logger == from {
                        at.logger = to;
                    } else if at.copy == Some(from) {
                        at.copy = Some(to);
                    } else {
                        continue;
                    }
                    changed.push((dst, Held::Dumped(old), Held::Dumped(*at)));
                }
            }
        }
        // Counted once the channels are no longer borrowed.
        for (dst, old, new) in &changed {
            self.count_payload_in(*dst, new);
            self.count_payload_out(*dst, old);
        }
        changed.len()
    }

    /// Blocks that no entry points into any more since the last call, with their loggers.
    pub fn take_released_blocks(&mut self) -> Vec<(u16, BlockId)> {
        std::mem::take(&mut self.released_blocks)
    }

    /// Sets with logged entries whose payloads are only in `lost` blocks (by logger).
    pub fn peers_depending_on(&self, lost: &BTreeSet<(u16, BlockId)>) -> Vec<SetId> {
        self.peers_with_dumped(|at| at.locations().all(|l| lost.contains(&(l, at.block))))
    }

    /// Sets with logged entries that have a payload in one of `blocks` (by logger).
    pub fn peers_pointing_into(&self, blocks: &BTreeSet<(u16, BlockId)>) -> Vec<SetId> {
        self.peers_with_dumped(|at| at.locations().any(|l| blocks.contains(&(l, at.block))))
    }

    /// Sets with a logged entry whose dumped payload `pick` accepts.
    fn peers_with_dumped(&self, pick: impl Fn(&DumpRef) -> bool) -> Vec<SetId> {
        (0..self.peer_bytes.len() as u16)
            .map(SetId)
            .filter(|&to| {
                self.peer_channels(to).is_some_and(|chs| {
                    chs.values().any(|out| {
                        out.entries
                            .iter()
                            .any(|e| matches!(&e.payload, Held::Dumped(at) if pick(at)))
                    })
                })
            })
            .collect()
    }

    /// Every block an entry points into, with its logger: what a restored set must keep
    /// at the loggers.
    pub fn dumped_blocks(&self) -> Vec<(u16, BlockId)> {
        self.blocks.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;
    use crate::recovery::dep_vector::DepVector;
    use crate::recovery::messages::ChannelIndices;

    const I0: Incarnation = Incarnation(0);

    fn ch(a: u64, to: u16) -> ChannelId {
        ChannelId::new(ActorId::new(0, a).unwrap(), ActorId::new(to, 0).unwrap())
    }

    fn send(log: &mut SenderLog<Vec<u8>>, to: u16, c: ChannelId, len: usize) {
        log.record_send(SetId(to), c, I0, &DepVector::new(), vec![to as u8; len])
            .unwrap();
    }

    #[test]
    fn a_dump_takes_the_oldest_payloads_to_the_heaviest_receiver_and_frees_their_memory() {
        let mut log = SenderLog::new(3);
        for _ in 0..4 {
            send(&mut log, 1, ch(1, 1), 100);
        }
        send(&mut log, 2, ch(1, 2), 50);
        // A block stays within its size: a third payload would make 300 of 250.
        assert_eq!(log.take_dump(I0, 250).unwrap().entries.len(), 2);
        // One payload larger than a block goes alone.
        assert_eq!(log.take_dump(I0, 40).unwrap().entries, vec![(ch(1, 1), 1)]);
        let dump = log.take_dump(I0, 300).unwrap();
        assert_eq!(dump.to, SetId(1), "set 1 holds 400 bytes, set 2 50");
        assert_eq!(
            dump.entries,
            vec![(ch(1, 1), 1), (ch(1, 1), 2), (ch(1, 1), 3)]
        );
        assert_eq!(dump.bytes, 300);
        // Nothing leaves memory before the logger acknowledges.
        assert_eq!(log.stats().payload_bytes, 450);
        assert_eq!(log.mark_dumped(&dump, 0, None), 3);
        let s = log.stats();
        assert_eq!(
            (s.payload_bytes, s.dumped_bytes, s.dumped_entries),
            (150, 300, 3)
        );
        assert_eq!(s.entries, 5, "dumped entries are still logged");
        assert_eq!(
            log.bytes_per_peer()[1],
            100 + 4,
            "one payload and four vectors"
        );
        assert_eq!(log.dumped_blocks(), vec![(0, dump.block)]);
    }

    #[test]
    fn a_resend_names_the_block_of_a_dumped_payload_and_its_slot() {
        let mut log = SenderLog::new(2);
        for _ in 0..3 {
            send(&mut log, 1, ch(1, 1), 10);
        }
        let dump = log.take_dump(I0, 20).unwrap();
        log.mark_dumped(&dump, 3, None);
        let again = log.entries_after(SetId(1), &ChannelIndices::default());
        let held: Vec<_> = again.into_iter().map(|(m, h)| (m.send_index, h)).collect();
        let at = |slot| {
            Held::Dumped(DumpRef {
                logger: 3,
                copy: None,
                block: dump.block,
                slot,
                bytes: 10,
            })
        };
        assert_eq!(
            held,
            vec![(1, at(0)), (2, at(1)), (3, Held::Here(vec![1; 10]))]
        );
    }

    #[test]
    fn a_block_is_released_once_the_last_entry_in_it_is() {
        let mut log = SenderLog::new(2);
        for _ in 0..3 {
            send(&mut log, 1, ch(1, 1), 10);
        }
        let dump = log.take_dump(I0, 20).unwrap();
        log.mark_dumped(&dump, 0, None);
        log.release(SetId(1), &ch(1, 1), 1);
        assert!(
            log.take_released_blocks().is_empty(),
            "entry 2 is still in it"
        );
        log.release(SetId(1), &ch(1, 1), 3);
        assert_eq!(log.take_released_blocks(), vec![(0, dump.block)]);
        assert_eq!(log.stats().dumped_bytes, 0);
        assert!(log.dumped_blocks().is_empty());
    }

    #[test]
    fn entries_released_while_their_dump_was_in_flight_stay_released() {
        let mut log = SenderLog::new(2);
        for _ in 0..3 {
            send(&mut log, 1, ch(1, 1), 10);
        }
        let dump = log.take_dump(I0, 100).unwrap();
        log.release(SetId(1), &ch(1, 1), 2);
        assert_eq!(log.mark_dumped(&dump, 0, None), 1, "only entry 3 was left");
        assert_eq!(log.stats().payload_bytes, 0);
        assert_eq!(log.stats().dumped_entries, 1);
    }

    #[test]
    fn dumped_entries_survive_a_checkpoint_as_references_and_blocks_are_numbered_per_incarnation() {
        let mut log = SenderLog::new(2);
        for _ in 0..2 {
            send(&mut log, 1, ch(1, 1), 10);
        }
        let first = log.take_dump(I0, 10).unwrap();
        log.mark_dumped(&first, 0, None);
        let restored = SenderLog::from_channels(2, log.channels());
        assert_eq!(restored.stats().dumped_bytes, 10);
        assert_eq!(restored.stats().payload_bytes, 10);
        assert_eq!(restored.dumped_blocks(), vec![(0, first.block)]);
        let mut restored = restored;
        let next = restored.take_dump(Incarnation(1), 10).unwrap();
        assert_ne!(next.block, first.block);
        assert_eq!(next.entries, vec![(ch(1, 1), 2)], "entry 1 is already out");
    }

    #[test]
    fn a_block_with_a_copy_is_released_at_both_loggers_and_lost_only_with_both() {
        let mut log = SenderLog::new(3);
        send(&mut log, 1, ch(1, 1), 10);
        send(&mut log, 2, ch(1, 2), 5);
        let first = log.take_dump(I0, 100).unwrap();
        log.mark_dumped(&first, 0, Some(1));
        let second = log.take_dump(I0, 100).unwrap();
        log.mark_dumped(&second, 1, None);
        assert_eq!(
            log.dumped_blocks(),
            vec![(0, first.block), (1, first.block), (1, second.block)]
        );
        // Every block each listed logger had, lost with it.
        let lost = |ls: &[u16]| {
            let blocks = log.dumped_blocks();
            let gone = blocks.into_iter().filter(|(l, _)| ls.contains(l)).collect();
            log.peers_depending_on(&gone)
        };
        assert!(
            lost(&[0]).is_empty(),
            "logger 1 has a copy of set 1's block"
        );
        assert_eq!(lost(&[1]), vec![SetId(2)]);
        assert_eq!(lost(&[0, 1]), vec![SetId(1), SetId(2)]);
        log.release(SetId(1), &ch(1, 1), 1);
        assert_eq!(
            log.take_released_blocks(),
            vec![(0, first.block), (1, first.block)]
        );
    }

    #[test]
    fn nothing_in_memory_means_nothing_to_dump() {
        let mut log = SenderLog::new(2);
        assert!(log.take_dump(I0, 10).is_none());
        send(&mut log, 1, ch(1, 1), 10);
        let d = log.take_dump(I0, 10).unwrap();
        log.mark_dumped(&d, 0, None);
        assert!(log.take_dump(I0, 10).is_none());
    }
}
