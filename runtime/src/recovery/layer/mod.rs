//! The recovery layer: wraps a node's messaging with the sans-IO protocol core of
//! [`crate::recovery`] (as Open MPI's vprotocol wraps its messaging layer) when recovery
//! is on, and is absent when it is off.
//!
//! What it does, and where:
//!
//! | concern | here |
//! |---|---|
//! | a message to another node: channel index, dependency vector, sender-based log | `RecoveryLayer::send_remote` |
//! | a message from another node: duplicate suppression, delivery rule | `RecoveryLayer::on_logged` |
//! | ROLLBACK / RESPONSE / CHECKPOINT_ADVANCE | `RecoveryLayer::on_control` |
//! | the node's coordinated checkpoint | [`set_checkpoint`] |
//! | the buddy replica of checkpoints | [`replica`] |
//! | a restarted node: load, restore actors, roll back | [`restore`] |
//! | the app's `main` in a restarted node | `RecoveryLayer::main_turn` |
//! | determinants of order-sensitive actors, `ctx.now()`, `ctx.random()` | [`events`] |
//! | which determinants an actor's messages out of the node wait for | `recovery::hooks::dependence` (kept per actor cell by the core) |
//! | what the actor core calls (the seam) | `hooks` (`RecoveryHooks` for this layer) |
//! | the lock over `NodeRecovery` and what changes with it; replies to `main` deferred while it is held | `state` |
//! | the count of messages between the node's own actors, folded into the interval | `local_counts` |
//! | the log quota's backpressure on senders while loggers take the excess | `quota` |
//! | settings from `LAZARUS_*`; metric names | `config`, `metric_names` |
//!
//! Messages between actors of the node never come here: they stay moves of values into
//! mailboxes, and the coordinated checkpoint captures them. They are only counted, as
//! events of the set (`LocalDeliveries`, a plain store on the sending core's counter each).

use crate::recovery::hooks::dependence;
pub mod events;
mod hooks;
pub mod in_place;
pub mod log_offload;
pub(crate) mod main_replay;
pub mod replica;
pub mod restore;
pub mod set_checkpoint;
pub(crate) mod stall;

mod config;
mod local_counts;
mod metric_names;
mod quota;
mod state;

pub use config::{Buddy, RecoveryConfig};
pub(crate) use local_counts::LocalDeliveries;
pub use metric_names::*;
pub(crate) use quota::turn_begins;
pub use quota::QUOTA_WAIT_MAX;
pub(crate) use state::{blocking, holds_state, ForcedLog, LayerState, StateGuard};

use crate::actor_id::ActorId;
use crate::checkpoint::{CheckpointStore, DirectoryStore};
use crate::executor::CoreQueue;
use crate::node::{CurrentNode, NodeHandle};
use crate::recovery::{
    Action, Arrival, ChannelId, ContractViolation, ControlMessage, EarlyFrame, FoundBy, Frame,
    GateRule, Incarnation, MessageMeta, NodeRecovery, Received, Refused, Routed, Sent, SetId,
    SetProtocol,
};
use crate::transport::frame::{Envelope, FrameBody, RecoveryFrame};
use crate::transport::Transport;
use metrics::{counter, gauge, histogram};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, OnceLock};

pub(crate) use crate::cluster::supervisor_channel::{event, ACTOR_FAILED_EXIT};

/// Publishes the count of regenerations compared so far and reports the violations
/// found since the last call.
fn report_checks(rank: u16, protocol: &mut SetProtocol<Envelope>) {
    counter!(REGENERATIONS_CHECKED).absolute(protocol.stats().regenerations_checked);
    if protocol.has_violations() {
        report_violations(rank, protocol.take_violations());
    }
}

/// Reports regenerated messages that differ from the copies delivered before a failure
/// (see [`crate::recovery::replay_check`]): metric, error, and an event for the timeline.
/// The run goes on: the delivered copies stay, and the supervisor warns at the end.
fn report_violations(rank: u16, violations: Vec<ContractViolation>) {
    /// Violations told in detail per process; the rest are counted (metric, final totals).
    const DETAILED: u64 = 8;
    static REPORTED: AtomicU64 = AtomicU64::new(0);
    for v in violations {
        let found_by = match v.found_by {
            FoundBy::Receiver => "receiver",
            FoundBy::Sender => "sender",
        };
        counter!(CONTRACT_VIOLATIONS, "found_by" => found_by).increment(1);
        let n = REPORTED.fetch_add(1, Ordering::Relaxed);
        if n >= DETAILED {
            if n == DETAILED {
                tracing::error!(
                    "more regenerated messages differ from their delivered copies: counted \
                     from now on, not told (metric {CONTRACT_VIOLATIONS}, final totals)"
                );
            }
            continue;
        }
        tracing::error!(
            "determinism contract broken: message #{} from actor {} to actor {} was \
             regenerated differently after a rollback than it was delivered before it \
             (found by the {found_by}); the run goes on with the delivered copy, and its \
             result may not be a failure-free run's (docs/recovery.md, \"The determinism contract\")",
            v.send_index,
            v.channel.from,
            v.channel.to
        );
        event(
            rank,
            &format!(
                "contract-violation from={} to={} index={} found_by={found_by}",
                v.channel.from, v.channel.to, v.send_index
            ),
        );
    }
}

/// The recovery layer of one node.
pub struct RecoveryLayer {
    rank: u16,
    size: u16,
    config: RecoveryConfig,
    state: Mutex<LayerState>,
    transport: OnceLock<Arc<Transport>>,
    store: DirectoryStore,
    replicas: replica::Replicas,
    /// Frames the layer emits from network tasks, sent in order by its own thread (which
    /// may wait for room in a peer's queue; network tasks may not). The queue exists from
    /// the start: frames from a restarted peer can arrive while this node's transport is
    /// still connecting to the others, and the answers must not be lost (they wait here
    /// until [`RecoveryLayer::attach`] starts the sender).
    outbox: Mutex<std_mpsc::Sender<(u16, FrameBody)>>,
    /// The other end of `outbox`, until the sender thread takes it.
    outbox_rx: Mutex<Option<std_mpsc::Receiver<(u16, FrameBody)>>>,
    /// Frames in `outbox` or being sent by the sender thread. While there are any, new
    /// frames queue behind them (order); while there are none, [`RecoveryLayer::emit`]
    /// hands frames straight to the peers' queues when those have room, so a
    /// determinant, the logger's acknowledgement and the reply it releases cross no
    /// thread on their way.
    outbox_pending: Arc<AtomicUsize>,
    /// Held by the checkpoint being taken (one at a time): the buffer its image is
    /// encoded into, kept from one checkpoint to the next so its pages stay mapped.
    checkpointing: Mutex<Vec<u8>>,
    stop: Arc<AtomicBool>,
    /// A peer asked for a checkpoint (CHECKPOINT_REQUEST) and the checkpointer has not
    /// taken it yet.
    checkpoint_requested: AtomicBool,
    checkpoints_done: AtomicU64,
    /// Messages delivered, sent and received by the protocol at the last commit (for
    /// the stall report).
    progress_at_commit: AtomicU64,
    /// The core's count of local deliveries, reachable without the lock.
    local: Arc<LocalDeliveries>,
    /// Send index per channel to an order-sensitive actor of this node (its own lock: a
    /// stamp is taken while `main` holds the core lock).
    stamps: Mutex<HashMap<(ActorId, ActorId), u64>>,
    /// The logger nodes the log is dumped to, if any.
    offload: OnceLock<log_offload::LogOffload>,
}

impl RecoveryLayer {
    /// The layer of node `rank` of `size`.
    pub(crate) fn new(rank: u16, size: u16, config: RecoveryConfig) -> Arc<Self> {
        let fresh = config.incarnation == 0;
        let store = DirectoryStore::new(config.dir.clone());
        if fresh {
            // A first incarnation starts from the beginning: checkpoints of this rank in
            // the directory belong to an earlier run, and a restart must not load them.
            match store.discard_all(rank) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    "removed {n} checkpoints of rank {rank} that an earlier run left in {}",
                    config.dir.display()
                ),
                Err(e) => tracing::warn!("cannot clear this rank's old checkpoints: {e}"),
            }
        }
        let (events, logger_store) = events::Events::new(rank, fresh, &config.dir);
        // `LAZARUS_SEND_GATE=set`: every frame waits for every determinant of the node
        // (the rule before actors' dependences were tracked; a measurement baseline).
        let gate_rule = if std::env::var("LAZARUS_SEND_GATE").is_ok_and(|v| v == "set") {
            GateRule::WholeNode
        } else {
            GateRule::PerActor
        };
        let mut recovery = NodeRecovery::new(SetId(rank), gate_rule, logger_store);
        if fresh {
            // A restarted node starts its machine from its checkpoint once loaded.
            if let Err(e) = recovery.start(config.node(size)) {
                tracing::error!("recovery cannot start: {e}");
            }
        }
        let (outbox, outbox_rx) = std_mpsc::channel::<(u16, FrameBody)>();
        let local = Arc::new(LocalDeliveries::new());
        Arc::new(RecoveryLayer {
            rank,
            size,
            store,
            config,
            state: Mutex::new(LayerState {
                recovery,
                ready: fresh,
                main_replay: Default::default(),
                deferred: Vec::new(),
                images: HashMap::new(),
                exited: Default::default(),
                logger_instances: Vec::new(),
                rollback_at: None,
                replay_span: None,
                forced_log: ForcedLog::default(),
                local: Arc::clone(&local),
                events,
            }),
            transport: OnceLock::new(),
            replicas: replica::Replicas::default(),
            outbox: Mutex::new(outbox),
            outbox_rx: Mutex::new(Some(outbox_rx)),
            outbox_pending: Arc::new(AtomicUsize::new(0)),
            checkpointing: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            checkpoint_requested: AtomicBool::new(false),
            checkpoints_done: AtomicU64::new(0),
            progress_at_commit: AtomicU64::new(u64::MAX),
            local,
            stamps: Mutex::new(HashMap::new()),
            offload: OnceLock::new(),
        })
    }

    /// Connects the layer to its transport and starts its sender thread.
    pub(crate) fn attach(self: &Arc<Self>, transport: Arc<Transport>) -> Result<(), String> {
        let _ = self.transport.set(Arc::clone(&transport));
        let rx = self
            .outbox_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or("the recovery layer is attached already")?;
        let pending = Arc::clone(&self.outbox_pending);
        std::thread::Builder::new()
            .name("lazarus-recovery".into())
            .spawn(move || {
                for (to, body) in rx {
                    // A peer that is down gets what it needs again when it rolls back.
                    let _ = transport.send_body(to, &body);
                    pending.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// This node's rank.
    pub fn rank(&self) -> u16 {
        self.rank
    }

    /// The configuration.
    pub fn config(&self) -> &RecoveryConfig {
        &self.config
    }

    pub(crate) fn lock(&self) -> StateGuard<'_> {
        StateGuard::new(self, self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// [`RecoveryLayer::lock`] for network tasks: when a checkpoint holds the lock, the
    /// wait happens in `block_in_place`, so heartbeats and other streams keep moving on
    /// another runtime thread. Uncontended, it is a plain lock.
    fn lock_from_network(&self) -> StateGuard<'_> {
        match self.state.try_lock() {
            Ok(g) => StateGuard::new(self, g),
            Err(std::sync::TryLockError::Poisoned(p)) => StateGuard::new(self, p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => blocking(|| self.lock()),
        }
    }

    /// Sends a frame without ever waiting for queue room (through the sender thread when
    /// the peer's queue is full): for a thread that holds this layer's lock, where a
    /// blocking send could wait on a network task that waits for the lock.
    pub(crate) fn send_unblocking(&self, to: u16, body: FrameBody) {
        self.emit([(to, body)]);
    }

    fn transport(&self) -> Option<&Arc<Transport>> {
        self.transport.get()
    }

    /// Sends frames in order: straight into the peers' queues while nothing waits for
    /// the sender thread and they have room, else through the sender thread (which may
    /// wait for room; the caller may be a network task, which must not).
    fn emit(&self, frames: impl IntoIterator<Item = (u16, FrameBody)>) {
        let tx = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        let mut direct = self
            .transport()
            .filter(|_| self.outbox_pending.load(Ordering::Acquire) == 0);
        for (to, body) in frames {
            if let Some(t) = direct {
                match t.offer_body(to, &body) {
                    Ok(true) => continue,
                    // A peer that is down gets what it needs again when it rolls back.
                    Err(_) => continue,
                    Ok(false) => direct = None,
                }
            }
            self.outbox_pending.fetch_add(1, Ordering::AcqRel);
            if tx.send((to, body)).is_err() {
                self.outbox_pending.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Queues protocol actions in the node's machine, behind the frames its send gate
    /// holds (`core` is the caller's lock: a resend whose payload is at a logger node is
    /// fetched from there under it, so that it keeps its place).
    fn send_actions(&self, state: &mut LayerState, actions: Vec<Action<Envelope>>) {
        for (to, frame) in self.frames(actions) {
            state.recovery.send_behind_held(SetId(to), frame);
        }
    }

    /// Locks the layer to queue protocol actions (see [`Self::send_actions`]) and sends
    /// what the machine has to send.
    fn send_actions_now(&self, actions: Vec<Action<Envelope>>) {
        let frames = {
            let mut state = self.lock();
            self.send_actions(&mut state, actions);
            Self::outgoing(&mut state)
        };
        self.emit(frames);
    }

    /// The frames the node's machine has to send, in order, for [`Self::emit`] once the
    /// lock is released.
    fn outgoing(state: &mut LayerState) -> Outgoing {
        std::iter::from_fn(|| state.recovery.poll_transmit())
            .map(|(to, frame)| (to.0, body_of(frame)))
            .collect()
    }

    /// Turns protocol actions into frames; a resend whose payload is at a logger node
    /// is fetched from there.
    fn frames(&self, actions: Vec<Action<Envelope>>) -> Vec<(u16, Frame<Envelope>)> {
        // Resends from logger nodes wait for their blocks (up to a second each): on a
        // network worker, the other network tasks (heartbeats, readers) go on meanwhile.
        if actions
            .iter()
            .any(|a| matches!(a, Action::SendDumped { .. }))
        {
            return blocking(|| self.frames_now(actions));
        }
        self.frames_now(actions)
    }

    fn frames_now(&self, actions: Vec<Action<Envelope>>) -> Vec<(u16, Frame<Envelope>)> {
        actions
            .into_iter()
            .filter_map(|a| match a {
                Action::Send { to, meta, payload } => {
                    counter!(REPLAYED).increment(1);
                    Some((to.0, Frame::Message { meta, payload }))
                }
                Action::SendDumped { to, meta, at } => {
                    counter!(REPLAYED).increment(1);
                    self.dumped_frame(to.0, meta, at)
                }
                Action::Control { to, message } => Some((to.0, Frame::Control(message))),
            })
            .collect()
    }

    /// The pseudo-actor that sends on behalf of the app's `main` on this node.
    pub(crate) fn main_id(rank: u16) -> ActorId {
        crate::recovery::hooks::main_id(rank)
    }

    /// An actor (or main) of this node sends `env` to another node: logged with the
    /// channel's next index and the dependency vector, and queued in the node's machine,
    /// at once or once the determinants its sender depends on are stable (take it with
    /// [`Self::outgoing`]). Nothing is queued when the receiver already has it (a
    /// regenerated message after a rollback).
    pub(crate) fn log_send(
        state: &mut LayerState,
        node: &NodeHandle,
        from: ActorId,
        env: Envelope,
    ) {
        // The message depends on every local delivery before it (folded into the
        // interval here; they may also let logged messages through).
        Self::deliver_ready(state, node);
        let to = SetId(env.to.rank());
        let channel = ChannelId::new(from, env.to);
        // Under the layer's lock, as `ActorDependence::resolve` requires.
        let sender = dependence::with_current(|d| d.map(|d| (from, d.get())));
        let logging = state.recovery.events().is_some();
        match state.recovery.handle_send(to, channel, env, sender) {
            Ok(Sent::Logged {
                needed,
                held,
                piggyback,
                ..
            }) => {
                histogram!(PIGGYBACK_BYTES).record(piggyback as f64);
                if logging {
                    dependence::with_current(|d| {
                        if let Some(d) = d {
                            d.resolve(needed);
                        }
                    });
                }
                if held {
                    counter!(events::GATED_SENDS).increment(1);
                }
            }
            Ok(Sent::Suppressed { .. }) => {
                counter!(SUPPRESSED).increment(1);
                if let Some(p) = state.recovery.protocol_mut() {
                    report_checks(node.rank(), p);
                }
            }
            Ok(Sent::NoProtocol) => {}
            Err(e) => tracing::error!("recovery layer refused a send: {e}"),
        }
        // After a restore, a send made again may be what logged messages waited for.
        if state
            .recovery
            .protocol()
            .is_some_and(|p| p.has_deliverable())
        {
            Self::deliver_ready(state, node);
        }
    }

    /// An actor of this node put a message into a mailbox of this node (see
    /// [`LocalDeliveries`]): a plain store on a core thread (a locked increment on any
    /// other), and the lock only when the count lets a blocked logged message through.
    #[inline]
    pub(crate) fn local_delivery(
        &self,
        node: &NodeHandle,
        receiver: &CoreQueue,
        sender: crate::recovery::Dependence,
    ) {
        if self.local.count(node, receiver, sender) {
            let mut state = self.lock();
            Self::deliver_ready(&mut state, node);
        }
    }

    /// Child actor `id` was spawned: the logged messages that waited for it go into its
    /// mailbox, in their delivery order, before any later one (both under the lock).
    pub(crate) fn child_spawned(&self, node: &NodeHandle, id: ActorId) {
        if holds_state() {
            // Not expected: spawns run in handlers and `main`, outside the lock (a
            // restore's vacant cells do not come here). Taking it again would deadlock.
            tracing::warn!(actor = %id, "child spawned under the recovery lock: messages waiting for it stay held");
            return;
        }
        let mut state = self.lock();
        let waiting = state.recovery.child_spawned(id);
        if waiting.is_empty() {
            return;
        }
        let _current = CurrentNode::enter(node);
        for d in waiting {
            let stamp = crate::actor::mailbox::Stamp {
                from: d.channel.from,
                index: d.send_index,
            };
            if let Err(e) = main_replay::without_drop_replies(|| {
                node.deliver_remote(d.payload, d.from.0, Some(stamp))
            }) {
                counter!(crate::transport::UNDELIVERABLE, "reason" => "recovered_unknown")
                    .increment(1);
                tracing::warn!(actor = %id, "logged message undeliverable: {e}");
            }
        }
    }

    /// Measurement mode: logs a message between two actors of this node as if it
    /// crossed sets (serialized payload, channel index, dependency vector).
    pub(crate) fn log_local(&self, from: ActorId, to: ActorId, payload: bytes::Bytes) {
        let mut state = self.lock();
        let vector_len = state
            .recovery
            .protocol()
            .map_or(0, |p| p.depend().encoded_len());
        histogram!(PIGGYBACK_BYTES).record((vector_len + 2) as f64);
        state
            .forced_log
            .push(ChannelId::new(from, to), payload, vector_len);
    }

    /// Sends `env` from actor `from` to its node through the log.
    pub(crate) fn send_remote(
        &self,
        node: &NodeHandle,
        from: ActorId,
        env: Envelope,
    ) -> Result<(), String> {
        let (frames, over_quota) = {
            let mut state = self.lock();
            Self::log_send(&mut state, node, from, env);
            (Self::outgoing(&mut state), self.over_quota(&state))
        };
        let sent = self.send_from_actor(frames);
        if over_quota {
            self.wait_for_dump(node);
        }
        sent
    }

    /// Sends an actor's frames (its message, and what the machine queued with it) from
    /// the actor's thread, which waits for room in the peers' queues.
    fn send_from_actor(&self, frames: Outgoing) -> Result<(), String> {
        if frames.is_empty() {
            return Ok(());
        }
        let t = self.transport().ok_or("no transport")?;
        let mut sent = Ok(());
        for (to, body) in frames {
            match t.send_body(to, &body) {
                // Logged: the peer gets it again when its replacement rolls back.
                Ok(()) | Err(crate::transport::TransportError::PeerDown(_)) => {}
                Err(e) => {
                    if sent.is_ok() {
                        sent = Err(e.to_string());
                    }
                }
            }
        }
        sent
    }

    /// A frame of node `from`'s recovery layer arrived on a connection of its incarnation
    /// `via`. A logged message returns its addressee and the depth of the deepest mailbox
    /// it filled (for the transport's inbound backpressure).
    pub(crate) fn on_frame(
        &self,
        node: &NodeHandle,
        from: u16,
        via: u32,
        frame: RecoveryFrame,
    ) -> Option<(ActorId, usize)> {
        match frame {
            RecoveryFrame::Node(Frame::Message { meta, payload }) => {
                if crate::failpoint::withhold_logged(from, &meta) {
                    return None;
                }
                let to = payload.to;
                Some((to, self.on_logged(node, from, via, meta, payload)))
            }
            RecoveryFrame::Node(Frame::Control(message)) => {
                self.on_control(node, from, message);
                None
            }
            RecoveryFrame::Node(Frame::Events(message)) => {
                self.on_events(node, from, message);
                None
            }
            RecoveryFrame::Replica(frame) => {
                self.on_replica(from, frame);
                None
            }
        }
    }

    /// A logged message from node `from` arrived on a connection of its incarnation
    /// `via`. Returns the deepest mailbox it filled (for the transport's inbound
    /// backpressure).
    pub(crate) fn on_logged(
        &self,
        node: &NodeHandle,
        from: u16,
        via: u32,
        meta: MessageMeta,
        env: Envelope,
    ) -> usize {
        // Sets are nodes: a message on a channel that does not run from node `from` to
        // this one (the machine refuses it), or for another actor than the channel's
        // receiver, would queue on a channel that does not exist.
        let channel = meta.channel;
        let mut state = self.lock_from_network();
        let (index, inc) = (meta.send_index, meta.sender_incarnation);
        let r = if env.to == channel.to {
            state
                .recovery
                .handle_message(SetId(from), Incarnation(via), meta, env)
        } else {
            Err(Refused::Channel { from })
        };
        tracing::trace!(target: set_checkpoint::STATE_TARGET, from, ?channel, index, ?inc, ?r, "received");
        match r {
            Ok(Arrival::Early) => return 0,
            Ok(Arrival::Received(Received::Stale)) => {
                counter!(STALE_MESSAGES).increment(1);
            }
            Ok(Arrival::Received(Received::Duplicate)) => {
                counter!(DUPLICATES).increment(1);
                if let Some(p) = state.recovery.protocol_mut() {
                    report_checks(self.rank, p);
                }
            }
            Ok(Arrival::Received(_)) => {}
            Err(Refused::Channel { .. }) => {
                counter!(BAD_RECOVERY_FRAMES, "reason" => "channel").increment(1);
                tracing::warn!(
                    from,
                    "refused a logged message from node {from} on channel {channel:?}"
                );
                return 0;
            }
            Err(e) => {
                counter!(BAD_RECOVERY_FRAMES, "reason" => "message").increment(1);
                tracing::warn!(from, "refused a logged message from node {from}: {e}");
            }
        }
        Self::deliver_ready(&mut state, node)
    }

    /// Hands every deliverable message to its actor (not before a restarted node's
    /// actors are restored). Returns the deepest mailbox filled.
    pub(crate) fn deliver_ready(state: &mut LayerState, node: &NodeHandle) -> usize {
        if !state.ready {
            return 0;
        }
        let LayerState {
            recovery,
            local,
            main_replay,
            ..
        } = state;
        let mut deepest = 0;
        loop {
            local.fold_into(recovery, node);
            let Some(protocol) = recovery.protocol_mut() else {
                return deepest;
            };
            if protocol.has_deliverable() {
                // Messages hold actor references, which resolve against the current
                // node: the caller may be a thread of no node (the app's main during a
                // restore).
                let _current = CurrentNode::enter(node);
                deepest = deepest.max(Self::deliver_now(recovery, main_replay, node));
            }
            let Some(protocol) = recovery.protocol_mut() else {
                return deepest;
            };
            if !local.rearm(protocol, node) {
                return deepest;
            }
        }
    }

    /// Hands every message the machine can deliver now to its actor (or to `main`).
    fn deliver_now(
        recovery: &mut NodeRecovery<Envelope>,
        main_replay: &mut main_replay::MainReplay,
        node: &NodeHandle,
    ) -> usize {
        let mut deepest = 0;
        let unspawned = |to: ActorId| node.control(to).is_none() && !node.has_exited(to);
        while let Some(routed) = recovery.poll_routed(unspawned) {
            let d = match routed {
                Routed::Actor(d) => d,
                Routed::Main(d) => {
                    Self::deliver_to_main(main_replay, node, &d.payload);
                    continue;
                }
                Routed::AwaitingSpawn(to) => {
                    tracing::debug!(actor = %to, "logged message waits for its addressee to be spawned again");
                    counter!(HELD_FOR_UNSPAWNED).increment(1);
                    continue;
                }
            };
            let to = d.payload.to;
            let stamp = crate::actor::mailbox::Stamp {
                from: d.channel.from,
                index: d.send_index,
            };
            let request = d.payload.request;
            // A reply slot of `main`'s that the mailbox refuses (or that a failed decoding
            // leaves behind) is dropped here without answering: the error below is the
            // one answer.
            let delivered = main_replay::without_drop_replies(|| {
                node.deliver_remote(d.payload, d.from.0, Some(stamp))
            });
            match delivered {
                Ok(depth) => deepest = deepest.max(depth),
                Err(e) => {
                    counter!(crate::transport::UNDELIVERABLE, "reason" => "recovered_unknown")
                        .increment(1);
                    tracing::warn!(actor = %to, "logged message undeliverable: {e}");
                    // `main` asked: it gets the error instead of waiting for ever (sent
                    // once the lock is released, as the addressee's reply).
                    if let Some(request) = request.filter(|r| main_replay::is_main_request(*r)) {
                        main_replay::defer(main_replay::Deferred {
                            node: node.clone(),
                            from: to,
                            rank: d.channel.from.rank(),
                            request,
                            outcome: Err(e),
                        });
                    }
                }
            }
        }
        deepest
    }

    /// A reply to one of `main`'s asks was delivered: kept for a re-executed `main`, and
    /// handed to the ask waiting for it, if one does.
    fn deliver_to_main(
        main_replay: &mut main_replay::MainReplay,
        node: &NodeHandle,
        env: &Envelope,
    ) {
        if env.type_tag != main_replay::REPLY_TAG {
            counter!(BAD_RECOVERY_FRAMES, "reason" => "driver_reply").increment(1);
            tracing::warn!(from = %env.from, "refused a message to main that is not a reply");
            return;
        }
        let late = env.request.is_some_and(|r| {
            main_replay::is_main_request(r)
                && main_replay.is_answered(r)
                && main_replay::decode_outcome_bytes(&env.payload).is_ok()
        });
        if late {
            // A reply after the ask timed out (its timeout is the kept outcome), or a
            // second copy: `main` has its answer.
            counter!(BAD_RECOVERY_FRAMES, "reason" => "driver_reply_late").increment(1);
            tracing::debug!(from = %env.from, "a reply to an ask main has its answer to");
            return;
        }
        match main_replay.on_reply(env) {
            Ok((request, outcome)) => {
                if let Some(tr) = node.transport() {
                    tr.complete_request(request, outcome);
                }
            }
            Err(e) => {
                counter!(BAD_RECOVERY_FRAMES, "reason" => "driver_reply").increment(1);
                tracing::warn!(from = %env.from, "refused a reply to main: {e}");
            }
        }
    }

    /// A control message from node `from` arrived.
    pub(crate) fn on_control(&self, node: &NodeHandle, from: u16, message: ControlMessage) {
        let kind = message.kind();
        let mut state = self.lock_from_network();
        let outcome = match state.recovery.handle_control(SetId(from), message) {
            // Kept until the protocol is back.
            Ok(None) => return,
            Ok(Some(outcome)) => outcome,
            Err(Refused::Channel { .. }) => {
                counter!(BAD_RECOVERY_FRAMES, "reason" => "channel").increment(1);
                tracing::warn!(
                    from,
                    "refused a {kind} from node {from} naming channels between other nodes"
                );
                return;
            }
            Err(e) => {
                counter!(BAD_RECOVERY_FRAMES, "reason" => kind).increment(1);
                tracing::warn!(from, "refused a {kind} from node {from}: {e}");
                return;
            }
        };
        // A report of a new incarnation drops what its predecessors left queued.
        counter!(STALE_MESSAGES).increment(outcome.stale_dropped);
        if kind == "rollback" {
            event(
                self.rank,
                &format!(
                    "peer-rollback from={from} resent={}",
                    outcome.actions.len().saturating_sub(1)
                ),
            );
        }
        if let Some(u) = &outcome.unservable {
            self.cannot_resend(from, u.incarnation, &u.gaps);
        }
        if outcome.checkpoint_wanted {
            self.checkpoint_requested.store(true, Ordering::Release);
        }
        if kind == "response" {
            // Regenerations held until this RESPONSE were compared just now.
            if let Some(p) = state.recovery.protocol_mut() {
                report_checks(self.rank, p);
            }
        }
        self.send_actions(&mut state, outcome.actions);
        let frames = Self::outgoing(&mut state);
        Self::deliver_ready(&mut state, node);
        if outcome.recovered {
            state.replay_span = None;
            if let Some(at) = state.rollback_at.take() {
                histogram!(RECOVERY_PHASE, "phase" => "replay").record(at.elapsed().as_secs_f64());
                event(
                    self.rank,
                    &format!("replayed ms={}", at.elapsed().as_millis()),
                );
            }
        }
        drop(state);
        self.emit(frames);
    }

    /// Says that restarted node `to` (incarnation `incarnation`) cannot be recovered
    /// exactly: its ROLLBACK reports less delivered on the channels of `gaps` than this
    /// node's log was released up to, as `(channel, released, delivered)`, so the
    /// messages in between are gone. It restored an older state than the checkpoint it
    /// had committed (that one was damaged or lost, and no intact copy was found). An
    /// error, and the `recovery-impossible` event on which the launcher stops the run
    /// (nothing this node could do would let `to` replay the same execution).
    fn cannot_resend(&self, to: u16, incarnation: Incarnation, gaps: &[(ChannelId, u64, u64)]) {
        let Some(&(channel, released, delivered)) = gaps.iter().max_by_key(|(_, r, d)| r - d)
        else {
            return;
        };
        let missing: u64 = gaps.iter().map(|(_, r, d)| r - d).sum();
        counter!(RECOVERY_IMPOSSIBLE).increment(1);
        tracing::error!(
            "cannot resend to restarted node {to} (incarnation {}) the messages it needs: \
             channel {channel:?} was released up to {released}, node {to} restored {delivered} \
             ({missing} messages on {} channel(s) are gone); its newest checkpoint was damaged \
             or lost, and it restored an older state: recovery is impossible",
            incarnation.0,
            gaps.len()
        );
        event(
            self.rank,
            &format!(
                "recovery-impossible peer={to} incarnation={} channel={channel:?} \
                 released={released} restored={delivered} channels={} missing={missing}",
                incarnation.0,
                gaps.len()
            ),
        );
    }

    /// Feeds the frames that arrived before the protocol existed.
    pub(crate) fn replay_early(&self, node: &NodeHandle) {
        let (early, early_events) = {
            let mut state = self.lock();
            (
                state.recovery.take_early(),
                state.recovery.take_early_events(),
            )
        };
        for (from, frame) in early {
            match frame {
                EarlyFrame::Message { via, meta, payload } => {
                    self.on_logged(node, from.0, via.0, meta, payload);
                }
                EarlyFrame::Control(m) => self.on_control(node, from.0, m),
            }
        }
        for (from, m) in early_events {
            self.on_events(node, from.0, m);
        }
    }

    /// A (new) connection to `peer`'s incarnation `incarnation` at `addr` is up.
    pub(crate) fn peer_connected(&self, peer: u16, incarnation: u32, addr: std::net::SocketAddr) {
        if incarnation > 0 {
            event(
                self.rank,
                &format!("reconnected peer={peer} incarnation={incarnation} addr={addr}"),
            );
        }
    }

    /// Publishes the log's size as metrics.
    pub(crate) fn publish_log_stats(state: &LayerState, rank: u16) {
        if let Some(p) = state.recovery.protocol() {
            let s = p.log_stats();
            gauge!(LOG_BYTES, "rank" => rank.to_string()).set(s.bytes() as f64);
            gauge!(LOG_ENTRIES, "rank" => rank.to_string()).set(s.entries as f64);
        }
    }

    /// The app's main is about to send or wait: a restarted node restores its actors
    /// first. For a counted send (a tell, an ask to another node), returns whether it
    /// must be skipped because the restored checkpoint already contains it, with the
    /// layer locked for the send.
    pub(crate) fn main_turn(&self, node: &NodeHandle, counted: bool) -> (StateGuard<'_>, bool) {
        let mut state = self.lock();
        if !state.ready {
            drop(state);
            self.restore_point(node);
            state = self.lock();
        }
        if !counted {
            return (state, false);
        }
        let skip = state.main_replay.count_send();
        if state.main_replay.off_thread_sends == 1 {
            counter!(MAIN_OFF_THREAD_SENDS).increment(1);
            tracing::warn!(
                "main sends from more than one thread: such sends are numbered in the order \
                 they happen, so after a failure a re-executed main may skip or repeat the \
                 wrong ones; make main's tells and asks from one thread"
            );
            event(self.rank, "driver-threads");
        }
        (state, skip)
    }

    /// Logs main's message `env` to another node and transmits it (a peer that is down
    /// gets it when it rolls back). `core` is released before the transmission.
    pub(crate) fn main_send_logged(
        &self,
        mut state: StateGuard<'_>,
        node: &NodeHandle,
        env: Envelope,
    ) {
        // Logging delivers what the send let through first.
        let main_replay = Self::main_id(node.rank());
        Self::log_send(&mut state, node, main_replay, env);
        let frames = Self::outgoing(&mut state);
        drop(state);
        if let Some(tr) = node.transport() {
            for (to, body) in frames {
                let _ = tr.send_body(to, &body);
            }
        }
    }

    /// A re-executed `main` made its ask `request` of `to` where its lost incarnation
    /// asked `before`: it broke the determinism contract (its reply from before the
    /// failure answered another question). Reported like a regenerated message that
    /// differs: metric, error, timeline event, final totals.
    pub(crate) fn report_diverged_ask(&self, request: u64, to: ActorId, before: ActorId) {
        counter!(CONTRACT_VIOLATIONS, "found_by" => "main").increment(1);
        let position = request & !main_replay::MAIN_REQUEST;
        tracing::error!(
            "determinism contract broken: the re-executed main made its send #{position}, an \
             ask, of actor {to}, where before the failure it asked actor {before}; it gets the \
             reply kept from before, and the run's result may not be a failure-free run's \
             (docs/recovery.md, \"The app's main\")"
        );
        event(
            self.rank,
            &format!(
                "contract-violation from=main to={to} index={position} found_by=main asked_before={before}"
            ),
        );
    }

    /// `main`'s ask `request` to `to` timed out: keeps the timeout as its outcome (see
    /// [`main_replay::MainReplay::keep_timeout`]). False if the ask has its reply already.
    pub(crate) fn main_ask_timed_out(&self, request: u64, to: ActorId) -> bool {
        self.lock().main_replay.keep_timeout(request, to)
    }

    /// An actor of this node answers `main`'s ask `request` on node `rank`: the reply
    /// goes as a logged message, so a restarted `main` gets it again (see [`main_replay`]).
    /// `Ok(false)`: `main` gave up on the ask (it timed out) before this reply.
    pub(crate) fn reply_to_main(
        &self,
        node: &NodeHandle,
        rank: u16,
        request: u64,
        outcome: &main_replay::Outcome,
    ) -> Result<bool, String> {
        let from =
            crate::actor::lifecycle::current_actor().unwrap_or_else(|| Self::main_id(self.rank));
        if holds_state() {
            main_replay::defer(main_replay::Deferred {
                node: node.clone(),
                from,
                rank,
                request,
                outcome: outcome.clone(),
            });
            return Ok(true);
        }
        self.send_reply_to_main(node, from, rank, request, outcome)
    }

    /// Settles a reply to `main` deferred while this layer's lock was held, with the
    /// lock still held: kept (`answered`: to hand to the ask once the lock is released)
    /// or logged (`frames`: to queue without blocking).
    fn settle_deferred(
        &self,
        state: &mut LayerState,
        d: main_replay::Deferred,
        answered: &mut Vec<(u64, main_replay::Outcome)>,
        frames: &mut Vec<(u16, FrameBody)>,
    ) {
        let settled = if d.rank == self.rank {
            state
                .main_replay
                .keep_local_reply(d.request, &d.outcome)
                .map(|kept| answered.extend(kept.map(|outcome| (d.request, outcome))))
        } else {
            main_replay::reply_envelope(Self::main_id(d.rank), d.from, d.request, &d.outcome).map(
                |env| {
                    Self::log_send(state, &d.node, d.from, env);
                    frames.extend(Self::outgoing(state));
                },
            )
        };
        if let Err(e) = settled {
            tracing::warn!(
                rank = d.rank,
                "reply to main on node {} not sent: {e}",
                d.rank
            );
        }
    }

    /// Sends the reply of actor `from` to `main`'s ask `request` on node `rank`, as a
    /// logged message (kept directly on `main`'s own node; `Ok(false)` if `main` gave up
    /// on the ask before).
    pub(crate) fn send_reply_to_main(
        &self,
        node: &NodeHandle,
        from: ActorId,
        rank: u16,
        request: u64,
        outcome: &main_replay::Outcome,
    ) -> Result<bool, String> {
        if rank == self.rank {
            // An actor of main's own node: the reply stays in the node (the checkpoint
            // keeps it with the actor that made it).
            let Some(kept) = self.lock().main_replay.keep_local_reply(request, outcome)? else {
                return Ok(false);
            };
            if let Some(tr) = node.transport() {
                tr.complete_request(request, kept);
            }
            return Ok(true);
        }
        let env = main_replay::reply_envelope(Self::main_id(rank), from, request, outcome)?;
        self.send_remote(node, from, env).map(|()| true)
    }

    /// The first phase of a supervised shutdown: announces that this node's `main` has
    /// finished (event `finished`). The node then runs on until the supervisor says
    /// `leave`: its actors, checkpoints and log serve a peer that dies and replays.
    pub(crate) fn announce_finished(&self) {
        crate::failpoint::before_finished();
        event(
            self.rank,
            &format!("finished incarnation={}", self.config.incarnation),
        );
    }

    /// Stops the checkpoint thread and reports the node's recovery totals.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let s = self.stats();
        let (determinants, driver_replies, core_diverged) = {
            let state = self.lock();
            (
                state.events.report(&state.recovery),
                state.main_replay.replies_kept(),
                state.main_replay.diverged,
            )
        };
        event(
            self.rank,
            &format!(
                "final incarnation={} checkpoints={} replayed={} duplicates={} suppressed={} regenerations_checked={} contract_violations={} delivered={} driver_replies={driver_replies} log_entries={} log_peak_entries={} log_peak_bytes={} piggyback_bytes={} max_piggyback={} forced_logged={} forced_peak_bytes={} checkpoint_requests_sent={} checkpoint_requests_received={} {} {determinants}",
                self.config.incarnation,
                s.checkpoints,
                s.protocol.resent,
                s.protocol.duplicates,
                s.protocol.suppressed,
                s.protocol.regenerations_checked,
                s.protocol.contract_violations + core_diverged,
                s.protocol.delivered,
                s.log_entries,
                s.log_peak_entries,
                s.log_peak_bytes,
                s.protocol.piggyback_bytes,
                s.protocol.max_piggyback,
                s.forced_logged,
                s.forced_peak_bytes,
                s.protocol.checkpoint_requests_sent,
                s.protocol.checkpoint_requests_received,
                self.offload_report(),
            ),
        );
        crate::failpoint::after_final();
    }

    /// An actor of this node failed: with recovery on the whole set rolls back. The node
    /// does it itself, in place (see [`in_place`]): the process re-executes its program as
    /// the next incarnation, which restores the set from its checkpoint while the peers
    /// replay. A failure repeated the same way ends the process as a deterministic bug;
    /// so does a failure after `main` finished, or an exec that fails (a supervisor, if
    /// any, then decides).
    pub(crate) fn actor_failed(&self, failure: &crate::actor::supervision::SupervisionEvent) {
        let message_type = match &failure.kind {
            crate::actor::supervision::FailureKind::HandlerPanicked { message_type } => {
                message_type
            }
            _ => "-",
        };
        let signature = format!(
            "actor={} type={} message={message_type} panic={:?}",
            failure.actor, failure.actor_type, failure.panic_message
        );
        event(self.rank, &format!("actor-failed {signature}"));
        let history = std::env::var(in_place::FAILURES_VAR).ok();
        let finished = self.stop.load(Ordering::Acquire);
        match in_place::decide(
            history.as_deref(),
            &signature,
            self.config.incarnation,
            finished,
        ) {
            in_place::Decision::RollBack {
                incarnation,
                failures,
            } => {
                event(
                    self.rank,
                    &format!(
                        "rolling-back incarnation={incarnation} pid={}",
                        std::process::id()
                    ),
                );
                // A node started with an explicit peer list hands on the current one:
                // peers may have moved to spare slots since it started.
                let peers = std::env::var_os("LAZARUS_RANK")
                    .and_then(|_| self.transport.get())
                    .map(|t| t.peer_addrs());
                let e = in_place::reexec(incarnation, &failures, peers.as_deref());
                tracing::error!("cannot re-execute this node to roll back in place: {e}");
            }
            in_place::Decision::GiveUp { times } => {
                tracing::error!(
                    "giving up: the same actor failed the same way {times} times (a deterministic bug, not a transient fault): {signature}"
                );
            }
            in_place::Decision::Exit => {}
        }
        // SAFETY: _exit ends the process without running destructors or atexit handlers,
        // which could block on locks other threads hold; stderr is unbuffered.
        unsafe { libc::_exit(ACTOR_FAILED_EXIT) }
    }

    /// The protocol's incarnation of this node.
    pub fn incarnation(&self) -> Incarnation {
        self.lock()
            .recovery
            .protocol()
            .map(|p| p.incarnation())
            .unwrap_or(Incarnation(self.config.incarnation))
    }

    /// Statistics of the protocol and log (for tests, benchmarks and the demo).
    pub fn stats(&self) -> LayerStats {
        let state = self.lock();
        let (protocol, log) = state
            .recovery
            .protocol()
            .map(|p| (p.stats(), p.log_stats()))
            .unwrap_or_default();
        let (forced_logged, forced_peak_bytes) =
            (state.forced_log.logged, state.forced_log.peak_bytes);
        LayerStats {
            protocol,
            log_entries: log.entries,
            log_bytes: log.bytes(),
            log_peak_entries: log.peak_entries,
            log_peak_bytes: log.peak_bytes,
            checkpoints: self.checkpoints_done.load(Ordering::Relaxed),
            forced_logged,
            forced_peak_bytes,
            main_off_thread_sends: state.main_replay.off_thread_sends,
        }
    }
}

/// A snapshot of a node's recovery activity.
#[derive(Clone, Copy, Debug, Default)]
pub struct LayerStats {
    /// Protocol counters.
    pub protocol: crate::recovery::ProtocolStats,
    /// Entries in the sender-based log now.
    pub log_entries: usize,
    /// Payload bytes in the log now.
    pub log_bytes: usize,
    /// Most entries the log ever held.
    pub log_peak_entries: usize,
    /// Most bytes the log ever held.
    pub log_peak_bytes: usize,
    /// Checkpoints committed by this process.
    pub checkpoints: u64,
    /// Log-everything mode: messages inside the node that were logged.
    pub forced_logged: u64,
    /// Log-everything mode: most bytes the node-internal log held.
    pub forced_peak_bytes: usize,
    /// Sends of `main` made from another thread than its first send's (their numbering
    /// is not reproducible).
    pub main_off_thread_sends: u64,
}

/// Frames the node's machine has to send after one input: inline for the common case
/// (an actor's message, with or without a determinant batch), no allocation per send.
type Outgoing = smallvec::SmallVec<[(u16, FrameBody); 2]>;

/// The transport's frame for a frame of the recovery machine.
fn body_of(frame: Frame<Envelope>) -> FrameBody {
    FrameBody::Recovery(RecoveryFrame::Node(frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::{ChannelIndices, Config, DepVector};

    #[test]
    fn local_messages_take_the_lock_only_once_they_let_a_waiting_message_through() {
        // A restarted set (interval 0) holds a logged message that followed 3 events of
        // its lost execution.
        let mut fresh = SetProtocol::<Vec<u8>>::new(SetId(0), 2).unwrap();
        let (mut p, _) =
            SetProtocol::restore(fresh.checkpoint(), Incarnation(1), Config::default()).unwrap();
        // The peer answered the rollback: it had delivered nothing from set 0.
        let empty = crate::recovery::RecoveryReport {
            incarnation: Incarnation(0),
            delivered: ChannelIndices::default(),
            checkpointed: ChannelIndices::default(),
        };
        let response = ControlMessage::Response {
            to_incarnation: Incarnation(1),
            report: empty,
            digests: Default::default(),
            positions: Vec::new(),
        };
        p.on_control(SetId(1), response).unwrap();
        let mut depend = DepVector::new();
        depend.set(SetId(0), 3);
        let meta = MessageMeta {
            channel: ChannelId::new(ActorId::new(1, 0).unwrap(), ActorId::new(0, 0).unwrap()),
            send_index: 1,
            sender_incarnation: Incarnation(0),
            depend,
        };
        p.on_receive(SetId(1), Incarnation(0), meta, b"answer".to_vec())
            .unwrap();
        // Counted from this thread, which is none of the node's cores: the locked way.
        let node = crate::Node::builder().cores(1).pin(false).build().unwrap();
        let handle = node.handle();
        let receiver = &handle.cores()[0];
        let local = LocalDeliveries::new();
        let mut n = NodeRecovery::new(SetId(0), GateRule::PerActor, Default::default());
        n.start_protocol(p);
        let none = crate::recovery::Dependence::Below(0);
        assert!(!local.rearm(n.protocol().unwrap(), handle));
        assert!(
            !local.count(handle, receiver, none) && !local.count(handle, receiver, none),
            "2 of 3: nothing to deliver yet"
        );
        assert!(
            local.count(handle, receiver, none),
            "the third lets it through"
        );
        local.fold_into(&mut n, handle);
        let p = n.protocol_mut().unwrap();
        assert_eq!(p.interval(), 3);
        assert!(p.poll_delivery().is_some());
        assert!(!local.rearm(p, handle));
        assert!(
            !local.count(handle, receiver, none),
            "nothing waits: no lock"
        );
        local.fold_into(&mut n, handle);
        assert_eq!(
            n.protocol().unwrap().interval(),
            5,
            "the delivery and the fourth count"
        );
        node.shutdown();
    }

    #[test]
    fn a_logged_message_on_a_channel_the_sending_node_does_not_own_is_refused() {
        let dir = std::env::temp_dir().join(format!("lazarus-channel-{}", std::process::id()));
        let layer = RecoveryLayer::new(0, 3, RecoveryConfig::for_tests(dir.clone()));
        let node = crate::Node::builder().cores(1).pin(false).build().unwrap();
        let (ours, node1, node2) = (
            ActorId::new(0, 0).unwrap(),
            ActorId::new(1, 0).unwrap(),
            ActorId::new(2, 0).unwrap(),
        );
        let logged = |channel: ChannelId, to: ActorId| {
            let meta = MessageMeta {
                channel,
                send_index: 1,
                sender_incarnation: Incarnation(0),
                depend: DepVector::new(),
            };
            let env = Envelope {
                to,
                from: channel.from,
                type_tag: 0,
                request: None,
                payload: Default::default(),
            };
            (meta, env)
        };
        // Node 1 speaking for node 2's actor, to another node's actor, or with an
        // envelope addressed elsewhere than its channel: nothing is kept.
        for (channel, to) in [
            (ChannelId::new(node2, ours), ours),
            (ChannelId::new(node1, node2), node2),
            (ChannelId::new(node1, ours), ActorId::new(0, 1).unwrap()),
        ] {
            let (meta, env) = logged(channel, to);
            layer.on_logged(node.handle(), 1, 0, meta, env);
        }
        let taken = || {
            let state = layer.lock();
            let received = state.recovery.protocol().map_or(0, |p| p.stats().received);
            state.recovery.early_len() as u64 + received
        };
        assert_eq!(taken(), 0, "refused before the protocol sees it");
        let (meta, env) = logged(ChannelId::new(node1, ours), ours);
        layer.on_logged(node.handle(), 1, 0, meta, env);
        assert_eq!(taken(), 1, "a well-formed one is taken");
        node.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn frames_emitted_before_the_transport_is_attached_wait_for_it() {
        // A restarted peer's fetch can reach this node while its transport is still
        // connecting to the others; the answer must be sent once it is attached, not lost.
        let dir = std::env::temp_dir().join(format!("lazarus-outbox-{}", std::process::id()));
        let layer = RecoveryLayer::new(1, 2, RecoveryConfig::for_tests(dir.clone()));
        layer.emit([(0, FrameBody::Goodbye), (0, FrameBody::Goodbye)]);
        let rx = layer
            .outbox_rx
            .lock()
            .unwrap()
            .take()
            .expect("not attached");
        assert_eq!(rx.try_iter().count(), 2);
        let _ = std::fs::remove_dir_all(dir);
    }
}
