//! What a node says while its checkpoints fail, and when they commit again (sans-IO: the
//! checkpointer passes the time and each outcome, and prints what it is given).
//!
//! A node whose checkpoints fail keeps running, less and less protected: a failure of it
//! rolls it back to its last committed checkpoint, and its peers keep every message they
//! logged for it since. Nothing in the run stops, so unless the node says so, only its
//! final totals (`checkpoints=0`) would show it. It says so without flooding its log: the
//! first failure is told, then at most one every [`TELL_AGAIN_AFTER`] unless the cause
//! changes, with the count of failures not told meanwhile; after [`UNPROTECTED_AFTER`]
//! failures in a row it says once that it is unprotected; the commit that ends failures
//! that were told says that checkpoints resumed.

use std::time::{Duration, Instant};

/// The least time between two reports of failures with the same cause.
pub const TELL_AGAIN_AFTER: Duration = Duration::from_secs(30);

/// Failed checkpoints in a row after which the node says it is unprotected.
pub const UNPROTECTED_AFTER: u64 = 3;

/// One failed checkpoint, as the checkpointer describes it.
#[derive(Clone, Copy, Debug)]
pub struct Failure<'a> {
    /// The `reason` label of `lazarus_checkpoint_failures_total` (`no_space`, `io`,
    /// `capture`, ...).
    pub reason: &'static str,
    /// What makes two failures the same cause: without what changes from one attempt to
    /// the next (the file's name holds the checkpoint's number).
    pub kind: &'a str,
    /// The whole error, told to the user.
    pub cause: &'a str,
}

/// Something the node should say, as a timeline event and a log line.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// A checkpoint failed.
    Failed {
        /// Its `reason` label.
        reason: &'static str,
        /// Failures since the last commit, this one included.
        in_a_row: u64,
        /// Failures since the last one told, not told.
        not_told: u64,
        /// The error.
        cause: String,
    },
    /// Checkpoints have failed [`UNPROTECTED_AFTER`] times in a row.
    Unprotected {
        /// Since the last commit (or since the node started checkpointing).
        without_commit: Duration,
        /// Failures since the last commit.
        in_a_row: u64,
        /// The last failure's error.
        last_failure: String,
    },
    /// A checkpoint committed after failures that were told.
    Resumed {
        /// The committed checkpoint's number.
        id: u64,
        /// Failures since the previous commit.
        failures: u64,
        /// Since the previous commit (or since the node started checkpointing).
        without_commit: Duration,
        /// Whether the node had said it was unprotected.
        was_unprotected: bool,
    },
}

impl Notice {
    /// Whether this is bad news (an error in the log) rather than good.
    pub fn is_error(&self) -> bool {
        !matches!(self, Notice::Resumed { .. })
    }

    /// The timeline event (`lazarus-event` kind and details): key=value fields, the
    /// error last (it has spaces).
    pub fn event(&self) -> String {
        match self {
            Notice::Failed {
                reason,
                in_a_row,
                not_told,
                cause,
            } => format!(
                "checkpoint-failed reason={reason} in_a_row={in_a_row} not_told={not_told} \
                 cause={cause}"
            ),
            Notice::Unprotected {
                without_commit,
                in_a_row,
                last_failure,
            } => format!(
                "unprotected no_commit_s={:.1} in_a_row={in_a_row} last_failure={last_failure}",
                without_commit.as_secs_f64()
            ),
            Notice::Resumed {
                id,
                failures,
                without_commit,
                was_unprotected,
            } => format!(
                "checkpoints-resumed id={id} after_failures={failures} no_commit_s={:.1} \
                 was_unprotected={was_unprotected}",
                without_commit.as_secs_f64()
            ),
        }
    }

    /// The log line of node `rank`.
    pub fn message(&self, rank: u16) -> String {
        match self {
            Notice::Failed {
                in_a_row,
                not_told,
                cause,
                ..
            } => {
                let untold = match not_told {
                    0 => String::new(),
                    n => format!(", {n} more failed since the last report"),
                };
                format!(
                    "node {rank}: checkpoint failed: {cause} ({in_a_row} in a row{untold}); \
                     the next checkpoint tries again"
                )
            }
            Notice::Unprotected {
                without_commit,
                in_a_row,
                last_failure,
            } => format!(
                "node {rank} unprotected: no checkpoint committed for {:.1} s ({in_a_row} \
                 failures in a row; last failure: {last_failure}); a failure of this node \
                 rolls it back that far, and its peers keep their logs for it meanwhile",
                without_commit.as_secs_f64()
            ),
            Notice::Resumed {
                id,
                failures,
                without_commit,
                was_unprotected,
            } => format!(
                "node {rank}: checkpoints resumed: checkpoint {id} committed after {failures} \
                 failures ({:.1} s without a commit){}",
                without_commit.as_secs_f64(),
                if *was_unprotected {
                    "; protected again"
                } else {
                    ""
                }
            ),
        }
    }
}

/// The record of one node's checkpoint outcomes that decides what it says.
#[derive(Debug)]
pub struct CheckpointHealth {
    /// The last commit, or when the node started checkpointing.
    since: Instant,
    /// Failures since then.
    in_a_row: u64,
    /// A notice was given about the current run of failures.
    told: bool,
    /// The node said it is unprotected in the current run of failures.
    unprotected: bool,
    /// When a failure was last told, and its kind.
    last_told: Option<(Instant, String)>,
    /// Failures since the last one told.
    not_told: u64,
}

impl CheckpointHealth {
    /// A node that starts checkpointing at `now`.
    pub fn new(now: Instant) -> Self {
        CheckpointHealth {
            since: now,
            in_a_row: 0,
            told: false,
            unprotected: false,
            last_told: None,
            not_told: 0,
        }
    }

    /// A checkpoint failed at `now`: what to say (nothing, the failure, that the node is
    /// unprotected, or both).
    pub fn failed(&mut self, now: Instant, failure: Failure<'_>) -> Vec<Notice> {
        self.in_a_row += 1;
        let mut notices = Vec::new();
        let tell = match &self.last_told {
            None => true,
            Some((at, kind)) => kind != failure.kind || now.duration_since(*at) >= TELL_AGAIN_AFTER,
        };
        if tell {
            notices.push(Notice::Failed {
                reason: failure.reason,
                in_a_row: self.in_a_row,
                not_told: self.not_told,
                cause: failure.cause.to_string(),
            });
            self.last_told = Some((now, failure.kind.to_string()));
            self.not_told = 0;
            self.told = true;
        } else {
            self.not_told += 1;
        }
        if self.in_a_row >= UNPROTECTED_AFTER && !self.unprotected {
            self.unprotected = true;
            self.told = true;
            notices.push(Notice::Unprotected {
                without_commit: now.duration_since(self.since),
                in_a_row: self.in_a_row,
                last_failure: failure.cause.to_string(),
            });
        }
        notices
    }

    /// Checkpoint `id` committed at `now`: that checkpoints resumed, if failures were
    /// told since the previous commit.
    pub fn committed(&mut self, now: Instant, id: u64) -> Option<Notice> {
        let notice = self.told.then(|| Notice::Resumed {
            id,
            failures: self.in_a_row,
            without_commit: now.duration_since(self.since),
            was_unprotected: self.unprotected,
        });
        self.since = now;
        self.in_a_row = 0;
        self.told = false;
        self.unprotected = false;
        notice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Failure<'static> = Failure {
        reason: "no_space",
        kind: "No space left on device (os error 28)",
        cause: "checkpoint storage at d/ckpt-1.tmp: No space left on device (os error 28)",
    };

    fn kinds(notices: &[Notice]) -> Vec<&'static str> {
        notices
            .iter()
            .map(|n| match n {
                Notice::Failed { .. } => "failed",
                Notice::Unprotected { .. } => "unprotected",
                Notice::Resumed { .. } => "resumed",
            })
            .collect()
    }

    #[test]
    fn the_first_failure_is_told_then_one_per_interval_with_the_count_not_told() {
        let t0 = Instant::now();
        let mut h = CheckpointHealth::new(t0);
        let first = h.failed(t0, FULL);
        assert_eq!(kinds(&first), ["failed"]);
        assert!(first[0]
            .event()
            .starts_with("checkpoint-failed reason=no_space in_a_row=1"));
        assert!(first[0].message(2).contains("No space left on device"));
        assert!(h.failed(t0 + Duration::from_secs(1), FULL).is_empty());
        let mut later = Vec::new();
        for s in 2..40 {
            later.extend(h.failed(t0 + Duration::from_secs(s), FULL));
        }
        // Said once unprotected (third failure), and the failure again after 30 s.
        assert_eq!(kinds(&later), ["unprotected", "failed"]);
        assert_eq!(
            later[1],
            Notice::Failed {
                reason: "no_space",
                in_a_row: 31,
                not_told: 29,
                cause: FULL.cause.into(),
            }
        );
    }

    #[test]
    fn a_new_cause_is_told_at_once() {
        let t0 = Instant::now();
        let mut h = CheckpointHealth::new(t0);
        h.failed(t0, FULL);
        let other = Failure {
            reason: "io",
            kind: "Read-only file system (os error 30)",
            cause: "checkpoint storage at d: Read-only file system (os error 30)",
        };
        let told = h.failed(t0 + Duration::from_secs(1), other);
        assert_eq!(kinds(&told), ["failed"]);
        assert!(told[0].event().contains("reason=io"));
    }

    #[test]
    fn a_node_says_it_is_unprotected_once_and_protected_again_when_a_checkpoint_commits() {
        let t0 = Instant::now();
        let mut h = CheckpointHealth::new(t0);
        let mut said = Vec::new();
        for s in 1..=6 {
            said.extend(h.failed(t0 + Duration::from_millis(500 * s), FULL));
        }
        assert_eq!(kinds(&said), ["failed", "unprotected"]);
        let Notice::Unprotected { without_commit, .. } = &said[1] else {
            unreachable!()
        };
        assert_eq!(*without_commit, Duration::from_millis(1500));
        assert!(said[1]
            .message(3)
            .starts_with("node 3 unprotected: no checkpoint committed for 1.5 s"));
        let resumed = h.committed(t0 + Duration::from_secs(4), 9).unwrap();
        assert!(!resumed.is_error());
        assert_eq!(
            resumed.event(),
            "checkpoints-resumed id=9 after_failures=6 no_commit_s=4.0 was_unprotected=true"
        );
        assert!(resumed.message(3).contains("resumed"));
        assert_eq!(
            h.committed(t0 + Duration::from_secs(5), 10),
            None,
            "said once"
        );
    }

    #[test]
    fn failures_that_come_and_go_are_told_at_the_rate_limit_only() {
        let t0 = Instant::now();
        let mut h = CheckpointHealth::new(t0);
        let mut said = Vec::new();
        // A nearly full file system: every other checkpoint fits.
        for s in 0..20u64 {
            let now = t0 + Duration::from_secs(s);
            if s % 2 == 0 {
                said.extend(h.failed(now, FULL));
            } else {
                said.extend(h.committed(now, s));
            }
        }
        assert_eq!(
            kinds(&said),
            ["failed", "resumed"],
            "not two lines a period"
        );
    }
}
