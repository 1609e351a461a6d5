//! The gate of a node's part of a window: the paper's "delay at the target", in words
//! that origins on the same host read and write in shared memory.
//!
//! Two kinds of word. The target's *gate word* ([`GateWord`]: its epoch, and whether it is
//! closed for a checkpoint) is written by the target only. Each origin node has an
//! *inside* counter of its own, which it raises before it touches the target's part and
//! lowers after. An origin enters by raising its counter, then reading the gate word: if
//! the gate is closed or at another epoch, it lowers the counter and takes the message
//! path. A checkpoint closes the gate word, then waits until every counter is zero
//! (*drained*), takes the origins' records of what they did ([`Member::handle_direct`]),
//! copies the part with its bookkeeping ([`Member::image`]) and reopens. Both sides write
//! before they read (sequentially consistent): either the origin sees the gate closed, or
//! the checkpoint sees the origin inside. So an operation is in a part's image wholly,
//! with its record, or not at all: none crosses the cut, none overlaps it.
//!
//! A counter per origin node, not one shared count, because an origin node killed inside
//! the gate never lowers it: each counter carries its origin's incarnation, and the target
//! zeroes it when it hears of that incarnation's death (a notice that comes after the next
//! incarnation is inside finds the newer tag and leaves it). What the dead node half wrote is a put its
//! re-execution writes again whole; accumulates never go direct, see [`super`].
//!
//! [`Member::handle_direct`]: super::Member::handle_direct
//! [`Member::image`]: super::Member::image

use serde::{Deserialize, Serialize};

const CLOSED: u64 = 1;

/// The largest epoch the word holds (2^63 - 1 fences).
pub const MAX_EPOCH: u64 = u64::MAX >> 1;

/// The target's gate word: its epoch and whether it is closed for a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateWord(pub u64);

/// Why an origin may not go through the gate now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The target is copying its checkpoint image.
    Checkpointing,
    /// The target has not reached the operation's epoch yet (it is restarting, or has
    /// not completed its fence): the operation goes over the message path and waits
    /// there.
    EpochAhead {
        /// The target's epoch.
        target: u64,
    },
    /// The target is past the operation's epoch: the operation is a re-execution of one
    /// the target already has (the message path answers it from the target's log).
    EpochPassed {
        /// The target's epoch.
        target: u64,
    },
}

impl GateWord {
    /// An open gate at `epoch` (`None` past [`MAX_EPOCH`]).
    pub fn open_at(epoch: u64) -> Option<GateWord> {
        (epoch <= MAX_EPOCH).then_some(GateWord(epoch << 1))
    }

    /// The target's epoch.
    pub fn epoch(self) -> u64 {
        self.0 >> 1
    }

    /// Whether the target has closed it for a checkpoint.
    pub fn is_closed(self) -> bool {
        self.0 & CLOSED != 0
    }

    /// Whether an origin inside (its counter raised) may apply an operation of `epoch`.
    pub fn admits(self, epoch: u64) -> Result<(), Closed> {
        let target = self.epoch();
        if epoch > target {
            return Err(Closed::EpochAhead { target });
        }
        if epoch < target {
            return Err(Closed::EpochPassed { target });
        }
        if self.is_closed() {
            return Err(Closed::Checkpointing);
        }
        Ok(())
    }

    /// The word closed for a checkpoint.
    pub fn close(self) -> GateWord {
        GateWord(self.0 | CLOSED)
    }

    /// The word open again after the image was copied.
    pub fn reopen(self) -> GateWord {
        GateWord(self.0 & !CLOSED)
    }

    /// The word after the target's fence completed: the next epoch (`None` past
    /// [`MAX_EPOCH`]). Origins of the old epoch may still be inside; their operations
    /// were counted before the fence completed.
    pub fn advance(self) -> Option<GateWord> {
        let next = self.epoch().checked_add(1).filter(|e| *e <= MAX_EPOCH)?;
        Some(GateWord((self.0 & CLOSED) | (next << 1)))
    }
}

/// Whether every origin node's inside counter is zero: a closed gate may be copied.
pub fn drained(inside: &[u64]) -> bool {
    inside.iter().all(|c| *c == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_passes_only_an_open_gate_of_its_epoch() {
        let gate = GateWord::open_at(7).unwrap();
        assert_eq!(gate.admits(7), Ok(()));
        assert_eq!(gate.admits(8), Err(Closed::EpochAhead { target: 7 }));
        assert_eq!(gate.admits(6), Err(Closed::EpochPassed { target: 7 }));
        assert_eq!(gate.close().admits(7), Err(Closed::Checkpointing));
        assert_eq!(gate.close().reopen(), gate);
    }

    #[test]
    fn advancing_keeps_the_closed_bit_and_stops_at_the_last_epoch() {
        let next = GateWord::open_at(4).unwrap().close().advance().unwrap();
        assert_eq!((next.epoch(), next.is_closed()), (5, true));
        assert_eq!(GateWord::open_at(MAX_EPOCH).unwrap().advance(), None);
        assert_eq!(GateWord::open_at(MAX_EPOCH + 1), None);
        assert!(drained(&[0, 0]) && !drained(&[0, 1]));
    }
}
