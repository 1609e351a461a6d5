//! The deterministic recovery simulator: a seeded PRNG, a send-deterministic program, and a
//! simulated cluster that runs it on the recovery protocol core with crashes.

#![warn(missing_docs)]

pub mod net;
pub mod program;
pub mod rng;
pub mod windows;
pub mod world;
