//! Recovery of suspended async handlers in the actor cell: the record a live handler
//! keeps while recovery is on, and the re-execution a restore runs from it.
//!
//! The rule is the protocol core's ([`Suspension`], docs/recovery.md "Suspended async
//! handlers"): a checkpoint of an actor whose async handler is suspended keeps its state
//! from before the handler, the handler's message and the record; a restore runs the
//! handler again, skipping the effects the record counts, handing back its results one at
//! a time and reading back its values.
//!
//! The cell installs the handler's record on its thread while it polls the handler's
//! future ([`polling`]). Every effect a handler can make asks this module first: sends
//! and asks (`ActorRef::tell_with`), replies and dropped reply slots (`ReplyTo`), timers
//! armed and cancelled, children spawned; so do its nondeterministic reads
//! (`ctx.now()`, `ctx.random()`, `ctx.messages_waiting()`) and the results its awaits
//! take. Outside a poll (synchronous handlers, `main`, recovery off) nothing is installed
//! and every effect is made.

use crate::actor::awaits::{Awaited, AwaitedValue, ResultPayload};
use crate::actor_id::ActorId;
use crate::payload::Payload;
use crate::recovery::suspension::{Effect, ReplayShort, Suspension};
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};

/// A suspended handler's record, its states, messages and results wire-encoded.
pub(crate) type Record = Suspension<Payload>;

/// What the actor had before the handler started, besides its state: what a
/// re-execution's asks, spawns and timers count from.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Before {
    /// Asks made so far to each actor (the last key).
    pub(crate) asked: Vec<(ActorId, u64)>,
    /// Children spawned so far.
    pub(crate) children: u64,
    /// Timers armed so far.
    pub(crate) timers: u64,
}

/// A suspended handler as a checkpoint keeps it (the actor's image holds its state from
/// before the handler as its state).
#[derive(Serialize, Deserialize)]
pub(crate) struct SuspendedImage {
    /// The record, its `before` empty (the image's state is it).
    pub(crate) record: Record,
    /// The counters from before the handler.
    pub(crate) before: Before,
}

/// The record of one suspended handler with what the cell needs around it.
pub(crate) struct Recorded {
    pub(crate) record: Record,
    pub(crate) before: Before,
    /// Spawns and timer arms this execution has made or skipped.
    spawned: u64,
    armed: u64,
    /// A restore's re-execution that has not handed back every recorded result yet.
    pub(crate) reexecuting: bool,
    /// Results handed back from the record and not taken yet: their taking is not
    /// recorded again.
    handed: Vec<(ActorId, u64)>,
}

impl Recorded {
    /// The record of a handler that starts now, live.
    pub(crate) fn live(before_state: Payload, message: Payload, before: Before) -> Self {
        Recorded {
            record: Suspension::new(before_state, message),
            before,
            spawned: 0,
            armed: 0,
            reexecuting: false,
            handed: Vec::new(),
        }
    }

    /// A record read from a checkpoint, to re-execute (`state` is the image's state).
    pub(crate) fn restored(image: SuspendedImage, state: Payload) -> Self {
        let mut record = image.record.rewound();
        record.before = state;
        Recorded {
            record,
            before: image.before,
            spawned: 0,
            armed: 0,
            reexecuting: true,
            handed: Vec::new(),
        }
    }

    /// The record as a checkpoint keeps it.
    pub(crate) fn image(&self) -> SuspendedImage {
        let mut record = self.record.clone();
        record.before = Payload::default();
        SuspendedImage {
            record,
            before: self.before.clone(),
        }
    }

    /// The next recorded result a re-execution hands back, decoded; `Err` if the record
    /// holds one that does not decode.
    pub(crate) fn next_replayed(&mut self) -> Option<Result<Awaited, String>> {
        let (_, bytes) = self.record.next_replayed()?;
        let result = decode_result(bytes);
        if let Ok(r) = &result {
            self.handed.push((r.from, r.key));
        }
        Some(result)
    }

    /// Whether recorded results are left to hand back.
    pub(crate) fn replaying(&self) -> bool {
        self.record.replaying()
    }

    /// The re-execution has handed back every result: whether it made everything again.
    pub(crate) fn finish_reexecution(&mut self) -> Result<(), ReplayShort> {
        self.reexecuting = false;
        self.record.check_replayed()
    }
}

thread_local! {
    /// Whether a record is installed: the one check every send and reply makes.
    static INSTALLED: Cell<bool> = const { Cell::new(false) };
    /// The record of the handler being polled on this thread, if recovery keeps one.
    static POLLING: RefCell<Option<Box<Recorded>>> = const { RefCell::new(None) };
    /// A skipped effect's message is being dropped: its reply slots answer nothing.
    static DROPPING_SKIPPED: Cell<bool> = const { Cell::new(false) };
    /// An effect is being made: what it does in turn (a reply delivered as a tell, the
    /// slot of a refused message dropped) is part of it, not an effect of its own.
    static MAKING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `poll` (one poll of a suspended handler's future) with its record installed.
pub(crate) fn polling<T>(record: &mut Option<Box<Recorded>>, poll: impl FnOnce() -> T) -> T {
    struct Uninstall<'a>(&'a mut Option<Box<Recorded>>);
    impl Drop for Uninstall<'_> {
        fn drop(&mut self) {
            INSTALLED.with(|i| i.set(false));
            *self.0 = POLLING.with(|p| p.borrow_mut().take());
        }
    }
    let Some(r) = record.take() else {
        return poll();
    };
    POLLING.with(|p| *p.borrow_mut() = Some(r));
    INSTALLED.with(|i| i.set(true));
    let _uninstall = Uninstall(record);
    poll()
}

fn with_record<T>(f: impl FnOnce(&mut Recorded) -> T) -> Option<T> {
    if !INSTALLED.with(Cell::get) {
        return None;
    }
    POLLING.with(|p| p.borrow_mut().as_mut().map(|r| f(r)))
}

/// The handler being polled makes an effect: whether to make it or skip it (a
/// re-execution, and the checkpoint holds it). Inside an effect being made
/// ([`making`]), always made and not counted.
pub(crate) fn effect() -> Effect {
    if MAKING.with(Cell::get) {
        return Effect::Make;
    }
    with_record(|r| r.record.effect()).unwrap_or(Effect::Make)
}

/// Makes an effect: whatever `make` does in turn is part of it.
pub(crate) fn making<T>(make: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            MAKING.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(MAKING.with(|m| m.replace(true)));
    make()
}

/// An effect whose outcome the handler sees (a send's success or refusal): `Skip(code)`
/// with the outcome recorded the first time, during a re-execution; else `Make`, and
/// the caller makes it and records its outcome with [`outcome`].
pub(crate) enum Made {
    /// Make it, then record its outcome.
    Make,
    /// Skipped: the recorded outcome.
    Skip(u64),
}

/// The handler makes an effect whose outcome it sees (see [`Made`]).
pub(crate) fn effect_seen() -> Made {
    match effect() {
        Effect::Make => Made::Make,
        Effect::Skip => Made::Skip(value(|| 0)),
    }
}

/// Records the outcome of an effect made after [`effect_seen`] said `Make`.
pub(crate) fn outcome(code: u64) {
    if !MAKING.with(Cell::get) {
        value(|| code);
    }
}

/// Whether the effect the handler makes now is one to skip.
pub(crate) fn skips_effect() -> bool {
    effect() == Effect::Skip
}

/// Drops the message (or slot) of a skipped effect: its reply slots answer nothing, the
/// checkpoint holds what they answered.
pub(crate) fn drop_skipped<T>(value: T) {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DROPPING_SKIPPED.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(DROPPING_SKIPPED.with(|d| d.replace(true)));
    drop(value);
}

/// Whether the reply slot being dropped belongs to a skipped effect.
pub(crate) fn dropping_skipped() -> bool {
    DROPPING_SKIPPED.with(|d| d.get())
}

/// A nondeterministic value the handler reads: the recorded one during a re-execution,
/// else `fresh()`, recorded.
pub(crate) fn value(fresh: impl FnOnce() -> u64) -> u64 {
    let mut fresh = Some(fresh);
    let recorded = with_record(|r| {
        let f = &mut fresh;
        r.record.value(|| f.take().map_or(0, |f| f()))
    });
    match (recorded, fresh) {
        (Some(v), _) => v,
        (None, Some(f)) => f(),
        (None, None) => 0,
    }
}

/// An effect whose outcome the handler reads (a timer cancelled: whether it had been
/// handled): skipped during a re-execution with the recorded outcome, else made, its
/// outcome recorded.
pub(crate) fn effect_read(make: impl FnOnce() -> u64) -> u64 {
    match effect() {
        Effect::Skip => value(|| 0),
        Effect::Make => {
            let out = make();
            value(|| out)
        }
    }
}

/// The handler spawns a child: `Some(number)` of the child a skipped spawn made
/// before the checkpoint, `None` to spawn it.
pub(crate) fn spawn_skipped() -> Option<u64> {
    with_record(|r| {
        let n = r.before.children + r.spawned;
        r.spawned += 1;
        (r.record.effect() == Effect::Skip).then_some(n)
    })
    .flatten()
}

/// The handler arms a timer: `Some(arm number)` of the timer a skipped arm armed before
/// the checkpoint, `None` to arm it.
pub(crate) fn arm_skipped() -> Option<u64> {
    with_record(|r| {
        r.armed += 1;
        let seq = r.before.timers + r.armed;
        (r.record.effect() == Effect::Skip).then_some(seq)
    })
    .flatten()
}

/// An await took its result: recorded, unless a re-execution handed it back from the
/// record.
pub(crate) fn took(from: ActorId, key: u64, value: &AwaitedValue) {
    with_record(|r| {
        if let Some(i) = r.handed.iter().position(|h| *h == (from, key)) {
            r.handed.swap_remove(i);
            return;
        }
        match encode_result(from, key, value) {
            Ok(bytes) => r.record.result(key, bytes),
            Err(e) => tracing::error!(
                "the result of an await of actor {from}'s reply is not recorded: {e}"
            ),
        }
    });
}

/// A result in the wire encoding a record and an image keep.
pub(crate) fn encode_result(
    from: ActorId,
    key: u64,
    value: &AwaitedValue,
) -> Result<Payload, String> {
    let outcome = match value {
        AwaitedValue::Encoded(b) => Ok(b.clone()),
        AwaitedValue::Failed(e) => Err(e.clone()),
        AwaitedValue::Local(_) => {
            return Err("an unencoded local result cannot be kept (recovery is on)".into())
        }
    };
    let payload: ResultPayload = (from, key, outcome);
    crate::wire::encode(&payload)
        .map(Payload)
        .map_err(|e| e.to_string())
}

/// A result read back from an image.
pub(crate) fn decode_result(bytes: &[u8]) -> Result<Awaited, String> {
    let (from, key, outcome): ResultPayload =
        crate::wire::decode(bytes).map_err(|e| format!("a kept result does not decode: {e}"))?;
    Ok(Awaited {
        from,
        key,
        value: match outcome {
            Ok(b) => AwaitedValue::Encoded(b),
            Err(e) => AwaitedValue::Failed(e),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> Option<Box<Recorded>> {
        let empty = Payload::default();
        Some(Box::new(Recorded::live(
            empty.clone(),
            empty,
            Before::default(),
        )))
    }

    fn reexecution_of(recorded: Option<Box<Recorded>>) -> Option<Box<Recorded>> {
        let image = recorded.expect("a record").image();
        Some(Box::new(Recorded::restored(image, Payload::default())))
    }

    #[test]
    fn what_an_effect_does_in_turn_is_part_of_it_and_not_counted() {
        // A reply to a local asker is delivered as a tell; a refused message drops its
        // slot: one effect each, whether the slot is local (first execution) or was
        // decoded from a checkpoint (re-execution).
        let mut first = live();
        polling(&mut first, || {
            assert!(matches!(effect_seen(), Made::Make));
            making(|| {
                assert_eq!(effect(), Effect::Make);
                assert!(matches!(effect_seen(), Made::Make));
                outcome(7);
            });
            outcome(0);
        });
        assert_eq!(first.as_ref().map(|r| r.record.effects()), Some(1));
        let mut again = reexecution_of(first);
        polling(&mut again, || {
            assert!(matches!(effect_seen(), Made::Skip(0)), "the outer outcome");
        });
        assert!(again
            .map(|mut r| r.finish_reexecution())
            .expect("a record")
            .is_ok());
    }

    #[test]
    fn a_skipped_send_gets_the_outcome_the_first_one_had() {
        let mut first = live();
        polling(&mut first, || {
            assert!(matches!(effect_seen(), Made::Make));
            outcome(1); // refused: the actor had stopped
            assert!(matches!(effect_seen(), Made::Make));
            outcome(0);
        });
        let mut again = reexecution_of(first);
        polling(&mut again, || {
            assert!(matches!(effect_seen(), Made::Skip(1)));
            assert!(matches!(effect_seen(), Made::Skip(0)));
            assert!(matches!(effect_seen(), Made::Make), "past the record: live");
        });
    }

    #[test]
    fn outside_a_poll_every_effect_is_made_and_nothing_recorded() {
        assert!(matches!(effect_seen(), Made::Make));
        outcome(3);
        assert_eq!(value(|| 9), 9);
        assert_eq!(spawn_skipped(), None);
        assert_eq!(arm_skipped(), None);
    }
}
