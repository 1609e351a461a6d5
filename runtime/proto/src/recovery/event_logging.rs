//! Pessimistic event logging of determinants (sans-IO): a set's determinants are kept by
//! event loggers on other sets before any message that may depend on them leaves the set.
//!
//! Roles, all in one state machine per set ([`EventLogging`]):
//! - **Producer.** Order-sensitive actors record [`Determinant`]s (numbered per set:
//!   0, 1, 2, ...). They are shipped in batches to the set's loggers (the next `k` sets,
//!   [`loggers_of`]), which acknowledge what they hold. A message to another set may leave
//!   only once every determinant recorded before it is acknowledged by every logger
//!   ([`EventLogging::before_send`] / [`EventLogging::stable_below`]); messages inside the
//!   set never wait, since the set fails as a whole (Theorem 1 of the correlated-set paper:
//!   events inside a set must be logged, payloads need not be).
//! - **Logger.** Keeps other sets' determinants in an [`EventStore`] that survives its own
//!   failure (the driver makes it durable: a file written before the acknowledgement, a
//!   process kill does not lose it), releases them when the producer's checkpoint covers
//!   them, serves them back when the producer restarts.
//! - **Restored producer.** Fetches its determinants from all its loggers, keeps the
//!   longest gap-free run after its checkpoint (anything after a gap was never
//!   acknowledged by all loggers, so nothing outside depends on it), and replays it
//!   ([`ReplayScript`]); new determinants continue after that run, and loggers drop the
//!   void rest ([`EventMessage::Resume`]). A logger answering a fetch first drops what it
//!   holds past its own first gap: it never acknowledged that, and it may be an earlier
//!   incarnation's void rest whose `Resume` it missed.
//!
//! Lazy empty polls: a poll that finds nothing is only noted; a run of them becomes one
//! determinant when the actor's set next sends to another set or records an event of
//! another actor (which may depend on the poll through a message inside the set: a
//! restored set that replays that event must also replay the poll's answer), and a
//! successful event of the same actor makes it unnecessary (the script treats every
//! uncovered tick below a logged one as an empty poll).

use super::determinant::{Determinant, Event, ReplayScript};
use super::error::ProtocolError;
use super::ids::{Incarnation, SetId};
use crate::actor_id::ActorId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Wire size of one determinant, for statistics (postcard varints make it a bound).
const DETERMINANT_BYTES: u64 = 40;

/// What event logging sends between sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventMessage {
    /// Producer → logger: determinants to keep.
    Log {
        /// The producer's incarnation.
        incarnation: Incarnation,
        /// `(sequence number, determinant)`, ascending.
        dets: Vec<(u64, Determinant)>,
    },
    /// Logger → producer: every determinant numbered below `held_below` is kept durably.
    Ack {
        /// The producer incarnation the logger knows (acks for an older one are stale).
        producer_incarnation: Incarnation,
        /// All sequence numbers below this are held.
        held_below: u64,
    },
    /// Producer → logger: a committed checkpoint covers everything below `below`.
    Release {
        /// The producer's incarnation.
        incarnation: Incarnation,
        /// Determinants below this may be dropped.
        below: u64,
    },
    /// Restored producer → logger: send back the gap-free run held from `from` on.
    Fetch {
        /// The restored producer's incarnation.
        incarnation: Incarnation,
        /// The restored checkpoint covers everything below this.
        from: u64,
    },
    /// Logger → restored producer: what it holds, in parts of at most
    /// [`MAX_DETS_PER_MESSAGE`] determinants.
    Stored {
        /// The incarnation whose fetch this answers.
        to_incarnation: Incarnation,
        /// `(sequence number, determinant)`, ascending.
        dets: Vec<(u64, Determinant)>,
        /// Its position in the answer, from 0: a part that does not follow the one
        /// before means a part was lost in between (or the first one was).
        part: u32,
        /// Whether this is the answer's last part.
        complete: bool,
    },
    /// Restored producer → logger: sequence numbers from `from` on are void (they were
    /// never stable); new determinants will reuse them.
    Resume {
        /// The producer's incarnation.
        incarnation: Incarnation,
        /// The first void sequence number.
        from: u64,
    },
    /// A restarted set → every set: batches in flight to it were lost.
    Restarted {
        /// Its new incarnation.
        incarnation: Incarnation,
    },
}

impl EventMessage {
    /// Short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            EventMessage::Log { .. } => "log",
            EventMessage::Ack { .. } => "ack",
            EventMessage::Release { .. } => "release",
            EventMessage::Fetch { .. } => "fetch",
            EventMessage::Stored { .. } => "stored",
            EventMessage::Resume { .. } => "resume",
            EventMessage::Restarted { .. } => "restarted",
        }
    }
}

/// The sets that keep `set`'s determinants: the next `k` sets after it, wrapping around
/// (fewer if the cluster is smaller).
pub fn loggers_of(set: SetId, sets: u16, k: u16) -> Vec<SetId> {
    let k = k.min(sets.saturating_sub(1));
    (1..=k)
        .map(|i| SetId(((u32::from(set.0) + u32::from(i)) % u32::from(sets)) as u16))
        .collect()
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    incarnation: Incarnation,
    /// Everything below was released or is void.
    base: u64,
    /// Held determinants by sequence number, with the producer incarnation that logged
    /// each (a `Resume` voids only what earlier incarnations logged).
    dets: BTreeMap<u64, (Determinant, Incarnation)>,
}

impl Kept {
    fn held_below(&self) -> u64 {
        // Usually the run is gap-free: check the last key before walking.
        let n = self.dets.len() as u64;
        // Sequence numbers come from the network: near `u64::MAX` the sums saturate
        // rather than overflow (such a run is never acknowledged past its gap anyway).
        match self.dets.last_key_value() {
            None => self.base,
            Some((&last, _))
                if last
                    .checked_add(1)
                    .is_some_and(|e| Some(e) == self.base.checked_add(n)) =>
            {
                last + 1
            }
            _ => {
                let mut next = self.base;
                for &seq in self.dets.keys() {
                    if seq != next {
                        break;
                    }
                    next = next.saturating_add(1);
                }
                next
            }
        }
    }
}

/// A logger's store of other sets' determinants. It must outlive the logger's own
/// failures: the driver persists it (see the module docs) and hands it back on restart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventStore {
    producers: BTreeMap<SetId, Kept>,
}

impl EventStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Determinants held, all producers.
    pub fn len(&self) -> usize {
        self.producers.values().map(|k| k.dets.len()).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies a logger-role message (`Log`, `Release`, `Fetch`, `Resume`) from producer
    /// `from` and returns the answer; other messages are ignored. The driver journals the
    /// messages it applies and replays them through this after a restart.
    pub fn apply(&mut self, from: SetId, msg: EventMessage) -> Option<EventMessage> {
        match msg {
            EventMessage::Log { incarnation, dets } => self.on_log(from, incarnation, dets),
            EventMessage::Release { below, .. } => {
                self.drop_below(from, below);
                None
            }
            EventMessage::Fetch {
                incarnation,
                from: below,
            } => self.on_fetch(from, incarnation, below),
            EventMessage::Resume {
                incarnation,
                from: void_from,
            } => {
                self.on_resume(from, incarnation, void_from);
                None
            }
            _ => None,
        }
    }

    fn on_log(
        &mut self,
        from: SetId,
        incarnation: Incarnation,
        dets: Vec<(u64, Determinant)>,
    ) -> Option<EventMessage> {
        let kept = self.producers.entry(from).or_default();
        if incarnation < kept.incarnation {
            return None;
        }
        kept.incarnation = incarnation;
        for (seq, d) in dets {
            if seq >= kept.base {
                kept.dets.insert(seq, (d, incarnation));
            }
        }
        Some(EventMessage::Ack {
            producer_incarnation: kept.incarnation,
            held_below: kept.held_below(),
        })
    }

    fn drop_below(&mut self, from: SetId, below: u64) {
        let kept = self.producers.entry(from).or_default();
        kept.base = kept.base.max(below);
        kept.dets = kept.dets.split_off(&kept.base);
    }

    fn on_fetch(
        &mut self,
        from: SetId,
        incarnation: Incarnation,
        below: u64,
    ) -> Option<EventMessage> {
        let kept = self.producers.entry(from).or_default();
        if incarnation < kept.incarnation {
            return None;
        }
        kept.incarnation = incarnation;
        self.drop_below(from, below);
        let kept = self.producers.entry(from).or_default();
        // Past its first gap this logger never acknowledged anything, so nothing outside
        // depends on it; but it may be a dead incarnation's void rest, whose `Resume` this
        // logger missed while down (and whose producer failed again before resending it).
        // Kept, it would mix two histories in this or a later replay (found by the
        // simulator, seed 24020: a replayed actor met a tick the merged log skipped).
        let held = kept.held_below();
        kept.dets.split_off(&held);
        let dets = kept.dets.iter().map(|(&s, &(d, _))| (s, d)).collect();
        Some(EventMessage::Stored {
            to_incarnation: incarnation,
            dets,
            part: 0,
            complete: true,
        })
    }

    fn on_resume(&mut self, from: SetId, incarnation: Incarnation, void_from: u64) {
        let kept = self.producers.entry(from).or_default();
        if incarnation < kept.incarnation {
            return;
        }
        kept.incarnation = incarnation;
        // The void rest is what earlier incarnations logged from `void_from` on. This
        // incarnation's own determinants from there on are new and must stay: a `Resume`
        // sent while this logger was down can arrive after them over an older connection
        // (found by the simulator, seeds 22718 and 38795: an acknowledged determinant
        // voided, the message that depended on it regenerated with other contents).
        kept.dets
            .retain(|&seq, (_, logged_by)| seq < void_from || *logged_by >= incarnation);
    }
}

/// The most determinants one `Log` or `Stored` message carries (at most about 32 MiB
/// encoded, at about 61 bytes for the largest determinant): a restored producer's whole run, or everything a logger holds for it, can
/// be far more than one frame between nodes may carry (64 MiB).
pub const MAX_DETS_PER_MESSAGE: usize = 1 << 19;

/// `msg` as messages of at most `limit` determinants: a `Log` as several batches, a
/// `Stored` as parts of which only the last is `complete`; any other message as it is.
fn split(msg: EventMessage, limit: usize) -> Vec<EventMessage> {
    let limit = limit.max(1);
    match msg {
        EventMessage::Log { incarnation, dets } if dets.len() > limit => dets
            .chunks(limit)
            .map(|part| EventMessage::Log {
                incarnation,
                dets: part.to_vec(),
            })
            .collect(),
        EventMessage::Stored {
            to_incarnation,
            dets,
            part: 0,
            complete: true,
        } if dets.len() > limit => {
            let parts = dets.len().div_ceil(limit);
            dets.chunks(limit)
                .enumerate()
                .map(|(i, chunk)| EventMessage::Stored {
                    to_incarnation,
                    dets: chunk.to_vec(),
                    // At most 2^32 parts: 2^51 determinants, far beyond any memory.
                    part: u32::try_from(i).unwrap_or(u32::MAX),
                    complete: i + 1 == parts,
                })
                .collect()
        }
        other => vec![other],
    }
}

/// What a set's checkpoint records of event logging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSnapshot {
    /// Determinants numbered below this are reflected in the checkpointed state.
    pub next_seq: u64,
}

/// Counters of one set's event logging.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Determinants recorded (lazy empty-poll runs count once).
    pub recorded: u64,
    /// Polls that found nothing and were only noted.
    pub empty_polls: u64,
    /// Determinants sent to loggers (each copy counts).
    pub shipped: u64,
    /// Approximate bytes of determinants sent to loggers.
    pub shipped_bytes: u64,
    /// Determinants replayed after a restore.
    pub replayed: u64,
    /// Messages ignored as stale (older incarnations).
    pub stale: u64,
    /// Fetches sent again because a logger's answer came with a part missing.
    pub refetched: u64,
}

#[derive(Clone, Debug)]
struct Fetching {
    from: u64,
    waiting: BTreeSet<SetId>,
    got: BTreeMap<u64, Determinant>,
    /// Per logger, the position its answer's next part must have: a part elsewhere
    /// means one before it was lost (its connection broke between parts).
    next_part: BTreeMap<SetId, u32>,
    /// Loggers whose current answer missed a part: asked again at its last part.
    torn: BTreeSet<SetId>,
}

/// One set's event logging: producer, logger and restored-producer roles.
#[derive(Clone, Debug)]
pub struct EventLogging {
    set: SetId,
    sets: u16,
    incarnation: Incarnation,
    loggers: Vec<SetId>,
    next_seq: u64,
    released_below: u64,
    retained: BTreeMap<u64, Determinant>,
    sent_below: BTreeMap<SetId, u64>,
    acked_below: BTreeMap<SetId, u64>,
    lazy_empty: BTreeMap<ActorId, (u64, u64)>,
    fetching: Option<Fetching>,
    script: ReplayScript,
    /// The replayed run: per sequence number, the actor and the last tick the
    /// determinant covers. A checkpoint taken mid-replay must not release determinants
    /// its actors have not reproduced yet.
    replay_ticks: BTreeMap<u64, (ActorId, u64)>,
    stats: EventStats,
    /// The most determinants per message ([`MAX_DETS_PER_MESSAGE`]).
    parts_of: usize,
}

impl EventLogging {
    /// Event logging for `set` of a cluster of `sets`, with `k` loggers per set.
    pub fn new(set: SetId, sets: u16, k: u16) -> Result<Self, ProtocolError> {
        Self::at(set, sets, k, Incarnation::ORIGINAL, 0)
    }

    fn at(
        set: SetId,
        sets: u16,
        k: u16,
        incarnation: Incarnation,
        next_seq: u64,
    ) -> Result<Self, ProtocolError> {
        if set.0 >= sets {
            return Err(ProtocolError::UnknownSet { set, n: sets });
        }
        let loggers = loggers_of(set, sets, k);
        let start = |_: &SetId| next_seq;
        Ok(EventLogging {
            set,
            sets,
            incarnation,
            sent_below: loggers.iter().map(|l| (*l, start(l))).collect(),
            acked_below: loggers.iter().map(|l| (*l, start(l))).collect(),
            loggers,
            next_seq,
            released_below: next_seq,
            retained: BTreeMap::new(),
            lazy_empty: BTreeMap::new(),
            fetching: None,
            script: ReplayScript::default(),
            replay_ticks: BTreeMap::new(),
            stats: EventStats::default(),
            parts_of: MAX_DETS_PER_MESSAGE,
        })
    }

    /// Sends at most `n` determinants per message (at least 1) instead of
    /// [`MAX_DETS_PER_MESSAGE`]: for the simulator, whose runs are too short to fill one.
    pub fn set_message_limit(&mut self, n: usize) {
        self.parts_of = n.max(1);
    }

    /// This set's loggers.
    pub fn loggers(&self) -> &[SetId] {
        &self.loggers
    }

    /// Records a nondeterministic event of an actor of this set; returns its sequence
    /// number. A successful event makes the actor's noted empty polls unnecessary.
    pub fn record(&mut self, det: Determinant) -> u64 {
        if !matches!(det.event, Event::EmptyUpTo(_)) {
            self.lazy_empty.remove(&det.actor);
            // Other actors' pending runs go first: this event may depend on their answers
            // (through messages inside the set), so no replay may have it without them.
            // Found by the simulator once actors decided from state whom to receive from.
            self.flush_empty_polls();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.retained.insert(seq, det);
        self.stats.recorded += 1;
        seq
    }

    /// Notes that `actor`'s poll at `tick` found nothing (logged lazily).
    pub fn empty_poll(&mut self, actor: ActorId, tick: u64) {
        self.stats.empty_polls += 1;
        let run = self.lazy_empty.entry(actor).or_insert((tick, tick));
        run.1 = tick;
    }

    /// Called before a message leaves the set: turns noted empty-poll runs into
    /// determinants and returns the sequence number the message must wait for — it may
    /// leave once [`stable_below`](Self::stable_below) reaches it.
    pub fn before_send(&mut self) -> u64 {
        self.flush_empty_polls();
        self.next_seq
    }

    /// Turns every noted empty-poll run into a determinant.
    fn flush_empty_polls(&mut self) {
        for (actor, (first, last)) in std::mem::take(&mut self.lazy_empty) {
            self.record(Determinant {
                actor,
                tick: first,
                event: Event::EmptyUpTo(last),
            });
        }
    }

    /// Every determinant numbered below this is held by every logger (all of them, with
    /// no loggers: nobody outside can depend on what a lone set did).
    pub fn stable_below(&self) -> u64 {
        self.acked_below
            .values()
            .copied()
            .min()
            .unwrap_or(self.next_seq)
    }

    /// Whether a message that waits for `needed` may leave now.
    pub fn is_stable(&self, needed: u64) -> bool {
        self.stable_below() >= needed
    }

    /// Batches of not yet shipped determinants, one per logger.
    pub fn poll_transmit(&mut self) -> Vec<(SetId, EventMessage)> {
        let mut out = Vec::new();
        if self.fetching.is_some() {
            return out;
        }
        for l in &self.loggers {
            let sent = self.sent_below.entry(*l).or_default();
            if *sent >= self.next_seq {
                continue;
            }
            let dets: Vec<(u64, Determinant)> = self
                .retained
                .range(*sent..self.next_seq)
                .map(|(&s, &d)| (s, d))
                .collect();
            *sent = self.next_seq;
            self.stats.shipped += dets.len() as u64;
            self.stats.shipped_bytes += dets.len() as u64 * DETERMINANT_BYTES;
            if !dets.is_empty() {
                let log = EventMessage::Log {
                    incarnation: self.incarnation,
                    dets,
                };
                out.extend(split(log, self.parts_of).into_iter().map(|m| (*l, m)));
            }
        }
        out
    }

    /// What this set's checkpoint must record, taken together with the actors' states;
    /// `clock_of` gives each order-sensitive actor's event clock in those states. During a
    /// replay, the determinants its actors have not reproduced yet stay covered.
    pub fn checkpoint(&self, clock_of: impl Fn(ActorId) -> u64) -> EventSnapshot {
        let unreproduced = self
            .replay_ticks
            .iter()
            .find(|(_, &(actor, last))| last > clock_of(actor))
            .map(|(&seq, _)| seq);
        EventSnapshot {
            next_seq: unreproduced.unwrap_or(self.next_seq).min(self.next_seq),
        }
    }

    /// The checkpoint recorded as `snap` is durable: its determinants are released here
    /// and at the loggers.
    pub fn checkpoint_committed(&mut self, snap: EventSnapshot) -> Vec<(SetId, EventMessage)> {
        if snap.next_seq <= self.released_below {
            return Vec::new();
        }
        self.released_below = snap.next_seq;
        self.retained = self.retained.split_off(&snap.next_seq);
        self.replay_ticks = self.replay_ticks.split_off(&snap.next_seq);
        for l in &self.loggers {
            for below in [self.sent_below.get_mut(l), self.acked_below.get_mut(l)]
                .into_iter()
                .flatten()
            {
                *below = (*below).max(snap.next_seq);
            }
        }
        self.loggers
            .iter()
            .map(|l| {
                (
                    *l,
                    EventMessage::Release {
                        incarnation: self.incarnation,
                        below: snap.next_seq,
                    },
                )
            })
            .collect()
    }

    /// Event logging of `set` restarted from a checkpoint recorded as `snap`, as
    /// `incarnation`; returns the messages to send (restart notices to every set, fetches
    /// to the loggers). Until every logger answered, [`is_fetching`](Self::is_fetching)
    /// holds and order-sensitive actors must not run.
    pub fn restore(
        set: SetId,
        sets: u16,
        k: u16,
        snap: EventSnapshot,
        incarnation: Incarnation,
    ) -> Result<(Self, Vec<(SetId, EventMessage)>), ProtocolError> {
        let mut me = Self::at(set, sets, k, incarnation, snap.next_seq)?;
        let mut out: Vec<(SetId, EventMessage)> = (0..sets)
            .map(SetId)
            .filter(|s| *s != set)
            .map(|s| (s, EventMessage::Restarted { incarnation }))
            .collect();
        if !me.loggers.is_empty() {
            me.fetching = Some(Fetching {
                from: snap.next_seq,
                waiting: me.loggers.iter().copied().collect(),
                got: BTreeMap::new(),
                next_part: BTreeMap::new(),
                torn: BTreeSet::new(),
            });
            out.extend(me.loggers.iter().map(|l| (*l, me.fetch_message())));
        }
        Ok((me, out))
    }

    fn fetch_message(&self) -> EventMessage {
        EventMessage::Fetch {
            incarnation: self.incarnation,
            from: self.released_below,
        }
    }

    /// Whether the restored set still waits for its loggers' determinants.
    pub fn is_fetching(&self) -> bool {
        self.fetching.is_some()
    }

    /// The loggers whose answer a restored set still waits for (empty when not fetching).
    pub fn fetching_from(&self) -> Vec<SetId> {
        self.fetching
            .as_ref()
            .map(|f| f.waiting.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The events the re-execution must reproduce (empty once nothing is left to replay
    /// or if nothing was logged).
    pub fn script(&self) -> &ReplayScript {
        &self.script
    }

    /// Counts one determinant reproduced from the script.
    pub fn note_replayed(&mut self) {
        self.stats.replayed += 1;
    }

    /// Counters.
    pub fn stats(&self) -> EventStats {
        self.stats
    }

    /// Handles an event-logging message from `from`; `store` is this set's durable
    /// logger store. Returns the messages to send.
    pub fn on_message(
        &mut self,
        from: SetId,
        msg: EventMessage,
        store: &mut EventStore,
    ) -> Result<Vec<(SetId, EventMessage)>, ProtocolError> {
        if from.0 >= self.sets {
            return Err(ProtocolError::UnknownSet {
                set: from,
                n: self.sets,
            });
        }
        if from == self.set {
            return Err(ProtocolError::SelfAddressed(from));
        }
        let mut out = Vec::new();
        match msg {
            m @ (EventMessage::Log { .. } | EventMessage::Fetch { .. }) => {
                match store.apply(from, m) {
                    Some(answer) => {
                        out.extend(split(answer, self.parts_of).into_iter().map(|a| (from, a)))
                    }
                    None => self.stats.stale += 1,
                }
            }
            m @ (EventMessage::Release { .. } | EventMessage::Resume { .. }) => {
                store.apply(from, m);
            }
            EventMessage::Ack {
                producer_incarnation,
                held_below,
            } => {
                if producer_incarnation != self.incarnation || self.fetching.is_some() {
                    self.stats.stale += 1;
                } else if let Some(acked) = self.acked_below.get_mut(&from) {
                    *acked = (*acked).max(held_below.min(self.next_seq));
                }
            }
            EventMessage::Stored {
                to_incarnation,
                dets,
                part,
                complete,
            } => {
                if to_incarnation != self.incarnation {
                    self.stats.stale += 1;
                } else if let Some(f) = &mut self.fetching {
                    let mut ask_again = false;
                    if f.waiting.contains(&from) {
                        if part == 0 {
                            // A new answer (the first, or one asked for again after a
                            // restart): what an earlier one missed no longer matters.
                            f.torn.remove(&from);
                        } else if f.next_part.get(&from).copied().unwrap_or(0) != part {
                            f.torn.insert(from);
                        }
                        f.next_part.insert(from, part.saturating_add(1));
                        for (seq, d) in dets {
                            if seq >= f.from {
                                f.got.insert(seq, d);
                            }
                        }
                        if complete {
                            f.next_part.remove(&from);
                            // What the lost part held may be what the replay needs (the
                            // other loggers' answers need not cover it): the whole answer
                            // again, which starts a new run of parts.
                            ask_again = f.torn.remove(&from);
                            if !ask_again {
                                f.waiting.remove(&from);
                            }
                        }
                    }
                    if ask_again {
                        self.stats.refetched += 1;
                        out.push((from, self.fetch_message()));
                    } else if f.waiting.is_empty() {
                        out.extend(self.finish_fetch());
                    }
                }
            }
            EventMessage::Restarted { incarnation: _ } => {
                // Whatever was in flight to it (batches, a release, a resume) was lost. Its
                // store is durable, so nothing stable is gone: release again, void what lies
                // beyond this history (only a dead incarnation can have put it there), and
                // ship again everything not known to be held.
                if self.loggers.contains(&from) && self.fetching.is_none() {
                    out.push((
                        from,
                        EventMessage::Release {
                            incarnation: self.incarnation,
                            below: self.released_below,
                        },
                    ));
                    out.push((
                        from,
                        EventMessage::Resume {
                            incarnation: self.incarnation,
                            from: self.next_seq,
                        },
                    ));
                    let acked = self.acked_below.get(&from).copied();
                    self.sent_below
                        .insert(from, acked.unwrap_or(self.released_below));
                }
                // Its answer to our fetch may have been lost as well.
                if self
                    .fetching
                    .as_ref()
                    .is_some_and(|f| f.waiting.contains(&from))
                {
                    out.push((from, self.fetch_message()));
                }
            }
        }
        Ok(out)
    }

    /// All loggers answered: keep the gap-free run, replay it, void the rest.
    fn finish_fetch(&mut self) -> Vec<(SetId, EventMessage)> {
        let Some(f) = self.fetching.take() else {
            return Vec::new();
        };
        let mut next = f.from;
        for &seq in f.got.keys() {
            if seq != next {
                break;
            }
            next += 1;
        }
        let run: BTreeMap<u64, Determinant> =
            f.got.into_iter().filter(|(s, _)| *s < next).collect();
        self.script = ReplayScript::new(run.values());
        self.replay_ticks = run
            .iter()
            .map(|(&seq, d)| {
                let last = match d.event {
                    Event::EmptyUpTo(last) => last.max(d.tick),
                    _ => d.tick,
                };
                (seq, (d.actor, last))
            })
            .collect();
        self.retained = run;
        self.next_seq = next;
        let mut out = Vec::new();
        for l in &self.loggers {
            out.push((
                *l,
                EventMessage::Resume {
                    incarnation: self.incarnation,
                    from: next,
                },
            ));
            // Every logger gets the whole run again: one of them may have missed part of it.
            self.sent_below.insert(*l, f.from);
            self.acked_below.insert(*l, f.from);
        }
        out.extend(self.poll_transmit());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::ids::ChannelId;

    fn actor(set: u16, n: u64) -> ActorId {
        ActorId::new(set, n).unwrap()
    }

    fn det(tick: u64, from_seq: u64) -> Determinant {
        Determinant {
            actor: actor(0, 1),
            tick,
            event: Event::Delivery {
                channel: ChannelId::new(actor(1, 1), actor(0, 1)),
                send_index: from_seq,
            },
        }
    }

    /// Delivers every message to its addressee until none is left; `down` sets drop theirs.
    fn pump(
        sets: &mut [EventLogging],
        stores: &mut [EventStore],
        mut msgs: Vec<(SetId, SetId, EventMessage)>,
        down: &[SetId],
    ) {
        while let Some((from, to, m)) = msgs.pop() {
            if down.contains(&to) {
                continue;
            }
            let out = sets[to.index()]
                .on_message(from, m, &mut stores[to.index()])
                .unwrap();
            msgs.extend(out.into_iter().map(|(t, m)| (to, t, m)));
        }
    }

    fn from(set: SetId, msgs: Vec<(SetId, EventMessage)>) -> Vec<(SetId, SetId, EventMessage)> {
        msgs.into_iter().map(|(t, m)| (set, t, m)).collect()
    }

    fn cluster(n: u16, k: u16) -> (Vec<EventLogging>, Vec<EventStore>) {
        (
            (0..n)
                .map(|s| EventLogging::new(SetId(s), n, k).unwrap())
                .collect(),
            (0..n).map(|_| EventStore::new()).collect(),
        )
    }

    #[test]
    fn loggers_are_the_next_sets_wrapping_around() {
        assert_eq!(loggers_of(SetId(2), 4, 2), vec![SetId(3), SetId(0)]);
        assert_eq!(loggers_of(SetId(0), 2, 5), vec![SetId(1)]);
        assert!(loggers_of(SetId(0), 1, 2).is_empty());
    }

    #[test]
    fn a_send_waits_until_every_logger_holds_the_determinants_before_it() {
        let (mut sets, mut stores) = cluster(4, 2);
        sets[0].record(det(1, 1));
        sets[0].record(det(2, 2));
        let needed = sets[0].before_send();
        assert_eq!(needed, 2);
        assert!(!sets[0].is_stable(needed));
        let batches = from(SetId(0), sets[0].poll_transmit());
        assert_eq!(batches.len(), 2, "one batch per logger");
        // Only the first logger answers: still not stable.
        let (one, two): (Vec<_>, Vec<_>) = batches.into_iter().partition(|b| b.1 == SetId(1));
        pump(&mut sets, &mut stores, one, &[]);
        assert!(!sets[0].is_stable(needed));
        pump(&mut sets, &mut stores, two, &[]);
        assert!(sets[0].is_stable(needed));
        assert_eq!(stores[1].len(), 2);
        assert_eq!(stores[2].len(), 2);
    }

    #[test]
    fn a_lone_set_never_waits() {
        let mut s = EventLogging::new(SetId(0), 1, 2).unwrap();
        s.record(det(1, 1));
        let needed = s.before_send();
        assert!(s.is_stable(needed));
    }

    #[test]
    fn a_checkpoint_releases_the_determinants_it_covers_at_the_loggers() {
        let (mut sets, mut stores) = cluster(3, 2);
        for t in 1..=5 {
            sets[0].record(det(t, t));
        }
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[]);
        let snap = sets[0].checkpoint(|_| 0);
        sets[0].record(det(6, 6));
        let rel = from(SetId(0), sets[0].checkpoint_committed(snap));
        pump(&mut sets, &mut stores, rel, &[]);
        assert_eq!(stores[1].len(), 0);
        assert_eq!(stores[2].len(), 0);
    }

    #[test]
    fn empty_polls_cost_one_determinant_per_run_and_only_before_a_send() {
        let (mut sets, _) = cluster(2, 1);
        for tick in 1..=100 {
            sets[0].empty_poll(actor(0, 1), tick);
        }
        assert_eq!(sets[0].stats().recorded, 0);
        sets[0].before_send();
        assert_eq!(sets[0].stats().recorded, 1);
        assert_eq!(sets[0].stats().empty_polls, 100);
        // A success discards a pending run: the script covers the ticks below it anyway.
        sets[0].empty_poll(actor(0, 1), 101);
        sets[0].record(det(102, 1));
        sets[0].before_send();
        assert_eq!(sets[0].stats().recorded, 2);
    }

    #[test]
    fn a_late_resume_voids_only_what_earlier_incarnations_logged() {
        let mut store = EventStore::new();
        let producer = SetId(0);
        let old = EventMessage::Log {
            incarnation: Incarnation(1),
            dets: vec![(0, det(1, 1)), (1, det(2, 2))],
        };
        store.apply(producer, old);
        // Incarnation 2 restarted with nothing to replay and logs anew from 0; its
        // `Resume { from: 0 }`, sent while this logger was down, arrives after that.
        let new = EventMessage::Log {
            incarnation: Incarnation(2),
            dets: vec![(0, det(5, 5))],
        };
        store.apply(producer, new);
        let late = EventMessage::Resume {
            incarnation: Incarnation(2),
            from: 0,
        };
        store.apply(producer, late);
        assert_eq!(store.len(), 1, "incarnation 2's determinant stays");
        let Some(EventMessage::Stored { dets, .. }) = store.apply(
            producer,
            EventMessage::Fetch {
                incarnation: Incarnation(3),
                from: 0,
            },
        ) else {
            panic!("a fetch is answered");
        };
        assert_eq!(dets, vec![(0, det(5, 5))]);
    }

    #[test]
    fn another_actors_event_logs_a_pending_empty_poll_run_first() {
        let (mut sets, _) = cluster(2, 1);
        let poller = actor(0, 2);
        for tick in 1..=3 {
            sets[0].empty_poll(poller, tick);
        }
        // Actor 0:1's delivery may depend on what 0:2 saw (a message inside the set).
        let seq = sets[0].record(det(1, 1));
        assert_eq!(seq, 1, "the run was recorded first, as number 0");
        assert_eq!(sets[0].stats().recorded, 2);
        let shipped: Vec<Determinant> = sets[0]
            .poll_transmit()
            .into_iter()
            .flat_map(|(_, m)| match m {
                EventMessage::Log { dets, .. } => dets.into_iter().map(|(_, d)| d).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(
            shipped.first().map(|d| (d.actor, d.tick, d.event)),
            Some((poller, 1, Event::EmptyUpTo(3)))
        );
    }

    #[test]
    fn a_restored_set_replays_the_stable_run_and_voids_what_follows_a_gap() {
        let (mut sets, mut stores) = cluster(3, 2);
        let snap = sets[0].checkpoint(|_| 0);
        for t in 1..=4 {
            sets[0].record(det(t, t));
        }
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[]);
        // Determinant 4 reaches logger 1 only; 5 reaches nobody before the crash.
        sets[0].record(det(5, 5));
        let b: Vec<_> = from(SetId(0), sets[0].poll_transmit())
            .into_iter()
            .filter(|m| m.1 == SetId(1))
            .collect();
        pump(&mut sets, &mut stores, b, &[]);
        sets[0].record(det(6, 6));

        let (restored, msgs) = EventLogging::restore(SetId(0), 3, 2, snap, Incarnation(1)).unwrap();
        sets[0] = restored;
        assert!(sets[0].is_fetching());
        pump(&mut sets, &mut stores, from(SetId(0), msgs), &[]);
        assert!(!sets[0].is_fetching());
        // The union of the loggers is 0..=4: ticks 1..=5 are forced, tick 6 runs free.
        for t in 1..=5 {
            assert!(matches!(
                sets[0].script().delivery(actor(0, 1), t),
                Ok(crate::recovery::determinant::ReplayDelivery::Forced { .. })
            ));
        }
        assert_eq!(
            sets[0].script().delivery(actor(0, 1), 6),
            Ok(crate::recovery::determinant::ReplayDelivery::Free)
        );
        // Both loggers now hold the whole run; new determinants continue after it.
        assert_eq!(stores[1].len(), 5);
        assert_eq!(stores[2].len(), 5);
        assert_eq!(sets[0].record(det(6, 7)), 5);
    }

    /// Set 0 of three (two loggers each) logged five determinants and was restored from
    /// the checkpoint before them: the sets, their stores and set 0's fetches.
    fn restored_after_five_determinants() -> (
        Vec<EventLogging>,
        Vec<EventStore>,
        Vec<(SetId, EventMessage)>,
    ) {
        let (mut sets, mut stores) = cluster(3, 2);
        let snap = sets[0].checkpoint(|_| 0);
        for t in 1..=5 {
            sets[0].record(det(t, t));
        }
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[]);
        let (restored, out) = EventLogging::restore(SetId(0), 3, 2, snap, Incarnation(1)).unwrap();
        sets[0] = restored;
        let fetches = out
            .into_iter()
            .filter(|(_, m)| matches!(m, EventMessage::Fetch { .. }))
            .collect();
        (sets, stores, fetches)
    }

    /// Logger `l`'s answer to set 0's `fetch`, cut into parts of two determinants.
    fn answer_in_parts(
        sets: &mut [EventLogging],
        stores: &mut [EventStore],
        l: SetId,
        fetch: EventMessage,
    ) -> Vec<EventMessage> {
        let answers = sets[l.index()]
            .on_message(SetId(0), fetch, &mut stores[l.index()])
            .unwrap();
        answers
            .into_iter()
            .filter(|(_, a)| matches!(a, EventMessage::Stored { .. }))
            .flat_map(|(_, a)| split(a, 2))
            .collect()
    }

    /// Whether set 0's replay script forces ticks 1 to 5 of the actor that logged them.
    fn replays_all_five(set: &EventLogging) -> bool {
        (1..=5).all(|t| {
            matches!(
                set.script().delivery(actor(0, 1), t),
                Ok(crate::recovery::determinant::ReplayDelivery::Forced { .. })
            )
        })
    }

    #[test]
    fn a_loggers_answer_in_parts_is_waited_for_until_its_last_part() {
        let (mut sets, mut stores, fetches) = restored_after_five_determinants();
        let mut parts = Vec::new();
        for (l, fetch) in fetches {
            let answer = answer_in_parts(&mut sets, &mut stores, l, fetch);
            parts.extend(answer.into_iter().map(|p| (l, p)));
        }
        assert_eq!(
            parts.len(),
            6,
            "5 determinants from each logger, 3 parts each"
        );
        let last = parts.pop().unwrap();
        for (l, part) in parts {
            sets[0].on_message(l, part, &mut stores[0]).unwrap();
            assert!(sets[0].is_fetching(), "a logger's last part has not come");
        }
        sets[0].on_message(last.0, last.1, &mut stores[0]).unwrap();
        assert!(!sets[0].is_fetching());
        assert!(
            replays_all_five(&sets[0]),
            "every tick replays from the parts put together"
        );
        // A producer's batch is cut the same way.
        let log = EventMessage::Log {
            incarnation: Incarnation(0),
            dets: (0..5).map(|s| (s, det(s + 1, s))).collect(),
        };
        let sizes: Vec<usize> = split(log, 2)
            .into_iter()
            .map(|m| match m {
                EventMessage::Log { dets, .. } => dets.len(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
    }

    /// Both loggers answer set 0 in three parts and part `lost` of each answer does not
    /// arrive (its connection broke): set 0 must not replay short, must ask each logger
    /// again once, and replays every tick from the second answers.
    fn answers_losing_part_are_fetched_again(lost: usize) {
        let (mut sets, mut stores, fetches) = restored_after_five_determinants();
        let mut again = Vec::new();
        for (l, fetch) in fetches {
            let mut parts = answer_in_parts(&mut sets, &mut stores, l, fetch);
            assert_eq!(parts.len(), 3);
            parts.remove(lost);
            for part in parts {
                again.extend(sets[0].on_message(l, part, &mut stores[0]).unwrap());
            }
        }
        assert!(
            sets[0].is_fetching(),
            "a replay that skipped the lost determinants would void them"
        );
        assert_eq!(sets[0].stats().refetched, 2);
        assert_eq!(again.len(), 2, "one fetch again to each logger: {again:?}");
        for (l, fetch) in again {
            assert!(matches!(fetch, EventMessage::Fetch { .. }));
            for part in answer_in_parts(&mut sets, &mut stores, l, fetch) {
                sets[0].on_message(l, part, &mut stores[0]).unwrap();
            }
        }
        assert!(!sets[0].is_fetching());
        assert!(replays_all_five(&sets[0]), "every tick replays");
    }

    #[test]
    fn a_loggers_answer_that_lost_a_middle_part_is_asked_for_again() {
        // Determinants 2 and 3 are missing between the others.
        answers_losing_part_are_fetched_again(1);
    }

    #[test]
    fn a_loggers_answer_that_lost_its_first_part_is_asked_for_again() {
        // Determinants 0 and 1 are missing: the rest is a gap-free run too, so only the
        // parts' positions tell.
        answers_losing_part_are_fetched_again(0);
    }

    #[test]
    fn a_determinant_past_a_loggers_gap_never_enters_a_later_replay() {
        use crate::recovery::determinant::ReplayDelivery;
        let (mut sets, mut stores) = cluster(3, 2);
        let (l1, l2) = (SetId(1), SetId(2));
        let to = |msgs: Vec<(SetId, SetId, EventMessage)>, l: SetId| -> Vec<_> {
            msgs.into_iter().filter(|m| m.1 == l).collect()
        };
        let snap = sets[0].checkpoint(|_| 0);
        sets[0].record(det(1, 1));
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[]);
        // Incarnation 0's determinant 1 reaches no logger, its determinant 2 only logger 1
        // (which thus holds it past a gap), then the set fails.
        sets[0].record(det(2, 2));
        let _lost = sets[0].poll_transmit();
        sets[0].record(det(3, 3));
        let b = to(from(SetId(0), sets[0].poll_transmit()), l1);
        pump(&mut sets, &mut stores, b, &[]);

        // Incarnation 1 replays determinant 0 only and logs its own 1 and 2; logger 1 goes
        // down once it has answered, so it misses the `Resume` that voids the old 2.
        let (restored, msgs) = EventLogging::restore(SetId(0), 3, 2, snap, Incarnation(1)).unwrap();
        sets[0] = restored;
        let mut answers = Vec::new();
        for (_, l, m) in to(from(SetId(0), msgs.clone()), l1)
            .into_iter()
            .chain(to(from(SetId(0), msgs), l2))
        {
            let out = sets[l.index()]
                .on_message(SetId(0), m, &mut stores[l.index()])
                .unwrap();
            answers.extend(out.into_iter().map(|(t, m)| (l, t, m)));
        }
        pump(&mut sets, &mut stores, answers, &[l1]);
        assert!(!sets[0].is_fetching());
        assert_eq!(sets[0].record(det(2, 5)), 1);
        sets[0].record(det(3, 6));
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[l1]);
        assert!(
            !sets[0].is_stable(3),
            "logger 1 holds none of incarnation 1's own"
        );

        // Incarnation 2: logger 2 answers first, logger 1 last.
        let (restored, msgs) = EventLogging::restore(SetId(0), 3, 2, snap, Incarnation(2)).unwrap();
        sets[0] = restored;
        let msgs = from(SetId(0), msgs);
        pump(&mut sets, &mut stores, to(msgs.clone(), l2), &[]);
        pump(&mut sets, &mut stores, to(msgs, l1), &[]);
        assert!(!sets[0].is_fetching());
        // Incarnation 1's history, or a prefix of it; never a mix with incarnation 0's.
        for (tick, send_index) in [(2, 5), (3, 6)] {
            match sets[0].script().delivery(actor(0, 1), tick) {
                Ok(ReplayDelivery::Forced {
                    send_index: got, ..
                }) => assert_eq!(got, send_index, "tick {tick}"),
                other => panic!("tick {tick}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_checkpoint_taken_mid_replay_keeps_the_determinants_not_reproduced_yet() {
        let (mut sets, mut stores) = cluster(2, 1);
        let snap = sets[0].checkpoint(|_| 0);
        for t in 1..=4 {
            sets[0].record(det(t, t));
        }
        let b = from(SetId(0), sets[0].poll_transmit());
        pump(&mut sets, &mut stores, b, &[]);
        let (restored, msgs) = EventLogging::restore(SetId(0), 2, 1, snap, Incarnation(1)).unwrap();
        sets[0] = restored;
        pump(&mut sets, &mut stores, from(SetId(0), msgs), &[]);
        // The actor has reproduced ticks 1 and 2 when the set checkpoints again.
        let mid = sets[0].checkpoint(|_| 2);
        assert_eq!(
            mid.next_seq, 2,
            "ticks 3 and 4 are not in the checkpointed state"
        );
        let rel = from(SetId(0), sets[0].checkpoint_committed(mid));
        pump(&mut sets, &mut stores, rel, &[]);
        assert_eq!(
            stores[1].len(),
            2,
            "the logger keeps what a new crash would replay"
        );
    }

    #[test]
    fn a_restarted_logger_gets_again_what_it_had_not_acknowledged() {
        let (mut sets, mut stores) = cluster(2, 1);
        sets[0].record(det(1, 1));
        let needed = sets[0].before_send();
        let _lost_in_flight = sets[0].poll_transmit();
        assert!(!sets[0].is_stable(needed));
        let (restarted, notices) =
            EventLogging::restore(SetId(1), 2, 1, EventSnapshot::default(), Incarnation(1))
                .unwrap();
        sets[1] = restarted;
        // Its own fetch goes to set 0 as well; answer everything.
        pump(&mut sets, &mut stores, from(SetId(1), notices), &[]);
        let again = from(SetId(0), sets[0].poll_transmit());
        assert_eq!(again.len(), 1);
        pump(&mut sets, &mut stores, again, &[]);
        assert!(sets[0].is_stable(needed));
    }

    #[test]
    fn stale_acks_and_answers_of_older_incarnations_are_ignored() {
        let (mut sets, mut stores) = cluster(2, 1);
        sets[0].record(det(1, 1));
        let old_batch = from(SetId(0), sets[0].poll_transmit());
        let (restored, msgs) =
            EventLogging::restore(SetId(0), 2, 1, EventSnapshot::default(), Incarnation(1))
                .unwrap();
        sets[0] = restored;
        pump(&mut sets, &mut stores, from(SetId(0), msgs), &[]);
        // The old incarnation's batch arrives late: the logger must not keep it.
        pump(&mut sets, &mut stores, old_batch, &[]);
        assert_eq!(stores[1].len(), 0);
        assert!(sets[1].stats().stale >= 1);
    }

    #[test]
    fn sequence_numbers_at_the_top_of_the_range_are_kept_without_overflow() {
        // A peer's frames choose the numbers; neither a release nor a determinant at
        // `u64::MAX` may panic the logger (its journal would replay the panic forever).
        let mut store = EventStore::new();
        let log = |seq| EventMessage::Log {
            incarnation: Incarnation(0),
            dets: vec![(seq, det(1, 1))],
        };
        let held = |answer: Option<EventMessage>| match answer {
            Some(EventMessage::Ack { held_below, .. }) => held_below,
            other => panic!("not an ack: {other:?}"),
        };
        assert_eq!(held(store.apply(SetId(1), log(u64::MAX))), 0, "a gap at 0");
        store.apply(
            SetId(1),
            EventMessage::Release {
                incarnation: Incarnation(0),
                below: u64::MAX - 1,
            },
        );
        assert_eq!(held(store.apply(SetId(1), log(u64::MAX - 1))), u64::MAX);
    }
}
