//! The names of the recovery layer's metrics (`metrics` facade; the telemetry module
//! and README list them with the rest of the runtime's).

/// Bytes held by the sender-based log (payloads), per node.
pub const LOG_BYTES: &str = "lazarus_recovery_log_bytes";
/// Entries held by the sender-based log, per node.
pub const LOG_ENTRIES: &str = "lazarus_recovery_log_entries";
/// Recovery metadata bytes piggybacked on each inter-node message (histogram).
pub const PIGGYBACK_BYTES: &str = "lazarus_recovery_piggyback_bytes";
/// Checkpoints committed.
pub const CHECKPOINTS: &str = "lazarus_checkpoints_total";
/// CHECKPOINT_REQUESTs this node sent because its log was over its quota.
pub const CHECKPOINT_REQUESTS: &str = "lazarus_checkpoint_requests_sent_total";
/// Checkpoints this node took because a peer asked (its log was over its quota), not
/// because the period had passed.
pub const REQUESTED_CHECKPOINTS: &str = "lazarus_checkpoints_requested_total";
/// Checkpoints abandoned (label `reason`; see [`crate::telemetry::CHECKPOINT_FAILURES`]).
pub use crate::telemetry::CHECKPOINT_FAILURES;
/// Time the node's cores were paused for a checkpoint, seconds (histogram).
pub const CHECKPOINT_PAUSE: &str = "lazarus_checkpoint_pause_seconds";
/// Whole checkpoint duration (pause, encode, store, replica), seconds (histogram).
pub const CHECKPOINT_DURATION: &str = "lazarus_checkpoint_duration_seconds";
/// Size of the last checkpoint, bytes.
pub const CHECKPOINT_BYTES: &str = "lazarus_checkpoint_bytes";
/// Logged messages sent again for a peer's recovery.
pub const REPLAYED: &str = "lazarus_recovery_replayed_total";
/// Received messages dropped as duplicates.
pub const DUPLICATES: &str = "lazarus_recovery_duplicates_total";
/// Messages of a peer's incarnation that a newer one replaced, dropped (the newer one
/// sends them again).
pub const STALE_MESSAGES: &str = "lazarus_recovery_stale_messages_total";
/// Regenerated sends not transmitted (the receiver had them).
pub const SUPPRESSED: &str = "lazarus_recovery_suppressed_total";
/// Logged messages a restarted node held for a child actor not spawned again yet.
pub const HELD_FOR_UNSPAWNED: &str = "lazarus_recovery_held_for_unspawned_total";
/// Rollbacks of this node (restarts from a checkpoint).
pub const ROLLBACKS: &str = "lazarus_recovery_rollbacks_total";
/// Duration of each recovery phase, seconds (label `phase`: load, restore, replay).
pub const RECOVERY_PHASE: &str = "lazarus_recovery_phase_seconds";
/// Checkpoint periods in which a node delivered, sent and received nothing although its
/// inbox held messages (a stalled run; the warning says what they wait for).
pub const STALLED_PERIODS: &str = "lazarus_recovery_stalled_periods_total";

/// Stalls reported: a node held messages back for longer than the stall bound (10 s,
/// `LAZARUS_STALL_AFTER`) without delivering, receiving or sending anything (see
/// `stall.rs`; the timeline's `stalled` event says what it waits for).
pub const STALLS: &str = "lazarus_recovery_stalls_total";
/// Recovery frames refused by the protocol (label `reason`).
pub const BAD_RECOVERY_FRAMES: &str = "lazarus_recovery_rejected_total";

/// Nodes whose `main` sent from a second thread (counted once per incarnation).
pub const MAIN_OFF_THREAD_SENDS: &str = "lazarus_main_off_thread_sends_total";

/// Regenerated messages compared with the copy delivered before the failure.
pub const REGENERATIONS_CHECKED: &str = "lazarus_recovery_regenerations_checked_total";
/// Regenerated messages that differed from the copy delivered before the failure: the
/// determinism contract was broken (label `found_by`: `receiver` or `sender`).
pub const CONTRACT_VIOLATIONS: &str = "lazarus_recovery_contract_violations_total";

/// Seconds an actor's send waited for the dump to loggers to bring its node's log back
/// under the quota (see `RecoveryLayer::wait_for_dump`).
pub const QUOTA_WAIT_SECONDS: &str = "lazarus_log_quota_wait_seconds";
/// Such waits that ended at [`QUOTA_WAIT_MAX`](super::QUOTA_WAIT_MAX) with the log still over the quota.
pub const QUOTA_WAITS_CUT_SHORT: &str = "lazarus_log_quota_waits_cut_short_total";
/// Restarted peers this node could not serve: their ROLLBACK reported less delivered
/// than this node's log had been released up to (their newest checkpoint was lost).
pub const RECOVERY_IMPOSSIBLE: &str = "lazarus_recovery_impossible_total";
