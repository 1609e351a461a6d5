//! How a miniapp's run ends on every node: the runtime's own ending
//! ([`lazarus::Cluster::report_and_leave`], [`lazarus::Cluster::leave_after_rank0`]),
//! under the names the apps use.

use lazarus::Cluster;
use std::error::Error;

pub use lazarus::Verdict;

/// Rank 0's end of a run (see [`Cluster::report_and_leave`]).
pub fn report_and_leave(
    cluster: Cluster,
    verdict: impl FnOnce() -> Verdict,
) -> Result<(), Box<dyn Error>> {
    cluster.report_and_leave(verdict)
}

/// The end of a run on every node but rank 0 (see [`Cluster::leave_after_rank0`]).
pub fn leave_after_rank0(cluster: Cluster) -> Result<(), Box<dyn Error>> {
    cluster.leave_after_rank0()
}
