//! The send gate of pessimistic event logging: which messages leaving a set must wait for
//! the set's determinants to be stable (held by every event logger), and which may leave
//! at once.
//!
//! A message may leave only once every determinant its sender's state depends on is
//! stable; otherwise a failure could lose the determinant while a survivor keeps the
//! message, and the replay could not regenerate it (an orphan). What a sender depends on
//! is one of:
//!
//! - [`Dependence::Set`]: every determinant the set recorded so far (and its noted
//!   empty-poll runs, which [`EventLogging::before_send`] turns into determinants). The
//!   rule for senders that are not actors (the app's `main`), for an actor that noted an
//!   empty poll (logged lazily, so it has no number yet) or replayed a logged event, and
//!   for an actor that received a message from one of those inside the set.
//! - [`Dependence::Below`]`(n)`: only determinants numbered below `n`: an actor whose
//!   own events (deliveries of an order-sensitive actor, clock reads, random numbers)
//!   or whose messages from actors of the set depended on determinants up to `n - 1`.
//!   `Below(0)`: nothing (an actor fed only by messages from other sets, which left their
//!   sets stable), so its messages never wait for its neighbours' determinants.
//!
//! Order: a message from an actor never overtakes a held message from the same actor
//! (per-channel FIFO on the wire); senders that are not actors and protocol frames
//! (resends, control) wait behind every held frame, as before this gate tracked actors.
//! Held frames leave in the order they were held.
//!
//! The driver keeps each actor's dependence (raised when an actor of the set pushes a
//! message into its mailbox, see `docs/recovery.md`); the runtime and the recovery
//! simulator drive this same gate.

use super::event_logging::EventLogging;
use super::ids::SetId;
use crate::actor_id::ActorId;
use std::collections::{HashMap, VecDeque};

/// What a message leaving the set depends on among the set's determinants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dependence {
    /// Every determinant the set recorded so far.
    Set,
    /// Only the determinants numbered below this.
    Below(u64),
}

impl Dependence {
    /// The encoding of [`Dependence::Set`] in a `u64` (an actor's dependence kept in an
    /// atomic): numbers below it are [`Dependence::Below`].
    pub const SET_ENCODED: u64 = u64::MAX;

    /// Decodes a dependence kept as a `u64` (see [`Self::SET_ENCODED`]).
    pub fn from_encoded(v: u64) -> Self {
        if v == Self::SET_ENCODED {
            Dependence::Set
        } else {
            Dependence::Below(v)
        }
    }

    /// The `u64` encoding (see [`Self::SET_ENCODED`]).
    pub fn encoded(self) -> u64 {
        match self {
            Dependence::Set => Self::SET_ENCODED,
            Dependence::Below(n) => n.min(Self::SET_ENCODED - 1),
        }
    }

    /// What a receiver depends on after a message from a sender with `self` (the larger
    /// of both).
    pub fn join(self, other: Dependence) -> Dependence {
        match (self, other) {
            (Dependence::Set, _) | (_, Dependence::Set) => Dependence::Set,
            (Dependence::Below(a), Dependence::Below(b)) => Dependence::Below(a.max(b)),
        }
    }

    /// The determinant count a message must wait for: for [`Dependence::Set`] everything
    /// recorded so far (noted empty polls become determinants now).
    pub fn needed(self, logging: &mut EventLogging) -> u64 {
        match self {
            Dependence::Set => logging.before_send(),
            Dependence::Below(n) => n,
        }
    }
}

/// Who sends a frame through the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateSender {
    /// An actor whose dependence was resolved to a number: it waits only for its own
    /// held frames and for that number.
    Tracked(ActorId),
    /// A sender that is not an actor (`main`, the whole-node rule of
    /// `LAZARUS_SEND_GATE=set`) or a protocol frame: waits behind every held frame.
    Set,
}

/// A frame waiting for stable determinants (or behind such a frame).
#[derive(Debug)]
struct Held<F> {
    needed: u64,
    to: SetId,
    from: GateSender,
    frame: F,
}

/// Frames to other sets held until the determinants they depend on are stable.
#[derive(Debug)]
pub struct SendGate<F> {
    held: VecDeque<Held<F>>,
    /// Held frames per actor sender (so its next frame does not overtake them).
    held_from: HashMap<ActorId, usize>,
}

impl<F> Default for SendGate<F> {
    fn default() -> Self {
        SendGate {
            held: VecDeque::new(),
            held_from: HashMap::new(),
        }
    }
}

impl<F> SendGate<F> {
    /// An empty gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// A frame from `from` to set `to` that depends on determinants below `needed`, with
    /// determinants below `stable` held by every logger: returned if it may leave now,
    /// else held (and `None`).
    pub fn send(
        &mut self,
        stable: u64,
        needed: u64,
        from: GateSender,
        to: SetId,
        frame: F,
    ) -> Option<F> {
        let behind = match from {
            GateSender::Set => !self.held.is_empty(),
            GateSender::Tracked(a) => self.held_from.contains_key(&a),
        };
        if !behind && needed <= stable {
            return Some(frame);
        }
        if let GateSender::Tracked(a) = from {
            *self.held_from.entry(a).or_insert(0) += 1;
        }
        self.held.push_back(Held {
            needed,
            to,
            from,
            frame,
        });
        None
    }

    /// The held frames that may leave now that determinants below `stable` are held by
    /// every logger, in the order they were held.
    pub fn release(&mut self, stable: u64) -> Vec<(SetId, F)> {
        let mut out = Vec::new();
        while self.held.front().is_some_and(|h| h.needed <= stable) {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            if let GateSender::Tracked(a) = h.from {
                if let Some(n) = self.held_from.get_mut(&a) {
                    *n -= 1;
                    if *n == 0 {
                        self.held_from.remove(&a);
                    }
                }
            }
            out.push((h.to, h.frame));
        }
        out
    }

    /// Frames held now.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(seq: u64) -> ActorId {
        ActorId::new(0, seq).expect("a valid id")
    }

    #[test]
    fn a_deterministic_actor_that_depends_on_nothing_passes_a_held_set_wide_frame() {
        let mut gate = SendGate::new();
        // An order-sensitive actor's reply waits for determinant 0.
        assert_eq!(gate.send(0, 1, GateSender::Set, SetId(1), "ordered"), None);
        assert_eq!(
            gate.send(0, 0, GateSender::Tracked(actor(2)), SetId(1), "plain"),
            Some("plain")
        );
        assert_eq!(gate.release(1), vec![(SetId(1), "ordered")]);
    }

    #[test]
    fn an_actor_that_depends_on_an_unstable_determinant_waits_for_it() {
        let mut gate = SendGate::new();
        assert_eq!(
            gate.send(3, 5, GateSender::Tracked(actor(2)), SetId(1), "a"),
            None
        );
        assert!(gate.release(4).is_empty());
        assert_eq!(gate.release(5), vec![(SetId(1), "a")]);
    }

    #[test]
    fn an_actors_frame_never_overtakes_its_own_held_frame() {
        let mut gate = SendGate::new();
        assert_eq!(
            gate.send(0, 1, GateSender::Tracked(actor(2)), SetId(1), "first"),
            None
        );
        // Depends on nothing more, but its channel is FIFO.
        assert_eq!(
            gate.send(0, 0, GateSender::Tracked(actor(2)), SetId(2), "second"),
            None
        );
        // Another actor is not held up.
        assert_eq!(
            gate.send(0, 0, GateSender::Tracked(actor(3)), SetId(1), "other"),
            Some("other")
        );
        assert_eq!(
            gate.release(1),
            vec![(SetId(1), "first"), (SetId(2), "second")]
        );
        // Nothing of actor 2 is held any more.
        assert_eq!(
            gate.send(1, 0, GateSender::Tracked(actor(2)), SetId(1), "third"),
            Some("third")
        );
    }

    #[test]
    fn set_wide_senders_and_protocol_frames_wait_behind_every_held_frame() {
        let mut gate = SendGate::new();
        assert_eq!(
            gate.send(0, 1, GateSender::Tracked(actor(2)), SetId(1), "a"),
            None
        );
        assert_eq!(gate.send(0, 0, GateSender::Set, SetId(2), "resend"), None);
        assert_eq!(gate.len(), 2);
        assert_eq!(gate.release(1), vec![(SetId(1), "a"), (SetId(2), "resend")]);
        assert!(gate.is_empty());
    }

    #[test]
    fn a_dependence_on_the_whole_set_absorbs_any_number() {
        assert_eq!(
            Dependence::Below(3).join(Dependence::Below(7)),
            Dependence::Below(7)
        );
        assert_eq!(Dependence::Below(3).join(Dependence::Set), Dependence::Set);
        for d in [Dependence::Set, Dependence::Below(0), Dependence::Below(42)] {
            assert_eq!(Dependence::from_encoded(d.encoded()), d);
        }
    }
}
