//! The log quota's backpressure on an actor's sends while the dump to logger nodes
//! takes the excess.

use super::log_offload;
use super::metric_names::{QUOTA_WAITS_CUT_SHORT, QUOTA_WAIT_SECONDS};
use super::state::LayerState;
use super::RecoveryLayer;
use crate::node::NodeHandle;
use metrics::{counter, histogram};
use std::cell::Cell;
use std::time::Duration;

/// The longest an actor waits for the dump to loggers over one turn (all its sends in
/// it): bounded, so that a dump that cannot catch up (or a logger that stalls) slows
/// senders instead of stopping them, and a turn of many sends cannot hold its core for
/// longer than a checkpoint waits for it.
pub const QUOTA_WAIT_MAX: Duration = Duration::from_millis(100);
/// How often a waiting sender looks at the log again.
const QUOTA_WAIT_POLL: Duration = Duration::from_micros(200);

thread_local! {
    /// What is left of the current actor turn's [`QUOTA_WAIT_MAX`].
    static QUOTA_WAIT_LEFT: Cell<Duration> = const { Cell::new(QUOTA_WAIT_MAX) };
}

/// An actor turn begins on this thread: its sends may wait for the dump again.
pub(crate) fn turn_begins() {
    QUOTA_WAIT_LEFT.with(|left| left.set(QUOTA_WAIT_MAX));
}

impl RecoveryLayer {
    /// Whether the log holds more than its quota (`--log-quota`) in a way the dump to
    /// loggers can bring back ([`log_offload::dump_would_help`]).
    pub(super) fn over_quota(&self, state: &LayerState) -> bool {
        self.config.log_quota.is_some_and(|quota| {
            (state.recovery.protocol())
                .is_some_and(|p| log_offload::dump_would_help(&p.log_stats(), quota, quota))
        })
    }

    /// Backpressure of the log's quota while loggers take its excess: an actor whose send
    /// left the log over the quota waits for the dump to bring it back under, so that a
    /// sender faster than the dump does not grow the log far past its quota. Only actors
    /// wait (not `main`, not the network), only while the dump thread takes blocks to a
    /// logger (without loggers the quota asks peers to checkpoint instead), at most
    /// [`QUOTA_WAIT_MAX`] over a whole actor turn (a turn handles many messages), and
    /// never while a checkpoint waits for the cores.
    #[cold]
    pub(super) fn wait_for_dump(&self, node: &NodeHandle) {
        if crate::actor::lifecycle::current_actor().is_none() || !self.dumps_to_loggers() {
            return;
        }
        let budget = QUOTA_WAIT_LEFT.with(Cell::get);
        if budget.is_zero() {
            return;
        }
        let started = std::time::Instant::now();
        let mut waited = false;
        loop {
            if !self.over_quota(&self.lock()) || !self.dumps_to_loggers() || node.pause_requested()
            {
                break;
            }
            if started.elapsed() >= budget {
                counter!(QUOTA_WAITS_CUT_SHORT).increment(1);
                break;
            }
            waited = true;
            std::thread::sleep(QUOTA_WAIT_POLL);
        }
        let spent = started.elapsed();
        QUOTA_WAIT_LEFT.with(|left| left.set(budget.saturating_sub(spent)));
        if waited {
            histogram!(QUOTA_WAIT_SECONDS).record(spent.as_secs_f64());
        }
    }
}
