//! How a miniapp's run ends on every node: rank 0 releases the others at a barrier once it
//! has its answer, prints its `RESULT` line and leaves the cluster; every other node waits
//! at that barrier (its actors still serve rank 0's run) and then leaves.
//!
//! Rank 0 prints before it leaves because a node killed while it waits to leave is not
//! restarted: the RESULT must be out by then.

use crate::ResultLine;
use lazarus::Cluster;
use std::error::Error;

/// What rank 0 found at the end of a run.
#[derive(Debug)]
pub struct Verdict {
    /// The RESULT line, still without its `verified` field.
    pub result: ResultLine,
    /// Whether the answer checked out.
    pub verified: bool,
    /// The error the app ends with when it did not.
    pub failure: String,
}

/// Rank 0's end of a run, once it has its answer: releases the other nodes at the barrier,
/// then gets the `verdict` (anything it prints comes before the RESULT line), prints its
/// RESULT line, leaves the cluster, and fails with the verdict's failure unless the answer
/// was verified.
pub fn report_and_leave(
    cluster: Cluster,
    verdict: impl FnOnce() -> Verdict,
) -> Result<(), Box<dyn Error>> {
    cluster.barrier()?;
    let Verdict {
        result,
        verified,
        failure,
    } = verdict();
    println!("{}", result.finish(verified));
    cluster.shutdown();
    if !verified {
        return Err(failure.into());
    }
    Ok(())
}

/// The end of a run on every node but rank 0: waits at the barrier until rank 0 has its
/// answer, then leaves the cluster.
pub fn leave_after_rank0(cluster: Cluster) -> Result<(), Box<dyn Error>> {
    cluster.barrier()?;
    cluster.shutdown();
    Ok(())
}
