//! Determinants in the running node: the delivery order of order-sensitive actors and the
//! values actors read from `ctx.now()` / `ctx.random()`, recorded, shipped to event
//! loggers on other nodes before anything that depends on them leaves the node, kept
//! durably by those loggers, and replayed by a restored node (the sans-IO machine is
//! [`crate::recovery::EventLogging`]; this module drives it).
//!
//! - Channel stamps: a message to an order-sensitive actor inside the node carries its
//!   sender and the channel's send index (`RecoveryLayer::stamp_local`); between nodes
//!   the protocol's channel index serves.
//! - `RecoveryLayer::admit` decides, per delivery, whether the actor may take this
//!   message now: past its logged events always (and the choice is recorded), during a
//!   replay only the one the log names.
//! - Frames to other nodes wait in a FIFO until the determinants before them are
//!   acknowledged by every logger (pessimistic logging); the logger's store is a journal
//!   file written before it acknowledges, so a killed logger loses nothing.

use super::dependence;
use super::{event, LayerState, RecoveryLayer};
use crate::actor::mailbox::Stamp;
use crate::actor_id::ActorId;
use crate::node::NodeHandle;
use crate::recovery::{
    Admission, ChannelId, Dependence, EventMessage, EventRead, EventSnapshot, EventStore,
    EventsArrival, NodeRecovery, ReplayDelivery, SetId,
};
use crate::transport::frame::Envelope;
use metrics::counter;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Determinants recorded (deliveries of order-sensitive actors, clock reads, draws).
pub const DETERMINANTS: &str = "lazarus_recovery_determinants_total";
/// Determinants reproduced by a restored node.
pub const DETERMINANTS_REPLAYED: &str = "lazarus_recovery_determinants_replayed_total";
/// Frames to other nodes that had to wait for their determinants to be acknowledged.
pub const GATED_SENDS: &str = "lazarus_recovery_gated_sends_total";
/// A restored actor asked for another event than the one logged (contract broken).
pub const DIVERGENCES: &str = "lazarus_recovery_divergences_total";
/// Deliveries of selective receives (order-sensitive actors; determined by the channel,
/// so not logged).
pub const SELECTED_DELIVERIES: &str = "lazarus_recovery_selected_deliveries_total";

/// Journal size above which it is rewritten as one snapshot of the store.
const COMPACT_AT: u64 = 8 << 20;

/// Metric: writes of the event-logger journal that failed (disk full, I/O error).
pub const JOURNAL_FAILURES: &str = "lazarus_recovery_event_journal_failures_total";

/// The determinant state of a node the driver keeps, inside the layer's [`LayerState`] (the
/// node's event logging, logger store and send gate are in its machine,
/// [`LayerState::recovery`]).
pub(crate) struct Events {
    journal: Option<Journal>,
    /// Event clock per actor that had nondeterministic events.
    pub(crate) clocks: HashMap<ActorId, u64>,
    /// Order-sensitive actors holding messages back, to wake when the replay moves on.
    waiting: HashSet<ActorId>,
    /// Timer deliveries a restored actor was forced to repeat at their logged point.
    timers_replayed: u64,
    /// Deliveries of selective receives (not logged).
    pub(crate) selected: u64,
}

/// What a node's checkpoint records of its determinants.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct EventImage {
    pub(crate) snapshot: EventSnapshot,
    pub(crate) clocks: Vec<(ActorId, u64)>,
    /// Send index per channel to an order-sensitive actor inside the node.
    pub(crate) stamps: Vec<(ActorId, ActorId, u64)>,
}

impl Events {
    /// The state of node `rank`, and the logger store it keeps for other nodes, read back
    /// from the journal in `dir` (`fresh`: a new run, which starts it empty).
    pub(crate) fn new(rank: u16, fresh: bool, dir: &Path) -> (Self, EventStore) {
        let path = dir.join(format!("events-{rank}.journal"));
        let (store, journal) = match Journal::open(&path, fresh) {
            Ok(x) => (x.0, Some(x.1)),
            Err(e) => {
                tracing::error!("event-logger journal {}: {e}", path.display());
                (EventStore::new(), None)
            }
        };
        let events = Events {
            journal,
            clocks: HashMap::new(),
            waiting: HashSet::new(),
            timers_replayed: 0,
            selected: 0,
        };
        (events, store)
    }

    /// `determinants=.. replayed=.. shipped=.. gated=.. held=..` for the node's final report.
    pub(crate) fn report(&self, recovery: &NodeRecovery<Envelope>) -> String {
        let s = recovery.events().map(|l| l.stats()).unwrap_or_default();
        format!(
            "determinants={} determinants_replayed={} timers_replayed={} selected_deliveries={} determinants_shipped={} gated_sends={} held_now={} logger_keeps={}",
            s.recorded,
            s.replayed,
            self.timers_replayed,
            self.selected,
            s.shipped,
            recovery.gated(),
            recovery.held_len(),
            recovery.logger_store().len()
        )
    }

    /// Whether an order-sensitive actor holds messages back or the node still fetches its
    /// determinants, or frames wait for stable determinants.
    pub(crate) fn holds_back(&self, recovery: &NodeRecovery<Envelope>) -> bool {
        !self.waiting.is_empty()
            || recovery.held_len() > 0
            || recovery.events().is_some_and(|l| l.is_fetching())
    }

    /// What the order-sensitive actors of this node wait for, for a stall report: the
    /// loggers a restored node still waits for, and for each actor holding messages back
    /// the delivery its replay needs next (tick, channel, send index, sending node).
    pub(crate) fn describe_waits(&self, recovery: &NodeRecovery<Envelope>) -> String {
        let Some(logging) = recovery.events() else {
            return "determinants: not restored yet".to_string();
        };
        let mut out = Vec::new();
        if logging.is_fetching() {
            let from: Vec<u16> = logging.fetching_from().iter().map(|s| s.0).collect();
            out.push(format!("fetching its determinants from nodes {from:?}"));
        }
        let mut waiting: Vec<&ActorId> = self.waiting.iter().collect();
        waiting.sort();
        for actor in waiting.into_iter().take(8) {
            let tick = self.clocks.get(actor).copied().unwrap_or(0) + 1;
            match logging.script().delivery(*actor, tick) {
                Ok(ReplayDelivery::Forced {
                    channel,
                    send_index,
                }) if crate::actor::timer::is_source(channel.from) => {
                    let what = if send_index & crate::actor::awaits::SLEEP_BIT != 0 {
                        let key = send_index & !crate::actor::awaits::SLEEP_BIT;
                        format!("the end of its async handler's sleep #{key}")
                    } else {
                        format!("its timer #{send_index}")
                    };
                    out.push(format!(
                        "actor {actor} replays tick {tick}: waits for {what}"
                    ))
                }
                Ok(ReplayDelivery::Forced {
                    channel,
                    send_index,
                }) => out.push(format!(
                    "actor {actor} replays tick {tick}: waits for message #{send_index} on \
                     channel {channel:?} from node {}",
                    channel.from.rank()
                )),
                _ => out.push(format!(
                    "actor {actor} at tick {tick} holds messages back (a selective receive)"
                )),
            }
        }
        if out.is_empty() {
            "no order-sensitive actor waits".to_string()
        } else {
            out.join("; ")
        }
    }
}

impl LayerState {
    /// Advances `actor`'s event clock for a value read or a probe: the new tick; `None` while there is no logging (a restarted node still loading).
    fn event_tick(&mut self, actor: ActorId) -> Option<u64> {
        self.recovery.events()?;
        let clock = self.events.clocks.entry(actor).or_insert(0);
        *clock += 1;
        Some(*clock)
    }

    /// The tick `actor`'s next delivery would take; `None` while deliveries must wait (a
    /// restarted node without its logging yet, or fetching its log). The clock moves only
    /// once a delivery is admitted.
    fn delivery_tick(&self, actor: ActorId) -> Option<u64> {
        let logging = self.recovery.events()?;
        (!logging.is_fetching()).then(|| self.events.clocks.get(&actor).copied().unwrap_or(0) + 1)
    }
}

/// The running actor recorded a determinant, noted an empty poll or replayed an event:
/// its messages out of the node wait for it.
fn raise_current(d: Dependence) {
    dependence::with_current(|cur| {
        if let Some(cur) = cur {
            cur.raise(d);
        }
    });
}

/// The running actor took an event from the log (a replay): counted, and what follows
/// waits for the whole node (as under the whole-node rule), not only for what it
/// depends on.
fn replayed() {
    raise_current(Dependence::Set);
    counter!(DETERMINANTS_REPLAYED).increment(1);
}

/// A value the running actor read: counted, and its messages out of the node wait for
/// what it depends on now.
fn noted<T>(read: EventRead<T>) -> T {
    if read.replayed {
        replayed();
        return read.value;
    }
    if let Some(e) = &read.diverged {
        counter!(DIVERGENCES).increment(1);
        tracing::error!("{e}; the actor runs free from here");
    }
    raise_current(read.depends);
    if read.depends != Dependence::Set {
        counter!(DETERMINANTS).increment(1);
    }
    read.value
}

impl RecoveryLayer {
    /// The channel stamp of a message from `from` to order-sensitive actor `to` of this
    /// node: the channel's next send index.
    pub(crate) fn stamp_local(&self, from: ActorId, to: ActorId) -> Stamp {
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        let index = stamps.entry((from, to)).or_insert(0);
        *index += 1;
        Stamp {
            from,
            index: *index,
        }
    }

    /// Whether order-sensitive `actor` may handle the message with `stamp` now. Past its
    /// logged events: yes, and the delivery is recorded; during its replay: only if the
    /// log names this message next; while the node fetches its log: no.
    pub(crate) fn admit(&self, actor: ActorId, stamp: Stamp) -> bool {
        let mut state = self.lock();
        let Some(tick) = state.delivery_tick(actor) else {
            return false;
        };
        let channel = ChannelId::new(stamp.from, actor);
        match state
            .recovery
            .admit_delivery(actor, tick, channel, stamp.index)
        {
            Admission::NotNow => return false,
            Admission::Replayed => {
                replayed();
                if crate::actor::timer::is_source(stamp.from) {
                    state.events.timers_replayed += 1;
                }
            }
            Admission::Recorded { depends, diverged } => {
                if let Some(e) = diverged {
                    counter!(DIVERGENCES).increment(1);
                    tracing::error!("{e}; the actor runs free from here");
                }
                raise_current(depends);
                counter!(DETERMINANTS).increment(1);
            }
        }
        state.events.clocks.insert(actor, tick);
        // Shipped now, while the handler runs: its replies wait only for the rest of the
        // logger's round trip.
        state.recovery.flush_events();
        let frames = Self::outgoing(&mut state);
        drop(state);
        self.emit(frames);
        true
    }

    /// Whether order-sensitive `actor`, in a selective receive, may handle the message with
    /// `stamp` (from the sender it named) now. The delivery is determined by the channel's
    /// FIFO order, so nothing is logged: the actor's event clock just moves on, in the
    /// original run and in a replay alike. While the node fetches its log: no (the clock
    /// must not move before the script is known).
    pub(crate) fn admit_selected(&self, actor: ActorId, stamp: Stamp) -> bool {
        let mut state = self.lock();
        let Some(tick) = state.delivery_tick(actor) else {
            return false;
        };
        match state.recovery.admit_selected(actor, tick) {
            None => return false,
            Some(Ok(())) => {}
            Some(Err(e)) => {
                counter!(DIVERGENCES).increment(1);
                tracing::error!("{e} (from {}); the actor runs free from here", stamp.from);
            }
        }
        state.events.clocks.insert(actor, tick);
        counter!(SELECTED_DELIVERIES).increment(1);
        state.events.selected += 1;
        true
    }

    /// `actor` holds messages back; wake it when its replay can move on.
    pub(crate) fn note_waiting(&self, actor: ActorId) {
        self.lock().events.waiting.insert(actor);
    }

    /// A nondeterministic value read by `actor` (`ctx.now()`, `ctx.random()`): replayed
    /// from the log during a replay, else `fresh()`, recorded.
    pub(crate) fn value(&self, actor: ActorId, fresh: impl FnOnce() -> u64) -> u64 {
        let mut state = self.lock();
        let Some(tick) = state.event_tick(actor) else {
            return fresh();
        };
        match state.recovery.read_value(actor, tick, fresh) {
            Some(read) => noted(read),
            None => 0,
        }
    }

    /// A probe of order-sensitive `actor`'s mailbox: whether messages are waiting. During
    /// its replay the logged answer; past it `fresh()`, recorded (a run of empty answers
    /// lazily, as one determinant, and only if a message leaves the node after it).
    pub(crate) fn probe(&self, actor: ActorId, fresh: impl FnOnce() -> bool) -> bool {
        let mut state = self.lock();
        let Some(tick) = state.event_tick(actor) else {
            return fresh();
        };
        match state.recovery.probe(actor, tick, fresh) {
            Some(read) => noted(read),
            None => false,
        }
    }

    /// An event-logging frame from node `from` arrived.
    pub(crate) fn on_events(&self, node: &NodeHandle, from: u16, msg: EventMessage) {
        let mut state = self.lock_from_network();
        let LayerState {
            events, recovery, ..
        } = &mut *state;
        let kind = msg.kind();
        let logger_role = matches!(
            msg,
            EventMessage::Log { .. }
                | EventMessage::Release { .. }
                | EventMessage::Fetch { .. }
                | EventMessage::Resume { .. }
        );
        if let (Some(j), true, true) = (
            events.journal.as_mut(),
            logger_role,
            recovery.events().is_some(),
        ) {
            // Durable before it is acknowledged.
            if let Err(e) = j.append(from, &msg, recovery.logger_store()) {
                journal_failed(&e);
            }
        }
        let arrival = match recovery.handle_events(SetId(from), msg) {
            Ok(EventsArrival::Early) => return,
            Ok(a) => a,
            Err(e) => {
                counter!(super::BAD_RECOVERY_FRAMES, "reason" => kind).increment(1);
                tracing::warn!(
                    from,
                    "refused an event-logging {kind} from node {from}: {e}"
                );
                return;
            }
        };
        // A write that failed above: the store now holds its message, so the journal can
        // be made whole again at once (if the disk has room by now).
        if let Some(Err(e)) = events
            .journal
            .as_mut()
            .map(|j| j.heal(recovery.logger_store()))
        {
            journal_failed(&e);
        }
        let fetched = matches!(arrival, EventsArrival::Fetched { .. });
        let wake: Vec<ActorId> = if fetched || !events.waiting.is_empty() {
            events.waiting.drain().collect()
        } else {
            Vec::new()
        };
        if let EventsArrival::Fetched { replay } = arrival {
            let replay = if replay { "yes" } else { "none" };
            event(self.rank, &format!("determinants fetched replay={replay}"));
        }
        let frames = Self::outgoing(&mut state);
        drop(state);
        self.emit(frames);
        for id in wake {
            if let Some(c) = node.control(id) {
                c.wake();
            }
        }
    }

    /// The determinant part of a checkpoint, read with the actors (cores paused):
    /// event logging's `snapshot` with the clocks and stamps the layer keeps.
    pub(crate) fn events_image(&self, state: &LayerState, snapshot: EventSnapshot) -> EventImage {
        let clocks = &state.events.clocks;
        let stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        EventImage {
            snapshot,
            clocks: clocks.iter().map(|(a, c)| (*a, *c)).collect(),
            stamps: stamps.iter().map(|((f, t), i)| (*f, *t, *i)).collect(),
        }
    }

    /// A restarted node takes back the determinant state its recovery machine does not
    /// hold (event clocks, channel stamps) from its checkpoint.
    pub(crate) fn restore_event_clocks(&self, state: &mut LayerState, image: &EventImage) {
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        *stamps = image
            .stamps
            .iter()
            .map(|(f, t, i)| ((*f, *t), *i))
            .collect();
        state.events.clocks = image.clocks.iter().copied().collect();
    }
}

/// One record of a logger's journal.
#[derive(Serialize, Deserialize)]
enum JournalRecord {
    /// The whole store (written when the journal is compacted).
    Whole(EventStore),
    /// A message the store applied.
    Applied(u16, EventMessage),
}

/// The append-only file that makes a logger's store survive the logger's death: each
/// record is written (not fsynced: a killed process loses nothing the kernel has) before
/// the store acknowledges it.
pub(crate) struct Journal {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
    /// A write failed (disk full): the file may end in a torn record, which would hide
    /// every record written after it from a restart. Rewritten whole before the next.
    broken: bool,
}

impl Journal {
    /// Opens the journal at `path`, reading the store back from it; `fresh` (a new run,
    /// not a restart) starts empty.
    fn open(path: &Path, fresh: bool) -> std::io::Result<(EventStore, Journal)> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let mut store = EventStore::new();
        if !fresh {
            if let Ok(mut f) = std::fs::File::open(path) {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes)?;
                if let Some(at) = replay_journal(&bytes, &mut store) {
                    // Not a torn tail: a whole record that does not verify. What follows
                    // it is lost; the file is kept aside for a post-mortem.
                    counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "events_journal")
                        .increment(1);
                    let aside = path.with_extension("journal.damaged");
                    let kept = std::fs::write(&aside, &bytes).is_ok();
                    tracing::error!(
                        at,
                        len = bytes.len(),
                        "the event-logger journal {} is damaged at byte {at}: the records from \
                         there on are lost{}",
                        path.display(),
                        if kept {
                            format!(" (kept as {})", aside.display())
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
        // The store as read becomes the journal's first record; written aside and renamed
        // in, so a death right here leaves the old journal intact.
        let tmp = path.with_extension("journal.tmp");
        let mut journal = Journal {
            path: path.to_path_buf(),
            file: std::fs::File::create(&tmp)?,
            len: 0,
            broken: false,
        };
        journal.write(&JournalRecord::Whole(store.clone()))?;
        std::fs::rename(&tmp, path)?;
        Ok((store, journal))
    }

    fn write(&mut self, record: &JournalRecord) -> std::io::Result<()> {
        let body = crate::wire::encode(record).map_err(std::io::Error::other)?;
        let len = u32::try_from(body.len())
            .map_err(|_| std::io::Error::other("a journal record over 4 GiB"))?;
        let mut rec = Vec::with_capacity(body.len() + 8);
        rec.extend_from_slice(&len.to_le_bytes());
        rec.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        rec.extend_from_slice(&body);
        self.file.write_all(&rec)?;
        self.len += rec.len() as u64;
        Ok(())
    }

    /// Records `msg` from `from`; rewrites the journal whole first when it has grown large
    /// or a write failed.
    fn append(&mut self, from: u16, msg: &EventMessage, store: &EventStore) -> std::io::Result<()> {
        if self.len > COMPACT_AT || self.broken {
            self.rewrite(store)?;
        }
        let written = self.write(&JournalRecord::Applied(from, msg.clone()));
        self.broken = written.is_err();
        written
    }

    /// Replaces the journal with one record of `store`: written aside and renamed in, so
    /// a failure leaves the old journal as it was (and this one `broken`).
    fn rewrite(&mut self, store: &EventStore) -> std::io::Result<()> {
        let tmp = self.path.with_extension("journal.tmp");
        let fresh = std::fs::File::create(&tmp).and_then(|file| {
            let mut fresh = Journal {
                path: self.path.clone(),
                file,
                len: 0,
                broken: false,
            };
            fresh.write(&JournalRecord::Whole(store.clone()))?;
            std::fs::rename(&tmp, &self.path)?;
            Ok(fresh)
        });
        match fresh {
            Ok(fresh) => {
                *self = fresh;
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// After a failed write, once `store` holds what that write was for: rewrites the
    /// journal whole, so a restart reads it all again. Nothing to do otherwise.
    fn heal(&mut self, store: &EventStore) -> std::io::Result<()> {
        if self.broken {
            self.rewrite(store)?;
        }
        Ok(())
    }
}

/// A journal write failed: counted, said, and the node goes on with the determinant in
/// memory until a rewrite succeeds (see "Not done yet" in docs/recovery.md).
fn journal_failed(e: &std::io::Error) {
    counter!(JOURNAL_FAILURES).increment(1);
    tracing::error!(
        "event-logger journal: {e}; kept in memory until the journal can be rewritten whole"
    );
}

/// Rebuilds a store from journal bytes. A torn tail (a record cut short: the host died
/// while writing) ends the replay quietly; a whole record that does not verify ends it
/// too, and its offset is returned.
fn replay_journal(bytes: &[u8], store: &mut EventStore) -> Option<usize> {
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let body = bytes.get(at + 8..)?.get(..len)?;
        if crc32c::crc32c(body) != crc {
            return Some(at);
        }
        match crate::wire::decode::<JournalRecord>(body) {
            Ok(JournalRecord::Whole(s)) => *store = s,
            Ok(JournalRecord::Applied(from, msg)) => {
                store.apply(SetId(from), msg);
            }
            Err(_) => return Some(at),
        }
        at += 8 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::{Determinant, Event};

    fn det(tick: u64) -> Determinant {
        let a = ActorId::new(0, 1).unwrap();
        Determinant {
            actor: a,
            tick,
            event: Event::Value(tick * 10),
        }
    }

    #[test]
    fn a_logger_store_survives_its_process_through_the_journal() {
        let dir = std::env::temp_dir().join(format!("lazarus-journal-{}", std::process::id()));
        let path = dir.join("events-1.journal");
        let (mut store, mut journal) = Journal::open(&path, true).unwrap();
        let log = EventMessage::Log {
            incarnation: crate::recovery::Incarnation(0),
            dets: (0..5).map(|s| (s, det(s + 1))).collect(),
        };
        journal.append(0, &log, &store).unwrap();
        store.apply(SetId(0), log);
        let release = EventMessage::Release {
            incarnation: crate::recovery::Incarnation(0),
            below: 2,
        };
        journal.append(0, &release, &store).unwrap();
        store.apply(SetId(0), release);
        drop(journal);
        // A torn record at the end (the process died mid-write) is ignored.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let (back, _) = Journal::open(&path, false).unwrap();
        assert_eq!(back, store);
        assert_eq!(back.len(), 3);
        assert!(
            !path.with_extension("journal.damaged").exists(),
            "a torn tail is no damage"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn after_a_failed_write_the_journal_is_rewritten_whole_and_a_restart_reads_every_record() {
        let dir = std::env::temp_dir().join(format!("lazarus-full-{}", std::process::id()));
        let path = dir.join("events-3.journal");
        let (mut store, mut journal) = Journal::open(&path, true).unwrap();
        let log = |seq: u64| EventMessage::Log {
            incarnation: crate::recovery::Incarnation(0),
            dets: vec![(seq, det(seq + 1))],
        };
        journal.append(0, &log(0), &store).unwrap();
        store.apply(SetId(0), log(0));
        // The disk is full for one write.
        let healthy = std::mem::replace(
            &mut journal.file,
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        );
        assert!(journal.append(0, &log(1), &store).is_err());
        store.apply(SetId(0), log(1));
        // What a full disk can leave in the real file: the start of that record.
        let mut torn = healthy;
        torn.write_all(&[40, 0, 0, 0, 1, 2, 3]).unwrap();
        journal.file = torn;
        // Room again: the store, which now holds the message, replaces the journal.
        journal.heal(&store).unwrap();
        journal.append(0, &log(2), &store).unwrap();
        store.apply(SetId(0), log(2));
        drop(journal);
        let (back, _) = Journal::open(&path, false).unwrap();
        assert_eq!(back, store);
        assert_eq!(
            back.len(),
            3,
            "the record whose write failed, and the one after it"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_damaged_record_ends_the_replay_and_the_journal_is_kept_aside() {
        let dir = std::env::temp_dir().join(format!("lazarus-damaged-{}", std::process::id()));
        let path = dir.join("events-2.journal");
        let (mut store, mut journal) = Journal::open(&path, true).unwrap();
        let first_record_ends = journal.len as usize;
        for seq in 0..3 {
            let log = EventMessage::Log {
                incarnation: crate::recovery::Incarnation(0),
                dets: vec![(seq, det(seq + 1))],
            };
            journal.append(0, &log, &store).unwrap();
            store.apply(SetId(0), log);
        }
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        // Flip a bit in the body of the first determinant's record.
        bytes[first_record_ends + 9] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let mut replayed = EventStore::new();
        assert_eq!(
            replay_journal(&bytes, &mut replayed),
            Some(first_record_ends)
        );
        let (back, _) = Journal::open(&path, false).unwrap();
        assert_eq!(back.len(), 0, "nothing past the damage is taken");
        assert_eq!(
            std::fs::read(path.with_extension("journal.damaged")).unwrap(),
            bytes,
            "the damaged journal is kept for a post-mortem"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
