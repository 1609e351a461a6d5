//! Timers: messages an actor sends itself after a delay ([`crate::Context::send_after`]).
//!
//! A timer belongs to its actor. While it is pending its message stays in the actor's
//! timers (so a checkpoint holds it and a restore re-arms it); when it fires the message
//! goes into the mailbox stamped as the next message of the actor's *timer channel*, whose
//! send index is the timer's arm number. For an order-sensitive actor with recovery on,
//! the moment a timer is handled among the other messages is then a logged delivery
//! determinant like any other, and a re-execution that arms the same timers again (same
//! arm numbers) is forced to handle them at the same points. One process-wide thread
//! keeps the deadlines; firing is a mailbox push.
//!
//! The rules of an actor's timers (arm numbers, pending / fired / cancelled, what a
//! checkpoint keeps) are the sans-IO [`TimerState`] of the recovery core, shared with the
//! recovery simulator; this module gives it real time (`Instant` deadlines) and keeps the
//! clock thread.

use crate::actor_id::ActorId;
use crate::payload::Payload;
use crate::recovery::timer_state::{TimerImage, TimerState};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Instant;

/// Names one armed timer of an actor, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimerId(pub(crate) u64);

/// Spawn sequence numbers with this bit set are timer channels, not actors: an actor's
/// timer channel is named by its id with this bit set (no actor id has it: `main`'s
/// spawns stay below 2^46 and children's ids set bit 46 only, `ActorId::child`).
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

/// One actor's timers, due at `Instant`s (the rules: [`TimerState`]).
pub(crate) type Timers<M> = TimerState<Instant, M>;

/// An actor's timers in a checkpoint: pending messages in the wire encoding, each with
/// the nanoseconds left to its deadline.
pub(crate) type TimersImage = TimerImage<Payload>;

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
    use std::time::Duration;

    #[test]
    fn a_checkpoint_keeps_the_nanoseconds_left_and_a_restore_counts_them_from_its_own_now() {
        let mut t = Timers::default();
        let now = Instant::now();
        let a = t.arm(now + Duration::from_millis(50), 7u32);
        let overdue = t.arm(now, 8u32);
        let image: TimersImage = t
            .image(now + Duration::from_millis(1), |m| {
                Ok::<_, ()>(Payload(m.to_le_bytes().to_vec()))
            })
            .unwrap();
        let later = now + Duration::from_secs(5);
        let mut back = Timers::default();
        let due = back
            .restore(&image, later, |b| {
                Ok::<_, ()>(u32::from_le_bytes(b.as_slice().try_into().unwrap()))
            })
            .unwrap();
        assert_eq!(
            due,
            vec![(a, later + Duration::from_millis(49)), (overdue, later)],
            "an overdue timer is due at once"
        );
        assert_eq!(back.take_fired(a), Some(7));
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
