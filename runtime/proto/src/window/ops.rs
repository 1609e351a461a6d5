//! One-sided operations as data: what an origin asks of a target's part of a window, the
//! identity an operation carries, and the frames the members exchange.

use super::element::{
    byte_range, check_operand, check_reduce, reduce, ElementType, ReduceOp, WindowError,
};
use crate::actor_id::ActorId;
use crate::range_set::RangeSet;
use serde::{Deserialize, Serialize};

/// A window, numbered in the order a node's `main` created them (the same on every node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WindowId(pub u32);

/// What every member agrees on at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// The window.
    pub window: WindowId,
    /// The element type.
    pub elem: ElementType,
    /// Elements of each member's part, by rank (the members are ranks `0..lens.len()`).
    pub lens: Vec<u64>,
}

impl Shape {
    /// Number of members.
    pub fn members(&self) -> u16 {
        u16::try_from(self.lens.len()).unwrap_or(u16::MAX)
    }

    /// Elements of `rank`'s part.
    pub fn len_of(&self, rank: u16) -> Result<u64, WindowError> {
        self.lens
            .get(usize::from(rank))
            .copied()
            .ok_or(WindowError::UnknownMember {
                rank,
                members: self.members(),
            })
    }

    /// Bytes of `rank`'s part.
    pub fn bytes_of(&self, rank: u16) -> Result<usize, WindowError> {
        let len = self.len_of(rank)?;
        byte_range(rank, self.elem, len, 0, len).map(|r| r.end)
    }
}

/// The kind of a one-sided operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Write the operand.
    Put,
    /// Combine the operand into the target's elements.
    Accumulate(ReduceOp),
    /// Read elements.
    Get,
    /// Read the elements, then combine the operand into them (one atomic step per
    /// operation at the target).
    FetchAndOp(ReduceOp),
}

impl OpKind {
    /// Whether it changes the target's memory (so its origin logs it until the target's
    /// checkpoint covers it).
    pub fn writes(self) -> bool {
        !matches!(self, OpKind::Get)
    }

    /// Whether an origin may apply it to another node's part itself (puts and gets): an
    /// origin killed halfway through leaves half a put, which its re-execution writes
    /// again whole, but half an accumulate would be added twice.
    pub fn may_go_direct(self) -> bool {
        matches!(self, OpKind::Put | OpKind::Get)
    }

    /// Whether it returns values to its origin.
    pub fn answers(self) -> bool {
        matches!(self, OpKind::Get | OpKind::FetchAndOp(_))
    }
}

/// A one-sided operation on elements `offset..offset + count` of one target's part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// What it does.
    pub kind: OpKind,
    /// The element type it was written for.
    pub elem: ElementType,
    /// First element.
    pub offset: u64,
    /// Number of elements.
    pub count: u64,
    /// The values it writes or combines, little-endian (empty for a get).
    #[serde(with = "crate::wire::byte_string")]
    pub operand: Vec<u8>,
}

impl Op {
    /// Checks it against the window's shape for target `rank`, and returns the byte range
    /// of the target's part it touches.
    pub fn check(&self, shape: &Shape, rank: u16) -> Result<std::ops::Range<usize>, WindowError> {
        if self.elem != shape.elem {
            return Err(WindowError::WrongElementType {
                window: shape.elem,
                given: self.elem,
            });
        }
        let range = byte_range(
            rank,
            self.elem,
            shape.len_of(rank)?,
            self.offset,
            self.count,
        )?;
        match self.kind {
            OpKind::Get => check_operand(self.elem, 0, &self.operand)?,
            OpKind::Put => check_operand(self.elem, self.count, &self.operand)?,
            OpKind::Accumulate(op) | OpKind::FetchAndOp(op) => {
                check_reduce(self.elem, op)?;
                check_operand(self.elem, self.count, &self.operand)?;
            }
        }
        Ok(range)
    }

    /// Carries it out on `part`, target `rank`'s memory, and returns what it answers (a
    /// get's values, a fetch-and-op's values from before). Checked first: a refused
    /// operation changes nothing.
    pub fn apply(
        &self,
        shape: &Shape,
        rank: u16,
        part: &mut [u8],
    ) -> Result<Option<Vec<u8>>, WindowError> {
        let range = self.check(shape, rank)?;
        let Some(elements) = part.get_mut(range) else {
            return Err(WindowError::InvalidImage(format!(
                "node {rank}'s memory is {} bytes, smaller than its part of the window",
                part.len()
            )));
        };
        Ok(match self.kind {
            OpKind::Put => {
                elements.copy_from_slice(&self.operand);
                None
            }
            OpKind::Accumulate(op) => {
                reduce(self.elem, op, elements, &self.operand);
                None
            }
            OpKind::Get => Some(elements.to_vec()),
            OpKind::FetchAndOp(op) => {
                let before = elements.to_vec();
                reduce(self.elem, op, elements, &self.operand);
                Some(before)
            }
        })
    }

    /// Bytes it weighs in a log.
    pub fn weight(&self) -> usize {
        self.operand.len() + 32
    }
}

/// The identity of an operation: its origin actor, its index on the channel from that
/// actor to the target (1, 2, 3, ...), and the epoch it belongs to.
///
/// Channels run from an actor, not from a node, for the reason message channels do: only
/// one actor's sequence of operations is the same in every execution; the interleaving of
/// several actors of a node depends on thread scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OpMeta {
    /// The actor that issued it (`main` has its own id).
    pub origin: ActorId,
    /// Its index on the channel from `origin` to the target.
    pub index: u64,
    /// The epoch of its origin's node when it was issued.
    pub epoch: u64,
}

/// What one member of a window sends another, on the authenticated path of the pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WindowFrame {
    /// An operation for the receiver's part (the message path; the target applies it).
    Op {
        /// Its identity.
        meta: OpMeta,
        /// The operation.
        op: Op,
        /// What its origin wants back.
        reply: Reply,
    },
    /// The values a get or fetch-and-op answered.
    Answer {
        /// The operation's origin actor.
        origin: ActorId,
        /// Its index.
        index: u64,
        /// The values, little-endian.
        #[serde(with = "crate::wire::byte_string")]
        values: Vec<u8>,
    },
    /// The sender's fence of `epoch`: it issued `count` operations of that epoch to the
    /// receiver.
    Notice {
        /// The epoch the fence closes.
        epoch: u64,
        /// Operations of that epoch to the receiver.
        count: u64,
    },
    /// The sender's committed checkpoint holds these operations of the receiver's actors
    /// and every fence count of epochs before `epoch`: the
    /// receiver may drop them from its log.
    Covered {
        /// The indices applied, per origin actor of the receiver.
        ops: Vec<(ActorId, RangeSet)>,
        /// The epoch of the image.
        epoch: u64,
    },
    /// The sender's committed checkpoint issued operations up to these indices to the
    /// receiver: it will never ask for their answers again.
    AnswersTaken {
        /// Highest index issued, per origin actor of the sender.
        answers: Vec<(ActorId, u64)>,
    },
    /// The sender refused a frame of the receiver's (out of range, wrong element type,
    /// out of order): the receiver's waits on this window fail with the reason.
    Refused {
        /// Why.
        reason: String,
    },
    /// The sender restarted from its checkpoint: what it has of the receiver now. The
    /// receiver resends what it lacks, answers with [`WindowFrame::Resumed`], and drops
    /// from its log what the checkpoint covers.
    Restarted(Progress),
    /// The answer to [`WindowFrame::Restarted`]: what the sender has of the restarted
    /// node. The restarted node resends what it lacks (the sender may have restarted too)
    /// and sends its re-executed operations the sender already has over the message
    /// path, where they are dropped or answered from the log.
    Resumed(Progress),
}

/// What the origin of an operation wants back from its target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// It waits for the answer (a get or fetch-and-op issued, or asked again).
    Answer,
    /// Nothing: the operation is resent to a restarted target for its effect only.
    Effect,
    /// Nothing, and it got these values already: the target keeps them as the
    /// operation's answer. A fetch-and-op that a restarted target applies again, in
    /// another order than the first time, answers what it answered the first time.
    Answered(#[serde(with = "crate::wire::byte_string")] Vec<u8>),
}

/// What a member has of another member's operations, sent when one of them restarted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The indices it has applied or holds, per origin actor of the receiver.
    pub applied: Vec<(ActorId, RangeSet)>,
    /// Its epoch: fence counts of this epoch and later are sent again.
    pub epoch: u64,
    /// The indices its last committed checkpoint holds, per origin actor of the receiver.
    pub covered: Vec<(ActorId, RangeSet)>,
    /// The epoch of that checkpoint: fence counts before it are no longer needed.
    pub covered_epoch: u64,
}
