//! How a run ends on every node: rank 0 has the answer, the others serve it until then.
//! Rank 0 releases the others at a barrier once it has its answer, prints its `RESULT`
//! line and leaves the cluster; every other node waits at that barrier (its actors still
//! serve rank 0's run) and then leaves ([`Cluster::report_and_leave`],
//! [`Cluster::leave_after_rank0`]).
//!
//! Rank 0 prints before it leaves because a node killed while it waits to leave is not
//! restarted: the RESULT must be out by then.

use super::Cluster;
use std::error::Error;
use std::fmt::Display;

/// The `RESULT app=<name> <key>=<value> ... verified=<bool>` line a run prints as its last
/// line on rank 0, so that scripts and benchmarks can compare runs.
#[derive(Debug, Clone)]
pub struct ResultLine {
    app: String,
    fields: Vec<(String, String)>,
}

impl ResultLine {
    /// Starts the line for app `app`.
    pub fn new(app: &str) -> Self {
        ResultLine {
            app: app.to_string(),
            fields: Vec::new(),
        }
    }

    /// Appends `key=value`. Keys must not contain spaces or `=`; values must not contain
    /// spaces (they are written as given).
    pub fn field(mut self, key: &str, value: impl Display) -> Self {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// Appends `key=0x<16 hex digits>`: how checksums and digests are written.
    pub fn hex(self, key: &str, value: u64) -> Self {
        self.field(key, format!("{value:#018x}"))
    }

    /// Appends `elapsed_s=<seconds>`, to the microsecond: how long the timed part took.
    pub fn elapsed(self, seconds: f64) -> Self {
        self.field("elapsed_s", format!("{seconds:.6}"))
    }

    /// The finished line, ending with `verified=<verified>`.
    pub fn finish(&self, verified: bool) -> String {
        let mut line = format!("RESULT app={}", self.app);
        for (k, v) in &self.fields {
            line.push_str(&format!(" {k}={v}"));
        }
        line.push_str(&format!(" verified={verified}"));
        line
    }
}

/// What rank 0 found at the end of a run.
#[derive(Debug)]
pub struct Verdict {
    /// The RESULT line, still without its `verified` field.
    pub result: ResultLine,
    /// Whether the answer checked out.
    pub verified: bool,
    /// The error the run ends with when it did not.
    pub failure: String,
}

impl Cluster {
    /// Rank 0's end of a run, once it has its answer: releases the other nodes at the
    /// barrier, then gets the `verdict` (anything it prints comes before the RESULT line),
    /// prints its RESULT line, leaves the cluster, and fails with the verdict's failure
    /// unless the answer was verified.
    pub fn report_and_leave(self, verdict: impl FnOnce() -> Verdict) -> Result<(), Box<dyn Error>> {
        self.barrier()?;
        let Verdict {
            result,
            verified,
            failure,
        } = verdict();
        println!("{}", result.finish(verified));
        self.shutdown();
        if !verified {
            return Err(failure.into());
        }
        Ok(())
    }

    /// The end of a run on every node but rank 0: waits at the barrier until rank 0 has
    /// its answer, then leaves the cluster.
    pub fn leave_after_rank0(self) -> Result<(), Box<dyn Error>> {
        self.barrier()?;
        self.shutdown();
        Ok(())
    }
}
