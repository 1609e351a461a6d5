//! Determinants: the recorded outcomes of an order-sensitive actor's nondeterministic
//! events, and the replay script a restored set follows to reproduce them.
//!
//! An actor that declares itself order-sensitive has an *event clock*: it ticks once per
//! nondeterministic event — a delivery chosen among several channels, a mailbox poll, a
//! clock read, a random draw. A [`Determinant`] says what happened at one tick. After a
//! restore, the actor re-executes from its checkpoint; at every tick the script either
//! forces the original outcome or, past the last logged tick, lets the actor run free
//! (after "Redesigning the message logging model", Bouteiller et al.: only
//! nondeterministic events are logged, deterministic receptions cost nothing, and runs of
//! empty polls are logged lazily as one event).

use super::ids::ChannelId;
use crate::actor_id::ActorId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What happened at one tick of an actor's event clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The message with this channel and send index was delivered (a handler ran for it,
    /// or a poll returned it).
    Delivery {
        /// Its channel.
        channel: ChannelId,
        /// Its send index on the channel.
        send_index: u64,
    },
    /// A clock read or a random draw returned this value.
    Value(u64),
    /// Every poll at ticks up to and including this one that has no determinant of its
    /// own found the mailbox empty (lazy logging of empty polls: one event for a run).
    EmptyUpTo(u64),
    /// A probe found messages waiting without taking one (which one is delivered next is
    /// a delivery event of its own).
    Waiting,
}

/// One determinant: actor, tick, outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Determinant {
    /// The order-sensitive actor.
    pub actor: ActorId,
    /// Its event clock at the event (the first event is tick 1).
    pub tick: u64,
    /// What happened.
    pub event: Event,
}

/// What a restored actor must do at its next delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayDelivery {
    /// Deliver exactly this message next; wait for it if it has not arrived.
    Forced {
        /// Its channel.
        channel: ChannelId,
        /// Its send index on the channel.
        send_index: u64,
    },
    /// No determinant covers this tick: any message may be delivered (and recorded).
    Free,
}

/// What a restored actor's poll at a tick returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayPoll {
    /// The original poll returned this message: wait for it, then return it.
    Forced {
        /// Its channel.
        channel: ChannelId,
        /// Its send index on the channel.
        send_index: u64,
    },
    /// The original poll found the mailbox empty.
    Empty,
    /// The original probe found messages waiting (and took none).
    Waiting,
    /// Not covered: poll for real (and record).
    Free,
}

/// The re-execution asked for an event of another kind than the one logged at that tick:
/// the actor is not deterministic apart from its declared events (it reads a clock or a
/// random source without going through its context, or iterates a `HashMap`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("actor {actor} diverged from its logged events at tick {tick}: asked for {asked}, the log has {logged:?}")]
pub struct Diverged {
    /// The actor.
    pub actor: ActorId,
    /// The tick.
    pub tick: u64,
    /// What the re-execution asked for.
    pub asked: &'static str,
    /// What the log holds there.
    pub logged: Event,
}

#[derive(Clone, Debug, Default)]
struct ActorScript {
    events: BTreeMap<u64, Event>,
    /// Highest tick covered (by an event or by an empty-poll run).
    horizon: u64,
}

/// The logged events of a restored set, per actor, that its re-execution must reproduce.
#[derive(Clone, Debug, Default)]
pub struct ReplayScript {
    actors: BTreeMap<ActorId, ActorScript>,
}

impl ReplayScript {
    /// The script made of these determinants.
    pub fn new<'a>(dets: impl IntoIterator<Item = &'a Determinant>) -> Self {
        let mut actors: BTreeMap<ActorId, ActorScript> = BTreeMap::new();
        for d in dets {
            let s = actors.entry(d.actor).or_default();
            let covered = match d.event {
                Event::EmptyUpTo(last) => last.max(d.tick),
                _ => {
                    s.events.insert(d.tick, d.event);
                    d.tick
                }
            };
            s.horizon = s.horizon.max(covered);
        }
        ReplayScript { actors }
    }

    /// Whether the script holds no determinant at all.
    pub fn is_empty(&self) -> bool {
        self.actors.is_empty()
    }

    /// The highest tick the log covers for `actor` (0 if none): past it the actor runs free.
    pub fn horizon(&self, actor: ActorId) -> u64 {
        self.actors.get(&actor).map_or(0, |s| s.horizon)
    }

    fn logged(&self, actor: ActorId, tick: u64) -> Option<(Option<Event>, u64)> {
        let s = self.actors.get(&actor)?;
        (tick <= s.horizon).then(|| (s.events.get(&tick).copied(), s.horizon))
    }

    /// The delivery `actor` must make at `tick`.
    pub fn delivery(&self, actor: ActorId, tick: u64) -> Result<ReplayDelivery, Diverged> {
        match self.logged(actor, tick) {
            None => Ok(ReplayDelivery::Free),
            Some((
                Some(Event::Delivery {
                    channel,
                    send_index,
                }),
                _,
            )) => Ok(ReplayDelivery::Forced {
                channel,
                send_index,
            }),
            Some((other, _)) => Err(Diverged {
                actor,
                tick,
                asked: "a delivery",
                logged: other.unwrap_or(Event::EmptyUpTo(tick)),
            }),
        }
    }

    /// The value a clock read or random draw of `actor` at `tick` returns, or `None` past
    /// the log (read for real).
    pub fn value(&self, actor: ActorId, tick: u64) -> Result<Option<u64>, Diverged> {
        match self.logged(actor, tick) {
            None => Ok(None),
            Some((Some(Event::Value(v)), _)) => Ok(Some(v)),
            Some((other, _)) => Err(Diverged {
                actor,
                tick,
                asked: "a value",
                logged: other.unwrap_or(Event::EmptyUpTo(tick)),
            }),
        }
    }

    /// What a poll of `actor` at `tick` returns.
    pub fn poll(&self, actor: ActorId, tick: u64) -> Result<ReplayPoll, Diverged> {
        match self.logged(actor, tick) {
            None => Ok(ReplayPoll::Free),
            Some((None, _)) => Ok(ReplayPoll::Empty),
            Some((
                Some(Event::Delivery {
                    channel,
                    send_index,
                }),
                _,
            )) => Ok(ReplayPoll::Forced {
                channel,
                send_index,
            }),
            Some((Some(Event::Waiting), _)) => Ok(ReplayPoll::Waiting),
            Some((Some(other), _)) => Err(Diverged {
                actor,
                tick,
                asked: "a poll",
                logged: other,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(n: u64) -> ActorId {
        ActorId::new(0, n).unwrap()
    }

    fn delivery(from: u64, i: u64) -> Event {
        Event::Delivery {
            channel: ChannelId::new(ActorId::new(1, from).unwrap(), actor(1)),
            send_index: i,
        }
    }

    #[test]
    fn logged_ticks_are_forced_and_past_the_log_the_actor_runs_free() {
        let dets = [
            Determinant {
                actor: actor(1),
                tick: 1,
                event: delivery(7, 1),
            },
            Determinant {
                actor: actor(1),
                tick: 2,
                event: Event::Value(42),
            },
        ];
        let s = ReplayScript::new(&dets);
        assert!(matches!(
            s.delivery(actor(1), 1),
            Ok(ReplayDelivery::Forced { send_index: 1, .. })
        ));
        assert_eq!(s.value(actor(1), 2), Ok(Some(42)));
        assert_eq!(s.delivery(actor(1), 3), Ok(ReplayDelivery::Free));
        assert_eq!(s.value(actor(1), 3), Ok(None));
        // Another actor has no script at all.
        assert_eq!(s.delivery(actor(2), 1), Ok(ReplayDelivery::Free));
    }

    #[test]
    fn a_run_of_empty_polls_is_one_event_and_replays_as_empty() {
        let dets = [
            Determinant {
                actor: actor(1),
                tick: 5,
                event: Event::EmptyUpTo(9),
            },
            Determinant {
                actor: actor(1),
                tick: 10,
                event: delivery(3, 4),
            },
        ];
        let s = ReplayScript::new(&dets);
        for tick in 1..=9 {
            assert_eq!(s.poll(actor(1), tick), Ok(ReplayPoll::Empty), "tick {tick}");
        }
        assert!(matches!(
            s.poll(actor(1), 10),
            Ok(ReplayPoll::Forced { send_index: 4, .. })
        ));
        assert_eq!(s.poll(actor(1), 11), Ok(ReplayPoll::Free));
        assert_eq!(s.horizon(actor(1)), 10);
    }

    #[test]
    fn a_probe_that_found_messages_replays_as_waiting_and_empty_runs_around_it_as_empty() {
        let dets = [
            Determinant {
                actor: actor(1),
                tick: 1,
                event: Event::EmptyUpTo(2),
            },
            Determinant {
                actor: actor(1),
                tick: 3,
                event: Event::Waiting,
            },
            Determinant {
                actor: actor(1),
                tick: 4,
                event: delivery(3, 1),
            },
        ];
        let s = ReplayScript::new(&dets);
        assert_eq!(s.poll(actor(1), 2), Ok(ReplayPoll::Empty));
        assert_eq!(s.poll(actor(1), 3), Ok(ReplayPoll::Waiting));
        assert!(
            s.delivery(actor(1), 3).is_err(),
            "a probe is not a delivery"
        );
        assert!(matches!(
            s.delivery(actor(1), 4),
            Ok(ReplayDelivery::Forced { send_index: 1, .. })
        ));
    }

    #[test]
    fn asking_for_another_kind_of_event_than_logged_is_a_divergence() {
        let dets = [Determinant {
            actor: actor(1),
            tick: 1,
            event: Event::Value(5),
        }];
        let s = ReplayScript::new(&dets);
        let err = s.delivery(actor(1), 1).unwrap_err();
        assert_eq!(err.logged, Event::Value(5));
        assert!(err.to_string().contains("diverged"));
    }
}
