//! Shared code of the benchmarks (`benches/`) and of the results report
//! (`lazarus-report`, which writes `docs/results/`): building and locating the release
//! binaries, running apps under the launcher and reading what they print, reading
//! criterion's estimates, and the report itself.

#![warn(missing_docs)]

pub mod coordination;
pub mod criterion_data;
pub mod error;
pub mod interleaved;
pub mod local_messaging;
pub mod machine;
pub mod paired;
pub mod ping_pong;
pub mod report;
pub mod runs;
pub mod stats;
pub mod target;

pub use error::{Error, Result};
