//! Timers: messages an actor sends itself after a delay ([`crate::Context::send_after`]).
//!
//! A timer belongs to its actor. While it is pending its message stays in the actor's
//! [`Timers`] (so a checkpoint holds it and a restore re-arms it); when it fires the message
//! goes into the mailbox stamped as the next message of the actor's *timer channel*, whose
//! send index is the timer's arm number. For an order-sensitive actor with recovery on,
//! the moment a timer is handled among the other messages is then a logged delivery
//! determinant like any other, and a re-execution that arms the same timers again (same
//! arm numbers) is forced to handle them at the same points. One process-wide thread
//! keeps the deadlines; firing is a mailbox push.

use crate::actor_id::ActorId;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Names one armed timer of an actor, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimerId(pub(crate) u64);

/// Spawn sequence numbers at or above this bit are timer channels, not actors: an actor's
/// timer channel is named by its id with this bit set (no node spawns 2^47 actors).
const TIMER_SOURCE_BIT: u64 = 1 << 47;

/// The pseudo-sender of `actor`'s timer messages: the sender of its timer channel, as
/// delivery determinants name it (public for drivers of the protocol core, such as the
/// recovery simulator, that must name timer deliveries the way the runtime does).
pub fn source_of(actor: ActorId) -> ActorId {
    ActorId::from_u64(actor.as_u64() | TIMER_SOURCE_BIT)
}

/// Whether `from` names a timer channel rather than an actor.
pub(crate) fn is_source(from: ActorId) -> bool {
    from.seq() & TIMER_SOURCE_BIT != 0 && from.seq() != (1 << 48) - 1
}

/// Something whose timers fire (an actor cell).
pub(crate) trait TimerTarget: Send + Sync {
    /// Timer `seq`'s deadline passed.
    fn fire(self: Arc<Self>, seq: u64);
}

/// One actor's timers.
pub(crate) struct Timers<M> {
    /// Arm number of the last timer armed (the first is 1).
    armed: u64,
    /// Armed, not fired: deadline and message.
    pending: BTreeMap<u64, (Instant, M)>,
    /// Fired, in the mailbox, not yet handled.
    fired: BTreeSet<u64>,
    /// Fired and then cancelled: dropped when they come out of the mailbox.
    cancelled: BTreeSet<u64>,
}

impl<M> Default for Timers<M> {
    fn default() -> Self {
        Timers {
            armed: 0,
            pending: BTreeMap::new(),
            fired: BTreeSet::new(),
            cancelled: BTreeSet::new(),
        }
    }
}

impl<M> Timers<M> {
    /// Arms a timer for `msg` at `deadline` and returns its arm number.
    pub(crate) fn arm(&mut self, deadline: Instant, msg: M) -> u64 {
        self.armed += 1;
        self.pending.insert(self.armed, (deadline, msg));
        self.armed
    }

    /// Takes the message of timer `seq` if it is still pending (not cancelled, not fired).
    pub(crate) fn take_fired(&mut self, seq: u64) -> Option<M> {
        let (_, msg) = self.pending.remove(&seq)?;
        self.fired.insert(seq);
        Some(msg)
    }

    /// Cancels timer `seq`: true if its message had not been handled yet (it never will).
    pub(crate) fn cancel(&mut self, seq: u64) -> bool {
        if self.pending.remove(&seq).is_some() {
            return true;
        }
        if self.fired.remove(&seq) {
            self.cancelled.insert(seq);
            return true;
        }
        false
    }

    /// Whether timer `seq` fired and was then cancelled (its message, still in the
    /// mailbox, is to be dropped).
    pub(crate) fn is_cancelled(&self, seq: u64) -> bool {
        self.cancelled.contains(&seq)
    }

    /// Timer `seq`'s message came out of the mailbox: whether to handle it.
    pub(crate) fn handle(&mut self, seq: u64) -> bool {
        self.fired.remove(&seq);
        !self.cancelled.remove(&seq)
    }

    /// What a checkpoint keeps, with each pending message encoded by `encode`.
    pub(crate) fn image<E>(
        &self,
        now: Instant,
        mut encode: impl FnMut(&M) -> Result<Vec<u8>, E>,
    ) -> Result<TimersImage, E> {
        let mut pending = Vec::with_capacity(self.pending.len());
        for (seq, (deadline, msg)) in &self.pending {
            pending.push(PendingTimer {
                seq: *seq,
                remaining_nanos: u64::try_from(deadline.saturating_duration_since(now).as_nanos())
                    .unwrap_or(u64::MAX),
                message: crate::payload::Payload(encode(msg)?),
            });
        }
        Ok(TimersImage {
            armed: self.armed,
            pending,
            fired: self.fired.iter().copied().collect(),
            cancelled: self.cancelled.iter().copied().collect(),
        })
    }

    /// The timers of `image` with their messages decoded by `decode`, pending ones due
    /// their remaining delay after `now`. Returns the pending (arm number, deadline) pairs
    /// to arm.
    pub(crate) fn restore<E>(
        &mut self,
        image: &TimersImage,
        now: Instant,
        mut decode: impl FnMut(&[u8]) -> Result<M, E>,
    ) -> Result<Vec<(u64, Instant)>, E> {
        let mut due = Vec::with_capacity(image.pending.len());
        let mut pending = BTreeMap::new();
        for p in &image.pending {
            let deadline = now + Duration::from_nanos(p.remaining_nanos);
            pending.insert(p.seq, (deadline, decode(&p.message)?));
            due.push((p.seq, deadline));
        }
        *self = Timers {
            armed: image.armed,
            pending,
            fired: image.fired.iter().copied().collect(),
            cancelled: image.cancelled.iter().copied().collect(),
        };
        Ok(due)
    }
}

/// An actor's timers in a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TimersImage {
    armed: u64,
    pending: Vec<PendingTimer>,
    fired: Vec<u64>,
    cancelled: Vec<u64>,
}

impl TimersImage {
    /// Whether the actor had no timer state at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.armed == 0
    }
}

/// A timer armed and not fired when the checkpoint was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PendingTimer {
    seq: u64,
    /// Time left to its deadline (a restore re-arms it with this delay).
    remaining_nanos: u64,
    message: crate::payload::Payload,
}

/// The deadlines of every timer of this process, kept by one thread.
struct Clock {
    queue: Mutex<BinaryHeap<Reverse<Due>>>,
    changed: Condvar,
}

struct Due {
    deadline: Instant,
    seq: u64,
    target: Weak<dyn TimerTarget>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

fn clock() -> &'static Arc<Clock> {
    static CLOCK: OnceLock<Arc<Clock>> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let clock = Arc::new(Clock {
            queue: Mutex::new(BinaryHeap::new()),
            changed: Condvar::new(),
        });
        let c = Arc::clone(&clock);
        // If the thread cannot start, timers never fire; say so once instead of panicking.
        if let Err(e) = std::thread::Builder::new()
            .name("lazarus-timers".into())
            .spawn(move || run(&c))
        {
            tracing::error!("cannot start the timer thread: {e}; timers will not fire");
        }
        clock
    })
}

fn run(clock: &Clock) {
    let mut queue = clock.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while queue.peek().is_some_and(|Reverse(d)| d.deadline <= now) {
            if let Some(Reverse(d)) = queue.pop() {
                due.push(d);
            }
        }
        if !due.is_empty() {
            drop(queue);
            for d in due {
                if let Some(target) = d.target.upgrade() {
                    target.fire(d.seq);
                }
            }
            queue = clock.queue.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        queue = match queue.peek().map(|Reverse(d)| d.deadline) {
            Some(next) => {
                clock
                    .changed
                    .wait_timeout(queue, next.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => clock.changed.wait(queue).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// Calls `target.fire(seq)` at `deadline` (on the timer thread).
pub(crate) fn schedule(deadline: Instant, seq: u64, target: Weak<dyn TimerTarget>) {
    let clock = clock();
    clock
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Reverse(Due {
            deadline,
            seq,
            target,
        }));
    clock.changed.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_cancelled_before_it_fires_never_fires() {
        let mut t = Timers::default();
        let now = Instant::now();
        let a = t.arm(now, "a");
        assert!(t.cancel(a));
        assert_eq!(t.take_fired(a), None);
        assert!(!t.cancel(a), "cancelling twice reports it was already gone");
    }

    #[test]
    fn a_timer_cancelled_after_it_fired_is_dropped_when_it_leaves_the_mailbox() {
        let mut t = Timers::default();
        let a = t.arm(Instant::now(), "a");
        let b = t.arm(Instant::now(), "b");
        assert_eq!(t.take_fired(a), Some("a"));
        assert_eq!(t.take_fired(b), Some("b"));
        assert!(t.cancel(a));
        assert!(t.is_cancelled(a) && !t.is_cancelled(b));
        assert!(!t.handle(a), "the cancelled one is not handled");
        assert!(t.handle(b));
        assert!(!t.cancel(b), "a handled timer cannot be cancelled any more");
    }

    #[test]
    fn a_checkpoint_keeps_pending_timers_with_their_remaining_delay_and_arm_numbers() {
        let mut t = Timers::default();
        let now = Instant::now();
        let a = t.arm(now + Duration::from_millis(50), 7u32);
        let b = t.arm(now + Duration::from_millis(10), 8u32);
        assert_eq!(t.take_fired(b), Some(8));
        let image = t
            .image(now, |m| Ok::<_, ()>(m.to_le_bytes().to_vec()))
            .unwrap();
        let later = now + Duration::from_secs(5);
        let mut back = Timers::default();
        let due = back
            .restore(&image, later, |b| {
                Ok::<_, ()>(u32::from_le_bytes(b.try_into().unwrap()))
            })
            .unwrap();
        assert_eq!(due, vec![(a, later + Duration::from_millis(50))]);
        assert_eq!(back.take_fired(a), Some(7));
        assert!(back.handle(b), "the fired one is still to be handled");
        assert_eq!(back.arm(now, 9), 3, "arm numbers go on where they were");
    }

    #[test]
    fn timer_channels_are_told_apart_from_actors_and_the_driver() {
        let actor = ActorId::new(3, 12).unwrap();
        assert!(is_source(source_of(actor)));
        assert_eq!(source_of(actor).rank(), 3);
        assert!(!is_source(actor));
        assert!(!is_source(ActorId::new(3, (1 << 48) - 1).unwrap()));
    }

    struct Probe(Mutex<Vec<u64>>);
    impl TimerTarget for Probe {
        fn fire(self: Arc<Self>, seq: u64) {
            self.0.lock().unwrap().push(seq);
        }
    }

    #[test]
    fn the_clock_fires_in_deadline_order_not_arm_order() {
        let probe = Arc::new(Probe(Mutex::new(Vec::new())));
        let weak: Weak<dyn TimerTarget> = Arc::downgrade(&probe) as Weak<dyn TimerTarget>;
        let now = Instant::now();
        schedule(now + Duration::from_millis(40), 1, weak.clone());
        schedule(now + Duration::from_millis(5), 2, weak);
        let deadline = Instant::now() + Duration::from_secs(10);
        while probe.0.lock().unwrap().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*probe.0.lock().unwrap(), vec![2, 1]);
    }
}
