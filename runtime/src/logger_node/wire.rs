//! What a node and a logger say to each other: one request and one answer per QUIC
//! bidirectional stream, postcard-encoded, with a size limit.

use crate::payload::Payload;
use crate::recovery::BlockId;
use serde::{Deserialize, Serialize};

/// Version of these messages, part of the connection's ALPN.
pub const ALPN: &[u8] = b"lazarus-logger/2";

/// Largest request or answer accepted: a block of [`MAX_BLOCK`] and its header.
pub const MAX_MESSAGE: usize = MAX_BLOCK + 4096;

/// Largest block a node ships.
pub const MAX_BLOCK: usize = 64 << 20;

/// A node's request to a logger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoggerRequest {
    /// Keep this block of node `rank`'s dumped payloads.
    Store {
        /// The node.
        rank: u16,
        /// The block's id.
        block: BlockId,
        /// Its content.
        bytes: Payload,
    },
    /// Send back a block.
    Fetch {
        /// The node.
        rank: u16,
        /// The block's id.
        block: BlockId,
    },
    /// No logged entry points into these blocks any more.
    Release {
        /// The node.
        rank: u16,
        /// The blocks.
        blocks: Vec<BlockId>,
    },
    /// Node `rank` restarted: keep only these of its blocks (its checkpoint points into
    /// them; the others were dumped by its lost incarnation after that checkpoint). The
    /// answer names those of them the logger does not have.
    Retain {
        /// The node.
        rank: u16,
        /// The blocks to keep.
        blocks: Vec<BlockId>,
    },
    /// The first request on each connection: which logger process answers.
    Hello,
}

/// A logger's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoggerResponse {
    /// The block is kept.
    Stored,
    /// No room: the node tries another logger.
    Declined {
        /// Bytes left.
        free: u64,
    },
    /// The requested block.
    Block(Payload),
    /// This logger does not have the block.
    Missing,
    /// Done (release).
    Done,
    /// Done (retain); these of the blocks to keep were not here (a restarted logger
    /// lost them).
    Retained {
        /// The blocks asked for that the logger does not have.
        missing: Vec<BlockId>,
    },
    /// The answer to [`LoggerRequest::Hello`].
    Hello {
        /// The logger's number.
        index: u16,
        /// Drawn at random when the process starts: another value on a later connection
        /// means the logger was restarted and lost every block it held.
        instance: u64,
    },
    /// The request could not be read.
    Refused(String),
}

impl LoggerRequest {
    /// Its name, for metrics and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            LoggerRequest::Store { .. } => "store",
            LoggerRequest::Fetch { .. } => "fetch",
            LoggerRequest::Release { .. } => "release",
            LoggerRequest::Retain { .. } => "retain",
            LoggerRequest::Hello => "hello",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::Incarnation;

    #[test]
    fn a_block_crosses_as_one_byte_string() {
        let req = LoggerRequest::Store {
            rank: 2,
            block: BlockId {
                incarnation: Incarnation(1),
                seq: 7,
            },
            bytes: vec![9u8; 1000].into(),
        };
        let bytes = postcard::to_allocvec(&req).unwrap();
        assert!(
            bytes.len() < 1010,
            "{} bytes for 1000 of payload",
            bytes.len()
        );
        assert_eq!(postcard::from_bytes::<LoggerRequest>(&bytes).unwrap(), req);
    }

    #[test]
    fn garbage_is_refused_not_misread() {
        assert!(postcard::from_bytes::<LoggerRequest>(&[200, 1, 2]).is_err());
    }
}
