//! Each actor's dependence on its node's determinants: which determinants its messages to
//! other nodes must wait for (the rule is [`crate::recovery::send_gate`]).
//!
//! Kept per actor cell, in one atomic, and raised:
//! - when an actor of the node pushes a message into the cell's mailbox (to the sender's
//!   dependence; a sender that is not an actor counts as the whole node's determinants).
//!   Raised at the push, before the message is delivered: earlier than needed, never
//!   later;
//! - when the actor itself records a determinant (an order-sensitive actor's delivery,
//!   `ctx.now()`, `ctx.random()`, a probe: up to that determinant), notes an empty poll
//!   (logged lazily, so the whole node) or replays a logged event (the whole node, as the
//!   rule was before actors were tracked).
//!
//! Messages from other nodes raise nothing: they left their node once what they depended
//! on was stable. A whole-node dependence is resolved to a number at the actor's next
//! message out of the node. Tracked with recovery on only.

use crate::recovery::Dependence;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// One actor's dependence ([`Dependence`] encoded in an atomic: raised from any thread
/// that pushes into its mailbox, read by its own thread when it sends).
#[derive(Debug)]
pub(crate) struct ActorDependence(AtomicU64);

impl ActorDependence {
    /// Starts at `initial` (an actor spawned by another depends on what its spawner did).
    pub(crate) fn new(initial: Dependence) -> Self {
        ActorDependence(AtomicU64::new(initial.encoded()))
    }

    /// What the actor depends on now.
    pub(crate) fn get(&self) -> Dependence {
        Dependence::from_encoded(self.0.load(Ordering::Acquire))
    }

    /// Joins `d` in (the encoding orders like the join: `Set` is the largest).
    pub(crate) fn raise(&self, d: Dependence) {
        if d != Dependence::Below(0) {
            self.0.fetch_max(d.encoded(), Ordering::AcqRel);
        }
    }

    /// A whole-node dependence became the number `needed` (everything recorded by the
    /// time the actor sent). Call under the recovery layer's lock, which every determinant
    /// is recorded under: a raise this may overwrite came from a sender whose
    /// determinants were all recorded before that lock was taken, so `needed` covers
    /// them; a later raise comes after this call and stays.
    pub(crate) fn resolve(&self, needed: u64) {
        let _ = self.0.compare_exchange(
            Dependence::SET_ENCODED,
            Dependence::Below(needed).encoded(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

thread_local! {
    /// The dependence of the actor whose handler runs on this thread (null: no actor, or
    /// recovery off).
    static CURRENT: Cell<*const ActorDependence> = const { Cell::new(std::ptr::null()) };
}

/// Marks `d` as the running actor's dependence until dropped.
pub(crate) struct Entered(());

impl Drop for Entered {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(std::ptr::null()));
    }
}

/// The running actor's dependence is `d` until the guard drops. The caller keeps `d`
/// alive (and in place) for as long as the guard lives.
pub(crate) fn enter(d: &ActorDependence) -> Entered {
    CURRENT.with(|c| c.set(d as *const ActorDependence));
    Entered(())
}

/// Runs `f` with the running actor's dependence (`None`: the sender counts as the whole
/// node).
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&ActorDependence>) -> R) -> R {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: `CURRENT` is non-null only between `enter` and the drop of its guard, which
    // the actor's turn holds on this thread while the cell (which owns the dependence)
    // is borrowed by that turn; the reference does not escape `f`.
    let d = unsafe { p.as_ref() };
    f(d)
}

/// What a message sent now from this thread carries into its receiver's dependence.
pub(crate) fn of_sender() -> Dependence {
    with_current(|d| d.map_or(Dependence::Set, ActorDependence::get))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_depends_on_the_most_its_senders_depended_on() {
        let d = ActorDependence::new(Dependence::Below(0));
        d.raise(Dependence::Below(4));
        d.raise(Dependence::Below(2));
        assert_eq!(d.get(), Dependence::Below(4));
        d.raise(Dependence::Set);
        assert_eq!(d.get(), Dependence::Set);
        d.resolve(9);
        assert_eq!(d.get(), Dependence::Below(9));
    }

    #[test]
    fn outside_an_actor_a_sender_counts_as_the_whole_node() {
        assert_eq!(of_sender(), Dependence::Set);
        let d = ActorDependence::new(Dependence::Below(3));
        {
            let _in = enter(&d);
            assert_eq!(of_sender(), Dependence::Below(3));
        }
        assert_eq!(of_sender(), Dependence::Set);
    }
}
