//! The receiving side of a set: per incoming channel, the last delivered index, the queue
//! of received messages not yet deliverable, and the delivery rule of Algorithm 1.
//!
//! A received message `m` on channel `c` is delivered when
//! 1. `m.send_index == last_deliver[c] + 1` (per-channel FIFO, no gap), and
//! 2. the set's own interval has reached `m.depend[me]` (it has delivered at least as many
//!    messages as it had when the causal chain leading to `m` left it), when that
//!    requirement *binds* (below).
//!
//! A message with `send_index <= last_deliver[c]` is a duplicate (a resend, or a message
//! regenerated during someone's roll-forward) and is dropped; so is a second copy of a
//! queued index (the less restrictive copy is kept).
//!
//! **Which requirements bind.** A requirement can only exceed the receiver's current
//! interval if it refers to a state interval of one of the receiver's *lost* incarnations.
//! Such a requirement is honoured only when the message was first sent by an original
//! (never restarted) incarnation of its sender, i.e. when every copy of that message ever
//! seen carries the same vector. A message sent by a restarted incarnation may be a
//! regeneration, and regenerations can carry vectors that do not match the lost history
//! they replace: a roll-forward that delivers in another order than the lost execution
//! can merge into a regenerated message a dependency on a state that itself depended on
//! the original copy of that very message. Honouring it deadlocks the receiver (see
//! docs/recovery.md, "Concurrent recoveries"). Not binding such requirements keeps the
//! rule deadlock-free; the simulator checks both.
//!
//! Ready channels are kept in a FIFO (round-robin fairness across channels), blocked ones
//! by the interval they wait for, so polling is O(log n) per delivery, never a scan.

use super::ids::{ChannelId, Incarnation, SetId};
use super::messages::{ChannelIndices, MessageMeta};
use super::replay_check::{ContractViolation, DeliveredDigests, DigestWindow, FoundBy};
use super::sender_log::LogPayload;
use std::collections::{btree_map, BTreeMap, VecDeque};

/// A received message waiting for delivery.
#[derive(Clone, Debug)]
pub struct Queued<P> {
    /// Its metadata.
    pub meta: MessageMeta,
    /// The message.
    pub payload: P,
    /// The sender's incarnation whose connection carried it.
    pub via: Incarnation,
}

/// Where a channel's head stands in the delivery machinery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Head {
    /// No deliverable head (empty, or a gap before the next index).
    #[default]
    Idle,
    /// Listed in `ready`.
    Ready,
    /// Listed in `blocked` under this interval.
    Blocked(u64),
}

/// The state of one incoming channel.
#[derive(Clone, Debug)]
struct InChannel<P> {
    last_deliver: u64,
    last_checkpointed: u64,
    queue: BTreeMap<u64, Queued<P>>,
    head: Head,
    /// Digests of the delivered messages the sender's checkpoint does not cover yet.
    digests: DigestWindow,
    /// Where in the sender's history each of those messages was sent: its interval at
    /// the send (the message's dependency on its own set), same window as `digests`.
    positions: PositionWindow,
}

impl<P> Default for InChannel<P> {
    fn default() -> Self {
        InChannel {
            last_deliver: 0,
            last_checkpointed: 0,
            queue: BTreeMap::new(),
            head: Head::Idle,
            digests: DigestWindow::default(),
            positions: PositionWindow::starting_at(1),
        }
    }
}

/// The sender's interval at each send of a run of delivered indices of one channel
/// (at most [`POSITION_LIMIT`]; the oldest are dropped beyond).
#[derive(Clone, Debug)]
struct PositionWindow {
    first: u64,
    at: VecDeque<u64>,
}

/// Most positions kept per channel (as many as digests).
const POSITION_LIMIT: usize = 65_536;

impl PositionWindow {
    fn starting_at(next: u64) -> Self {
        PositionWindow {
            first: next,
            at: VecDeque::new(),
        }
    }

    fn next(&self) -> u64 {
        self.first + self.at.len() as u64
    }

    /// Appends index `index`, sent at the sender's interval `position`; a window that it
    /// does not follow starts afresh there (as [`DigestWindow::push`]).
    fn push(&mut self, index: u64, position: u64) {
        if self.at.is_empty() && index < self.first {
            return;
        }
        if index != self.next() {
            *self = PositionWindow::starting_at(index);
        }
        if self.at.len() == POSITION_LIMIT {
            self.at.pop_front();
            self.first += 1;
        }
        self.at.push_back(position);
    }

    fn forget_upto(&mut self, upto: u64) {
        while self.first <= upto && self.at.pop_front().is_some() {
            self.first += 1;
        }
        self.first = self.first.max(upto.saturating_add(1));
    }
}

/// Where a set's sends on one channel sit in its history, as a receiver saw them: the
/// sender's interval at each send of indices `first, first + 1, ...` (see
/// [`Inbox::positions_from`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SendPositions {
    /// The channel.
    pub channel: ChannelId,
    /// The first index.
    pub first: u64,
    /// The sender's interval at each send, from `first` on.
    pub at: Vec<u64>,
}

/// Outcome of [`Inbox::insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// Queued; it may be deliverable now.
    Queued,
    /// Already delivered or already queued: dropped.
    Duplicate,
    /// Came from an incarnation of the sender that a newer one replaced: dropped (see
    /// [`SetProtocol::on_receive`](super::protocol::SetProtocol::on_receive)).
    Stale,
}

/// A message taken out of the inbox for delivery.
#[derive(Debug)]
pub struct Taken<P> {
    /// The sending set.
    pub from: SetId,
    /// The message.
    pub queued: Queued<P>,
    /// Its requirement on this set exceeded the interval, but did not bind.
    pub relaxed: bool,
    /// Its requirement binds (see [`DependencyRule`]).
    pub binding: bool,
}

/// How strictly dependency requirements bind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DependencyRule {
    /// Requirements bind when the message comes from an original sender incarnation
    /// (see the module documentation). Deadlock-free. The default.
    #[default]
    OriginalSenders,
    /// Every requirement binds, as Algorithm 1 is written. Can deadlock when several
    /// sets roll forward at once; kept to demonstrate that in tests.
    Strict,
}

/// The receiving side of one set.
#[derive(Debug)]
pub struct Inbox<P> {
    me: SetId,
    rule: DependencyRule,
    peers: Vec<BTreeMap<ChannelId, InChannel<P>>>,
    ready: VecDeque<(SetId, ChannelId)>,
    /// Keyed by *need*: a binding requirement `r` needs `r + 1`, so that a requirement
    /// that does not bind (need 0) is never held.
    blocked: BTreeMap<u64, Vec<(SetId, ChannelId)>>,
    queued: usize,
    violations: Vec<ContractViolation>,
    checked: u64,
    /// The smallest interval, in this set's lost history, of a send that another set
    /// delivered and this set has not made again yet (`u64::MAX`: none). A message that
    /// depends on this set up to interval `r` is held until `r < frontier`: it may
    /// depend on that send (see [`SetProtocol`](super::protocol::SetProtocol)'s
    /// regenerations).
    frontier: u64,
}

impl<P: LogPayload> Inbox<P> {
    /// An empty inbox of set `me` in a cluster of `n` sets.
    pub fn new(me: SetId, n: u16, rule: DependencyRule) -> Self {
        Inbox {
            me,
            rule,
            peers: (0..n).map(|_| BTreeMap::new()).collect(),
            ready: VecDeque::new(),
            blocked: BTreeMap::new(),
            queued: 0,
            violations: Vec::new(),
            checked: 0,
            frontier: u64::MAX,
        }
    }

    /// Sets the delivered (and checkpointed) index of a channel, for a restore.
    pub fn restore_channel(&mut self, from: SetId, channel: ChannelId, delivered: u64) {
        if let Some(peer) = self.peers.get_mut(from.index()) {
            let c = peer.entry(channel).or_default();
            c.last_deliver = delivered;
            c.last_checkpointed = delivered;
            c.digests = DigestWindow::starting_at(delivered.saturating_add(1));
            c.positions = PositionWindow::starting_at(delivered.saturating_add(1));
        }
    }

    /// Puts back the digests a checkpoint kept of what was delivered from `from` (after
    /// [`Inbox::restore_channel`]); runs that do not end at a channel's delivered index
    /// are cut to it.
    pub fn restore_digests(&mut self, from: SetId, digests: &DeliveredDigests) {
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return;
        };
        for run in digests.runs() {
            if let Some(c) = peer.get_mut(&run.channel) {
                let mut window = DigestWindow::starting_at(run.first);
                for (index, digest) in run
                    .window()
                    .iter()
                    .take_while(|(i, _)| *i <= c.last_deliver)
                {
                    window.push(index, digest);
                }
                if window.next() == c.last_deliver + 1 {
                    c.digests = window;
                }
            }
        }
    }

    /// Puts back the send positions a checkpoint kept of what was delivered from `from`
    /// (after [`Inbox::restore_channel`]); a run that does not end at its channel's
    /// delivered index is cut to it, or dropped if it does not reach it.
    pub fn restore_positions(&mut self, from: SetId, runs: &[SendPositions]) {
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return;
        };
        for run in runs {
            let Some(c) = peer.get_mut(&run.channel) else {
                continue;
            };
            let mut window = PositionWindow::starting_at(run.first);
            for (k, at) in (0u64..).zip(run.at.iter().copied()) {
                match run.first.checked_add(k) {
                    Some(index) if index <= c.last_deliver => window.push(index, at),
                    _ => break,
                }
            }
            if window.next() == c.last_deliver + 1 {
                c.positions = window;
            }
        }
    }

    /// Queues a message received from set `from` (already validated by the caller).
    /// `interval` is the set's current own interval.
    pub fn insert(&mut self, from: SetId, q: Queued<P>, interval: u64) -> Received {
        let requirement = need(self.rule, self.me, &q.meta);
        let channel = q.meta.channel;
        let index = q.meta.send_index;
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return Received::Duplicate;
        };
        let c = peer.entry(channel).or_default();
        if index <= c.last_deliver {
            // A resend of the logged copy, or a regeneration by a restored sender: under
            // the determinism contract both equal what was delivered.
            let compared = c.digests.get(index).and_then(|_| {
                // Digested only when there is something to compare with.
                c.digests.matches(index, q.payload.digest())
            });
            if let Some(matches) = compared {
                self.checked += 1;
                if !matches {
                    self.violations.push(ContractViolation {
                        channel,
                        send_index: index,
                        found_by: FoundBy::Receiver,
                    });
                }
            }
            return Received::Duplicate;
        }
        match c.queue.entry(index) {
            btree_map::Entry::Occupied(mut o) => {
                // Keep the copy of the newest connection: an older incarnation's copy is
                // dropped once its successor is known (`discard_older`), the newer one's
                // stays. Between copies of one connection, keep the one that waits less:
                // it is as valid, and never worse for liveness.
                let old = o.get();
                let old_req = need(self.rule, self.me, &old.meta);
                if q.via > old.via || (q.via == old.via && requirement < old_req) {
                    o.insert(q);
                    if let Head::Blocked(r) = c.head {
                        c.head = Head::Idle;
                        unlist_blocked(&mut self.blocked, r, (from, channel));
                        self.classify(from, channel, interval);
                    }
                }
                Received::Duplicate
            }
            btree_map::Entry::Vacant(v) => {
                v.insert(q);
                self.queued += 1;
                if index == c.last_deliver + 1 && c.head == Head::Idle {
                    self.classify(from, channel, interval);
                }
                Received::Queued
            }
        }
    }

    /// Drops every message queued from `from` that came on a connection of one of its
    /// incarnations before `incarnation`; returns how many.
    pub fn discard_older(&mut self, from: SetId, incarnation: Incarnation, interval: u64) -> usize {
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return 0;
        };
        let mut dropped = 0;
        let mut touched = Vec::new();
        for (channel, c) in peer.iter_mut() {
            let before = c.queue.len();
            c.queue.retain(|_, q| q.via >= incarnation);
            if c.queue.len() != before {
                dropped += before - c.queue.len();
                touched.push(*channel);
                // Its head is listed again from scratch below.
                c.head = Head::Idle;
            }
        }
        if dropped == 0 {
            return 0;
        }
        self.queued -= dropped;
        self.ready
            .retain(|(f, ch)| *f != from || !touched.contains(ch));
        for keys in self.blocked.values_mut() {
            keys.retain(|(f, ch)| *f != from || !touched.contains(ch));
        }
        self.blocked.retain(|_, keys| !keys.is_empty());
        for channel in touched {
            self.classify(from, channel, interval);
        }
        dropped
    }

    /// Lists a channel whose head may have become the next index.
    fn classify(&mut self, from: SetId, channel: ChannelId, interval: u64) {
        let me = self.me;
        let rule = self.rule;
        let Some(c) = self
            .peers
            .get_mut(from.index())
            .and_then(|p| p.get_mut(&channel))
        else {
            return;
        };
        if c.head != Head::Idle {
            return;
        }
        let Some((&index, q)) = c.queue.first_key_value() else {
            return;
        };
        if index != c.last_deliver + 1 {
            return;
        }
        let requirement = need(rule, me, &q.meta);
        if requirement <= level(interval, self.frontier) {
            c.head = Head::Ready;
            self.ready.push_back((from, channel));
        } else {
            c.head = Head::Blocked(requirement);
            self.blocked
                .entry(requirement)
                .or_default()
                .push((from, channel));
        }
    }

    /// Takes the next deliverable message, advancing its channel's delivered index. The
    /// caller must then update its interval and call [`Inbox::settle`].
    pub fn take(&mut self, interval: u64) -> Option<Taken<P>> {
        while let Some((from, channel)) = self.ready.pop_front() {
            let Some(c) = self
                .peers
                .get_mut(from.index())
                .and_then(|p| p.get_mut(&channel))
            else {
                continue;
            };
            c.head = Head::Idle;
            let next = c.last_deliver + 1;
            let Some(q) = c.queue.get(&next) else {
                continue;
            };
            // The frontier may have come down since the channel was listed (a peer's
            // answer named sends still to be made again).
            let requirement = need(self.rule, self.me, &q.meta);
            if requirement > level(interval, self.frontier) {
                c.head = Head::Blocked(requirement);
                self.blocked
                    .entry(requirement)
                    .or_default()
                    .push((from, channel));
                continue;
            }
            let Some(queued) = c.queue.remove(&next) else {
                continue;
            };
            c.last_deliver = next;
            c.digests.push(next, queued.payload.digest());
            c.positions.push(next, queued.meta.depend.get(from));
            self.queued -= 1;
            let binding = binds(self.rule, &queued.meta);
            let relaxed = !binding && queued.meta.depend.get(self.me) > interval;
            return Some(Taken {
                from,
                queued,
                relaxed,
                binding,
            });
        }
        None
    }

    /// After a delivery on `(from, channel)` raised the interval to `interval`: lists that
    /// channel's next head and releases the channels that waited for this interval.
    pub fn settle(&mut self, from: SetId, channel: ChannelId, interval: u64) {
        self.classify(from, channel, interval);
        self.interval_raised(interval);
    }

    /// The set's interval grew to `interval` without a delivery (an input from outside
    /// the sets): releases the channels that waited for it.
    pub fn interval_raised(&mut self, interval: u64) {
        let still_blocked = self
            .blocked
            .split_off(&level(interval, self.frontier).saturating_add(1));
        let unblocked = std::mem::replace(&mut self.blocked, still_blocked);
        for (_, keys) in unblocked {
            for (f, ch) in keys {
                if let Some(c) = self.peers.get_mut(f.index()).and_then(|p| p.get_mut(&ch)) {
                    c.head = Head::Ready;
                    self.ready.push_back((f, ch));
                }
            }
        }
    }

    /// Last delivered index per channel from `from`.
    pub fn delivered_from(&self, from: SetId) -> ChannelIndices {
        self.peers
            .get(from.index())
            .map(|p| p.iter().map(|(c, s)| (*c, s.last_deliver)).collect())
            .unwrap_or_default()
    }

    /// Last delivered index per channel from `from` covered by the last committed
    /// checkpoint.
    pub fn checkpointed_from(&self, from: SetId) -> ChannelIndices {
        self.peers
            .get(from.index())
            .map(|p| p.iter().map(|(c, s)| (*c, s.last_checkpointed)).collect())
            .unwrap_or_default()
    }

    /// The sending set `from` committed a checkpoint that covers its sends up to `sent`:
    /// those messages can no longer be regenerated, their digests are dropped.
    pub fn forget_digests(&mut self, from: SetId, sent: &ChannelIndices) {
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return;
        };
        for (channel, upto) in sent.iter() {
            // Also a channel not delivered on yet: its first deliveries are covered.
            let c = peer.entry(channel).or_default();
            c.digests.forget_upto(upto);
            c.positions.forget_upto(upto);
        }
    }

    /// The digests of what this set delivered from `from` after `from`'s last committed
    /// checkpoint known here, for `from`'s recovery.
    pub fn digests_from(&self, from: SetId) -> DeliveredDigests {
        self.peers
            .get(from.index())
            .map(|p| DeliveredDigests::collect(p.iter().map(|(c, s)| (*c, &s.digests))))
            .unwrap_or_default()
    }

    /// Where in `from`'s history each message this set delivered from it after `from`'s
    /// last committed checkpoint known here was sent, for `from`'s recovery.
    pub fn positions_from(&self, from: SetId) -> Vec<SendPositions> {
        self.peers
            .get(from.index())
            .map(|p| {
                p.iter()
                    .filter(|(_, c)| !c.positions.at.is_empty())
                    .map(|(channel, c)| SendPositions {
                        channel: *channel,
                        first: c.positions.first,
                        at: c.positions.at.iter().copied().collect(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Sets the frontier (see the field); `interval` is the set's current interval. A
    /// frontier that went up releases the channels that waited for it; one that came
    /// down holds channels as they are taken.
    pub fn set_frontier(&mut self, frontier: u64, interval: u64) {
        let raised = frontier > self.frontier;
        self.frontier = frontier;
        if raised {
            self.interval_raised(interval);
        }
    }

    /// Digests held over all channels (for metrics).
    pub fn digests_held(&self) -> usize {
        self.peers
            .iter()
            .flat_map(|p| p.values())
            .map(|c| c.digests.len())
            .sum()
    }

    /// Takes the number of duplicates compared with a digest since the last call.
    pub fn take_checked(&mut self) -> u64 {
        std::mem::take(&mut self.checked)
    }

    /// Takes the contract violations found since the last call.
    pub fn take_violations(&mut self) -> Vec<ContractViolation> {
        std::mem::take(&mut self.violations)
    }

    /// Records that a committed checkpoint covers `covered` from `from`; returns the
    /// channels whose checkpointed index advanced, with their new index.
    pub fn mark_checkpointed(&mut self, from: SetId, covered: &ChannelIndices) -> ChannelIndices {
        let Some(peer) = self.peers.get_mut(from.index()) else {
            return ChannelIndices::default();
        };
        let mut advanced = Vec::new();
        for (channel, index) in covered.iter() {
            let c = peer.entry(channel).or_default();
            if index > c.last_checkpointed {
                c.last_checkpointed = index;
                advanced.push((channel, index));
            }
        }
        advanced.into_iter().collect()
    }

    /// What the inbox holds back, for diagnosing a stall: each channel with queued
    /// messages, as `from:channel delivered=D next=N head=..`, where `next` is the lowest
    /// queued index (a gap when it is not `D + 1`). At most `limit` channels.
    pub fn describe_waiting(&self, limit: usize) -> String {
        let mut out = Vec::new();
        for (s, peer) in self.peers.iter().enumerate() {
            for (channel, c) in peer.iter().filter(|(_, c)| !c.queue.is_empty()) {
                let next = c.queue.keys().next().copied().unwrap_or(0);
                let head = match c.head {
                    Head::Idle if next != c.last_deliver + 1 => {
                        format!("waits for index {} (a gap)", c.last_deliver + 1)
                    }
                    Head::Idle | Head::Ready => "deliverable".to_string(),
                    Head::Blocked(n) if n > self.frontier => format!(
                        "requires interval {} and this set's sends up to it made again \
                         (the earliest not made yet was made at {})",
                        n - 1,
                        self.frontier
                    ),
                    Head::Blocked(n) => format!("requires interval {}", n - 1),
                };
                out.push(format!(
                    "{s}:{channel:?} delivered={} next={next} queued={} {head}",
                    c.last_deliver,
                    c.queue.len(),
                ));
            }
        }
        let total = out.len();
        out.truncate(limit);
        format!("{total} channels waiting: {}", out.join("; "))
    }

    /// Messages queued (received, not yet delivered).
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Channels whose next message waits for the interval to grow.
    pub fn blocked(&self) -> usize {
        self.blocked.values().map(Vec::len).sum()
    }

    /// The smallest interval a blocked channel's head waits for (heads held only by
    /// the frontier wait for sends, not for the interval).
    pub fn next_requirement(&self, interval: u64) -> Option<u64> {
        self.blocked
            .range(interval.saturating_add(2)..)
            .next()
            .map(|(n, _)| n - 1)
    }

    /// Whether a message is ready for delivery.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

/// What set `me` needs before delivering a message with `meta`: its dependency on `me`
/// plus one when that binds under `rule` (the interval must reach the dependency, and
/// every send this set made up to that interval, as far as others saw them, must be made
/// again), else 0 (nothing).
fn need(rule: DependencyRule, me: SetId, meta: &MessageMeta) -> u64 {
    if binds(rule, meta) {
        meta.depend.get(me).saturating_add(1)
    } else {
        0
    }
}

/// The most a set may deliver a message for: need `n` is met when `n <= level`, i.e. its
/// requirement `n - 1` is at most the interval and below the frontier.
fn level(interval: u64, frontier: u64) -> u64 {
    interval.saturating_add(1).min(frontier)
}

/// Whether a message's requirement binds under `rule`.
fn binds(rule: DependencyRule, meta: &MessageMeta) -> bool {
    match rule {
        DependencyRule::Strict => true,
        DependencyRule::OriginalSenders => meta.sender_incarnation == Incarnation::ORIGINAL,
    }
}

fn unlist_blocked(
    blocked: &mut BTreeMap<u64, Vec<(SetId, ChannelId)>>,
    requirement: u64,
    key: (SetId, ChannelId),
) {
    if let Some(keys) = blocked.get_mut(&requirement) {
        keys.retain(|k| *k != key);
        if keys.is_empty() {
            blocked.remove(&requirement);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor_id::ActorId;
    use crate::recovery::dep_vector::DepVector;

    /// The tests' payloads are numbers; a number is its own digest.
    impl LogPayload for u64 {
        fn byte_len(&self) -> usize {
            8
        }

        fn digest(&self) -> u32 {
            *self as u32
        }
    }

    const ME: SetId = SetId(0);
    const A: SetId = SetId(1);
    const B: SetId = SetId(2);

    fn ch(from: SetId, n: u64) -> ChannelId {
        ChannelId::new(
            ActorId::new(from.0, n).unwrap(),
            ActorId::new(ME.0, 0).unwrap(),
        )
    }

    fn msg(from: SetId, n: u64, index: u64, needs: u64, inc: u32) -> Queued<u64> {
        let mut depend = DepVector::new();
        depend.set(ME, needs);
        depend.set(from, 1);
        Queued {
            meta: MessageMeta {
                channel: ch(from, n),
                send_index: index,
                sender_incarnation: Incarnation(inc),
                depend,
            },
            via: Incarnation(inc),
            payload: index * 100 + n,
        }
    }

    /// Delivers everything deliverable, as the protocol does; returns the payloads.
    fn drain(inbox: &mut Inbox<u64>, interval: &mut u64) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(t) = inbox.take(*interval) {
            *interval += 1;
            inbox.settle(t.from, t.queued.meta.channel, *interval);
            out.push(t.queued.payload);
        }
        out
    }

    #[test]
    fn a_stalled_inbox_says_which_channel_waits_for_a_gap_and_which_for_the_interval() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::OriginalSenders);
        inbox.insert(A, msg(A, 1, 2, 0, 0), 0); // index 1 is missing
        inbox.insert(B, msg(B, 2, 1, 5, 0), 0); // needs this set's interval 5
        let said = inbox.describe_waiting(16);
        assert!(said.starts_with("2 channels waiting"), "{said}");
        assert!(
            said.contains("delivered=0 next=2 queued=1 waits for index 1 (a gap)"),
            "{said}"
        );
        assert!(
            said.contains("delivered=0 next=1 queued=1 requires interval 5"),
            "{said}"
        );
        assert_eq!(inbox.describe_waiting(1).matches("delivered=").count(), 1);
    }

    #[test]
    fn per_channel_fifo_waits_for_gaps() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        assert_eq!(
            inbox.insert(A, msg(A, 1, 2, 0, 0), interval),
            Received::Queued
        );
        assert_eq!(
            inbox.insert(A, msg(A, 1, 3, 0, 0), interval),
            Received::Queued
        );
        assert!(
            drain(&mut inbox, &mut interval).is_empty(),
            "index 1 missing"
        );
        inbox.insert(A, msg(A, 1, 1, 0, 0), interval);
        assert_eq!(drain(&mut inbox, &mut interval), vec![101, 201, 301]);
        assert_eq!(inbox.delivered_from(A).get(&ch(A, 1)), 3);
    }

    #[test]
    fn duplicates_are_dropped_whether_delivered_or_queued() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        inbox.insert(A, msg(A, 1, 1, 0, 0), interval);
        drain(&mut inbox, &mut interval);
        assert_eq!(
            inbox.insert(A, msg(A, 1, 1, 0, 0), interval),
            Received::Duplicate
        );
        inbox.insert(A, msg(A, 1, 3, 0, 0), interval);
        assert_eq!(
            inbox.insert(A, msg(A, 1, 3, 0, 0), interval),
            Received::Duplicate
        );
        assert_eq!(inbox.queued(), 1);
    }

    #[test]
    fn a_message_waits_until_the_set_reached_the_interval_it_depends_on() {
        // Logged message from A that depended on this set having delivered 2 messages.
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        inbox.insert(A, msg(A, 1, 1, 2, 0), interval);
        assert!(drain(&mut inbox, &mut interval).is_empty());
        assert_eq!(inbox.blocked(), 1);
        // Two independent messages from B bring the interval to 2: then A's goes.
        inbox.insert(B, msg(B, 1, 1, 0, 0), interval);
        inbox.insert(B, msg(B, 1, 2, 0, 0), interval);
        assert_eq!(drain(&mut inbox, &mut interval), vec![101, 201, 101]);
        assert_eq!(inbox.blocked(), 0);
        assert_eq!(interval, 3);
    }

    #[test]
    fn requirements_from_restarted_senders_do_not_bind_but_are_reported() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        inbox.insert(A, msg(A, 1, 1, 5, 1), interval);
        let t = inbox.take(interval).expect("deliverable");
        assert!(t.relaxed);

        let mut strict = Inbox::new(ME, 3, DependencyRule::Strict);
        strict.insert(A, msg(A, 1, 1, 5, 1), interval);
        assert!(strict.take(interval).is_none());
        assert_eq!(drain(&mut strict, &mut interval), Vec::<u64>::new());
    }

    #[test]
    fn a_less_restrictive_copy_unblocks_a_queued_head() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::Strict);
        let mut interval = 0;
        inbox.insert(A, msg(A, 1, 1, 4, 0), interval);
        assert!(inbox.take(interval).is_none());
        assert_eq!(
            inbox.insert(A, msg(A, 1, 1, 0, 0), interval),
            Received::Duplicate
        );
        assert_eq!(inbox.blocked(), 0);
        assert_eq!(drain(&mut inbox, &mut interval), vec![101]);
    }

    #[test]
    fn ready_channels_are_served_round_robin() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        for i in 1..=3 {
            inbox.insert(A, msg(A, 1, i, 0, 0), interval);
            inbox.insert(B, msg(B, 2, i, 0, 0), interval);
        }
        assert_eq!(
            drain(&mut inbox, &mut interval),
            vec![101, 102, 201, 202, 301, 302]
        );
    }

    #[test]
    fn checkpoint_marks_report_only_advances() {
        let mut inbox = Inbox::new(ME, 3, DependencyRule::default());
        let mut interval = 0;
        inbox.insert(A, msg(A, 1, 1, 0, 0), interval);
        inbox.insert(A, msg(A, 1, 2, 0, 0), interval);
        drain(&mut inbox, &mut interval);
        let covered = inbox.delivered_from(A);
        assert_eq!(inbox.mark_checkpointed(A, &covered).get(&ch(A, 1)), 2);
        assert!(inbox.mark_checkpointed(A, &covered).is_empty());
        assert_eq!(inbox.checkpointed_from(A).get(&ch(A, 1)), 2);
    }
}
