//! The gate word of a node's part of a window: the paper's "delay at the target" as one
//! 64-bit word that origins and the target change with compare-and-swap.
//!
//! An origin that reads or writes the target's memory itself (shared memory, RDMA) first
//! *enters* the gate: it may only while the target is not copying its checkpoint image
//! and is in the operation's epoch. It does its operation, records it in the target's
//! bookkeeping, and *leaves*. The target that checkpoints *closes* the gate (no new
//! origin enters), waits until it is *drained* (every origin inside has left), copies its
//! memory with its bookkeeping, and *opens* it again. So an operation is in a checkpoint
//! image wholly, with its index, or not at all: none crosses the cut, none overlaps it.
//!
//! Layout (the driver keeps it in an `AtomicU64` where the origins can reach it):
//! bits 0..24 the origins inside, bit 24 closed for a checkpoint, bits 25..64 the epoch.
//! Plain functions on the value, so the simulator steps through the same rules the
//! shared-memory driver runs in its compare-and-swap loops.

use serde::{Deserialize, Serialize};

const ACTIVE_BITS: u32 = 24;
const ACTIVE_MASK: u64 = (1 << ACTIVE_BITS) - 1;
const CLOSED: u64 = 1 << ACTIVE_BITS;
const EPOCH_SHIFT: u32 = ACTIVE_BITS + 1;

/// The largest epoch the word holds (2^39 - 1 fences).
pub const MAX_EPOCH: u64 = u64::MAX >> EPOCH_SHIFT;

/// The gate word's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateWord(pub u64);

/// Why an origin may not enter the gate now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The target is copying its checkpoint image: wait, or go over the message path.
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
    /// 2^24 - 1 origins are inside at once.
    Crowded,
}

impl GateWord {
    /// An open gate at `epoch` with nobody inside (`None` past [`MAX_EPOCH`]).
    pub fn open_at(epoch: u64) -> Option<GateWord> {
        (epoch <= MAX_EPOCH).then_some(GateWord(epoch << EPOCH_SHIFT))
    }

    /// The target's epoch.
    pub fn epoch(self) -> u64 {
        self.0 >> EPOCH_SHIFT
    }

    /// Origins inside.
    pub fn inside(self) -> u64 {
        self.0 & ACTIVE_MASK
    }

    /// Whether the target has closed it for a checkpoint.
    pub fn is_closed(self) -> bool {
        self.0 & CLOSED != 0
    }

    /// The word after an origin with an operation of `epoch` entered, or why it may not.
    pub fn enter(self, epoch: u64) -> Result<GateWord, Closed> {
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
        if self.inside() == ACTIVE_MASK {
            return Err(Closed::Crowded);
        }
        Ok(GateWord(self.0 + 1))
    }

    /// The word after an origin inside left. Leaving an empty gate changes nothing (it
    /// is a driver's bug, and wrapping would corrupt the epoch).
    pub fn leave(self) -> GateWord {
        if self.inside() == 0 {
            return self;
        }
        GateWord(self.0 - 1)
    }

    /// The word after the target closed it to copy its image.
    pub fn close(self) -> GateWord {
        GateWord(self.0 | CLOSED)
    }

    /// Whether it is closed and every origin has left: the image may be copied.
    pub fn is_drained(self) -> bool {
        self.is_closed() && self.inside() == 0
    }

    /// The word after the image was copied.
    pub fn reopen(self) -> GateWord {
        GateWord(self.0 & !CLOSED)
    }

    /// The word after the target's fence completed: the next epoch (`None` past
    /// [`MAX_EPOCH`]). Origins of the old epoch may still be leaving; their operations
    /// were counted before the fence completed.
    pub fn advance(self) -> Option<GateWord> {
        let next = self.epoch().checked_add(1).filter(|e| *e <= MAX_EPOCH)?;
        Some(GateWord(
            (self.0 & (ACTIVE_MASK | CLOSED)) | (next << EPOCH_SHIFT),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_enters_only_an_open_gate_of_its_epoch() {
        let gate = GateWord::open_at(7).unwrap();
        let inside = gate.enter(7).unwrap();
        assert_eq!((inside.epoch(), inside.inside()), (7, 1));
        assert_eq!(gate.enter(8), Err(Closed::EpochAhead { target: 7 }));
        assert_eq!(gate.enter(6), Err(Closed::EpochPassed { target: 7 }));
        assert_eq!(gate.close().enter(7), Err(Closed::Checkpointing));
        assert_eq!(inside.leave(), gate);
    }

    #[test]
    fn a_closed_gate_drains_as_origins_leave_and_reopens() {
        let two = GateWord::open_at(3)
            .unwrap()
            .enter(3)
            .unwrap()
            .enter(3)
            .unwrap();
        let closed = two.close();
        assert!(!closed.is_drained());
        let one = closed.leave();
        assert!(!one.is_drained());
        assert_eq!(one.enter(3), Err(Closed::Checkpointing));
        let empty = one.leave();
        assert!(empty.is_drained());
        assert_eq!(empty.reopen(), GateWord::open_at(3).unwrap());
        assert_eq!(
            empty.leave(),
            empty,
            "leaving an empty gate changes nothing"
        );
    }

    #[test]
    fn advancing_keeps_the_origins_inside_and_the_closed_bit() {
        let word = GateWord::open_at(4).unwrap().enter(4).unwrap().close();
        let next = word.advance().unwrap();
        assert_eq!(
            (next.epoch(), next.inside(), next.is_closed()),
            (5, 1, true)
        );
        assert_eq!(GateWord::open_at(MAX_EPOCH).unwrap().advance(), None);
        assert_eq!(GateWord::open_at(MAX_EPOCH + 1), None);
    }
}
