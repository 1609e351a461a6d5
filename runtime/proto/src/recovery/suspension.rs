//! An actor's suspended async handler, as recovery keeps it.
//!
//! An async handler awaits results (the replies to its asks, its sleeps) and takes no
//! other message meanwhile. Its future cannot go into a checkpoint, so a checkpoint taken
//! while it is suspended keeps, instead of the actor's state, a [`Suspension`]: the state
//! the actor had before the handler started, the message that started it, how many
//! effects the handler has made (sends, asks, timer operations, spawns), the results its
//! awaits received in the order they came, and the nondeterministic values it read. A
//! restore puts the state back and runs the handler again from the top: the first
//! `effects` effects are skipped (the checkpoint already holds them: logged sends, armed
//! timers, spawned children), the recorded results are handed back one at a time in their
//! order, each followed by a poll, and the values are read back in order. Once the record
//! is used up the handler is where it was at the checkpoint, and goes on live: its
//! pending awaits are answered by messages like any other, resent by the askee's log if
//! it answered after the checkpoint, made by the askee if it had not.
//!
//! This needs the handler to be deterministic given its state, its message, its results
//! in order and its values: the contract every handler already keeps with recovery on.
//! A re-execution that makes fewer effects, awaits fewer results or reads fewer values
//! than its record did breaks that contract, and [`Suspension::check_replayed`] says so.
//!
//! The same rule runs in the actor cell and in the simulator.

use serde::{Deserialize, Serialize};

/// What happens to an effect a handler makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Make it: the handler is live.
    Make,
    /// Skip it: a re-execution, and the restored checkpoint already holds it.
    Skip,
}

/// The record of one suspended handler (see the module documentation). `P` is the
/// driver's encoding of a state, a message or a result.
///
/// Serialized, it is what a checkpoint holds; deserialized, it is a record to re-execute
/// (its positions start at zero).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension<P> {
    /// The actor's state when the handler started.
    pub before: P,
    /// The message that started the handler.
    pub message: P,
    /// Effects the handler made, in all.
    effects: u64,
    /// Results its awaits received, in the order they came: the await's number and the
    /// result.
    results: Vec<(u64, P)>,
    /// Nondeterministic values it read, in order.
    values: Vec<u64>,
    /// Positions of a re-execution in the record (all at the end while live).
    #[serde(skip)]
    at: Positions,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Positions {
    effects: u64,
    results: usize,
    values: usize,
}

/// A re-execution that did not make again what its record holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a re-executed async handler made {effects} of {recorded_effects} effects, took \
     {results} of {recorded_results} results and read {values} of {recorded_values} values \
     its record holds: it is not deterministic given its state, message and results"
)]
pub struct ReplayShort {
    /// Effects made again.
    pub effects: u64,
    /// Effects the record holds.
    pub recorded_effects: u64,
    /// Results taken again.
    pub results: usize,
    /// Results the record holds.
    pub recorded_results: usize,
    /// Values read again.
    pub values: usize,
    /// Values the record holds.
    pub recorded_values: usize,
}

impl<P> Suspension<P> {
    /// The record of a handler that starts now, live, from state `before` with `message`.
    pub fn new(before: P, message: P) -> Self {
        Suspension {
            before,
            message,
            effects: 0,
            results: Vec::new(),
            values: Vec::new(),
            at: Positions::default(),
        }
    }

    /// The record as a restore reads it from a checkpoint: every position back at the
    /// start, ready for a re-execution. (A record deserialized from a checkpoint is
    /// already there.)
    pub fn rewound(mut self) -> Self {
        self.at = Positions::default();
        self
    }

    /// The handler makes an effect: skipped while a re-execution is within the record,
    /// else made and counted.
    pub fn effect(&mut self) -> Effect {
        self.at.effects += 1;
        if self.at.effects <= self.effects {
            return Effect::Skip;
        }
        self.effects = self.at.effects;
        Effect::Make
    }

    /// The handler reads a nondeterministic value: the recorded one while a re-execution
    /// is within the record, else `fresh()`, recorded.
    pub fn value(&mut self, fresh: impl FnOnce() -> u64) -> u64 {
        if let Some(&v) = self.values.get(self.at.values) {
            self.at.values += 1;
            return v;
        }
        let v = fresh();
        self.values.push(v);
        self.at.values = self.values.len();
        v
    }

    /// A live result came for await `number`: recorded. (During a re-execution the
    /// driver hands the recorded ones back first: [`Suspension::next_replayed`].)
    pub fn result(&mut self, number: u64, result: P) {
        self.results.push((number, result));
        self.at.results = self.results.len();
    }

    /// The next recorded result for a re-execution to hand to its handler, in the order
    /// they came; `None` once all have been.
    pub fn next_replayed(&mut self) -> Option<(u64, &P)> {
        let (number, result) = self.results.get(self.at.results)?;
        self.at.results += 1;
        Some((*number, result))
    }

    /// Whether a re-execution has recorded results left to hand back.
    pub fn replaying(&self) -> bool {
        self.at.results < self.results.len()
    }

    /// After a re-execution has handed back every recorded result: whether it made every
    /// recorded effect and read every recorded value again (the handler is then where it
    /// was when the record was taken).
    pub fn check_replayed(&self) -> Result<(), ReplayShort> {
        let at = self.at;
        if at.effects >= self.effects
            && at.results >= self.results.len()
            && at.values >= self.values.len()
        {
            return Ok(());
        }
        Err(ReplayShort {
            effects: at.effects.min(self.effects),
            recorded_effects: self.effects,
            results: at.results,
            recorded_results: self.results.len(),
            values: at.values,
            recorded_values: self.values.len(),
        })
    }

    /// Effects the handler has made in all.
    pub fn effects(&self) -> u64 {
        self.effects
    }

    /// Results recorded.
    pub fn results(&self) -> usize {
        self.results.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handler in three steps, as its future would run: it sends its message, awaits;
    /// sends the first result plus a drawn value, awaits; sends the sum of both results.
    #[derive(Default)]
    struct Handler {
        r1: u64,
        sent: Vec<u64>,
    }

    impl Handler {
        fn send(&mut self, s: &mut Suspension<u64>, v: u64) {
            if s.effect() == Effect::Make {
                self.sent.push(v);
            }
        }
        fn start(&mut self, s: &mut Suspension<u64>) {
            self.send(s, s.message);
        }
        fn first(&mut self, s: &mut Suspension<u64>, r1: u64, draw: u64) {
            self.r1 = r1;
            let d = s.value(|| draw);
            self.send(s, r1 + d);
        }
        fn second(&mut self, s: &mut Suspension<u64>, r2: u64) {
            self.send(s, self.r1 + r2);
        }
    }

    fn restored(live: &Suspension<u64>) -> Suspension<u64> {
        postcard::from_bytes(&postcard::to_allocvec(live).unwrap()).unwrap()
    }

    #[test]
    fn a_re_execution_skips_the_recorded_effects_and_reads_the_recorded_values() {
        let mut live = Suspension::new(0u64, 7u64);
        let mut h = Handler::default();
        h.start(&mut live);
        live.result(0, 5);
        h.first(&mut live, 5, 100);
        assert_eq!(h.sent, vec![7, 105]);

        // A checkpoint now keeps the record; a restore re-executes it from the top.
        let mut again = restored(&live);
        let mut h2 = Handler::default();
        h2.start(&mut again);
        let (n, &r) = again.next_replayed().unwrap();
        assert_eq!((n, r), (0, 5));
        h2.first(&mut again, r, 999);
        assert!(again.next_replayed().is_none());
        assert_eq!(again.check_replayed(), Ok(()));
        assert!(h2.sent.is_empty(), "the checkpoint holds every effect made");

        // Live again: the second result makes the last send, once, with the recorded
        // draw in it (105 - 5 = 100, not 999).
        again.result(1, 6);
        h2.second(&mut again, 6);
        assert_eq!(h2.sent, vec![11]);
        assert_eq!(again.effects(), 3);
    }

    #[test]
    fn a_re_execution_that_makes_fewer_effects_than_recorded_is_reported() {
        let mut live = Suspension::new(0u64, 1u64);
        assert_eq!(live.effect(), Effect::Make);
        assert_eq!(live.effect(), Effect::Make);
        live.result(0, 3);
        let image = postcard::to_allocvec(&live).unwrap();
        let mut restored: Suspension<u64> = postcard::from_bytes(&image).unwrap();
        assert_eq!(restored.effect(), Effect::Skip);
        assert!(restored.next_replayed().is_some());
        let short = restored.check_replayed().unwrap_err();
        assert_eq!((short.effects, short.recorded_effects), (1, 2));
    }

    #[test]
    fn past_the_record_effects_are_made_and_values_drawn_fresh() {
        let image = postcard::to_allocvec(&Suspension::new(0u64, 0u64)).unwrap();
        let mut s: Suspension<u64> = postcard::from_bytes(&image).unwrap();
        assert_eq!(s.effect(), Effect::Make);
        assert_eq!(s.value(|| 42), 42);
        assert_eq!(s.effects(), 1);
        let again: Suspension<u64> =
            postcard::from_bytes(&postcard::to_allocvec(&s).unwrap()).unwrap();
        let mut again = again;
        assert_eq!(again.effect(), Effect::Skip);
        assert_eq!(again.value(|| 7), 42, "the recorded value, not a fresh one");
    }
}
