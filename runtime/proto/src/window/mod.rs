//! One-sided windows: memory that a node exposes to the others' `put`, `get`,
//! `accumulate` and fetch-and-op, synchronized by fences, whose checkpoints stay
//! consistent with operations in flight and whose recovery is exact (after "Coordinated
//! checkpointing for one-sided communication", Butelle and Coti).
//!
//! A window has one *part* on every member node, plain little-endian elements of one
//! type. The target's CPU does not take part in an operation: between nodes of one host
//! the origin reads and writes the target's part in shared memory itself; otherwise the
//! target's network thread applies the operation it receives (the *message path*). Both
//! paths keep the same rules, here as a sans-IO machine, [`Member`], that the runtime
//! and the simulator drive:
//!
//! 1. **Channels.** An operation carries its origin actor, its index on the channel from
//!    that actor to the target (1, 2, 3, ...) and its origin node's epoch ([`OpMeta`]).
//!    The target keeps, per channel, the set of indices it has applied: a re-executed
//!    operation is recognised, dropped if it writes, answered from the log if it reads.
//! 2. **Epochs.** A fence ends the node's epoch. Its origin side tells every member how
//!    many operations it issued to it in the epoch; it completes when every member's
//!    count is in, that many have been applied to the node's part, and every answer the
//!    node awaits has come. An operation of epoch `e` is applied only while its target is
//!    at `e`: a later one waits ([`Applied::Held`]); an earlier one cannot exist, its
//!    origin's count held the target's fence.
//! 3. **The gate** ([`gate`], the paper's delay at the target). An origin that touches
//!    the target's memory itself enters the target's gate first, which it may only while
//!    the target is at the operation's epoch and not copying its checkpoint image; it
//!    applies the operation, leaves a record for the target's bookkeeping
//!    ([`Member::handle_direct`]) and leaves. A checkpoint closes the gate, waits until it
//!    is drained, takes the records, copies the part with [`Member::image`], and opens
//!    it. So no operation crosses a checkpoint's cut and none overlaps it: a part's image
//!    holds an operation wholly, with its index, or not at all. Only puts and gets go
//!    direct: an origin killed in the middle of a put leaves half of it, which its
//!    re-execution writes again whole; half an accumulate would be added twice. So
//!    accumulates and fetch-and-ops always take the message path, where the target
//!    applies each one in one step.
//! 4. **Logs at the origin.** Every operation to another node stays in its origin node's
//!    log (in that node's checkpoint image too) until the target's committed checkpoint
//!    holds it ([`WindowFrame::Covered`]); fence counts stay until the target's
//!    checkpoint has passed their epoch.
//! 5. **Answers at the target.** A get's or fetch-and-op's values stay in the target's
//!    log (and image) until the origin's committed checkpoint has issued past it
//!    ([`WindowFrame::AnswersTaken`]): a restarted origin's re-executed get returns what
//!    it returned before, though the target has moved on.
//! 6. **Restart.** A restarted node tells every member what it has of that member's
//!    actors' operations ([`Progress`] in [`WindowFrame::Restarted`]); each resends what
//!    is missing from its log and its fence counts from the restarted node's epoch on,
//!    and answers with what it has of the restarted node's actors
//!    ([`WindowFrame::Resumed`]), which makes the restarted node resend in turn (both may
//!    have restarted). Until that answer, the restarted node's operations take the
//!    message path; after it, those the target has go that way still (the target drops
//!    or answers them), new ones may go direct. Survivors never roll back.
//!
//! The contract with applications (docs/semantics.md): within an epoch, no two
//! operations touch the same element unless both are accumulates of one commutative
//! reduction, and the part's owner reads or writes its own elements only where no
//! operation of the epoch does. Then an epoch's result does not depend on the order its
//! operations came in, which is what lets a restarted target apply them again in any
//! order within their epoch. Fetch-and-op answers depend on that order; they are logged
//! at the target like gets, so a restarted origin gets back the same values.
//!
//! Modules: [`element`] (element types, reductions, the checks), [`ops`] (operations,
//! their identity, the frames), [`gate`] (the gate word), [`member`] (the machine).

pub mod element;
pub mod gate;
pub mod member;
pub mod ops;

pub use element::{ElementType, ReduceOp, WindowError};
pub use gate::{drained, Closed, GateWord, MAX_EPOCH};
pub use member::{
    Applied, Issued, MainFence, Member, MemberImage, MemberStats, Recovery, Transmit,
};
pub use ops::{Op, OpKind, OpMeta, Progress, Reply, Shape, WindowFrame, WindowId};
