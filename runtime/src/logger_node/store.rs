//! A logger's memory: the blocks of dumped payloads it keeps per node, within a capacity.
//! Sans-IO: the server feeds it requests and sends back what it answers.

use super::wire::{LoggerRequest, LoggerResponse};
use crate::recovery::BlockId;
use bytes::Bytes;
use std::collections::BTreeMap;

/// What a logger holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Blocks held.
    pub blocks: usize,
    /// Bytes held.
    pub bytes: u64,
    /// Largest `bytes` seen.
    pub peak_bytes: u64,
    /// Blocks stored so far.
    pub stored: u64,
    /// Store requests declined for want of room.
    pub declined: u64,
    /// Blocks served back.
    pub fetched: u64,
    /// Blocks let go of (released or not retained).
    pub dropped: u64,
}

/// The blocks a logger keeps, by node rank and block id.
#[derive(Debug)]
pub struct BlockStore {
    capacity: u64,
    blocks: BTreeMap<(u16, BlockId), Bytes>,
    stats: StoreStats,
}

impl BlockStore {
    /// An empty store that holds at most `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        BlockStore {
            capacity,
            blocks: BTreeMap::new(),
            stats: StoreStats::default(),
        }
    }

    /// Answers one request.
    pub fn handle(&mut self, request: LoggerRequest) -> LoggerResponse {
        match request {
            LoggerRequest::Store { rank, block, bytes } => {
                let len = bytes.len() as u64;
                // Storing a block again (the same node's retry) replaces it.
                let old = self
                    .blocks
                    .get(&(rank, block))
                    .map_or(0, |b| b.len() as u64);
                let free = self.capacity.saturating_sub(self.stats.bytes - old);
                if len > free {
                    self.stats.declined += 1;
                    return LoggerResponse::Declined { free };
                }
                self.blocks
                    .insert((rank, block), Bytes::from(bytes.into_inner()));
                self.stats.bytes = self.stats.bytes - old + len;
                self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.bytes);
                self.stats.stored += 1;
                self.stats.blocks = self.blocks.len();
                LoggerResponse::Stored
            }
            LoggerRequest::Fetch { rank, block } => match self.blocks.get(&(rank, block)) {
                Some(b) => {
                    self.stats.fetched += 1;
                    LoggerResponse::Block(b.to_vec().into())
                }
                None => LoggerResponse::Missing,
            },
            LoggerRequest::Release { rank, blocks } => {
                for block in blocks {
                    self.drop_block(rank, block);
                }
                LoggerResponse::Done
            }
            LoggerRequest::Retain { rank, blocks } => {
                let keep: std::collections::BTreeSet<BlockId> = blocks.into_iter().collect();
                let gone: Vec<BlockId> = self
                    .blocks
                    .range((rank, BlockId::MIN)..=(rank, BlockId::MAX))
                    .map(|((_, b), _)| *b)
                    .filter(|b| !keep.contains(b))
                    .collect();
                for block in gone {
                    self.drop_block(rank, block);
                }
                let missing = keep
                    .into_iter()
                    .filter(|b| !self.blocks.contains_key(&(rank, *b)))
                    .collect();
                LoggerResponse::Retained { missing }
            }
            // The server answers it (the process's identity is not the store's).
            LoggerRequest::Hello => LoggerResponse::Refused("hello is the server's".into()),
        }
    }

    fn drop_block(&mut self, rank: u16, block: BlockId) {
        if let Some(b) = self.blocks.remove(&(rank, block)) {
            self.stats.bytes -= b.len() as u64;
            self.stats.dropped += 1;
            self.stats.blocks = self.blocks.len();
        }
    }

    /// What it holds and has done.
    pub fn stats(&self) -> StoreStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::Incarnation;

    fn id(incarnation: u32, seq: u64) -> BlockId {
        BlockId {
            incarnation: Incarnation(incarnation),
            seq,
        }
    }

    fn store(s: &mut BlockStore, rank: u16, block: BlockId, len: usize) -> LoggerResponse {
        s.handle(LoggerRequest::Store {
            rank,
            block,
            bytes: vec![rank as u8; len].into(),
        })
    }

    #[test]
    fn a_block_is_served_back_as_stored_until_released() {
        let mut s = BlockStore::new(1000);
        assert_eq!(store(&mut s, 1, id(0, 0), 100), LoggerResponse::Stored);
        let fetch = LoggerRequest::Fetch {
            rank: 1,
            block: id(0, 0),
        };
        assert_eq!(
            s.handle(fetch.clone()),
            LoggerResponse::Block(vec![1; 100].into())
        );
        assert_eq!(
            s.handle(LoggerRequest::Fetch {
                rank: 2,
                block: id(0, 0)
            }),
            LoggerResponse::Missing,
            "blocks are per node"
        );
        s.handle(LoggerRequest::Release {
            rank: 1,
            blocks: vec![id(0, 0)],
        });
        assert_eq!(s.handle(fetch), LoggerResponse::Missing);
        assert_eq!(s.stats().bytes, 0);
    }

    #[test]
    fn a_full_logger_declines_and_says_how_much_room_is_left() {
        let mut s = BlockStore::new(250);
        assert_eq!(store(&mut s, 0, id(0, 0), 200), LoggerResponse::Stored);
        assert_eq!(
            store(&mut s, 0, id(0, 1), 100),
            LoggerResponse::Declined { free: 50 }
        );
        assert_eq!(s.stats().declined, 1);
        // Storing the same block again replaces it and needs no extra room.
        assert_eq!(store(&mut s, 0, id(0, 0), 240), LoggerResponse::Stored);
        assert_eq!(s.stats().bytes, 240);
    }

    #[test]
    fn a_restored_node_keeps_only_the_blocks_its_checkpoint_points_into() {
        let mut s = BlockStore::new(10_000);
        for seq in 0..4 {
            store(&mut s, 3, id(0, seq), 10);
        }
        store(&mut s, 4, id(0, 9), 10);
        assert_eq!(
            s.handle(LoggerRequest::Retain {
                rank: 3,
                blocks: vec![id(0, 1), id(0, 7)],
            }),
            LoggerResponse::Retained {
                missing: vec![id(0, 7)]
            },
            "a block it never had (or lost with a restart) is named"
        );
        let held: Vec<_> = s.blocks.keys().copied().collect();
        assert_eq!(held, vec![(3, id(0, 1)), (4, id(0, 9))]);
        assert_eq!(s.stats().dropped, 3);
    }
}
