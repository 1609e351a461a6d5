//! An actor's timers as plain state: the rules of arming, firing, cancelling and handling
//! them, and what a checkpoint keeps of them. No clock, thread or I/O: the driver says
//! what time it is and which timer fired.
//!
//! A timer gets an arm number when it is armed (1, 2, ... per actor, never reused; a
//! restore goes on from the checkpoint's). It then moves through
//!
//! | state | how it gets there | where its message is |
//! |---|---|---|
//! | pending | [`TimerState::arm`] | here, with its deadline |
//! | fired | [`TimerState::take_fired`] (its deadline passed) | in the actor's mailbox |
//! | cancelled after it fired | [`TimerState::cancel`] of a fired timer | still in the mailbox, to be dropped as it comes out |
//! | gone | [`TimerState::handle`] as it comes out of the mailbox, or [`TimerState::cancel`] while pending | nowhere |
//!
//! A checkpoint ([`TimerState::image`]) keeps the arm number reached, each pending timer
//! with its message and the delay left to its deadline, and the fired and cancelled arm
//! numbers (their messages are in the checkpointed mailbox). A restore
//! ([`TimerState::restore`]) re-arms the pending ones, each due its delay left after the
//! restore, and returns them for the driver to schedule.
//!
//! Users: the runtime (`timer.rs`: `Instant` deadlines, a clock thread that fires them)
//! and the recovery simulator (virtual steps). The deadline type is anything that
//! implements [`Deadline`].

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A point in time on the driver's clock at which a timer is due.
///
/// Delays are counted in the clock's own unit: nanoseconds for the runtime's `Instant`,
/// steps for a virtual clock (`u64`).
pub trait Deadline: Copy {
    /// The delay from `now` until this deadline, in the clock's unit (0 if it has passed).
    fn left_after(self, now: Self) -> u64;

    /// The deadline `left` units of the clock after `now`.
    fn after(now: Self, left: u64) -> Self;
}

/// Real time: a checkpoint keeps the nanoseconds left to a deadline. Only the type is
/// named here; the caller reads the clock and passes `now` in.
#[allow(clippy::disallowed_types)]
impl Deadline for std::time::Instant {
    fn left_after(self, now: Self) -> u64 {
        u64::try_from(self.saturating_duration_since(now).as_nanos()).unwrap_or(u64::MAX)
    }

    fn after(now: Self, left: u64) -> Self {
        // Cannot overflow: u64 nanoseconds are under 600 years, far inside `Instant`'s range.
        now + std::time::Duration::from_nanos(left)
    }
}

/// A virtual clock: deadlines are step (or tick) numbers.
impl Deadline for u64 {
    fn left_after(self, now: u64) -> u64 {
        self.saturating_sub(now)
    }

    fn after(now: u64, left: u64) -> u64 {
        now.saturating_add(left)
    }
}

/// One actor's timers: deadlines of type `D`, messages of type `M` (see the module doc
/// for the states a timer goes through).
#[derive(Clone, Debug)]
pub struct TimerState<D, M> {
    /// Arm number of the last timer armed (the first is 1).
    armed: u64,
    /// Armed, not fired: deadline and message.
    pending: BTreeMap<u64, (D, M)>,
    /// Fired, in the mailbox, not yet handled.
    fired: BTreeSet<u64>,
    /// Fired and then cancelled: dropped when they come out of the mailbox.
    cancelled: BTreeSet<u64>,
}

impl<D, M> Default for TimerState<D, M> {
    fn default() -> Self {
        TimerState {
            armed: 0,
            pending: BTreeMap::new(),
            fired: BTreeSet::new(),
            cancelled: BTreeSet::new(),
        }
    }
}

impl<D, M> TimerState<D, M> {
    /// Arms a timer for `msg` at `deadline` and returns its arm number.
    pub fn arm(&mut self, deadline: D, msg: M) -> u64 {
        self.armed += 1;
        self.pending.insert(self.armed, (deadline, msg));
        self.armed
    }

    /// Timer `seq` fired: takes its message (for the mailbox) if it is still pending, and
    /// counts it as fired. `None` if it was cancelled, already fired or never armed.
    pub fn take_fired(&mut self, seq: u64) -> Option<M> {
        let (_, msg) = self.pending.remove(&seq)?;
        self.fired.insert(seq);
        Some(msg)
    }

    /// Fires the pending timer with the earliest deadline (of equal deadlines, the first
    /// armed): its arm number and message. `None` if no timer is pending.
    pub fn fire_next(&mut self) -> Option<(u64, M)>
    where
        D: Ord,
    {
        let seq = self
            .pending
            .iter()
            .min_by_key(|(seq, (deadline, _))| (deadline, **seq))
            .map(|(seq, _)| *seq)?;
        self.take_fired(seq).map(|msg| (seq, msg))
    }

    /// Cancels timer `seq`: true if its message had not been handled yet (it now never
    /// will be), false if it was handled, cancelled already or never armed.
    pub fn cancel(&mut self, seq: u64) -> bool {
        if self.pending.remove(&seq).is_some() {
            return true;
        }
        if self.fired.remove(&seq) {
            self.cancelled.insert(seq);
            return true;
        }
        false
    }

    /// Whether timer `seq` fired and was then cancelled: its message, still in the
    /// mailbox, is to be dropped when it comes out.
    pub fn is_cancelled(&self, seq: u64) -> bool {
        self.cancelled.contains(&seq)
    }

    /// Timer `seq`'s message came out of the mailbox: whether to handle it (false if the
    /// timer was cancelled after it fired). Either way the timer is gone afterwards.
    pub fn handle(&mut self, seq: u64) -> bool {
        self.fired.remove(&seq);
        !self.cancelled.remove(&seq)
    }

    /// Arm number of the last timer armed (0 if none ever was): how many were armed.
    pub fn armed(&self) -> u64 {
        self.armed
    }

    /// Whether some timer is armed and has not fired yet.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Arm numbers of the timers armed and neither handled nor cancelled (pending, or
    /// fired and waiting in the mailbox), in ascending order.
    pub fn live(&self) -> Vec<u64> {
        let mut live: Vec<u64> = self.pending.keys().copied().collect();
        live.extend(self.fired.difference(&self.cancelled));
        live.sort_unstable();
        live
    }

    /// What a checkpoint taken at `now` keeps, with each pending message encoded by
    /// `encode` (the first error is returned).
    pub fn image<P, E>(
        &self,
        now: D,
        mut encode: impl FnMut(&M) -> Result<P, E>,
    ) -> Result<TimerImage<P>, E>
    where
        D: Deadline,
    {
        let mut pending = Vec::with_capacity(self.pending.len());
        for (seq, (deadline, msg)) in &self.pending {
            pending.push(PendingTimer {
                seq: *seq,
                left: deadline.left_after(now),
                message: encode(msg)?,
            });
        }
        Ok(TimerImage {
            armed: self.armed,
            pending,
            fired: self.fired.iter().copied().collect(),
            cancelled: self.cancelled.iter().copied().collect(),
        })
    }

    /// Replaces these timers by those of `image`, restored at `now`, with their messages
    /// decoded by `decode`: each pending timer is due its delay left after `now`. Returns
    /// the pending (arm number, deadline) pairs, for the driver to schedule. On a decode
    /// error the timers are left as they were.
    pub fn restore<P, E>(
        &mut self,
        image: &TimerImage<P>,
        now: D,
        mut decode: impl FnMut(&P) -> Result<M, E>,
    ) -> Result<Vec<(u64, D)>, E>
    where
        D: Deadline,
    {
        let mut due = Vec::with_capacity(image.pending.len());
        let mut pending = BTreeMap::new();
        for p in &image.pending {
            let deadline = D::after(now, p.left);
            pending.insert(p.seq, (deadline, decode(&p.message)?));
            due.push((p.seq, deadline));
        }
        *self = TimerState {
            armed: image.armed,
            pending,
            fired: image.fired.iter().copied().collect(),
            cancelled: image.cancelled.iter().copied().collect(),
        };
        Ok(due)
    }
}

/// An actor's timers in a checkpoint, with pending messages encoded as `P` (see
/// [`TimerState::image`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerImage<P> {
    armed: u64,
    pending: Vec<PendingTimer<P>>,
    fired: Vec<u64>,
    cancelled: Vec<u64>,
}

impl<P> Default for TimerImage<P> {
    fn default() -> Self {
        TimerImage {
            armed: 0,
            pending: Vec::new(),
            fired: Vec::new(),
            cancelled: Vec::new(),
        }
    }
}

impl<P> TimerImage<P> {
    /// Whether the actor had no timer state at all (it never armed one).
    pub fn is_empty(&self) -> bool {
        self.armed == 0
    }
}

/// A timer armed and not fired when the checkpoint was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PendingTimer<P> {
    seq: u64,
    /// Delay left to its deadline, in the clock's unit (a restore re-arms it with this
    /// delay).
    left: u64,
    message: P,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// An actor's timers on a virtual clock (deadlines are steps).
    fn timers() -> TimerState<u64, &'static str> {
        TimerState::default()
    }

    /// A checkpoint image with the messages kept as they are.
    fn image_of(t: &TimerState<u64, &'static str>, now: u64) -> TimerImage<&'static str> {
        let Ok(image) = t.image(now, |m| Ok::<_, Infallible>(*m));
        image
    }

    /// The timers of `image` restored at `now`, and the pending ones due.
    fn restored(
        image: &TimerImage<&'static str>,
        now: u64,
    ) -> (TimerState<u64, &'static str>, Vec<(u64, u64)>) {
        let mut t = timers();
        let Ok(due) = t.restore(image, now, |m| Ok::<_, Infallible>(*m));
        (t, due)
    }

    #[test]
    fn arm_numbers_start_at_one_and_are_never_reused() {
        let mut t = timers();
        assert_eq!(t.armed(), 0);
        assert_eq!(t.arm(5, "a"), 1);
        assert!(t.cancel(1));
        assert_eq!(t.arm(5, "b"), 2, "a cancelled timer's number is not reused");
        assert_eq!(t.armed(), 2);
    }

    #[test]
    fn a_timer_cancelled_before_it_fires_never_fires() {
        let mut t = timers();
        let a = t.arm(10, "a");
        assert!(t.cancel(a));
        assert_eq!(t.take_fired(a), None);
        assert!(!t.cancel(a), "cancelling twice reports it was already gone");
        assert!(!t.has_pending() && t.live().is_empty());
    }

    #[test]
    fn a_timer_fires_once() {
        let mut t = timers();
        let a = t.arm(10, "a");
        assert_eq!(t.take_fired(a), Some("a"));
        assert_eq!(
            t.take_fired(a),
            None,
            "its message is in the mailbox already"
        );
        assert_eq!(t.live(), vec![a], "fired, not handled: still live");
    }

    #[test]
    fn a_timer_cancelled_after_it_fired_is_dropped_when_it_leaves_the_mailbox() {
        let mut t = timers();
        let a = t.arm(10, "a");
        let b = t.arm(10, "b");
        assert_eq!(t.take_fired(a), Some("a"));
        assert_eq!(t.take_fired(b), Some("b"));
        assert!(t.cancel(a));
        assert!(t.is_cancelled(a) && !t.is_cancelled(b));
        assert_eq!(t.live(), vec![b]);
        assert!(!t.handle(a), "the cancelled one is not handled");
        assert!(!t.is_cancelled(a), "once dropped it is gone");
        assert!(t.handle(b));
        assert!(!t.cancel(b), "a handled timer cannot be cancelled any more");
        assert!(t.live().is_empty());
    }

    #[test]
    fn timers_fire_earliest_deadline_first_and_the_first_armed_of_equal_deadlines_first() {
        let mut t = timers();
        let late = t.arm(30, "late");
        let first = t.arm(10, "first");
        let second = t.arm(10, "second");
        assert_eq!(t.fire_next(), Some((first, "first")));
        assert_eq!(t.fire_next(), Some((second, "second")));
        assert_eq!(t.fire_next(), Some((late, "late")));
        assert_eq!(t.fire_next(), None);
        assert!(!t.has_pending());
    }

    #[test]
    fn a_checkpoint_keeps_pending_timers_with_their_delay_left_and_their_arm_numbers() {
        let mut t = timers();
        let a = t.arm(150, "a");
        let b = t.arm(110, "b");
        let overdue = t.arm(90, "overdue");
        assert_eq!(t.take_fired(b), Some("b"));
        let image = image_of(&t, 100);
        let (mut back, due) = restored(&image, 5000);
        assert_eq!(
            due,
            vec![(a, 5050), (overdue, 5000)],
            "each due its delay left (none for one past its deadline)"
        );
        assert_eq!(back.take_fired(a), Some("a"));
        assert!(back.handle(b), "the fired one is still to be handled");
        assert_eq!(back.arm(0, "c"), 4, "arm numbers go on where they were");
    }

    #[test]
    fn a_timer_cancelled_after_it_fired_is_still_dropped_after_a_restore() {
        let mut t = timers();
        let a = t.arm(10, "a");
        assert_eq!(t.take_fired(a), Some("a"));
        assert!(t.cancel(a));
        let (mut back, due) = restored(&image_of(&t, 20), 0);
        assert!(due.is_empty());
        assert!(back.is_cancelled(a));
        assert!(!back.handle(a));
    }

    #[test]
    fn only_an_actor_that_never_armed_a_timer_has_an_empty_image() {
        let mut t = timers();
        assert!(image_of(&t, 0).is_empty());
        let a = t.arm(10, "a");
        assert!(t.cancel(a));
        assert!(
            !image_of(&t, 0).is_empty(),
            "the arm number reached is kept"
        );
    }

    #[test]
    fn a_restore_that_cannot_decode_a_message_leaves_the_timers_as_they_were() {
        let mut t = timers();
        t.arm(10, "kept");
        let mut other = timers();
        other.arm(10, "unreadable");
        let image = image_of(&other, 0);
        assert_eq!(t.restore(&image, 0, |_| Err("garbled")), Err("garbled"));
        assert_eq!(t.take_fired(1), Some("kept"));
    }

    #[test]
    fn a_checkpoint_that_cannot_encode_a_message_fails() {
        let mut t = timers();
        t.arm(10, "a");
        assert_eq!(t.image(0, |_| Err::<(), _>("too big")), Err("too big"));
    }
}
