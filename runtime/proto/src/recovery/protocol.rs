//! The per-set protocol state machine, [`SetProtocol`]: Algorithm 1 of the lightweight
//! causal logging paper with correlated sets as its processes, made robust to message loss
//! at crashes, to several sets recovering at once and to stale control messages.
//!
//! Sans-IO: no sockets, threads, clocks or randomness. The driver feeds events (a local
//! send, a received message, a control message, a checkpoint, a restore) and carries out
//! the returned [`Action`]s in order, on the FIFO stream to each set. Every event is
//! deterministic: the same events in the same order give the same actions.

use super::delivery::{DependencyRule, Inbox, Queued, Received, SendPositions};
use super::dep_vector::DepVector;
use super::error::ProtocolError;
use super::ids::{ChannelId, CheckpointId, Incarnation, SetId};
use super::log_dump::{BlockId, DumpRef, Held, LogDump};
use super::messages::{ChannelIndices, ControlMessage, MessageMeta, RecoveryReport};
use super::replay_check::{ContractViolation, DeliveredDigests, FoundBy};
use super::sender_log::{LogPayload, LogStats, SenderLog};
use super::snapshot::{Snapshot, SNAPSHOT_FORMAT};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Tunables of the protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Which dependency requirements bind at delivery.
    pub dependency_rule: DependencyRule,
    /// Memory quota of the sender-based log, in bytes (payloads plus vectors): above it,
    /// [`SetProtocol::poll_log_quota`] asks the peers holding the largest shares of the
    /// log for a checkpoint. `None`: the log is released by the peers' own checkpoints
    /// only.
    pub log_quota: Option<usize>,
}

/// What to do with a message the application sent to another set.
#[derive(Debug)]
pub enum SendOutcome<P> {
    /// Transmit it with this metadata.
    Transmit {
        /// Recovery metadata to piggyback.
        meta: MessageMeta,
        /// The message.
        payload: P,
    },
    /// Do not transmit: it is a regeneration the receiver has already delivered (it stays
    /// logged in case the receiver rolls back behind it).
    Suppressed {
        /// The metadata it would have had.
        meta: MessageMeta,
    },
}

impl<P> SendOutcome<P> {
    /// The message's metadata.
    pub fn meta(&self) -> &MessageMeta {
        match self {
            SendOutcome::Transmit { meta, .. } | SendOutcome::Suppressed { meta } => meta,
        }
    }
}

/// A message handed to the application.
#[derive(Debug)]
pub struct Delivery<P> {
    /// The sending set.
    pub from: SetId,
    /// Its channel.
    pub channel: ChannelId,
    /// Its index on the channel.
    pub send_index: u64,
    /// The message.
    pub payload: P,
    /// The set's own interval after this delivery: this delivery is the `interval`-th of
    /// the set.
    pub interval: u64,
    /// The message's requirement on this set had not been reached, but it came from a
    /// restarted sender and did not bind.
    pub relaxed: bool,
    /// Its requirement on this set binds: the replay holds it until the set's interval
    /// reaches it (false for a message a restarted sender sent: see
    /// [`DependencyRule::OriginalSenders`]).
    pub binding: bool,
}

/// Something the driver must do, in order.
#[derive(Debug)]
pub enum Action<P> {
    /// Transmit an application message (a resend from the log) to set `to`.
    Send {
        /// The destination set.
        to: SetId,
        /// Its metadata, as logged.
        meta: MessageMeta,
        /// The message.
        payload: P,
    },
    /// Transmit a logged message whose payload a logger node keeps: fetch it from there
    /// first (see [`log_dump`](super::log_dump)), and keep it in this place in the order
    /// of the actions.
    SendDumped {
        /// The destination set.
        to: SetId,
        /// Its metadata, as logged.
        meta: MessageMeta,
        /// Where the payload is.
        at: DumpRef,
    },
    /// Transmit a control message to set `to`.
    Control {
        /// The destination set.
        to: SetId,
        /// The message.
        message: ControlMessage,
    },
}

/// Counters of one set's protocol activity (since this incarnation started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProtocolStats {
    /// Application messages transmitted at first send.
    pub sent: u64,
    /// Regenerated sends not transmitted (the receiver had them).
    pub suppressed: u64,
    /// Logged messages transmitted again for a peer's recovery.
    pub resent: u64,
    /// Application messages received.
    pub received: u64,
    /// Received messages dropped as duplicates.
    pub duplicates: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Deliveries whose requirement did not bind (see [`Delivery::relaxed`]).
    pub relaxed: u64,
    /// Bytes of recovery metadata piggybacked on transmitted messages (index, incarnation
    /// and dependency vector).
    pub piggyback_bytes: u64,
    /// Largest piggyback of one message.
    pub max_piggyback: u64,
    /// Control messages emitted.
    pub control_sent: u64,
    /// Control messages ignored because they came from an older incarnation.
    pub stale_control: u64,
    /// Application messages of an incarnation a newer one of the same set replaced,
    /// dropped: received on the older one's connection after the newer one appeared, or
    /// still queued when it appeared (the newer one sends them again).
    pub stale_messages: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// CHECKPOINT_REQUESTs sent because the log was over its quota.
    pub checkpoint_requests_sent: u64,
    /// CHECKPOINT_REQUESTs received from peers whose logs were over their quota.
    pub checkpoint_requests_received: u64,
    /// Regenerated messages compared with the copy delivered before the failure (by
    /// digest, see [`replay_check`](super::replay_check)).
    pub regenerations_checked: u64,
    /// Of those, the ones that differed: the determinism contract was broken.
    pub contract_violations: u64,
}

/// A checkpoint taken and not committed yet: what it covers, per peer.
#[derive(Debug)]
struct PendingCheckpoint {
    id: CheckpointId,
    /// Last delivered index per channel from each peer.
    delivered: Vec<(SetId, ChannelIndices)>,
    /// Last sent index per channel to each peer.
    sent: Vec<(SetId, ChannelIndices)>,
    /// Peers that had asked for a checkpoint: each gets a CHECKPOINT_ADVANCE at the
    /// commit, an empty one if nothing from or to it advanced, so it may ask again.
    requested_by: BTreeSet<SetId>,
}

/// The recovery protocol of one correlated set.
#[derive(Debug)]
pub struct SetProtocol<P> {
    me: SetId,
    sets: u16,
    incarnation: Incarnation,
    depend: DepVector,
    log: SenderLog<P>,
    inbox: Inbox<P>,
    known: Vec<Incarnation>,
    awaiting: BTreeSet<SetId>,
    last_checkpoint: CheckpointId,
    pending: Vec<PendingCheckpoint>,
    /// Per peer, the sent indices the last CHECKPOINT_ADVANCE announced.
    advertised_sent: Vec<ChannelIndices>,
    /// See [`Config::log_quota`].
    log_quota: Option<usize>,
    /// Per peer: a CHECKPOINT_REQUEST went to it and no CHECKPOINT_ADVANCE (or ROLLBACK)
    /// has come back since.
    asked: Vec<bool>,
    /// Peers that asked this set for a checkpoint since it last took one.
    requested_by: BTreeSet<SetId>,
    /// A peer asked for a checkpoint and the driver has not been told yet.
    checkpoint_wanted: bool,
    /// Dumped blocks, by logger, that the driver found gone with their logger (see
    /// [`SetProtocol::on_logger_lost`]); forgotten when released.
    lost_blocks: BTreeSet<(u16, BlockId)>,
    violations: Vec<ContractViolation>,
    /// After a restore: per peer and channel to it, the sends the peer delivered from a
    /// lost incarnation of this set that this set has not made again yet, as (send
    /// index, this set's interval when the lost incarnation made it), oldest first.
    regenerations: BTreeMap<(SetId, ChannelId), VecDeque<(u64, u64)>>,
    stats: ProtocolStats,
}

impl<P: LogPayload> SetProtocol<P> {
    /// The protocol of set `me` in a fresh cluster of `sets` sets.
    pub fn new(me: SetId, sets: u16) -> Result<Self, ProtocolError> {
        Self::with_config(me, sets, Config::default())
    }

    /// [`SetProtocol::new`] with explicit tunables.
    pub fn with_config(me: SetId, sets: u16, config: Config) -> Result<Self, ProtocolError> {
        if me.0 >= sets {
            return Err(ProtocolError::UnknownSet { set: me, n: sets });
        }
        Ok(SetProtocol {
            me,
            sets,
            incarnation: Incarnation::ORIGINAL,
            depend: DepVector::new(),
            log: SenderLog::new(sets),
            inbox: Inbox::new(me, sets, config.dependency_rule),
            known: vec![Incarnation::ORIGINAL; usize::from(sets)],
            awaiting: BTreeSet::new(),
            last_checkpoint: CheckpointId(0),
            pending: Vec::new(),
            advertised_sent: vec![ChannelIndices::default(); usize::from(sets)],
            log_quota: config.log_quota,
            asked: vec![false; usize::from(sets)],
            requested_by: BTreeSet::new(),
            checkpoint_wanted: false,
            lost_blocks: BTreeSet::new(),
            violations: Vec::new(),
            regenerations: BTreeMap::new(),
            stats: ProtocolStats::default(),
        })
    }

    /// A restarted set: state from its last committed checkpoint, running as
    /// `incarnation` (which must be newer than the snapshot's). Returns the ROLLBACK to
    /// send to every other set (Algorithm 1, lines 40-46). Until every peer has answered
    /// the set is [recovering](SetProtocol::is_recovering); it runs normally meanwhile.
    pub fn restore(
        snapshot: Snapshot<P>,
        incarnation: Incarnation,
        config: Config,
    ) -> Result<(Self, Vec<Action<P>>), ProtocolError> {
        snapshot.validate(snapshot.set, snapshot.sets)?;
        if incarnation <= snapshot.incarnation {
            return Err(ProtocolError::IncarnationNotNewer {
                snapshot: snapshot.incarnation,
                given: incarnation,
            });
        }
        let (me, sets) = (snapshot.set, snapshot.sets);
        let mut p = Self::with_config(me, sets, config)?;
        p.incarnation = incarnation;
        p.depend = snapshot.depend;
        for (from, indices) in &snapshot.delivered {
            for (channel, index) in indices.iter() {
                p.inbox.restore_channel(*from, channel, index);
            }
        }
        for (from, digests) in &snapshot.digests {
            p.inbox.restore_digests(*from, digests);
        }
        for (from, runs) in &snapshot.positions {
            p.inbox.restore_positions(*from, runs);
        }
        p.log = SenderLog::from_channels(sets, snapshot.sent);
        for (to, held) in &snapshot.held_regenerations {
            p.log.restore_held(*to, held);
        }
        p.known = snapshot.known_incarnations;
        p.known[me.index()] = incarnation;
        p.lost_blocks = snapshot.lost_blocks.into_iter().collect();
        p.last_checkpoint = snapshot.id;
        p.awaiting = p.peers().collect();
        p.update_frontier();
        let actions = p
            .peers()
            .map(|to| Action::Control {
                to,
                message: ControlMessage::Rollback(p.report_for(to)),
            })
            .collect::<Vec<_>>();
        p.stats.control_sent += actions.len() as u64;
        Ok((p, actions))
    }

    /// The application of this set sent `payload` on `channel` to set `to` (Algorithm 1,
    /// lines 8-12): assigns the channel's next index, attaches the dependency vector,
    /// logs it, and says whether to transmit it.
    pub fn on_send(
        &mut self,
        to: SetId,
        channel: ChannelId,
        payload: P,
    ) -> Result<SendOutcome<P>, ProtocolError> {
        self.check_peer(to)?;
        let recorded =
            self.log
                .record_send(to, channel, self.incarnation, &self.depend, payload)?;
        if !self.regenerations.is_empty() {
            self.made_again(to, channel, recorded.meta.send_index);
        }
        if let Some(digest) = recorded.digest {
            let index = recorded.meta.send_index;
            if self.awaiting.contains(&to) {
                // Not transmitted because the receiver's checkpoint covers it; its
                // RESPONSE, with the delivered copy's digest, is still on its way.
                self.log.hold_regeneration(to, channel, index, digest);
            } else if let Some(matches) = self.log.check_regeneration(to, &channel, index, digest) {
                self.checked(channel, index, matches, FoundBy::Sender);
            }
        }
        Ok(match recorded.transmit {
            Some(payload) => {
                self.stats.sent += 1;
                self.count_piggyback(&recorded.meta);
                SendOutcome::Transmit {
                    meta: recorded.meta,
                    payload,
                }
            }
            None => {
                self.stats.suppressed += 1;
                SendOutcome::Suppressed {
                    meta: recorded.meta,
                }
            }
        })
    }

    /// An application message from set `from` arrived (Algorithm 1, lines 13-14), on a
    /// connection of `from`'s incarnation `via` (not the message's own
    /// `sender_incarnation`: a resend keeps the incarnation that first sent it). It is
    /// queued or, if already delivered or queued, dropped as a duplicate; if `via` is
    /// older than an incarnation of `from` this set has heard from, it is dropped as
    /// stale. Call [`SetProtocol::poll_delivery`] afterwards.
    ///
    /// Why stale messages are dropped: once this set has answered a newer incarnation's
    /// ROLLBACK, that answer is what the newer one knows of this set's deliveries from
    /// its lost history. A message of the lost history delivered after the answer is
    /// one the newer incarnation cannot know it must make again before it delivers what
    /// depends on it (see "Sends made again" in docs/recovery.md). The newer incarnation
    /// sends everything after the answered indices again, resent or regenerated.
    pub fn on_receive(
        &mut self,
        from: SetId,
        via: Incarnation,
        meta: MessageMeta,
        payload: P,
    ) -> Result<Received, ProtocolError> {
        self.check_peer(from)?;
        if via < self.known[from.index()] {
            self.stats.stale_messages += 1;
            return Ok(Received::Stale);
        }
        if meta.send_index == 0 {
            return Err(ProtocolError::ZeroSendIndex(from));
        }
        if let Some(set) = meta.depend.max_set().filter(|s| s.0 >= self.sets) {
            return Err(ProtocolError::VectorOutOfRange {
                from,
                set,
                n: self.sets,
            });
        }
        self.stats.received += 1;
        let interval = self.interval();
        let r = self
            .inbox
            .insert(from, Queued { meta, payload, via }, interval);
        if r == Received::Duplicate {
            self.stats.duplicates += 1;
            self.stats.regenerations_checked += self.inbox.take_checked();
            for v in self.inbox.take_violations() {
                self.violation(v);
            }
        }
        Ok(r)
    }

    /// The next message to hand to the application, if one is deliverable (Algorithm 1,
    /// lines 15-31): advances the channel's delivered index and the set's interval and
    /// merges the message's dependency vector.
    pub fn poll_delivery(&mut self) -> Option<Delivery<P>> {
        let taken = self.inbox.take(self.interval())?;
        let Queued { meta, payload, .. } = taken.queued;
        self.depend.merge_from(&meta.depend, self.me);
        let interval = self.depend.increment(self.me);
        self.inbox.settle(taken.from, meta.channel, interval);
        self.stats.delivered += 1;
        self.stats.relaxed += u64::from(taken.relaxed);
        Some(Delivery {
            from: taken.from,
            channel: meta.channel,
            send_index: meta.send_index,
            payload,
            interval,
            relaxed: taken.relaxed,
            binding: taken.binding,
        })
    }

    /// An input reached the set from outside every set (a tell of the app's `main`):
    /// it starts a new state interval, like a delivery. What the set sends afterwards
    /// depends on this interval, so a restored set replaying logged messages delivers
    /// none that causally followed the input before the input is made again. Returns
    /// the new interval.
    pub fn on_local_input(&mut self) -> u64 {
        self.on_local_deliveries(1)
    }

    /// `n` messages were put into mailboxes of this set by actors of this set. Each
    /// starts a state interval, like a delivery from another set: a message another set
    /// sends afterwards may depend on them (through the actor that received one), so a
    /// restored set replaying logged messages delivers none that causally followed them
    /// before they are sent again. Without this, a replay could hand a logged message to
    /// an actor before the same-set message that caused it (see docs/recovery.md, "The
    /// interval rule is approximate"). Returns the new interval.
    pub fn on_local_deliveries(&mut self, n: u64) -> u64 {
        let interval = self.interval().saturating_add(n);
        self.depend.set(self.me, interval);
        self.inbox.interval_raised(interval);
        interval
    }

    /// The smallest interval a received message waits for (a binding requirement above
    /// the current interval), if any: the driver folds local deliveries in once they
    /// reach it.
    pub fn next_requirement(&self) -> Option<u64> {
        self.inbox.next_requirement(self.interval())
    }

    /// Takes the protocol part of a set checkpoint (Algorithm 1, line 33). The driver
    /// stores it with the actors' states and calls
    /// [`SetProtocol::checkpoint_committed`] once the whole checkpoint is durable; until
    /// then nothing is announced to the peers, so a crash before the commit falls back to
    /// the previous checkpoint safely.
    pub fn checkpoint(&mut self) -> Snapshot<P> {
        let id = CheckpointId(self.last_checkpoint.0 + 1);
        self.last_checkpoint = id;
        let delivered: Vec<(SetId, ChannelIndices)> = self
            .peers()
            .map(|p| (p, self.inbox.delivered_from(p)))
            .filter(|(_, d)| !d.is_empty())
            .collect();
        let sent = self
            .peers()
            .map(|p| (p, self.log.sent_to(p)))
            .filter(|(_, s)| !s.is_empty())
            .collect();
        self.checkpoint_wanted = false;
        self.pending.push(PendingCheckpoint {
            id,
            delivered: delivered.clone(),
            sent,
            requested_by: std::mem::take(&mut self.requested_by),
        });
        Snapshot {
            format: SNAPSHOT_FORMAT,
            id,
            set: self.me,
            sets: self.sets,
            incarnation: self.incarnation,
            depend: self.depend.clone(),
            digests: self
                .peers()
                .map(|p| (p, self.inbox.digests_from(p)))
                .filter(|(_, d)| !d.is_empty())
                .collect(),
            positions: self
                .peers()
                .map(|p| (p, self.inbox.positions_from(p)))
                .filter(|(_, r)| !r.is_empty())
                .collect(),
            delivered,
            sent: self.log.channels(),
            held_regenerations: self
                .peers()
                .map(|p| (p, self.log.held_regenerations(p)))
                .filter(|(_, d)| !d.is_empty())
                .collect(),
            known_incarnations: self.known.clone(),
            lost_blocks: self.lost_blocks.iter().copied().collect(),
        }
    }

    /// Checkpoint `id` is durable: returns the CHECKPOINT_ADVANCE notices for the sets
    /// whose messages it newly covers (Algorithm 1, lines 34-37), received or sent (the
    /// receivers of the sends forget their digests). Earlier pending checkpoints are
    /// superseded.
    pub fn checkpoint_committed(
        &mut self,
        id: CheckpointId,
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        let pos = self
            .pending
            .iter()
            .position(|p| p.id == id)
            .ok_or(ProtocolError::UnknownCheckpoint(id))?;
        let mut requested_by = BTreeSet::new();
        let mut covered = None;
        for p in self.pending.drain(..=pos) {
            requested_by.extend(p.requested_by.iter().copied());
            covered = Some(p);
        }
        let Some(covered) = covered else {
            return Err(ProtocolError::UnknownCheckpoint(id));
        };
        let mut advanced: Vec<(SetId, ChannelIndices, ChannelIndices)> = Vec::new();
        for (peer, indices) in &covered.delivered {
            let delivered = self.inbox.mark_checkpointed(*peer, indices);
            advanced.push((*peer, delivered, ChannelIndices::default()));
        }
        for (peer, indices) in covered.sent {
            if self.awaiting.contains(&peer) {
                // The peer keeps its digests of what our lost incarnation sent until its
                // RESPONSE has let us compare our regenerations with them.
                continue;
            }
            let before = &mut self.advertised_sent[peer.index()];
            let sent: ChannelIndices = indices.iter().filter(|(c, i)| *i > before.get(c)).collect();
            if sent.is_empty() {
                continue;
            }
            *before = before.iter().chain(sent.iter()).collect();
            match advanced.iter_mut().find(|a| a.0 == peer) {
                Some(a) => a.2 = sent,
                None => advanced.push((peer, ChannelIndices::default(), sent)),
            }
        }
        for peer in &requested_by {
            if !advanced.iter().any(|a| a.0 == *peer) {
                advanced.push((*peer, ChannelIndices::default(), ChannelIndices::default()));
            }
        }
        advanced.sort_unstable_by_key(|a| a.0);
        let mut actions = Vec::new();
        for (peer, checkpointed, sent) in advanced {
            let asked = requested_by.contains(&peer);
            if asked || !checkpointed.is_empty() || !sent.is_empty() {
                actions.push(Action::Control {
                    to: peer,
                    message: ControlMessage::CheckpointAdvance { checkpointed, sent },
                });
            }
        }
        self.stats.checkpoints += 1;
        self.stats.control_sent += actions.len() as u64;
        Ok(actions)
    }

    /// A control message from set `from` arrived.
    pub fn on_control(
        &mut self,
        from: SetId,
        message: ControlMessage,
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        match message {
            ControlMessage::Rollback(report) => self.on_rollback(from, report),
            ControlMessage::Response {
                to_incarnation,
                report,
                digests,
                positions,
            } => self.on_response(from, to_incarnation, report, &digests, &positions),
            ControlMessage::CheckpointAdvance { checkpointed, sent } => {
                self.on_checkpoint_advance(from, &checkpointed, &sent)
            }
            ControlMessage::CheckpointRequest => {
                self.check_peer(from)?;
                self.stats.checkpoint_requests_received += 1;
                self.requested_by.insert(from);
                self.checkpoint_wanted = true;
                Ok(Vec::new())
            }
        }
    }

    /// Enforces the log's memory quota ([`Config::log_quota`]). When the log holds more,
    /// returns CHECKPOINT_REQUESTs for the peers whose messages take the largest shares
    /// of it, largest first, until what the others hold is under half the quota (so the
    /// next few sends do not ask again). A peer is asked once until its next
    /// CHECKPOINT_ADVANCE or ROLLBACK. The driver calls this after sends or
    /// periodically. It never holds a send back: the quota decides when receivers
    /// checkpoint, and the log exceeds it by what is sent while they do.
    pub fn poll_log_quota(&mut self) -> Vec<Action<P>> {
        let Some(quota) = self.log_quota else {
            return Vec::new();
        };
        let total = self.log.stats().bytes();
        if total <= quota {
            return Vec::new();
        }
        let held = self.log.bytes_per_peer().to_vec();
        let asked_bytes: usize = (0..held.len())
            .filter(|&p| self.asked[p])
            .map(|p| held[p])
            .sum();
        let mut remaining = total.saturating_sub(asked_bytes);
        let mut candidates: Vec<SetId> = self
            .peers()
            .filter(|p| !self.asked[p.index()] && held[p.index()] > 0)
            .collect();
        // Largest share first; ties by set number (the sort is stable).
        candidates.sort_by_key(|p| std::cmp::Reverse(held[p.index()]));
        let mut actions = Vec::new();
        for peer in candidates {
            if remaining <= quota / 2 {
                break;
            }
            remaining -= held[peer.index()];
            actions.push(self.ask_for_checkpoint(peer));
        }
        actions
    }

    /// A CHECKPOINT_REQUEST to `peer`, which is not asked again until it answers.
    fn ask_for_checkpoint(&mut self, peer: SetId) -> Action<P> {
        self.asked[peer.index()] = true;
        self.stats.checkpoint_requests_sent += 1;
        self.stats.control_sent += 1;
        Action::Control {
            to: peer,
            message: ControlMessage::CheckpointRequest,
        }
    }

    /// Chooses up to about `max_bytes` of logged payloads to move to a logger node in one
    /// block (see [`log_dump`](super::log_dump)); the driver ships it and calls
    /// [`SetProtocol::log_dumped`] on the logger's acknowledgement.
    pub fn take_log_dump(&mut self, max_bytes: usize) -> Option<LogDump<P>> {
        self.log.take_dump(self.incarnation, max_bytes)
    }

    /// Logger `logger` (and `copy`, with a copy) keeps `dump`'s block: its entries'
    /// payloads leave memory.
    pub fn log_dumped(&mut self, dump: &LogDump<P>, logger: u16, copy: Option<u16>) -> usize {
        self.log.mark_dumped(dump, logger, copy)
    }

    /// Dumped blocks no logged entry points into any more (the driver tells their
    /// loggers).
    pub fn take_released_blocks(&mut self) -> Vec<(u16, BlockId)> {
        let released = self.log.take_released_blocks();
        for at in &released {
            self.lost_blocks.remove(at);
        }
        released
    }

    /// Every dumped block a logged entry points into.
    pub fn dumped_blocks(&self) -> Vec<(u16, BlockId)> {
        self.log.dumped_blocks()
    }

    /// After a restore, what the loggers that answered said they lack (`lacks`, by
    /// logger) of the blocks the log points into at any logger ([`Self::dumped_blocks`]).
    /// A block missing at a logger an entry names, and kept by one the entry does not
    /// name, was relocated after the checkpoint this set restored (see
    /// [`Self::block_relocated`]): the entries point there from now on. Returns, by
    /// logger, the blocks missing there that have no such copy; `loggers` is how many
    /// loggers the run has (an image may name one it does not).
    pub fn locate_restored_blocks(
        &mut self,
        lacks: &BTreeMap<u16, BTreeSet<BlockId>>,
        loggers: u16,
    ) -> BTreeMap<u16, Vec<BlockId>> {
        let named: BTreeSet<(u16, BlockId)> = self.log.dumped_blocks().into_iter().collect();
        let mut missing: BTreeMap<u16, Vec<BlockId>> = BTreeMap::new();
        for &(logger, block) in &named {
            let lacked =
                logger >= loggers || lacks.get(&logger).is_some_and(|m| m.contains(&block));
            if !lacked {
                continue;
            }
            let elsewhere = lacks
                .iter()
                .map(|(&other, m)| (other, m))
                .find(|&(other, m)| {
                    other != logger && !m.contains(&block) && !named.contains(&(other, block))
                });
            match elsewhere {
                Some((other, _)) => {
                    self.block_relocated(logger, other, block);
                }
                None => missing.entry(logger).or_default().push(block),
            }
        }
        missing
    }

    /// Logger `logger` is gone (unreachable, or restarted empty): every block the log
    /// points into there is lost; blocks dumped to it later (after its restart) are not.
    /// Peers with logged entries whose payloads only lost blocks held get a
    /// CHECKPOINT_REQUEST each (unless asked already), so that their checkpoints release
    /// the entries before one of them needs them again.
    pub fn on_logger_lost(&mut self, logger: u16) -> Vec<Action<P>> {
        let gone: Vec<BlockId> = (self.log.dumped_blocks().into_iter())
            .filter(|&(l, _)| l == logger)
            .map(|(_, b)| b)
            .collect();
        self.on_blocks_lost(logger, &gone)
    }

    /// Logger `logger` does not have `blocks` any more (a restored set's checkpoint
    /// points into blocks a restarted logger lost): as [`SetProtocol::on_logger_lost`]
    /// for those blocks only.
    pub fn on_blocks_lost(&mut self, logger: u16, blocks: &[BlockId]) -> Vec<Action<P>> {
        self.lost_blocks
            .extend(blocks.iter().map(|&block| (logger, block)));
        let mut actions = Vec::new();
        for peer in self.log.peers_depending_on(&self.lost_blocks) {
            if !self.asked[peer.index()] {
                actions.push(self.ask_for_checkpoint(peer));
            }
        }
        actions
    }

    /// Blocks lost at logger `logger` that a logged entry still points into and that
    /// another logger keeps a copy of, with that logger: what the driver may copy back
    /// to `logger` (see [`SetProtocol::block_restored`]).
    pub fn refillable_blocks(&self, logger: u16) -> Vec<(BlockId, u16)> {
        let referenced = self.log.dumped_blocks();
        self.lost_blocks
            .range((logger, BlockId::MIN)..=(logger, BlockId::MAX))
            .filter_map(|&(_, block)| {
                let other = referenced
                    .iter()
                    .find(|&&(l, b)| b == block && l != logger)?
                    .0;
                (!self.lost_blocks.contains(&(other, block))).then_some((block, other))
            })
            .collect()
    }

    /// The driver stopped copying lost blocks back to `logger` with some left (it is
    /// full, or a copy failed): their entries are at one logger only now. Their
    /// receivers are asked to checkpoint (unless asked already), which releases them,
    /// so that losing the logger with the other copy too does not lose what a peer may
    /// still need.
    pub fn on_refill_abandoned(&mut self, logger: u16) -> Vec<Action<P>> {
        let single: BTreeSet<(u16, BlockId)> = (self.refillable_blocks(logger).into_iter())
            .map(|(block, _)| (logger, block))
            .collect();
        if single.is_empty() {
            return Vec::new();
        }
        let mut actions = Vec::new();
        for peer in self.log.peers_pointing_into(&single) {
            if !self.asked[peer.index()] {
                actions.push(self.ask_for_checkpoint(peer));
            }
        }
        actions
    }

    /// Logger `to` keeps `block`, which logger `lost_at` lost and had no room for
    /// again: the driver copied it there from its other logger. The log's entries point
    /// into it at `to` from now on, so it has two copies again. Returns how many entries
    /// moved.
    pub fn block_relocated(&mut self, lost_at: u16, to: u16, block: BlockId) -> usize {
        let moved = self.log.relocate_block(block, lost_at, to);
        // Nothing moved: released meanwhile (and no longer lost), or already at `to`.
        if moved > 0 {
            self.lost_blocks.remove(&(lost_at, block));
        }
        moved
    }

    /// Logger `logger` keeps `block` again (the driver copied it back there from its
    /// other logger): it is no longer lost.
    pub fn block_restored(&mut self, logger: u16, block: BlockId) {
        self.lost_blocks.remove(&(logger, block));
    }

    /// Whether a peer asked for a checkpoint (CHECKPOINT_REQUEST) since this set last
    /// took one; clears the request. The driver takes a checkpoint soon after.
    pub fn take_checkpoint_request(&mut self) -> bool {
        std::mem::take(&mut self.checkpoint_wanted)
    }

    /// ROLLBACK from `from` (Algorithm 1, lines 47-51): it restarted with the reported
    /// delivered indices. Resends what the log holds after them (with the logged vectors),
    /// releases what its checkpoint covers, resets the suppression thresholds towards it,
    /// then answers with a RESPONSE (after the resends, so its arrival means they arrived).
    /// If this set is itself still waiting for `from`'s answer and `from` is a new
    /// incarnation, it may never have seen our ROLLBACK: it is sent again.
    pub fn on_rollback(
        &mut self,
        from: SetId,
        report: RecoveryReport,
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        self.check_report(from, &report)?;
        let known = self.known[from.index()];
        if report.incarnation < known {
            self.stats.stale_control += 1;
            return Ok(Vec::new());
        }
        self.learn_incarnation(from, report.incarnation);
        // A new incarnation has not seen our CHECKPOINT_REQUEST.
        self.asked[from.index()] = false;
        // It restored digests from its checkpoint that an announcement since may have
        // covered: announce again at the next commit.
        self.advertised_sent[from.index()] = ChannelIndices::default();
        let mut actions = self.apply_report(from, &report);
        // The peer restarted: what its lost incarnation delivered no longer says what
        // this set must make again before it delivers.
        if self.regenerations.keys().any(|(to, _)| *to == from) {
            self.regenerations.retain(|(to, _), _| *to != from);
            self.update_frontier();
        }
        actions.push(Action::Control {
            to: from,
            message: ControlMessage::Response {
                to_incarnation: report.incarnation,
                report: self.report_for(from),
                digests: self.inbox.digests_from(from),
                positions: self.inbox.positions_from(from),
            },
        });
        self.stats.control_sent += 1;
        if report.incarnation > known && self.awaiting.contains(&from) {
            actions.push(Action::Control {
                to: from,
                message: ControlMessage::Rollback(self.report_for(from)),
            });
            self.stats.control_sent += 1;
        }
        Ok(actions)
    }

    /// `from` reported from its incarnation `incarnation`. If that one is new here, what
    /// older incarnations' connections brought and is still queued is dropped, as
    /// [`SetProtocol::on_receive`] drops what they bring from now on.
    fn learn_incarnation(&mut self, from: SetId, incarnation: Incarnation) {
        let known = &mut self.known[from.index()];
        if incarnation > *known {
            *known = incarnation;
            let interval = self.interval();
            let dropped = self.inbox.discard_older(from, incarnation, interval);
            self.stats.stale_messages += dropped as u64;
        }
    }

    /// RESPONSE from `from` (Algorithm 1, lines 52-53, extended): regenerated messages up
    /// to its delivered indices are suppressed from now on (and compared with `digests`),
    /// the log is released up to its checkpointed indices, and logged messages after its
    /// delivered indices are resent (messages this set sent before its checkpoint may
    /// have been lost in flight when it crashed; Algorithm 1 assumes they were not).
    pub fn on_response(
        &mut self,
        from: SetId,
        to_incarnation: Incarnation,
        report: RecoveryReport,
        digests: &DeliveredDigests,
        positions: &[SendPositions],
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        self.check_report(from, &report)?;
        if report.incarnation < self.known[from.index()] {
            self.stats.stale_control += 1;
            return Ok(Vec::new());
        }
        self.learn_incarnation(from, report.incarnation);
        let actions = self.apply_report(from, &report);
        if to_incarnation == self.incarnation {
            for (channel, index, matches) in self.log.set_expected(from, digests) {
                self.checked(channel, index, matches, FoundBy::Sender);
            }
            self.expect_regenerations(from, positions);
        }
        if to_incarnation == self.incarnation && self.awaiting.remove(&from) {
            self.update_frontier();
        }
        Ok(actions)
    }

    /// CHECKPOINT_ADVANCE from `from` (Algorithm 1, lines 38-39): releases the log
    /// entries its committed checkpoint covers, and forgets the digests of the messages
    /// from `from` it covers (they will not be regenerated).
    pub fn on_checkpoint_advance(
        &mut self,
        from: SetId,
        checkpointed: &ChannelIndices,
        sent: &ChannelIndices,
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        self.check_peer(from)?;
        self.asked[from.index()] = false;
        self.log.release_all(from, checkpointed);
        self.inbox.forget_digests(from, sent);
        Ok(Vec::new())
    }

    /// Takes the determinism-contract violations found since the last call (see
    /// [`replay_check`](super::replay_check)): the driver reports them.
    pub fn take_violations(&mut self) -> Vec<ContractViolation> {
        std::mem::take(&mut self.violations)
    }

    /// Whether violations wait to be taken.
    pub fn has_violations(&self) -> bool {
        !self.violations.is_empty()
    }

    /// Digests of delivered messages held for the check of regenerations.
    pub fn digests_held(&self) -> usize {
        self.inbox.digests_held()
    }

    fn violation(&mut self, v: ContractViolation) {
        self.stats.contract_violations += 1;
        self.violations.push(v);
    }

    /// A regeneration was compared with the delivered copy.
    fn checked(&mut self, channel: ChannelId, send_index: u64, matches: bool, found_by: FoundBy) {
        self.stats.regenerations_checked += 1;
        if !matches {
            self.violation(ContractViolation {
                channel,
                send_index,
                found_by,
            });
        }
    }

    fn apply_report(&mut self, from: SetId, report: &RecoveryReport) -> Vec<Action<P>> {
        self.log.set_suppression(from, &report.delivered);
        self.log.release_all(from, &report.checkpointed);
        let resends = self.log.entries_after(from, &report.delivered);
        let mut actions = Vec::with_capacity(resends.len() + 2);
        for (meta, payload) in resends {
            self.stats.resent += 1;
            self.count_piggyback(&meta);
            actions.push(match payload {
                Held::Here(payload) => Action::Send {
                    to: from,
                    meta,
                    payload,
                },
                Held::Dumped(at) => Action::SendDumped { to: from, meta, at },
            });
        }
        actions
    }

    /// A peer answered this incarnation's ROLLBACK with where in this set's lost history
    /// each message it delivered from this set was sent: the sends not made again yet
    /// are what this set's deliveries wait for (see [`Inbox`]'s frontier). A message
    /// from another set that depends on this set up to interval `r` may depend on any
    /// of them made at `r` or before, and the interval alone cannot tell: several actors
    /// of a set run at once, and a replay interleaves them differently.
    fn expect_regenerations(&mut self, from: SetId, positions: &[SendPositions]) {
        self.regenerations.retain(|(to, _), _| *to != from);
        for run in positions {
            // The driver checked that the channels run from this set to `from`.
            let made = self.last_sent(from, &run.channel);
            // Indices past u64::MAX (a peer's bad report) are dropped, not wrapped.
            let pending: VecDeque<(u64, u64)> = (0u64..)
                .zip(run.at.iter().copied())
                .map_while(|(k, at)| Some((run.first.checked_add(k)?, at)))
                .filter(|(index, _)| *index > made)
                .collect();
            if !pending.is_empty() {
                self.regenerations.insert((from, run.channel), pending);
            }
        }
        self.update_frontier();
    }

    /// This set sent `index` on `channel` to `to`: a send a peer waits for is made again.
    fn made_again(&mut self, to: SetId, channel: ChannelId, index: u64) {
        let Some(q) = self.regenerations.get_mut(&(to, channel)) else {
            return;
        };
        while q.front().is_some_and(|(i, _)| *i <= index) {
            q.pop_front();
        }
        if q.is_empty() {
            self.regenerations.remove(&(to, channel));
        }
        self.update_frontier();
    }

    /// Hands the inbox the earliest position of a send still to be made again.
    fn update_frontier(&mut self) {
        // Until every peer has answered, this set does not know what they delivered from
        // its lost incarnations: a message may depend on any send, even one made before
        // the first event (interval 0).
        let frontier = if self.awaiting.is_empty() {
            self.regenerations
                .values()
                .filter_map(|q| q.front().map(|(_, at)| *at))
                .min()
                .unwrap_or(u64::MAX)
        } else {
            0
        };
        let interval = self.interval();
        self.inbox.set_frontier(frontier, interval);
    }

    /// The first send this set must make again before it delivers what waits for it:
    /// (peer, channel, send index, interval of the lost history when it was made).
    pub fn next_regeneration(&self) -> Option<(SetId, ChannelId, u64, u64)> {
        self.regenerations
            .iter()
            .filter_map(|((to, ch), q)| q.front().map(|(i, at)| (*to, *ch, *i, *at)))
            .min_by_key(|(_, _, _, at)| *at)
    }

    fn report_for(&self, peer: SetId) -> RecoveryReport {
        RecoveryReport {
            incarnation: self.incarnation,
            delivered: self.inbox.delivered_from(peer),
            checkpointed: self.inbox.checkpointed_from(peer),
        }
    }

    fn check_report(&self, from: SetId, report: &RecoveryReport) -> Result<(), ProtocolError> {
        self.check_peer(from)?;
        if report
            .checkpointed
            .iter()
            .any(|(c, i)| i > report.delivered.get(&c))
        {
            return Err(ProtocolError::InconsistentReport(from));
        }
        Ok(())
    }

    fn check_peer(&self, set: SetId) -> Result<(), ProtocolError> {
        if set.0 >= self.sets {
            Err(ProtocolError::UnknownSet { set, n: self.sets })
        } else if set == self.me {
            Err(ProtocolError::SelfAddressed(set))
        } else {
            Ok(())
        }
    }

    fn count_piggyback(&mut self, meta: &MessageMeta) {
        let len = meta.piggyback_len() as u64;
        self.stats.piggyback_bytes += len;
        self.stats.max_piggyback = self.stats.max_piggyback.max(len);
    }

    fn peers(&self) -> impl Iterator<Item = SetId> + 'static {
        let me = self.me;
        (0..self.sets).map(SetId).filter(move |s| *s != me)
    }

    /// This set.
    pub fn set(&self) -> SetId {
        self.me
    }

    /// Number of sets in the cluster.
    pub fn sets(&self) -> u16 {
        self.sets
    }

    /// This set's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// This set's own interval: how many inter-set messages it has delivered in its
    /// (checkpointed plus current) history.
    pub fn interval(&self) -> u64 {
        self.depend.get(self.me)
    }

    /// The current dependency vector.
    pub fn depend(&self) -> &DepVector {
        &self.depend
    }

    /// Whether some peer has not answered this incarnation's ROLLBACK yet.
    pub fn is_recovering(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// The peers that have not answered this incarnation's ROLLBACK yet.
    pub fn awaiting(&self) -> impl Iterator<Item = SetId> + '_ {
        self.awaiting.iter().copied()
    }

    /// Size of the sender-based log.
    pub fn log_stats(&self) -> LogStats {
        self.log.stats()
    }

    /// Activity counters.
    pub fn stats(&self) -> ProtocolStats {
        self.stats
    }

    /// Whether [`SetProtocol::poll_delivery`] would return a message now.
    pub fn has_deliverable(&self) -> bool {
        self.inbox.has_ready()
    }

    /// Received messages not delivered yet.
    pub fn queued(&self) -> usize {
        self.inbox.queued()
    }

    /// Channels whose next message waits for this set's interval to grow.
    pub fn blocked(&self) -> usize {
        self.inbox.blocked()
    }

    /// What the inbox holds back and why (see [`Inbox::describe_waiting`]), with the
    /// interval and the peers still awaited: a diagnostic for a stalled set.
    pub fn describe_waiting(&self, limit: usize) -> String {
        let regeneration = match self.next_regeneration() {
            Some((to, channel, index, at)) => format!(
                " first send to make again: {channel:?}#{index} to {to} (made at interval \
                 {at} before the failure; {} sends to make again in all)",
                self.regenerations
                    .values()
                    .map(VecDeque::len)
                    .sum::<usize>()
            ),
            None => String::new(),
        };
        format!(
            "interval={} awaiting={:?} queued={} blocked={} ready={}{regeneration} {}",
            self.interval(),
            self.awaiting,
            self.inbox.queued(),
            self.inbox.blocked(),
            self.inbox.has_ready(),
            self.inbox.describe_waiting(limit)
        )
    }

    /// Index of the last message sent on `channel` to `to`.
    pub fn last_sent(&self, to: SetId, channel: &ChannelId) -> u64 {
        self.log.channel(to, channel).map_or(0, |c| c.last_send)
    }

    /// Last delivered index per channel from `from`.
    pub fn delivered_from(&self, from: SetId) -> ChannelIndices {
        self.inbox.delivered_from(from)
    }

    /// Read-only, for the driver's diagnosis of a ROLLBACK from `to` before it is
    /// handled: the channels to `to` whose log was released past the indices `delivered`
    /// the ROLLBACK reports, as `(channel, released, delivered)` (see
    /// [`SenderLog::released_past`]). Non-empty: `to` restored an older state than the
    /// checkpoint it committed, and the messages in between cannot be resent.
    pub fn released_past(
        &self,
        to: SetId,
        delivered: &ChannelIndices,
    ) -> Vec<(ChannelId, u64, u64)> {
        self.log.released_past(to, delivered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;

    fn ch(a: u16, b: u16) -> ChannelId {
        ChannelId::new(ActorId::new(a, 0).unwrap(), ActorId::new(b, 0).unwrap())
    }

    fn meta(from: u16, to: u16, index: u64) -> MessageMeta {
        MessageMeta {
            channel: ch(from, to),
            send_index: index,
            sender_incarnation: Incarnation(0),
            depend: DepVector::new(),
        }
    }

    type Bytes = Vec<u8>;

    /// Set 0 sends `msgs` to set 1, which delivers them all; returns both and the
    /// checkpoint set 0 took after the first message.
    fn sent_after_a_checkpoint(
        msgs: &[&[u8]],
    ) -> (SetProtocol<Bytes>, SetProtocol<Bytes>, Snapshot<Bytes>) {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut r = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let mut snap = None;
        for (i, m) in msgs.iter().enumerate() {
            let SendOutcome::Transmit { meta, payload } =
                f.on_send(SetId(1), ch(0, 1), m.to_vec()).unwrap()
            else {
                panic!("sent")
            };
            r.on_receive(SetId(0), meta.sender_incarnation, meta, payload)
                .unwrap();
            assert!(r.poll_delivery().is_some());
            if i == 0 {
                snap = Some(f.checkpoint());
            }
        }
        (f, r, snap.expect("a message"))
    }

    /// Restores set 0 from `snap` and lets set 1 answer its ROLLBACK; returns the restored
    /// set and the answer's digests (delivered after set 0's checkpoint).
    fn restore_and_answer(
        r: &mut SetProtocol<Vec<u8>>,
        snap: Snapshot<Vec<u8>>,
    ) -> (SetProtocol<Vec<u8>>, ControlMessage) {
        let (f, actions) = SetProtocol::restore(snap, Incarnation(1), Config::default()).unwrap();
        let Some(Action::Control {
            message: ControlMessage::Rollback(report),
            ..
        }) = actions.into_iter().next()
        else {
            panic!("rollback")
        };
        let answer = r.on_rollback(SetId(0), report).unwrap();
        let Some(Action::Control { message, .. }) = answer.into_iter().last() else {
            panic!("response")
        };
        (f, message)
    }

    #[test]
    fn a_regeneration_that_differs_from_the_delivered_copy_is_found_by_the_sender() {
        let (_, mut r, snap) = sent_after_a_checkpoint(&[b"one", b"two", b"three"]);
        let (mut f, response) = restore_and_answer(&mut r, snap);
        let ControlMessage::Response { digests, .. } = &response else {
            panic!("response")
        };
        assert_eq!(digests.len(), 3, "set 0's checkpoint was never committed");
        f.on_control(SetId(1), response).unwrap();
        for m in [&b"two"[..], b"THREE"] {
            let sent = f.on_send(SetId(1), ch(0, 1), m.to_vec()).unwrap();
            assert!(matches!(sent, SendOutcome::Suppressed { .. }));
        }
        assert_eq!(f.stats().regenerations_checked, 2);
        assert_eq!(
            f.take_violations(),
            vec![ContractViolation {
                channel: ch(0, 1),
                send_index: 3,
                found_by: FoundBy::Sender
            }]
        );
        assert_eq!(f.stats().contract_violations, 1);
        assert!(!f.has_violations());
    }

    #[test]
    fn a_held_regeneration_is_still_compared_after_its_set_fails_again() {
        let (_, mut r, snap) = sent_after_a_checkpoint(&[b"one", b"two", b"three"]);
        // Set 1's checkpoint covers all three deliveries; its CHECKPOINT_ADVANCE, sent
        // while set 0 was down, reaches set 0's next incarnation.
        let r_snap = r.checkpoint();
        let advance = r.checkpoint_committed(r_snap.id).unwrap();
        let (mut f1, _) = SetProtocol::restore(snap, Incarnation(1), Config::default()).unwrap();
        for a in advance {
            let Action::Control { message, .. } = a else {
                panic!()
            };
            f1.on_control(SetId(1), message).unwrap();
        }
        // Its regeneration of message 2 differs; it is not transmitted (covered) and waits
        // for set 1's RESPONSE to be compared. The set checkpoints, then fails again.
        let sent = f1.on_send(SetId(1), ch(0, 1), b"TWO".to_vec()).unwrap();
        assert!(matches!(sent, SendOutcome::Suppressed { .. }));
        assert_eq!(f1.stats().regenerations_checked, 0, "held");
        let (mut f2, actions) =
            SetProtocol::restore(f1.checkpoint(), Incarnation(2), Config::default()).unwrap();
        let Some(Action::Control {
            message: ControlMessage::Rollback(report),
            ..
        }) = actions.into_iter().next()
        else {
            panic!("rollback")
        };
        let Some(Action::Control { message, .. }) = r.on_rollback(SetId(0), report).unwrap().pop()
        else {
            panic!("response")
        };
        f2.on_control(SetId(1), message).unwrap();
        assert_eq!(
            f2.take_violations(),
            vec![ContractViolation {
                channel: ch(0, 1),
                send_index: 2,
                found_by: FoundBy::Sender
            }]
        );
    }

    #[test]
    fn a_regeneration_sent_before_the_response_is_compared_by_the_receiver() {
        let (_, mut r, snap) = sent_after_a_checkpoint(&[b"one", b"two", b"three"]);
        let (mut f, _) = SetProtocol::restore(snap, Incarnation(1), Config::default()).unwrap();
        for m in [&b"TWO"[..], b"three"] {
            let SendOutcome::Transmit { meta, payload } =
                f.on_send(SetId(1), ch(0, 1), m.to_vec()).unwrap()
            else {
                panic!("not suppressed yet: no RESPONSE")
            };
            assert_eq!(
                r.on_receive(SetId(0), meta.sender_incarnation, meta, payload),
                Ok(Received::Duplicate)
            );
        }
        assert_eq!(r.stats().regenerations_checked, 2);
        assert_eq!(
            r.take_violations(),
            vec![ContractViolation {
                channel: ch(0, 1),
                send_index: 2,
                found_by: FoundBy::Receiver
            }]
        );
    }

    #[test]
    fn a_receiver_keeps_digests_only_until_the_senders_checkpoint_covers_them() {
        let (mut f, mut r, _) = sent_after_a_checkpoint(&[b"one", b"two", b"three"]);
        assert_eq!(r.digests_held(), 3);
        let snap = f.checkpoint();
        let advance = f.checkpoint_committed(snap.id).unwrap();
        let [Action::Control { to, message }] = &advance[..] else {
            panic!("one advance: {advance:?}")
        };
        assert_eq!(
            *to,
            SetId(1),
            "sent to the receiver, which sent nothing back"
        );
        r.on_control(SetId(0), message.clone()).unwrap();
        assert_eq!(r.digests_held(), 0);
        let again = f.checkpoint().id;
        assert!(
            f.checkpoint_committed(again).unwrap().is_empty(),
            "nothing new to announce"
        );
        let (mut f, response) = restore_and_answer(&mut r, snap);
        let ControlMessage::Response { digests, .. } = &response else {
            panic!("response")
        };
        assert!(digests.is_empty());
        f.on_control(SetId(1), response).unwrap();
        let sent = f.on_send(SetId(1), ch(0, 1), b"four".to_vec()).unwrap();
        assert!(matches!(sent, SendOutcome::Transmit { .. }));
        assert_eq!(f.stats().regenerations_checked, 0);
    }

    #[test]
    fn bad_input_is_refused_and_changes_nothing() {
        let mut p = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        let e = p
            .on_receive(SetId(3), Incarnation(0), meta(3, 0, 1), vec![])
            .unwrap_err();
        assert_eq!(
            e,
            ProtocolError::UnknownSet {
                set: SetId(3),
                n: 3
            }
        );
        let e = p
            .on_receive(SetId(0), Incarnation(0), meta(0, 0, 1), vec![])
            .unwrap_err();
        assert_eq!(e, ProtocolError::SelfAddressed(SetId(0)));
        let e = p
            .on_receive(SetId(1), Incarnation(0), meta(1, 0, 0), vec![])
            .unwrap_err();
        assert_eq!(e, ProtocolError::ZeroSendIndex(SetId(1)));
        let mut m = meta(1, 0, 1);
        m.depend.set(SetId(9), 1);
        assert!(matches!(
            p.on_receive(SetId(1), Incarnation(0), m, vec![]),
            Err(ProtocolError::VectorOutOfRange { .. })
        ));
        assert!(p.on_send(SetId(0), ch(0, 0), vec![]).is_err());
        assert!(p.on_send(SetId(7), ch(0, 7), vec![]).is_err());
        let bad_report = RecoveryReport {
            incarnation: Incarnation(1),
            delivered: ChannelIndices::default(),
            checkpointed: [(ch(0, 1), 1)].into_iter().collect(),
        };
        assert_eq!(
            p.on_rollback(SetId(1), bad_report).unwrap_err(),
            ProtocolError::InconsistentReport(SetId(1))
        );
        assert!(p.checkpoint_committed(CheckpointId(42)).is_err());
        assert_eq!(p.stats(), ProtocolStats::default());
        assert_eq!(p.queued(), 0);
        assert!(SetProtocol::<Vec<u8>>::new(SetId(3), 3).is_err());
    }

    #[test]
    fn restore_refuses_foreign_or_damaged_snapshots() {
        let mut p = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        p.on_send(SetId(1), ch(0, 1), vec![1]).unwrap();
        p.on_send(SetId(1), ch(0, 1), vec![2]).unwrap();
        let snap = p.checkpoint();
        let cfg = Config::default();

        assert!(matches!(
            SetProtocol::restore(snap.clone(), Incarnation(0), cfg),
            Err(ProtocolError::IncarnationNotNewer { .. })
        ));
        let mut wrong_size = snap.clone();
        wrong_size.sets = 3;
        assert!(SetProtocol::restore(wrong_size, Incarnation(1), cfg).is_err());
        let mut gap = snap.clone();
        gap.sent[0].2.entries.pop_front();
        assert!(matches!(
            SetProtocol::restore(gap, Incarnation(1), cfg),
            Err(ProtocolError::InvalidSnapshot(_))
        ));
        let mut future = snap.clone();
        future.format = SNAPSHOT_FORMAT + 1;
        assert!(SetProtocol::restore(future, Incarnation(1), cfg).is_err());
        let mut twice = snap.clone();
        twice.sent.push(twice.sent[0].clone());
        assert!(matches!(
            SetProtocol::restore(twice, Incarnation(1), cfg),
            Err(ProtocolError::InvalidSnapshot(_))
        ));
        let mut exhausted = snap.clone();
        exhausted.depend.set(SetId(0), u64::MAX);
        assert!(matches!(
            SetProtocol::restore(exhausted, Incarnation(1), cfg),
            Err(ProtocolError::InvalidSnapshot(_))
        ));

        let (q, actions) = SetProtocol::restore(snap, Incarnation(1), cfg).unwrap();
        assert_eq!(q.log_stats().entries, 2);
        assert!(q.is_recovering());
        assert!(matches!(
            &actions[..],
            [Action::Control {
                to: SetId(1),
                message: ControlMessage::Rollback(_)
            }]
        ));
    }

    #[test]
    fn a_replayed_answer_to_what_mains_tell_caused_waits_for_the_tell_to_be_made_again() {
        // Set 0's main tells one of its actors to start; the actor asks set 1; set 1
        // answers. Set 0 dies before any checkpoint and restarts from the beginning.
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let fresh = a.checkpoint();
        assert_eq!(a.on_local_input(), 1, "main's tell starts interval 1");
        let SendOutcome::Transmit { meta, payload } =
            a.on_send(SetId(1), ch(0, 1), b"ask".to_vec()).unwrap()
        else {
            panic!("sent")
        };
        b.on_receive(SetId(0), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert!(b.poll_delivery().is_some());
        let SendOutcome::Transmit { meta, payload } =
            b.on_send(SetId(0), ch(1, 0), b"answer".to_vec()).unwrap()
        else {
            panic!("sent")
        };
        let (mut restarted, rollbacks) =
            SetProtocol::restore(fresh, Incarnation(1), Config::default()).unwrap();
        // Set 1 resends its logged answer at once; the actor must not see it before
        // main's tell, which it never would have in a failure-free run.
        restarted
            .on_receive(SetId(1), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert!(restarted.poll_delivery().is_none());
        assert_eq!(restarted.blocked(), 1);
        answer_rollbacks(&mut restarted, &mut b, rollbacks);
        restarted.on_local_input();
        assert!(
            restarted.poll_delivery().is_none(),
            "set 1 delivered the ask: the answer waits for it to be made again"
        );
        assert!(matches!(
            restarted.on_send(SetId(1), ch(0, 1), b"ask".to_vec()),
            Ok(SendOutcome::Suppressed { .. })
        ));
        let d = restarted
            .poll_delivery()
            .expect("deliverable after the tell and the ask");
        assert_eq!(d.payload, b"answer");
    }

    #[test]
    fn what_a_replaced_incarnation_still_sends_is_dropped_and_its_successor_sends_it_again() {
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let fresh = a.checkpoint();
        let send = |a: &mut SetProtocol<Vec<u8>>, text: &[u8]| match a
            .on_send(SetId(1), ch(0, 1), text.to_vec())
            .unwrap()
        {
            SendOutcome::Transmit { meta, payload } => (meta, payload),
            SendOutcome::Suppressed { .. } => panic!("transmitted"),
        };
        // Incarnation 0 sends two messages and dies; the first reached set 1 and waits in
        // its inbox, the second is still on the old connection.
        let (m1, p1) = send(&mut a, b"one");
        let (m2, p2) = send(&mut a, b"two");
        assert_eq!(
            b.on_receive(SetId(0), Incarnation(0), m1, p1).unwrap(),
            Received::Queued
        );
        let (mut a, rollbacks) =
            SetProtocol::restore(fresh, Incarnation(1), Config::default()).unwrap();
        answer_rollbacks(&mut a, &mut b, rollbacks);
        // Set 1 answered that it delivered nothing: neither message may be delivered now.
        assert!(b.poll_delivery().is_none(), "the queued copy was dropped");
        assert_eq!(
            b.on_receive(SetId(0), Incarnation(0), m2, p2).unwrap(),
            Received::Stale
        );
        assert!(b.poll_delivery().is_none());
        assert_eq!(b.stats().stale_messages, 2);
        // The new incarnation makes both sends again; set 1 delivers them in order.
        for text in [&b"one"[..], b"two"] {
            let (m, p) = send(&mut a, text);
            assert_eq!(
                b.on_receive(SetId(0), Incarnation(1), m, p).unwrap(),
                Received::Queued
            );
            assert_eq!(b.poll_delivery().expect("delivered").payload, text);
        }
    }

    #[test]
    fn a_resend_keeps_its_first_incarnation_and_is_taken_from_the_new_connection() {
        // Set 0 sends before its checkpoint: the checkpoint's log holds the message and
        // the restarted set resends it.
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let SendOutcome::Transmit { .. } = a.on_send(SetId(1), ch(0, 1), b"one".to_vec()).unwrap()
        else {
            panic!("transmitted")
        };
        let snap = a.checkpoint();
        a.checkpoint_committed(snap.id).unwrap();
        // The original copy is lost in flight; incarnation 1 resends its logged copy
        // once set 1 answered its ROLLBACK.
        let (mut a, rollbacks) =
            SetProtocol::restore(snap, Incarnation(1), Config::default()).unwrap();
        let mut resent = Vec::new();
        for r in rollbacks {
            let Action::Control { message, .. } = r else {
                continue;
            };
            for answer in b.on_control(SetId(0), message).unwrap() {
                if let Action::Control { message, .. } = answer {
                    resent.extend(a.on_control(SetId(1), message).unwrap());
                }
            }
        }
        let [Action::Send { meta, payload, .. }] = &resent[..] else {
            panic!("one resend: {resent:?}")
        };
        assert_eq!(
            meta.sender_incarnation,
            Incarnation(0),
            "a resend keeps its origin"
        );
        assert_eq!(
            b.on_receive(SetId(0), Incarnation(1), meta.clone(), payload.clone())
                .unwrap(),
            Received::Queued
        );
        assert_eq!(b.poll_delivery().expect("delivered").payload, b"one");
    }

    /// `peer` answers `restarted`'s ROLLBACKs (the resends of its log are dropped here:
    /// the tests hand them over themselves), and `restarted` takes the RESPONSE.
    fn answer_rollbacks(
        restarted: &mut SetProtocol<Vec<u8>>,
        peer: &mut SetProtocol<Vec<u8>>,
        rollbacks: Vec<Action<Vec<u8>>>,
    ) {
        for a in rollbacks {
            let Action::Control { message, .. } = a else {
                continue;
            };
            for answer in peer.on_control(restarted.set(), message).unwrap() {
                if let Action::Control { message, .. } = answer {
                    restarted.on_control(peer.set(), message).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_message_that_depends_on_a_send_a_peer_delivered_waits_until_it_is_made_again() {
        // Two actors of set 0 run at once: X asks set 1 at interval 1; meanwhile Y takes
        // two messages (intervals 2 and 3). Set 1 answers X. Set 0 restarts from the
        // beginning, and in the replay Y runs ahead: the interval reaches 3 before X has
        // asked again. The answer must still wait for X's ask: the interval counts
        // events, not which ones.
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let fresh = a.checkpoint();
        a.on_local_input();
        let SendOutcome::Transmit { meta, payload } =
            a.on_send(SetId(1), ch(0, 1), b"ask".to_vec()).unwrap()
        else {
            panic!("sent")
        };
        a.on_local_deliveries(2);
        b.on_receive(SetId(0), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert!(b.poll_delivery().is_some());
        let SendOutcome::Transmit { meta, payload } =
            b.on_send(SetId(0), ch(1, 0), b"answer".to_vec()).unwrap()
        else {
            panic!("sent")
        };
        let (mut restarted, rollbacks) =
            SetProtocol::restore(fresh, Incarnation(1), Config::default()).unwrap();
        answer_rollbacks(&mut restarted, &mut b, rollbacks);
        restarted
            .on_receive(SetId(1), meta.sender_incarnation, meta, payload)
            .unwrap();
        restarted.on_local_deliveries(3);
        assert!(
            restarted.poll_delivery().is_none(),
            "the interval is reached, but X has not asked again"
        );
        assert!(restarted.describe_waiting(4).contains("made again"));
        let (peer, channel, index, at) = restarted.next_regeneration().expect("pending");
        assert_eq!((peer, channel, index, at), (SetId(1), ch(0, 1), 1, 1));
        let _ = restarted
            .on_send(SetId(1), ch(0, 1), b"ask".to_vec())
            .unwrap();
        assert!(restarted.poll_delivery().is_some(), "X asked again");
        assert_eq!(restarted.next_regeneration(), None);
    }

    #[test]
    fn a_replayed_request_waits_for_the_same_set_messages_that_preceded_its_cause() {
        // In set 0, actor A's message to actor B (same set) lets B finish; B reports to
        // set 1, whose answer is for B. Set 0 dies and restarts from before A's message.
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let before = a.checkpoint();
        assert_eq!(a.on_local_deliveries(2), 2, "A's two halos to B are events");
        let SendOutcome::Transmit { meta, payload } =
            a.on_send(SetId(1), ch(0, 1), b"finished".to_vec()).unwrap()
        else {
            panic!("sent")
        };
        b.on_receive(SetId(0), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert!(b.poll_delivery().is_some());
        let SendOutcome::Transmit { meta, payload } = b
            .on_send(SetId(0), ch(1, 0), b"send your values".to_vec())
            .unwrap()
        else {
            panic!("sent")
        };
        let (mut restarted, rollbacks) =
            SetProtocol::restore(before, Incarnation(1), Config::default()).unwrap();
        answer_rollbacks(&mut restarted, &mut b, rollbacks);
        restarted
            .on_receive(SetId(1), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert_eq!(restarted.next_requirement(), Some(2));
        restarted.on_local_deliveries(1);
        assert!(
            restarted.poll_delivery().is_none(),
            "one of A's two messages is not enough"
        );
        restarted.on_local_deliveries(1);
        assert!(
            restarted.poll_delivery().is_none(),
            "set 1 delivered B's report: the request waits for it to be made again"
        );
        let _ = restarted
            .on_send(SetId(1), ch(0, 1), b"finished".to_vec())
            .unwrap();
        let d = restarted.poll_delivery().expect("deliverable after both");
        assert_eq!(d.payload, b"send your values");
        assert_eq!(restarted.next_requirement(), None);
    }

    #[test]
    fn a_snapshot_survives_encoding_and_restores_the_same_state() {
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let mut b = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        for i in 0..3u8 {
            if let SendOutcome::Transmit { meta, payload } =
                b.on_send(SetId(0), ch(1, 0), vec![i]).unwrap()
            {
                a.on_receive(SetId(1), meta.sender_incarnation, meta, payload)
                    .unwrap();
            }
        }
        assert_eq!(a.poll_delivery().map(|d| d.interval), Some(1));
        a.on_send(SetId(1), ch(0, 1), vec![9]).unwrap();
        let snap = a.checkpoint();
        let bytes = crate::wire::encode(&snap).unwrap();
        let back: Snapshot<Vec<u8>> = crate::wire::decode(&bytes).unwrap();
        assert_eq!(back, snap);
        let (r, _) = SetProtocol::restore(back, Incarnation(1), Config::default()).unwrap();
        assert_eq!(r.interval(), 1);
        assert_eq!(r.delivered_from(SetId(1)).get(&ch(1, 0)), 1);
        assert_eq!(r.last_sent(SetId(1), &ch(0, 1)), 1);
        assert_eq!(r.queued(), 0, "undelivered messages are not checkpointed");
    }

    #[test]
    fn checkpoint_advance_waits_for_the_commit_and_names_only_advanced_channels() {
        let mut a = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        a.on_receive(SetId(1), Incarnation(0), meta(1, 0, 1), vec![])
            .unwrap();
        a.on_receive(SetId(2), Incarnation(0), meta(2, 0, 1), vec![])
            .unwrap();
        a.poll_delivery();
        let first = a.checkpoint();
        a.poll_delivery();
        let second = a.checkpoint();
        // Committing the later one supersedes the earlier.
        let actions = a.checkpoint_committed(second.id).unwrap();
        let targets: Vec<SetId> = actions
            .iter()
            .map(|x| match x {
                Action::Control { to, .. } => *to,
                Action::Send { to, .. } | Action::SendDumped { to, .. } => *to,
            })
            .collect();
        assert_eq!(targets, vec![SetId(1), SetId(2)]);
        assert!(a.checkpoint_committed(first.id).is_err());
        let third = a.checkpoint();
        assert!(a.checkpoint_committed(third.id).unwrap().is_empty());
    }

    /// Routes every control message in `actions` from set `from` to the matching set of
    /// `sets` (indexed by set number).
    fn route(sets: &mut [SetProtocol<Bytes>], from: u16, actions: Vec<Action<Bytes>>) {
        for a in actions {
            let Action::Control { to, message } = a else {
                panic!("only control messages expected")
            };
            let more = sets[to.index()].on_control(SetId(from), message).unwrap();
            assert!(more.is_empty());
        }
    }

    fn requests(actions: &[Action<Bytes>]) -> Vec<u16> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Control {
                    to,
                    message: ControlMessage::CheckpointRequest,
                } => Some(to.0),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_log_over_its_quota_asks_the_heaviest_receivers_to_checkpoint_once_until_they_do() {
        let config = Config {
            log_quota: Some(1000),
            ..Config::default()
        };
        let mut sets: Vec<SetProtocol<Bytes>> = (0..4)
            .map(|s| SetProtocol::with_config(SetId(s), 4, config).unwrap())
            .collect();
        let send = |sets: &mut Vec<SetProtocol<Bytes>>, to: u16, len: usize| {
            let SendOutcome::Transmit { meta, payload } =
                sets[0].on_send(SetId(to), ch(0, to), vec![1; len]).unwrap()
            else {
                panic!("transmitted")
            };
            sets[usize::from(to)]
                .on_receive(SetId(0), meta.sender_incarnation, meta, payload)
                .unwrap();
            assert!(sets[usize::from(to)].poll_delivery().is_some());
        };
        // Under the quota: nobody is asked.
        send(&mut sets, 1, 400);
        send(&mut sets, 2, 450);
        send(&mut sets, 3, 100);
        assert!(sets[0].poll_log_quota().is_empty());
        // Over it (1250 bytes held, plus a byte of vector each): set 2 holds the largest
        // share; without it 500 bytes and the vectors stay, more than half the quota, so
        // set 1 is asked too, and set 3 is not.
        send(&mut sets, 2, 300);
        let asked = sets[0].poll_log_quota();
        assert_eq!(requests(&asked), vec![2, 1]);
        assert_eq!(sets[0].stats().checkpoint_requests_sent, 2);
        // Asked once: more sends do not ask them again before they checkpoint.
        send(&mut sets, 2, 100);
        assert!(sets[0].poll_log_quota().is_empty());
        route(&mut sets, 0, asked);
        assert!(sets[2].take_checkpoint_request());
        assert!(
            !sets[2].take_checkpoint_request(),
            "one request, one checkpoint"
        );
        assert!(!sets[3].take_checkpoint_request());
        // Set 2 checkpoints: its CHECKPOINT_ADVANCE releases its 850 bytes.
        let snap = sets[2].checkpoint();
        let advance = sets[2].checkpoint_committed(snap.id).unwrap();
        route(&mut sets, 2, advance);
        assert_eq!(sets[0].log_stats().payload_bytes, 500);
        // Then set 1, and set 0 may ask it again.
        let snap = sets[1].checkpoint();
        let advance = sets[1].checkpoint_committed(snap.id).unwrap();
        assert!(matches!(
            &advance[..],
            [Action::Control { message: ControlMessage::CheckpointAdvance { checkpointed, .. }, .. }]
                if !checkpointed.is_empty()
        ));
        route(&mut sets, 1, advance);
        assert_eq!(sets[0].log_stats().payload_bytes, 100);
        send(&mut sets, 1, 1000);
        assert_eq!(requests(&sets[0].poll_log_quota()), vec![1]);
        assert_eq!(sets[1].stats().checkpoint_requests_received, 1);
    }

    #[test]
    fn a_rollback_resends_dumped_messages_from_their_block_in_channel_order() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        for i in 1..=3u8 {
            f.on_send(SetId(1), ch(0, 1), vec![i; 10]).unwrap();
        }
        let dump = f.take_log_dump(20).unwrap();
        assert_eq!(f.log_dumped(&dump, 7, None), 2);
        assert_eq!(f.log_stats().payload_bytes, 10);
        // The receiver restarted from the beginning: all three come again, the first two
        // named by their block, in index order.
        let r = SetProtocol::<Vec<u8>>::new(SetId(1), 2).unwrap();
        let actions = f
            .on_control(SetId(1), ControlMessage::Rollback(r.report_for(SetId(0))))
            .unwrap();
        let resent: Vec<(u64, Option<u32>)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::SendDumped { meta, at, .. } => {
                    assert_eq!((at.logger, at.block), (7, dump.block));
                    Some((meta.send_index, Some(at.slot)))
                }
                Action::Send { meta, .. } => Some((meta.send_index, None)),
                Action::Control { .. } => None,
            })
            .collect();
        assert_eq!(resent, vec![(1, Some(0)), (2, Some(1)), (3, None)]);
    }

    #[test]
    fn a_lost_logger_makes_the_receivers_of_what_it_kept_checkpoint() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        f.on_send(SetId(2), ch(0, 2), vec![2; 5]).unwrap();
        let dump = f.take_log_dump(100).unwrap();
        assert_eq!(
            dump.to,
            SetId(1),
            "the heaviest receiver's messages go first"
        );
        f.log_dumped(&dump, 0, None);
        assert!(f.on_logger_lost(1).is_empty(), "logger 1 kept nothing");
        let asks = f.on_logger_lost(0);
        assert!(matches!(
            &asks[..],
            [Action::Control {
                to: SetId(1),
                message: ControlMessage::CheckpointRequest
            }]
        ));
        assert!(
            f.on_logger_lost(0).is_empty(),
            "asked once until it checkpoints"
        );
    }

    #[test]
    fn a_restarted_logger_loses_only_the_blocks_dumped_to_it_before() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        let before = f.take_log_dump(100).unwrap();
        f.log_dumped(&before, 0, None);
        // Logger 0 restarts empty: set 1's block there is gone.
        assert_eq!(f.on_logger_lost(0).len(), 1);
        // Set 2's messages go to the restarted logger afterwards; losing another logger
        // (1, which keeps nothing) does not count them as lost.
        f.on_send(SetId(2), ch(0, 2), vec![2; 5]).unwrap();
        let after = f.take_log_dump(100).unwrap();
        assert_eq!(after.to, SetId(2));
        f.log_dumped(&after, 0, None);
        assert!(f.on_logger_lost(1).is_empty());
        // A restored set learns from the logger which blocks its checkpoint points into
        // that it does not have.
        let asks = f.on_blocks_lost(0, &[after.block]);
        assert!(matches!(
            &asks[..],
            [Action::Control {
                to: SetId(2),
                message: ControlMessage::CheckpointRequest
            }]
        ));
    }

    #[test]
    fn a_block_lost_at_a_restarted_logger_is_copied_back_from_its_other_logger() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        let copied = f.take_log_dump(100).unwrap();
        f.log_dumped(&copied, 0, Some(1));
        f.on_send(SetId(2), ch(0, 2), vec![2; 5]).unwrap();
        let single = f.take_log_dump(100).unwrap();
        f.log_dumped(&single, 0, None);
        assert!(f.refillable_blocks(0).is_empty(), "nothing lost yet");
        f.on_logger_lost(0);
        assert_eq!(
            f.refillable_blocks(0),
            vec![(copied.block, 1)],
            "the block with a copy at logger 1; the other has none left"
        );
        f.block_restored(0, copied.block);
        assert!(f.refillable_blocks(0).is_empty());
        // Losing logger 1 now loses nothing of set 1's: logger 0 has its block again.
        let asks = f.on_logger_lost(1);
        assert!(
            asks.iter()
                .all(|a| !matches!(a, Action::Control { to: SetId(1), .. })),
            "{asks:?}"
        );
    }

    #[test]
    fn a_restore_older_than_a_relocation_finds_the_block_at_the_third_logger() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        let block = f.take_log_dump(100).unwrap();
        f.log_dumped(&block, 0, Some(1));
        // The image names loggers 0 and 1. After it, logger 0 restarted and the block
        // went to logger 2; then logger 1 restarted too, and the set failed.
        let image = f.checkpoint();
        let (mut restored, _) =
            SetProtocol::restore(image, Incarnation(1), Config::default()).unwrap();
        let lacks: BTreeMap<u16, BTreeSet<BlockId>> = [
            (0, BTreeSet::from([block.block])),
            (1, BTreeSet::from([block.block])),
            (2, BTreeSet::new()),
        ]
        .into();
        let missing = restored.locate_restored_blocks(&lacks, 3);
        assert!(missing.is_empty(), "found at logger 2: {missing:?}");
        let mut at = restored.dumped_blocks();
        at.sort();
        assert_eq!(at, vec![(1, block.block), (2, block.block)]);
        // Had logger 2 not had it either, it would be missing where the image names it.
        let (mut again, _) =
            SetProtocol::restore(f.checkpoint(), Incarnation(2), Config::default()).unwrap();
        let nowhere: BTreeMap<u16, BTreeSet<BlockId>> =
            (0..3).map(|l| (l, BTreeSet::from([block.block]))).collect();
        let missing = again.locate_restored_blocks(&nowhere, 3);
        assert_eq!(
            missing,
            BTreeMap::from([(0, vec![block.block]), (1, vec![block.block])])
        );
    }

    #[test]
    fn a_lost_block_the_restarted_logger_has_no_room_for_moves_to_a_third_logger() {
        let mut f = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        let block = f.take_log_dump(100).unwrap();
        f.log_dumped(&block, 0, Some(1));
        f.on_logger_lost(0);
        assert_eq!(f.refillable_blocks(0), vec![(block.block, 1)]);
        // Logger 0 declines the copy; logger 2 takes it.
        assert_eq!(
            f.block_relocated(0, 2, block.block),
            2,
            "both entries moved"
        );
        assert!(
            f.refillable_blocks(0).is_empty(),
            "nothing left to copy back"
        );
        let mut at = f.dumped_blocks();
        at.sort();
        assert_eq!(at, vec![(1, block.block), (2, block.block)]);
        assert_eq!(
            f.take_released_blocks(),
            vec![(0, block.block)],
            "nothing points into it at logger 0 any more"
        );
        // Losing logger 1 now loses nothing: logger 2 has the copy.
        assert!(f.on_logger_lost(1).is_empty());
        assert!(f.refillable_blocks(1).iter().all(|&(_, from)| from == 2));
        // A resend names the new place.
        let r = SetProtocol::<Vec<u8>>::new(SetId(1), 3).unwrap();
        let resent = f
            .on_control(SetId(1), ControlMessage::Rollback(r.report_for(SetId(0))))
            .unwrap();
        let places: Vec<u16> = resent
            .iter()
            .filter_map(|a| match a {
                Action::SendDumped { at, .. } => Some(at.logger),
                _ => None,
            })
            .collect();
        assert_eq!(places, vec![2, 2]);
    }

    #[test]
    fn an_abandoned_refill_asks_the_receivers_of_the_blocks_left_with_one_copy_to_checkpoint() {
        let mut f = SetProtocol::<Bytes>::new(SetId(0), 3).unwrap();
        f.on_send(SetId(1), ch(0, 1), vec![1; 10]).unwrap();
        let copied = f.take_log_dump(100).unwrap();
        f.log_dumped(&copied, 0, Some(1));
        f.on_send(SetId(2), ch(0, 2), vec![2; 5]).unwrap();
        let restored = f.take_log_dump(100).unwrap();
        f.log_dumped(&restored, 0, Some(1));
        assert!(
            f.on_logger_lost(0).is_empty(),
            "both blocks have their copy at logger 1"
        );
        // Set 2's block is copied back; then logger 0 is full and the refill stops.
        f.block_restored(0, restored.block);
        let asks = f.on_refill_abandoned(0);
        assert_eq!(
            requests(&asks),
            vec![1],
            "set 1's block is at logger 1 only: set 1 checkpoints and releases it"
        );
        assert!(
            f.on_refill_abandoned(0).is_empty(),
            "asked once until it checkpoints"
        );
        assert!(
            f.on_refill_abandoned(1).is_empty(),
            "nothing lost at logger 1"
        );
    }

    #[test]
    fn a_requested_checkpoint_that_covers_nothing_new_still_answers_the_requester() {
        let config = Config {
            log_quota: Some(10),
            ..Config::default()
        };
        let mut f = SetProtocol::<Bytes>::with_config(SetId(0), 2, config).unwrap();
        let mut r = SetProtocol::<Bytes>::with_config(SetId(1), 2, config).unwrap();
        // The message is in flight when the receiver checkpoints.
        let SendOutcome::Transmit { meta, payload } =
            f.on_send(SetId(1), ch(0, 1), vec![0; 64]).unwrap()
        else {
            panic!("transmitted")
        };
        let asked = f.poll_log_quota();
        assert_eq!(requests(&asked), vec![1]);
        for a in asked {
            let Action::Control { message, .. } = a else {
                panic!()
            };
            r.on_control(SetId(0), message).unwrap();
        }
        assert!(r.take_checkpoint_request());
        let snap = r.checkpoint();
        let advance = r.checkpoint_committed(snap.id).unwrap();
        let [Action::Control {
            to: SetId(0),
            message: message @ ControlMessage::CheckpointAdvance { .. },
        }] = &advance[..]
        else {
            panic!("an (empty) CHECKPOINT_ADVANCE for the requester: {advance:?}")
        };
        f.on_control(SetId(1), message.clone()).unwrap();
        assert_eq!(
            f.log_stats().entries,
            1,
            "nothing delivered, nothing released"
        );
        assert_eq!(requests(&f.poll_log_quota()), vec![1], "asked again");
        // Once delivered and checkpointed, the log is empty.
        r.on_receive(SetId(0), meta.sender_incarnation, meta, payload)
            .unwrap();
        assert!(r.poll_delivery().is_some());
        let snap = r.checkpoint();
        for a in r.checkpoint_committed(snap.id).unwrap() {
            let Action::Control { message, .. } = a else {
                panic!()
            };
            f.on_control(SetId(1), message).unwrap();
        }
        assert_eq!(f.log_stats().entries, 0);
    }
}
