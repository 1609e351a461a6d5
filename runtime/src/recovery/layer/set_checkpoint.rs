//! The coordinated checkpoint of a node's correlated set: every core pauses between two
//! actor turns, every actor's state and mailbox (the set's in-flight internal messages)
//! and the protocol state are read in that instant, the cores resume, and the image is
//! stored (directory, then buddy) before the protocol announces it to the peers.
//!
//! No other node takes part: sets checkpoint independently, with no global barrier.

use super::events::EventImage;
use super::{event, RecoveryLayer, CHECKPOINTS, CHECKPOINT_BYTES, CHECKPOINT_DURATION};
use super::{CHECKPOINT_FAILURES, CHECKPOINT_PAUSE, CHECKPOINT_REQUESTS, REQUESTED_CHECKPOINTS};
use crate::actor::lifecycle::ActorImage;
use crate::checkpoint::health::{CheckpointHealth, Failure};
use crate::checkpoint::CheckpointStore;
use crate::node::NodeHandle;
use crate::recovery::{CheckpointRefused, NodeImage, Snapshot};
use crate::transport::frame::Envelope;
use metrics::{counter, gauge, histogram};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a node with recovery on waits for: its protocol's inbox (the interval, the peers
/// it awaits, and each channel whose messages it holds back, with why: see
/// `SetProtocol::describe_waiting`), the frames its send gate holds, and the mailboxes
/// that hold messages. The text of the stall report at a commit, and of the node's
/// answer to the launcher's `report`.
pub(crate) fn blocked_state(state: &super::LayerState, node: &NodeHandle) -> String {
    let Some(p) = state.recovery.protocol() else {
        return format!(
            "restoring its checkpoint (no protocol yet); {}",
            node.mailbox_summary(16)
        );
    };
    format!(
        "{} held_frames={} {}",
        p.describe_waiting(16),
        state.recovery.held_len(),
        node.mailbox_summary(16)
    )
}

/// Version of the layout of a node's checkpoint image (`SetImage`). 6: actor images
/// record their core and their count of children. 7: the actors `main` spawned that
/// have exited. 8: every actor that has exited. 9: the logger processes the node knew.
/// 10: the exited actors `main` spawned as ranges of ids. 11: actor images keep a
/// suspended async handler, the results not taken yet, the ask counters and the sleeps.
/// 13: the one-sided windows.
pub const SET_IMAGE_FORMAT: u16 = 13;

/// Everything a node's checkpoint holds.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SetImage {
    pub(crate) format: u16,
    /// The protocol state: vectors, indices, the sender-based log.
    pub(crate) protocol: Snapshot<Envelope>,
    /// Every live actor: state and mailbox.
    pub(crate) actors: Vec<ActorImage>,
    /// The app's main: sends made, how much of the reply journal holds the replies
    /// delivered to its asks.
    pub(crate) main_replay: super::main_replay::MainImage,
    /// Determinant state: event clocks, channel stamps, the event-logging watermark.
    pub(crate) events: super::events::EventImage,
    /// Every actor of the node that had exited. A restarted `main` spawns again those
    /// it had spawned, and the restore ends them before they run; references to any of
    /// them (an exited worker's exited child too, which no checkpointed parent's count
    /// of children names) resolve to stopped actors.
    pub(crate) exited: crate::actor::exited_actors::ExitedActors,
    /// Per logger node, the process (its `Hello` number) the node had last connected to:
    /// a restored node that finds another one there knows the blocks missing there were
    /// lost with a restart, not released since the checkpoint.
    pub(crate) logger_instances: Vec<Option<u64>>,
    /// The node's one-sided windows, membership and part, in order of creation.
    pub(crate) windows: Vec<crate::window::WindowImage>,
}

/// What a checkpoint read in its paused instant, and how long the cores were paused.
struct Captured {
    windows: Vec<crate::window::WindowImage>,
    protocol: Snapshot<Envelope>,
    actors: Vec<ActorImage>,
    main_replay: super::main_replay::MainImage,
    /// Replies to `main` kept since the last append to the reply journal.
    unjournaled: Vec<(u64, bytes::Bytes)>,
    events: EventImage,
    exited: crate::actor::exited_actors::ExitedActors,
    logger_instances: Vec<Option<u64>>,
    pause: Duration,
    /// The part of `pause` spent waiting for the cores to reach a pause point (their
    /// running handlers to return).
    gate: Duration,
}

/// How long a checkpoint waits for every core to reach a pause point.
const PAUSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a checkpoint waits for the buddy's acknowledgement.
const REPLICA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a checkpoint waits for the buddy's copy of a lost reply journal.
const JOURNAL_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the store failed because the reply journal is shorter than expected.
fn is_short(e: &crate::checkpoint::CheckpointError) -> bool {
    let crate::checkpoint::CheckpointError::Io { source, .. } = e;
    source.kind() == std::io::ErrorKind::UnexpectedEof
}

/// What one checkpoint cost.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointReport {
    /// The checkpoint's number.
    pub id: u64,
    /// Actors captured.
    pub actors: usize,
    /// Time the cores were paused (coordination plus reading states).
    pub pause: Duration,
    /// Bytes stored.
    pub bytes: usize,
    /// Whole duration.
    pub total: Duration,
}

/// Why a checkpoint was not taken.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointFailure {
    /// Not every core reached a pause point in time (a handler ran or blocked too long).
    #[error("cores did not pause within {0:?}")]
    PauseTimeout(Duration),
    /// A restarted node has not finished restoring.
    #[error("the node is still being restored")]
    NotReady,
    /// Logged messages wait for child actors a replaying handler has not spawned again
    /// (they would be in no image); tried again shortly.
    #[error("{0} logged messages wait for actors not spawned again yet")]
    AwaitingSpawn(usize),
    /// An actor's state or a message could not be encoded.
    #[error("encoding: {0}")]
    Encode(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::checkpoint::CheckpointError),
    /// The buddy did not acknowledge the replica in time.
    #[error("the buddy did not acknowledge the replica within {0:?}")]
    Replica(Duration),
    /// The protocol refused the commit.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A window's gate did not drain in time: another node's put or get stayed inside
    /// this node's part (a frozen origin); tried again at the next period.
    #[error("window gate: {0}")]
    WindowGate(String),
}

impl From<CheckpointRefused> for CheckpointFailure {
    fn from(e: CheckpointRefused) -> Self {
        match e {
            CheckpointRefused::NotReady => CheckpointFailure::NotReady,
            CheckpointRefused::AwaitingSpawn(n) => CheckpointFailure::AwaitingSpawn(n),
            CheckpointRefused::Protocol(e) => CheckpointFailure::Protocol(e.to_string()),
        }
    }
}

impl CheckpointFailure {
    /// Its `reason` label of `lazarus_checkpoint_failures_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            CheckpointFailure::PauseTimeout(_)
            | CheckpointFailure::NotReady
            | CheckpointFailure::Encode(_) => "capture",
            CheckpointFailure::AwaitingSpawn(_) => "awaiting_spawn",
            CheckpointFailure::Store(e) => e.reason(),
            CheckpointFailure::Replica(_) => "replica",
            CheckpointFailure::Protocol(_) => "protocol",
            CheckpointFailure::WindowGate(_) => "window_gate",
        }
    }
}

/// Tracing target of the node's recovery state after each checkpoint (debug level): what
/// the inbox holds back, held frames, mailbox depths. `RUST_LOG=lazarus::recovery_state=debug`
/// shows why a run stalls.
pub const STATE_TARGET: &str = "lazarus::recovery_state";

impl RecoveryLayer {
    /// Reads the node's set in one paused instant.
    fn capture(&self, node: &NodeHandle) -> Result<Captured, CheckpointFailure> {
        let _span = tracing::info_span!("pause").entered();
        let started = Instant::now();
        if !node.pause_cores(PAUSE_TIMEOUT) {
            return Err(CheckpointFailure::PauseTimeout(PAUSE_TIMEOUT));
        }
        let gate = started.elapsed();
        let captured = (|| {
            let mut state = self.lock();
            if !state.ready {
                return Err(CheckpointFailure::NotReady);
            }
            // The interval in the image counts every local delivery before it (and a
            // logged message they let through is in its mailbox).
            Self::deliver_ready(&mut state, node);
            // A reply to `main` those deliveries made (an error answer) goes into this
            // image with them: kept, or logged.
            state.settle_deferred_replies();
            // The recovery machine's part first: it refuses while messages wait for
            // children not spawned again (they would be in no image).
            let layer = &mut *state;
            let clocks = &layer.events.clocks;
            let NodeImage { protocol, events } = layer
                .recovery
                .checkpoint(|a| clocks.get(&a).copied().unwrap_or(0))
                .map_err(CheckpointFailure::from)?;
            // No handler runs while the cores are paused, so no actor is exiting: every
            // actor is either in `controls` or in `exited`.
            let exited = node.exited_actors();
            let mut actors = Vec::new();
            for control in node.controls() {
                if let Some(image) = control
                    .checkpoint_image()
                    .map_err(CheckpointFailure::Encode)?
                {
                    actors.push(image);
                }
            }
            state.forced_log.release();
            let events = self.events_image(&state, events);
            let (main_replay, unjournaled) = state.main_replay.image();
            // Read with the log: a block in this image was stored at the instance the
            // client knew then, or at an older one it had not found restarted yet.
            let logger_instances = self.logger_instances();
            // No handler runs; `main`'s window calls hold the window's lock.
            let windows = node
                .windows()
                .images()
                .map_err(CheckpointFailure::WindowGate)?;
            Ok(Captured {
                windows,
                protocol,
                actors,
                main_replay,
                unjournaled,
                events,
                exited,
                logger_instances,
                pause: Duration::ZERO,
                gate,
            })
        })();
        node.resume_cores();
        let pause = started.elapsed();
        captured.map(|c| Captured { pause, ..c })
    }

    /// Takes, stores and commits one checkpoint of this node's set.
    pub fn checkpoint_now(&self, node: &NodeHandle) -> Result<CheckpointReport, CheckpointFailure> {
        let mut body = self.checkpointing.lock().unwrap_or_else(|e| e.into_inner());
        // One span per checkpoint, its phases (pause, store, replica, commit) inside it:
        // a tracing subscriber (or OpenTelemetry behind one) sees where the time goes.
        let span = tracing::info_span!("checkpoint", rank = self.rank, id = tracing::field::Empty);
        let _checkpoint = span.enter();
        let started = Instant::now();
        let Captured {
            protocol,
            actors,
            mut main_replay,
            unjournaled,
            events,
            exited,
            logger_instances,
            pause,
            gate,
            windows,
        } = self.capture(node).inspect_err(|e| match e {
            CheckpointFailure::AwaitingSpawn(_) => {
                counter!(CHECKPOINT_FAILURES, "reason" => "awaiting_spawn").increment(1);
                tracing::debug!("checkpoint postponed: {e}");
            }
            // Told by the checkpointer, at a bounded rate.
            _ => counter!(CHECKPOINT_FAILURES, "reason" => e.reason()).increment(1),
        })?;
        // The replies first: an image is stored only once its part of the journal is
        // durable.
        let journal_from = main_replay.journal_len;
        let appended = self
            .append_journal(&mut main_replay, &unjournaled)
            .inspect_err(|e| {
                counter!(CHECKPOINT_FAILURES, "reason" => e.reason()).increment(1);
            })?;
        histogram!(CHECKPOINT_PAUSE).record(pause.as_secs_f64());
        let id = protocol.id;
        span.record("id", id.0);
        crate::failpoint::during_checkpoint(id.0);
        let n_actors = actors.len();
        // Actors whose image keeps a suspended async handler instead of their state.
        let suspended = actors.iter().filter(|a| a.suspended.is_some()).count();
        // Their sleeps not over yet.
        let sleeps: usize = actors.iter().map(|a| a.sleeps.len()).sum();
        let events_snapshot = events.snapshot;
        let journal_len = main_replay.journal_len;
        let image = SetImage {
            format: SET_IMAGE_FORMAT,
            protocol,
            actors,
            main_replay,
            events,
            exited,
            logger_instances,
            windows,
        };
        let replicated = self.config.buddy && self.size > 1;
        let store_span = tracing::info_span!("store", replicated).entered();
        let stored = if replicated {
            // The replica needs the image in memory anyway.
            crate::wire::encode_into(&image, &mut body)
                .map_err(|e| CheckpointFailure::Encode(e.to_string()))?;
            self.store
                .save(self.rank, id.0, &body)
                .map(|()| body.len() as u64)
        } else {
            // Encoded straight into the file: no copy of the image (mostly logged
            // payloads) in memory first.
            self.store
                .save_streamed(self.rank, id.0, &mut |w| crate::wire::encode_to(&image, w))
        };
        // The state buffers go back to their actors: the next checkpoint encodes into
        // memory that is already mapped. The rest (logged payloads among it) is freed now.
        let SetImage {
            actors,
            protocol,
            windows,
            ..
        } = image;
        drop(protocol);
        for actor in actors {
            if let Some(control) = node.control(actor.id) {
                control.recycle_image(actor);
            }
        }
        drop(store_span);
        let bytes = stored.map_err(CheckpointFailure::Store).inspect_err(|e| {
            counter!(CHECKPOINT_FAILURES, "reason" => e.reason()).increment(1);
        })? as usize;
        let body: &[u8] = &body;
        if replicated {
            // The commit waits for the replica: a checkpoint that the peers release their
            // logs for must survive the loss of this host's disk.
            let journal = super::replica::JournalPart {
                from: journal_from,
                appended: &appended,
                len: journal_len,
            };
            let _replica = tracing::info_span!("replica", buddy = self.buddy()).entered();
            if !self.replicate(id.0, body, journal, REPLICA_TIMEOUT) {
                counter!(CHECKPOINT_FAILURES, "reason" => "replica").increment(1);
                return Err(CheckpointFailure::Replica(REPLICA_TIMEOUT));
            }
        }
        let _commit = tracing::info_span!("commit").entered();
        let frames = {
            let mut state = self.lock();
            let actions = state
                .recovery
                .handle_checkpoint_committed(id, events_snapshot)
                .map_err(CheckpointFailure::from)
                .inspect_err(|e| {
                    counter!(CHECKPOINT_FAILURES, "reason" => e.reason()).increment(1);
                })?;
            Self::publish_log_stats(&state, self.rank);
            self.report_stall(&state, node, id.0);
            // In the machine's order: releases at the loggers and the frames the
            // checkpoint's determinants let out, then the announcement.
            self.send_actions(&mut state, actions);
            Self::outgoing(&mut state)
        };
        self.emit(frames);
        node.windows().committed(id.0, &windows);
        let _ = self.store.prune_before(self.rank, id.0);
        let total = started.elapsed();
        counter!(CHECKPOINTS).increment(1);
        histogram!(CHECKPOINT_DURATION).record(total.as_secs_f64());
        gauge!(CHECKPOINT_BYTES).set(bytes as f64);
        self.checkpoints_done.fetch_add(1, Ordering::Relaxed);
        event(
            self.rank,
            &format!(
                "checkpoint id={} actors={n_actors} suspended_handlers={suspended} \
                 sleeps={sleeps} bytes={} \
                 journal_bytes={journal_len} pause_us={} gate_us={} total_ms={}",
                id.0,
                bytes,
                pause.as_micros(),
                gate.as_micros(),
                total.as_millis()
            ),
        );
        Ok(CheckpointReport {
            id: id.0,
            actors: n_actors,
            pause,
            bytes,
            total,
        })
    }

    /// Appends the replies to `main` kept since the last checkpoint to the node's reply
    /// journal and records its new length in `driver`; returns the bytes appended.
    fn append_journal(
        &self,
        main_replay: &mut super::main_replay::MainImage,
        unjournaled: &[(u64, bytes::Bytes)],
    ) -> Result<Vec<u8>, CheckpointFailure> {
        if unjournaled.is_empty() {
            return Ok(Vec::new());
        }
        let mut records = Vec::new();
        crate::checkpoint::journal::encode_records(unjournaled, &mut records);
        let len = match self
            .store
            .append_journal(self.rank, main_replay.journal_len, &records)
        {
            Ok(len) => len,
            // Lost under a running node (its directory deleted): the buddy holds a copy.
            Err(e) if is_short(&e) && self.journal_from_buddy(main_replay.journal_len) => self
                .store
                .append_journal(self.rank, main_replay.journal_len, &records)?,
            // Until the journal takes the replies (room on a full file system, or the
            // lost journal back), no checkpoint of this node commits and its peers keep
            // their logs; the checkpointer says so.
            Err(e) => return Err(e.into()),
        };
        main_replay.journal_len = len;
        self.lock().main_replay.journaled(unjournaled.len(), len);
        Ok(records)
    }

    /// Puts back this node's reply journal, up to `len` bytes, from the buddy's copy
    /// (its directory lost it while the node ran); true if it could.
    fn journal_from_buddy(&self, len: u64) -> bool {
        if !(self.config.buddy && self.size > 1) {
            return false;
        }
        let Some((_, _, journal)) = self.fetch_replica(JOURNAL_FETCH_TIMEOUT) else {
            return false;
        };
        let Some(part) = usize::try_from(len).ok().and_then(|l| journal.get(..l)) else {
            tracing::error!(
                have = journal.len(),
                len,
                "the buddy's copy of the reply journal is shorter than this node's"
            );
            return false;
        };
        match self.store.append_journal(self.rank, 0, part) {
            Ok(_) => {
                event(
                    self.rank,
                    &format!("journal-restored-from-buddy bytes={len}"),
                );
                true
            }
            Err(e) => {
                tracing::error!("cannot write the buddy's reply journal here: {e}");
                false
            }
        }
    }

    /// Called at each commit: when the node delivered and sent nothing since the previous
    /// commit although its inbox holds messages, says what they wait for (a warning: the
    /// run is stalled); at debug level (`STATE_TARGET`) it always says.
    fn report_stall(&self, state: &super::LayerState, node: &NodeHandle, id: u64) {
        let Some(p) = state.recovery.protocol() else {
            return;
        };
        let s = p.stats();
        let progress = s.delivered + s.sent + s.received;
        let before = self.progress_at_commit.swap(progress, Ordering::Relaxed);
        let stalled = before == progress && p.queued() > 0;
        if !stalled && !tracing::enabled!(target: STATE_TARGET, tracing::Level::DEBUG) {
            return;
        }
        let state = blocked_state(state, node);
        if stalled {
            counter!(super::STALLED_PERIODS).increment(1);
            tracing::warn!(
                target: STATE_TARGET,
                "no message delivered or sent since the last checkpoint, but the inbox holds some: {state}"
            );
        } else {
            tracing::debug!(target: STATE_TARGET, "after checkpoint {id}: {state}");
        }
    }

    /// What this node waits for ([`blocked_state`], and what its order-sensitive actors
    /// wait for, as the node's own stall watch says it), for a report outside the
    /// checkpoint path (the launcher's stall watchdog). Waits at most `patience` for the
    /// layer's lock; a lock held longer is itself the answer.
    pub(crate) fn stall_report(&self, node: &NodeHandle, patience: Duration) -> String {
        let deadline = Instant::now() + patience;
        let said = |state: &super::LayerState| {
            format!(
                "{}; {}",
                blocked_state(state, node),
                state.events.describe_waits(&state.recovery)
            )
        };
        loop {
            match self.state.try_lock() {
                Ok(g) => return said(&super::StateGuard::new(self, g)),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return said(&super::StateGuard::new(self, p.into_inner()))
                }
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    return format!(
                        "its recovery layer has been locked for over {} ms (a checkpoint, or \
                         a thread stuck holding it); {}",
                        patience.as_millis(),
                        node.mailbox_summary(16)
                    )
                }
            }
        }
    }

    /// Starts the thread that checkpoints every `checkpoint_every` (the first time after
    /// [`first_checkpoint_after`]) and when a peer asks for it (CHECKPOINT_REQUEST; after
    /// a pause as long as the last checkpoint took, at least [`QUOTA_POLL`], so that
    /// requests keep the node checkpointing half the time at most; a requested
    /// checkpoint that failed is tried again after [`RETRY_AFTER_FAILURE`]), and that
    /// enforces the log's quota, if any, by asking peers for checkpoints (checked every
    /// [`QUOTA_POLL`]).
    pub(crate) fn start_checkpointer(self: &Arc<Self>, node: NodeHandle) {
        let every = self.config.checkpoint_every;
        let poll = if self.config.log_quota.is_some() {
            QUOTA_POLL
        } else {
            IDLE_POLL
        };
        let layer = Arc::clone(self);
        let stop = Arc::clone(&self.stop);
        let first = every.map(|e| first_checkpoint_after(e, self.rank, self.size));
        self.remove_partial_checkpoints();
        let _ = std::thread::Builder::new()
            .name("lazarus-checkpoint".into())
            .spawn(move || {
                let mut next = first.map(|f| Instant::now() + f);
                let mut awaiting: Option<SpawnWait> = None;
                let mut health = CheckpointHealth::new(Instant::now());
                let mut last_end = Instant::now();
                let mut gap = QUOTA_POLL;
                let mut watch = super::stall::StallWatch::new(super::stall::bound_from_env());
                let mut watched = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    layer.enforce_log_quota();
                    let now = Instant::now();
                    if now >= watched + STALL_WATCH_EVERY {
                        watched = now;
                        layer.watch_stall(&node, &mut watch, now);
                    }
                    let periodic = next.is_some_and(|n| now >= n);
                    let requested =
                        layer.checkpoint_requested.load(Ordering::Acquire) && now >= last_end + gap;
                    if !periodic && !requested {
                        std::thread::sleep(next.map_or(poll, |n| (n - now).min(poll)));
                        continue;
                    }
                    if !layer.lock().ready {
                        // A restarting node: the period's checkpoint is skipped; a
                        // requested one is taken once the node has resumed.
                        if periodic {
                            next = every.map(|e| now + e);
                        }
                        std::thread::sleep(poll);
                        continue;
                    }
                    let was_requested = layer.checkpoint_requested.swap(false, Ordering::AcqRel);
                    if !periodic {
                        counter!(REQUESTED_CHECKPOINTS).increment(1);
                    }
                    next = every.map(|e| now + e);
                    let outcome = layer.checkpoint_now(&node);
                    last_end = Instant::now();
                    gap = (last_end - now).max(QUOTA_POLL);
                    layer.tell_outcome(&mut health, last_end, &outcome);
                    match outcome {
                        Ok(_) => awaiting = None,
                        // Soon: the replaying handlers spawn them within moments, but
                        // less and less often if they do not.
                        Err(CheckpointFailure::AwaitingSpawn(held)) => {
                            let now = Instant::now();
                            let wait = awaiting.get_or_insert_with(|| SpawnWait::new(now));
                            let (retry, warn) = wait.failed(now);
                            if warn {
                                layer.warn_awaiting_spawn(held, now - wait.since);
                            }
                            next = Some(now + retry);
                        }
                        // The requesters wait for this node's next commit (their
                        // CHECKPOINT_ADVANCE) before they ask again: without a period,
                        // nothing else would take it.
                        Err(_) if was_requested => {
                            awaiting = None;
                            layer.checkpoint_requested.store(true, Ordering::Release);
                            gap = gap.max(RETRY_AFTER_FAILURE);
                        }
                        Err(_) => awaiting = None,
                    }
                }
            });
    }

    /// Says (timeline event `stalled`, a warning, [`super::STALLS`]) when this node has
    /// held messages back for the stall bound without any progress: which channels wait
    /// for what, which actor's replay waits for which message from which node, which
    /// loggers it still waits for, and which peers have not answered its rollback.
    fn watch_stall(&self, node: &NodeHandle, watch: &mut super::stall::StallWatch, now: Instant) {
        let state = self.lock();
        let Some(p) = state.recovery.protocol().filter(|_| state.ready) else {
            return;
        };
        let s = p.stats();
        let progress = s.delivered + s.sent + s.received + p.interval();
        let holds = p.queued() > 0 || p.is_recovering() || state.events.holds_back(&state.recovery);
        let waiting = holds.then(|| {
            format!(
                "{}; {}",
                blocked_state(&state, node),
                state.events.describe_waits(&state.recovery)
            )
        });
        drop(state);
        if let Some(stall) = watch.observe(now, progress, waiting) {
            counter!(super::STALLS).increment(1);
            tracing::warn!(
                "nothing delivered, received or sent for {:.0?} while messages are held back: {}",
                stall.for_,
                stall.waiting
            );
            event(
                self.rank,
                &format!(
                    "stalled for_s={:.0} waiting: {}",
                    stall.for_.as_secs_f64(),
                    stall.waiting
                ),
            );
        }
    }

    /// Deletes the partly written checkpoint files an earlier incarnation of this node
    /// left (killed while it wrote one): they take room this node's and, on a shared file
    /// system, the other nodes' next checkpoints need.
    fn remove_partial_checkpoints(&self) {
        match self.store.remove_partial(self.rank) {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                "removed {n} partly written checkpoint files an earlier incarnation left"
            ),
            Err(e) => tracing::warn!("cannot remove partly written checkpoint files: {e}"),
        }
    }

    /// Passes a checkpoint's outcome to `health` and says what it answers: an error in
    /// the log and an event in the timeline for a failure (at a bounded rate) and for a
    /// node left unprotected, a line when checkpoints commit again. A checkpoint waiting
    /// for spawns is not a failure here: it has its own warning.
    fn tell_outcome(
        &self,
        health: &mut CheckpointHealth,
        now: Instant,
        outcome: &Result<CheckpointReport, CheckpointFailure>,
    ) {
        let notices = match outcome {
            Ok(report) => health.committed(now, report.id).into_iter().collect(),
            Err(CheckpointFailure::AwaitingSpawn(_)) => Vec::new(),
            Err(failure) => {
                let cause = failure.to_string();
                // The OS error without the file's name, which holds the checkpoint's
                // number: the same cause each period.
                let kind = match failure {
                    CheckpointFailure::Store(crate::checkpoint::CheckpointError::Io {
                        source,
                        ..
                    }) => source.to_string(),
                    other => other.to_string(),
                };
                let failure = Failure {
                    reason: failure.reason(),
                    kind: &kind,
                    cause: &cause,
                };
                health.failed(now, failure)
            }
        };
        for notice in notices {
            event(self.rank, &notice.event());
            let message = notice.message(self.rank);
            if notice.is_error() {
                tracing::error!("{message}");
            } else {
                tracing::info!("{message}");
            }
        }
    }

    /// Says that checkpoints have waited `waited` for `held` logged messages whose
    /// addressees, children of this node's actors, the restored handlers have not
    /// spawned again: a replay that took another path than the lost execution (a broken
    /// determinism contract) or messages for actors that never existed. The node keeps
    /// serving; its log is not released meanwhile.
    fn warn_awaiting_spawn(&self, held: usize, waited: Duration) {
        let actors: Vec<String> = self
            .lock()
            .recovery
            .awaiting_spawn_ids()
            .take(5)
            .map(|id| id.to_string())
            .collect();
        counter!(CHECKPOINT_FAILURES, "reason" => "awaiting_spawn_long").increment(1);
        tracing::warn!(
            "no checkpoint for {:.0} s: {held} logged messages wait for actors the replay \
             has not spawned again (among them {}); until they are, this node cannot \
             checkpoint and its peers keep their logs (see docs/recovery.md, \
             \"How the runtime drives the state\", held messages)",
            waited.as_secs_f64(),
            actors.join(", ")
        );
    }

    /// Sends the CHECKPOINT_REQUESTs the log's quota calls for (nothing without a quota).
    /// While logger nodes take the payloads over it, only when what a dump cannot move,
    /// the entries' vectors, holds more than half the quota: many small messages and no
    /// period would otherwise keep the log over its quota for good.
    fn enforce_log_quota(&self) {
        let Some(quota) = self.config.log_quota else {
            return;
        };
        let dumping = self.dumps_to_loggers();
        let asks = match self.lock().recovery.protocol_mut() {
            Some(p) if dumping && p.log_stats().vector_bytes <= quota / 2 => return,
            Some(protocol) => protocol.poll_log_quota(),
            None => return,
        };
        if !asks.is_empty() {
            counter!(CHECKPOINT_REQUESTS).increment(asks.len() as u64);
            self.send_actions_now(asks);
        }
    }
}

/// How long after a requested checkpoint failed (its store, say) it is tried again.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// How often the checkpointer wakes without a quota to enforce.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// How often the checkpointer thread looks for a stall (see `stall.rs`).
const STALL_WATCH_EVERY: Duration = Duration::from_millis(500);

/// First retry of a checkpoint that waits for replaying handlers to spawn the addressees
/// of held logged messages; each further one waits twice as long, up to
/// [`AWAITING_SPAWN_MAX_RETRY`] (each attempt pauses every core).
const AWAITING_SPAWN_RETRY: Duration = Duration::from_millis(20);
/// The longest wait between such retries.
const AWAITING_SPAWN_MAX_RETRY: Duration = Duration::from_secs(1);
/// How long checkpoints may wait for spawns before the node says so (once per wait).
const AWAITING_SPAWN_WARN: Duration = Duration::from_secs(30);

/// Checkpoints waiting for replaying handlers to spawn the addressees of held messages:
/// since when, the delay before the next attempt, and whether the node has said so.
struct SpawnWait {
    since: Instant,
    retry: Duration,
    warned: bool,
}

impl SpawnWait {
    fn new(now: Instant) -> Self {
        SpawnWait {
            since: now,
            retry: AWAITING_SPAWN_RETRY,
            warned: false,
        }
    }

    /// Another attempt failed at `now`: the delay before the next one (doubling up to
    /// [`AWAITING_SPAWN_MAX_RETRY`]), and whether to warn now (once, after
    /// [`AWAITING_SPAWN_WARN`]).
    fn failed(&mut self, now: Instant) -> (Duration, bool) {
        let retry = self.retry;
        self.retry = (self.retry * 2).min(AWAITING_SPAWN_MAX_RETRY);
        let warn = !self.warned && now.duration_since(self.since) >= AWAITING_SPAWN_WARN;
        self.warned |= warn;
        (retry, warn)
    }
}

/// How often the checkpointer compares the log with its quota and looks for peers'
/// checkpoint requests: the log can outgrow its quota by what the node sends meanwhile.
pub(crate) const QUOTA_POLL: Duration = Duration::from_millis(10);

/// When node `rank` of `size` takes its first periodic checkpoint: nodes started together
/// are spread over the second period (rank `r` at `1 + r / size` periods) rather than left
/// in phase. A sender's log keeps what it sent since the receiver's last committed
/// checkpoint, so two neighbours checkpointing in the same instant each store a whole
/// period of their messages with every image; spread evenly, a pair stores one period
/// between them. It also keeps the nodes' checkpoint writes from contending at once.
pub(crate) fn first_checkpoint_after(every: Duration, rank: u16, size: u16) -> Duration {
    let size = u32::from(size.max(1));
    // The period comes from the command line or the environment: a huge one must not
    // overflow (it means "practically never" either way).
    every
        .checked_mul(u32::from(rank) % size)
        .and_then(|spread| every.checked_add(spread / size))
        .unwrap_or(every)
}

#[cfg(test)]
mod tests {
    use super::{first_checkpoint_after, SpawnWait, AWAITING_SPAWN_MAX_RETRY};
    use std::time::{Duration, Instant};

    /// A span's name and its parent's.
    type Opened = Vec<(String, Option<String>)>;

    /// Records each span opened.
    struct Spans(std::sync::Arc<std::sync::Mutex<Opened>>);

    impl<S> tracing_subscriber::Layer<S> for Spans
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            id: &tracing::span::Id,
            ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            let parent = (ctx.span(id).and_then(|s| s.parent())).map(|p| p.name().to_string());
            let name = attrs.metadata().name().to_string();
            self.0.lock().unwrap().push((name, parent));
        }
    }

    #[test]
    fn a_checkpoint_is_one_span_with_its_phases_inside() {
        use tracing_subscriber::layer::SubscriberExt;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Spans(seen.clone()));
        let dir = std::env::temp_dir().join(format!("lazarus-spans-{}", std::process::id()));
        let node = crate::Node::builder().cores(1).pin(false).build().unwrap();
        let layer = crate::recovery::layer::RecoveryLayer::new(
            0,
            1,
            crate::recovery::layer::RecoveryConfig::for_tests(dir.clone()),
        );
        node.handle().set_recovery(layer.clone());
        let taken =
            tracing::subscriber::with_default(subscriber, || layer.checkpoint_now(node.handle()));
        node.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
        taken.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.contains(&("checkpoint".into(), None)), "{seen:?}");
        for phase in ["pause", "store", "commit"] {
            let inside = (phase.to_string(), Some("checkpoint".to_string()));
            assert!(
                seen.contains(&inside),
                "no {phase} span inside the checkpoint's: {seen:?}"
            );
        }
    }

    #[test]
    fn checkpoints_waiting_for_spawns_retry_less_and_less_often_and_say_so_once() {
        let start = Instant::now();
        let mut wait = SpawnWait::new(start);
        let delays: Vec<_> = (0..8).map(|_| wait.failed(start).0.as_millis()).collect();
        assert_eq!(delays, [20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(wait.failed(start).0, AWAITING_SPAWN_MAX_RETRY);
        let late = start + Duration::from_secs(31);
        assert!(wait.failed(late).1, "after 30 s the node says so");
        assert!(!wait.failed(late).1, "once");
    }

    #[test]
    fn a_period_too_long_to_spread_is_kept_as_it_is() {
        assert_eq!(
            first_checkpoint_after(Duration::MAX, 3, 4),
            Duration::MAX,
            "no overflow"
        );
    }

    #[test]
    fn nodes_started_together_checkpoint_spread_over_one_period() {
        let every = Duration::from_millis(1000);
        let firsts: Vec<_> = (0..4)
            .map(|r| first_checkpoint_after(every, r, 4).as_millis())
            .collect();
        assert_eq!(firsts, vec![1000, 1250, 1500, 1750]);
        assert_eq!(first_checkpoint_after(every, 0, 1), every);
        assert_eq!(
            first_checkpoint_after(every, 0, 0),
            every,
            "no division by zero"
        );
    }
}
