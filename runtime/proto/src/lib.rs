//! Lazarus's sans-IO core: what the runtime and the deterministic simulator share.
//!
//! Nothing here owns a thread, a clock, a lock, a socket or a file. Inputs come in as
//! method calls (time, when it matters, is passed in); outputs come back as values the
//! caller acts on. The runtime (`lazarus`) drives this code over QUIC, threads and disks;
//! the simulator (`runtime/sim`, `lazarus-sim`) drives the same code over a seeded model of them.
//! The crate's `clippy.toml` refuses the types and calls that would break this, and the
//! test script checks that its dependency tree holds no I/O crate.
//!
//! - [`actor_id`]: the identity of an actor, `(node rank, spawn sequence)`.
//! - [`wire`]: the byte encoding of values that cross nodes or go into checkpoints.
//! - [`frame`]: the frame codec of the node-to-node byte stream.
//! - [`recovery`]: the rollback-recovery protocol of one correlated set.
//! - [`failure_detector`]: which peers have been silent past the timeout.
//! - [`time`]: the clock type the callers pass in.
//! - [`range_set`]: sets of numbers kept as disjoint ranges.
//! - [`window`]: one-sided windows (put, get, accumulate, fence) and what keeps their
//!   checkpoints consistent and their recovery exact.

pub mod actor_id;
pub mod failure_detector;
pub mod frame;
pub mod range_set;
pub mod recovery;
pub mod time;
pub mod window;
pub mod wire;

pub use actor_id::ActorId;
