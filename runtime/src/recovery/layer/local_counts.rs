//! The count of messages between the node's own actors, kept without the layer's lock
//! and folded into the set's interval when the lock is next taken.

use crate::executor::CoreQueue;
use crate::node::NodeHandle;
use crate::recovery::{Dependence, LogPayload, NodeRecovery, SetProtocol};
use std::sync::atomic::{AtomicU64, Ordering};

/// Messages actors of a node put into mailboxes of the same node. Each starts a state
/// interval of the set, like a delivery from another set
/// ([`SetProtocol::on_local_deliveries`]): a replay then cannot hand a logged message to
/// an actor before the same-node message that caused it. Counted without the layer's
/// lock and folded into the protocol's interval whenever the lock is taken; a count that
/// reaches a blocked message's requirement takes the lock itself and delivers it.
///
/// A core thread counts on its own counter with a plain store (`executor::count_local_send`),
/// because one locked increment per message was the whole measured cost of recovery
/// inside a node (ping-pong 1.02-1.03× off with it, 1.00-1.02× without). Whether a
/// message waits for the count is read after the store with only a compiler fence; the
/// rare side that starts such a wait makes every thread fence (`asymmetric_fence`), so
/// that either it sees the count or the counter sees the wait. Other threads, and a
/// process where that system call is refused, count with a locked increment.
pub(crate) struct LocalDeliveries {
    /// Counted by threads other than the node's cores (monotonic).
    shared: AtomicU64,
    /// The total (cores' counters plus `shared`) folded into the protocol so far.
    folded: AtomicU64,
    /// The total at which the first blocked message becomes deliverable (`u64::MAX`:
    /// no message waits for the interval).
    wake_at: AtomicU64,
    /// Whether core threads count with a plain store (asymmetric fences available).
    light: bool,
    /// The largest dependence on the node's determinants of a sender whose message was
    /// counted (a [`Dependence`], encoded): every message leaving the node waits for it
    /// (`NodeRecovery::on_local_deliveries`: the interval a message carries counts these
    /// events, and a replay makes again only events on stable determinants).
    needs: AtomicU64,
}

impl LocalDeliveries {
    pub(crate) fn new() -> Self {
        LocalDeliveries {
            shared: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            wake_at: AtomicU64::new(u64::MAX),
            light: crate::executor::asymmetric_fence::register(),
            needs: AtomicU64::new(0),
        }
    }

    /// Everything counted so far.
    pub(crate) fn total(&self, node: &NodeHandle) -> u64 {
        node.local_sends() + self.shared.load(Ordering::SeqCst)
    }

    /// Counts one message, from a sender that depends on `sender`, put into a mailbox on
    /// core `receiver`; true if a blocked message may now be deliverable.
    #[inline]
    pub(crate) fn count(
        &self,
        node: &NodeHandle,
        receiver: &CoreQueue,
        sender: Dependence,
    ) -> bool {
        if sender != Dependence::Below(0) {
            // Before the count, and released with it: a fold that sees the count sees
            // this too. Only senders that depend on determinants come here.
            self.needs.fetch_max(sender.encoded(), Ordering::SeqCst);
            std::sync::atomic::fence(Ordering::Release);
        }
        if self.light && crate::executor::count_local_send(receiver) {
            // Pairs with the heavy fence in `rearm`.
            crate::executor::asymmetric_fence::light();
            if self.wake_at.load(Ordering::Relaxed) == u64::MAX {
                return false;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
        } else {
            // SeqCst pairs with `rearm`: either the folder sees this count when it
            // re-reads the total, or this thread sees the new threshold.
            self.shared.fetch_add(1, Ordering::SeqCst);
        }
        self.total(node) >= self.wake_at.load(Ordering::SeqCst)
    }

    /// Moves the counted messages into the protocol's interval, and what their senders
    /// depend on into what messages leaving the node wait for (under the layer's lock).
    pub(crate) fn fold_into<P: LogPayload>(
        &self,
        recovery: &mut NodeRecovery<P>,
        node: &NodeHandle,
    ) {
        // `folded` and `wake_at` are written only under the lock: plain loads and stores
        // there, no locked instruction per fold.
        let total = self.total(node);
        // Pairs with the release in `count`: the dependences of the counts read above.
        std::sync::atomic::fence(Ordering::Acquire);
        let n = total.saturating_sub(self.folded.load(Ordering::Relaxed));
        self.folded.store(total, Ordering::Relaxed);
        if n > 0 {
            let needs = Dependence::from_encoded(self.needs.load(Ordering::SeqCst));
            recovery.on_local_deliveries(n, Some(needs));
        }
    }

    /// Sets the threshold for the protocol's first blocked message (under the layer's
    /// lock, after a fold); true if the count already reached it (fold and deliver
    /// again).
    pub(crate) fn rearm<P: LogPayload>(
        &self,
        protocol: &SetProtocol<P>,
        node: &NodeHandle,
    ) -> bool {
        let Some(r) = protocol.next_requirement() else {
            // A counter that still sees the old threshold only takes the lock once more.
            if self.wake_at.load(Ordering::Relaxed) != u64::MAX {
                self.wake_at.store(u64::MAX, Ordering::Release);
            }
            return false;
        };
        let need = r.saturating_sub(protocol.interval()).max(1);
        let wake = self.folded.load(Ordering::Relaxed).saturating_add(need);
        let was = self.wake_at.swap(wake, Ordering::SeqCst);
        // Core threads skip the fence while nothing waits: make them all fence once
        // now, so a count whose store is not visible yet sees this threshold instead.
        if was == u64::MAX && self.light && !crate::executor::asymmetric_fence::heavy() {
            // Registered, yet refused: a count made meanwhile may be missed for good,
            // and a node that waits for ever is worse than one that fails and restarts.
            tracing::error!("membarrier failed after it was registered: this node stops");
            std::process::abort();
        }
        self.total(node) >= wake
    }
}
