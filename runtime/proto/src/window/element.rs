//! The values a window holds and the operations on them: element types, reductions, and
//! the checks an operation passes before it touches memory.
//!
//! A window's memory is plain bytes, little-endian elements of one type. Operations name
//! the element type they were written for, so a wrong type is an error at the call, never
//! a reinterpretation of the bytes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The type of a window's elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ElementType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl ElementType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            ElementType::U8 | ElementType::I8 => 1,
            ElementType::U16 | ElementType::I16 => 2,
            ElementType::U32 | ElementType::I32 | ElementType::F32 => 4,
            ElementType::U64 | ElementType::I64 | ElementType::F64 => 8,
        }
    }

    /// Whether the bitwise reductions are defined on it (not on floats).
    pub const fn is_integer(self) -> bool {
        !matches!(self, ElementType::F32 | ElementType::F64)
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ElementType::U8 => "u8",
            ElementType::I8 => "i8",
            ElementType::U16 => "u16",
            ElementType::I16 => "i16",
            ElementType::U32 => "u32",
            ElementType::I32 => "i32",
            ElementType::U64 => "u64",
            ElementType::I64 => "i64",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
        };
        f.write_str(name)
    }
}

/// How an accumulate or fetch-and-op combines its operand with the target's element.
///
/// All but [`ReduceOp::Replace`] are commutative and associative on integers, so the
/// target's memory after an epoch does not depend on the order its accumulates came in.
/// Float sums are commutative but not associative: their result may differ in the last
/// bits with the order (see docs/semantics.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// `target + operand` (wrapping on integers).
    Sum,
    /// The smaller of the two.
    Min,
    /// The larger of the two.
    Max,
    /// Bitwise and (integers).
    BitAnd,
    /// Bitwise or (integers).
    BitOr,
    /// Bitwise exclusive or (integers).
    BitXor,
    /// The operand replaces the element (with fetch: an atomic swap). Not commutative.
    Replace,
}

impl ReduceOp {
    /// Whether the order of two such operations on one element never changes the result.
    pub const fn is_commutative(self) -> bool {
        !matches!(self, ReduceOp::Replace)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::BitAnd => "bitand",
            ReduceOp::BitOr => "bitor",
            ReduceOp::BitXor => "bitxor",
            ReduceOp::Replace => "replace",
        };
        f.write_str(name)
    }
}

/// Why a window operation was refused. None of these changes any memory or state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Elements `offset..offset + count` are not all inside the target's part.
    #[error("elements {offset}..{offset}+{count} are outside node {rank}'s part of the window ({len} elements)")]
    OutOfRange {
        /// The target node.
        rank: u16,
        /// First element.
        offset: u64,
        /// Number of elements.
        count: u64,
        /// Elements in the target's part.
        len: u64,
    },
    /// The operation was written for another element type than the window's.
    #[error("the window holds {window} elements, the operation is for {given}")]
    WrongElementType {
        /// The window's element type.
        window: ElementType,
        /// The operation's.
        given: ElementType,
    },
    /// The operand's byte length is not `count` elements.
    #[error("operand of {bytes} bytes for {count} elements of {elem}")]
    OperandLength {
        /// Bytes given.
        bytes: usize,
        /// Elements claimed.
        count: u64,
        /// Element type.
        elem: ElementType,
    },
    /// A bitwise reduction on floats.
    #[error("{op} is not defined on {elem}")]
    UndefinedReduce {
        /// The reduction.
        op: ReduceOp,
        /// The element type.
        elem: ElementType,
    },
    /// A rank outside the window's members.
    #[error("node {rank} is not a member of the window ({members} members)")]
    UnknownMember {
        /// The rank named.
        rank: u16,
        /// Number of members.
        members: u16,
    },
    /// An operation with index 0 (indices start at 1) or `u64::MAX` (never issued).
    #[error("operation index 0 or 2^64-1 from {0} (indices start at 1)")]
    ZeroIndex(String),
    /// An answer whose length is not that of the elements its operation read.
    #[error("an answer of {bytes} bytes from node {from} to an operation that reads {expected}")]
    AnswerLength {
        /// The answering node.
        from: u16,
        /// Bytes it sent.
        bytes: usize,
        /// Bytes the operation reads.
        expected: usize,
    },
    /// Member `from` refused a frame of this window: it can no longer be trusted.
    #[error("node {from} refused a frame of this window: {reason}")]
    PeerRefused {
        /// The refusing node.
        from: u16,
        /// Its reason.
        reason: String,
    },
    /// An operation of an epoch this node has already closed, not a duplicate: its
    /// origin's fence count did not include it.
    #[error("operation {index} from {origin} belongs to epoch {epoch}, node {rank} is at epoch {current}")]
    EpochPassed {
        /// The origin actor.
        origin: String,
        /// The target node.
        rank: u16,
        /// Its index.
        index: u64,
        /// Its epoch.
        epoch: u64,
        /// The target's epoch.
        current: u64,
    },
    /// A fence count that contradicts one received before for the same epoch.
    #[error(
        "node {from} announced {count} operations for epoch {epoch} to node {rank}, after {before}"
    )]
    NoticeChanged {
        /// The announcing node.
        from: u16,
        /// The receiving node.
        rank: u16,
        /// The epoch.
        epoch: u64,
        /// The new count.
        count: u64,
        /// The count announced before.
        before: u64,
    },
    /// More operations of an epoch arrived from a node than its fence announced.
    #[error("node {from} announced {announced} operations for epoch {epoch} to node {rank}, {applied} arrived")]
    TooManyOperations {
        /// The origin node.
        from: u16,
        /// The target node.
        rank: u16,
        /// The epoch.
        epoch: u64,
        /// Operations announced.
        announced: u64,
        /// Operations applied.
        applied: u64,
    },
    /// A re-executed get or fetch-and-op whose answer was released: the origin's
    /// checkpoint said it would never be asked again.
    #[error("answer {index} for {origin} was released by its checkpoint and is asked again")]
    AnswerReleased {
        /// The origin actor.
        origin: String,
        /// The operation's index.
        index: u64,
    },
    /// A record of an accumulate or fetch-and-op that its origin applied itself: only
    /// puts and gets may go direct.
    #[error("a {0:?} cannot be applied by its origin directly")]
    NotDirect(super::ops::OpKind),
    /// A fence while the previous one has not completed.
    #[error("fence of epoch {0} called while it is still in progress")]
    FenceInProgress(u64),
    /// A checkpoint image that does not fit this window.
    #[error("invalid window image: {0}")]
    InvalidImage(String),
    /// The window's epoch or a channel's index space is exhausted.
    #[error("window counter overflow")]
    Overflow,
}

/// Checks that `count` elements at `offset` fit a part of `len` elements of node `rank`,
/// and returns the byte range they occupy.
pub fn byte_range(
    rank: u16,
    elem: ElementType,
    len: u64,
    offset: u64,
    count: u64,
) -> Result<std::ops::Range<usize>, WindowError> {
    let out = || WindowError::OutOfRange {
        rank,
        offset,
        count,
        len,
    };
    let end = offset.checked_add(count).ok_or_else(out)?;
    if end > len {
        return Err(out());
    }
    let size = elem.size() as u64;
    let bytes = |n: u64| {
        n.checked_mul(size)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(out)
    };
    let (start, stop) = (bytes(offset)?, bytes(end)?);
    Ok(start..stop)
}

/// Checks that `operand` holds exactly `count` elements of `elem`.
pub fn check_operand(elem: ElementType, count: u64, operand: &[u8]) -> Result<(), WindowError> {
    let expected = count.checked_mul(elem.size() as u64);
    if expected != Some(operand.len() as u64) {
        return Err(WindowError::OperandLength {
            bytes: operand.len(),
            count,
            elem,
        });
    }
    Ok(())
}

/// Checks that `op` is defined on `elem`.
pub fn check_reduce(elem: ElementType, op: ReduceOp) -> Result<(), WindowError> {
    let bitwise = matches!(op, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor);
    if bitwise && !elem.is_integer() {
        return Err(WindowError::UndefinedReduce { op, elem });
    }
    Ok(())
}

macro_rules! reduce_int {
    ($t:ty, $op:expr, $target:expr, $operand:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (t, o) in $target.chunks_exact_mut(N).zip($operand.chunks_exact(N)) {
            let mut a = [0u8; N];
            a.copy_from_slice(t);
            let mut b = [0u8; N];
            b.copy_from_slice(o);
            let (x, y) = (<$t>::from_le_bytes(a), <$t>::from_le_bytes(b));
            let r: $t = match $op {
                ReduceOp::Sum => x.wrapping_add(y),
                ReduceOp::Min => x.min(y),
                ReduceOp::Max => x.max(y),
                ReduceOp::BitAnd => x & y,
                ReduceOp::BitOr => x | y,
                ReduceOp::BitXor => x ^ y,
                ReduceOp::Replace => y,
            };
            t.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

macro_rules! reduce_float {
    ($t:ty, $op:expr, $target:expr, $operand:expr) => {{
        const N: usize = std::mem::size_of::<$t>();
        for (t, o) in $target.chunks_exact_mut(N).zip($operand.chunks_exact(N)) {
            let mut a = [0u8; N];
            a.copy_from_slice(t);
            let mut b = [0u8; N];
            b.copy_from_slice(o);
            let (x, y) = (<$t>::from_le_bytes(a), <$t>::from_le_bytes(b));
            let r: $t = match $op {
                ReduceOp::Sum => x + y,
                ReduceOp::Min => x.min(y),
                ReduceOp::Max => x.max(y),
                ReduceOp::Replace => y,
                // Refused by `check_reduce` before any memory is touched.
                ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => x,
            };
            t.copy_from_slice(&r.to_le_bytes());
        }
    }};
}

/// Combines `operand` into `target` element by element. Both hold the same number of
/// `elem` elements; the caller checked them ([`check_operand`], [`check_reduce`]).
pub fn reduce(elem: ElementType, op: ReduceOp, target: &mut [u8], operand: &[u8]) {
    match elem {
        ElementType::U8 => reduce_int!(u8, op, target, operand),
        ElementType::I8 => reduce_int!(i8, op, target, operand),
        ElementType::U16 => reduce_int!(u16, op, target, operand),
        ElementType::I16 => reduce_int!(i16, op, target, operand),
        ElementType::U32 => reduce_int!(u32, op, target, operand),
        ElementType::I32 => reduce_int!(i32, op, target, operand),
        ElementType::U64 => reduce_int!(u64, op, target, operand),
        ElementType::I64 => reduce_int!(i64, op, target, operand),
        ElementType::F32 => reduce_float!(f32, op, target, operand),
        ElementType::F64 => reduce_float!(f64, op, target, operand),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le64(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn every_reduction_combines_element_by_element() {
        let cases = [
            (ReduceOp::Sum, vec![5, -3]),
            (ReduceOp::Min, vec![2, -4]),
            (ReduceOp::Max, vec![3, 1]),
            (ReduceOp::BitAnd, vec![2, 1 & -4]),
            (ReduceOp::BitOr, vec![3, -4 | 1]),
            (ReduceOp::BitXor, vec![1, 1 ^ -4]),
            (ReduceOp::Replace, vec![3, -4]),
        ];
        for (op, expected) in cases {
            let mut target = le64(&[2, 1]);
            reduce(ElementType::I64, op, &mut target, &le64(&[3, -4]));
            assert_eq!(target, le64(&expected), "{op}");
        }
    }

    #[test]
    fn integer_sums_wrap_and_float_sums_add() {
        let mut t = vec![250u8];
        reduce(ElementType::U8, ReduceOp::Sum, &mut t, &[10]);
        assert_eq!(t, [4]);
        let mut f = 1.5f64.to_le_bytes().to_vec();
        reduce(
            ElementType::F64,
            ReduceOp::Sum,
            &mut f,
            &2.25f64.to_le_bytes(),
        );
        assert_eq!(f, 3.75f64.to_le_bytes());
    }

    #[test]
    fn out_of_range_wrong_length_and_undefined_reductions_are_refused() {
        assert_eq!(byte_range(1, ElementType::U32, 10, 8, 2), Ok(32..40));
        assert!(matches!(
            byte_range(1, ElementType::U32, 10, 9, 2),
            Err(WindowError::OutOfRange { rank: 1, .. })
        ));
        assert!(byte_range(1, ElementType::U64, 10, u64::MAX, 2).is_err());
        assert!(byte_range(1, ElementType::U64, u64::MAX, u64::MAX / 4, 1).is_err());
        assert!(check_operand(ElementType::U16, 3, &[0; 6]).is_ok());
        assert!(check_operand(ElementType::U16, 3, &[0; 5]).is_err());
        assert!(check_operand(ElementType::U64, u64::MAX, &[]).is_err());
        assert!(check_reduce(ElementType::F32, ReduceOp::BitXor).is_err());
        assert!(check_reduce(ElementType::F32, ReduceOp::Max).is_ok());
        assert!(check_reduce(ElementType::U8, ReduceOp::BitXor).is_ok());
    }
}
