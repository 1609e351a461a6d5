//! Runtime metrics, reported through the `metrics` crate facade.
//!
//! Install any `metrics` recorder (Prometheus exporter, statsd, ...) to collect them; with
//! none installed they cost next to nothing. Per-message counts are accumulated in the
//! actor's own task and flushed once per mailbox batch, so the hot path does no shared
//! writes; handler time is sampled (one message in [`HANDLER_TIME_SAMPLE_EVERY`]).

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, Counter, Gauge, Histogram, Unit,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Messages accepted into mailboxes of actors of a type (label `actor_type`).
pub const MESSAGES_SENT: &str = "lazarus_messages_sent_total";
/// Messages whose handler ran (label `actor_type`).
pub const MESSAGES_DELIVERED: &str = "lazarus_messages_delivered_total";
/// Messages waiting in one actor's mailbox (labels `actor_type`, `actor_id`).
pub const MAILBOX_DEPTH: &str = "lazarus_mailbox_depth";
/// Sampled handler run time in seconds (label `actor_type`).
pub const HANDLER_SECONDS: &str = "lazarus_handler_seconds";
/// Actors whose handler or hook panicked (label `actor_type`).
pub const ACTOR_FAILURES: &str = "lazarus_actor_failures_total";
/// Messages left in the mailbox of an actor that stopped or failed (label `actor_type`).
pub const DEAD_LETTERS: &str = "lazarus_dead_letters_total";
/// Sends refused because the addressee had stopped or failed (label `actor_type`).
pub const SEND_ERRORS: &str = "lazarus_send_errors_total";
/// Asks that got no reply in time (label `actor_type`).
pub const ASK_TIMEOUTS: &str = "lazarus_ask_timeouts_total";
/// Frames of a one-sided window that its machine refused (the window fails its waits).
pub const WINDOW_REFUSED: &str = "lazarus_window_frames_refused_total";
/// Operations an origin applied to another node's part itself, in shared memory (label
/// `kind`: `put`, `get`).
pub const WINDOW_DIRECT: &str = "lazarus_window_direct_total";
/// Direct operations a target's gate sent to the message path (label `reason`:
/// `checkpoint`, `epoch`, `records_full`).
pub const WINDOW_GATE_REFUSED: &str = "lazarus_window_gate_refused_total";
/// Window segments of peers this node could not map (another host, or refused).
pub const WINDOW_SEGMENTS_UNMAPPED: &str = "lazarus_window_segments_unmapped_total";
/// Spawn requests refused (label `reason`).
pub const SPAWN_ERRORS: &str = "lazarus_spawn_errors_total";
/// Actors spawned by actors, with recovery on, whose type is not registered for
/// a restart to rebuild (label `actor`; see [`crate::register_actor`]).
pub const SPAWN_UNREGISTERED: &str = "lazarus_spawn_unregistered_total";

/// `ActorRef::ask`s made by actors to other nodes with recovery on, whose replies a
/// failure loses (label `actor`: the asked actor's type; `Context::ask` is the recovered
/// form).
pub const ASKS_UNRECOVERED: &str = "lazarus_asks_unrecovered_total";

/// Async handlers a restore re-executed from their checkpoint's record (label
/// `outcome`: `ok`, or `diverged` when the handler did not make again what its record
/// holds).
pub const ASYNC_REEXECUTIONS: &str = "lazarus_async_reexecutions_total";

/// Checkpoints not committed, with recovery on (label `reason`: `no_space` when the
/// checkpoint directory's file system is full, `io` for another storage error,
/// `capture`, `replica`, `protocol`, `awaiting_spawn`, `awaiting_spawn_long`). Counted
/// by the recovery layer, named here with the others.
pub const CHECKPOINT_FAILURES: &str = "lazarus_checkpoint_failures_total";

/// One handler in this many is timed.
pub const HANDLER_TIME_SAMPLE_EVERY: u64 = 64;

/// Whether the mailbox-depth gauge carries each actor's id (see [`set_per_actor_labels`]).
static PER_ACTOR_LABELS: AtomicBool = AtomicBool::new(false);

/// Labels [`MAILBOX_DEPTH`] with each actor's id (`actor_id`) as well as its type, for
/// actors started from now on. Off by default: one series per actor is unbounded
/// cardinality for a Prometheus server; the gauge is then the sum over each actor type.
/// A node of a cluster turns it on with `LAZARUS_METRICS_PER_ACTOR=1`.
pub fn set_per_actor_labels(on: bool) {
    PER_ACTOR_LABELS.store(on, Ordering::Relaxed);
}

/// The environment variable that makes a cluster node serve its metrics for Prometheus
/// at `HOST:PORT` (`lazarus run --metrics` sets it per node).
pub const METRICS_ADDR_VAR: &str = "LAZARUS_METRICS_ADDR";

/// Serves this process's metrics in the Prometheus text format at `addr` (any request
/// path answers; `/metrics` by convention), each series labelled with the node's `rank`.
/// Installs the process-wide recorder; the listener runs on a thread of its own.
///
/// # Errors
/// The address cannot be bound, or a recorder is installed already.
pub fn serve_prometheus(addr: std::net::SocketAddr, rank: u16) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .add_global_label("rank", rank.to_string())
        .install()
        .map_err(|e| e.to_string())?;
    describe();
    Ok(())
}

/// Registers descriptions of every Lazarus metric with the installed recorder.
pub fn describe() {
    describe_counter!(
        MESSAGES_SENT,
        Unit::Count,
        "messages accepted into actor mailboxes"
    );
    describe_counter!(
        MESSAGES_DELIVERED,
        Unit::Count,
        "messages handled by actors"
    );
    describe_gauge!(
        MAILBOX_DEPTH,
        Unit::Count,
        "messages waiting in an actor's mailbox"
    );
    describe_histogram!(HANDLER_SECONDS, Unit::Seconds, "sampled handler run time");
    describe_counter!(
        ACTOR_FAILURES,
        Unit::Count,
        "actors whose handler or hook panicked"
    );
    describe_counter!(
        DEAD_LETTERS,
        Unit::Count,
        "messages dropped from a stopped or failed actor's mailbox"
    );
    describe_counter!(
        SEND_ERRORS,
        Unit::Count,
        "sends refused because the actor had stopped or failed"
    );
    describe_counter!(ASK_TIMEOUTS, Unit::Count, "asks that timed out");
    describe_counter!(SPAWN_ERRORS, Unit::Count, "spawn requests refused");
    describe_counter!(
        SPAWN_UNREGISTERED,
        Unit::Count,
        "actors spawned by actors whose type a restart could not rebuild"
    );
    describe_counter!(
        CHECKPOINT_FAILURES,
        Unit::Count,
        "checkpoints not committed, by reason (no_space: the checkpoint directory is full; io: another storage error)"
    );
    describe_counter!(
        ASKS_UNRECOVERED,
        Unit::Count,
        "asks by actors to other nodes, with recovery on, whose replies a failure loses (use Context::ask)"
    );
    describe_counter!(
        ASYNC_REEXECUTIONS,
        Unit::Count,
        "suspended async handlers a restore re-executed, by outcome"
    );
}

/// Counts a restore's re-execution of a suspended async handler.
pub(crate) fn async_reexecution(diverged: bool) {
    let outcome = if diverged { "diverged" } else { "ok" };
    counter!(ASYNC_REEXECUTIONS, "outcome" => outcome).increment(1);
}

pub(crate) fn send_error(actor_type: &'static str) {
    counter!(SEND_ERRORS, "actor_type" => actor_type).increment(1);
}

pub(crate) fn ask_timeout(actor_type: &'static str) {
    counter!(ASK_TIMEOUTS, "actor_type" => actor_type).increment(1);
}

/// Counts an actor's `ActorRef::ask` to another node with recovery on, and warns once
/// per process: its reply is a frame to a per-process request number, which a failure
/// of either node loses.
pub(crate) fn ask_unrecovered(asked_type: &'static str) {
    counter!(ASKS_UNRECOVERED, "actor" => asked_type).increment(1);
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            asked = asked_type,
            "an actor awaits ActorRef::ask to another node with recovery on: its reply is \
             lost if either node fails. Await ctx.ask(&to, msg) in an async fn handler, or \
             ask with ctx.ask(&to, msg).reply_as::<H>() (the reply comes back as message H), \
             both logged and replayed"
        );
    });
}

pub(crate) fn spawn_error(reason: &'static str) {
    counter!(SPAWN_ERRORS, "reason" => reason).increment(1);
}

/// Per-actor counters, owned by the actor's task and flushed to the recorder per batch.
pub(crate) struct ActorStats {
    sent: Counter,
    delivered: Counter,
    depth: Gauge,
    /// Whether `depth` is this actor's own series (else its type's sum).
    per_actor: bool,
    /// The depth this actor last added to its type's sum.
    reported_depth: u64,
    handler_time: Histogram,
    failures: Counter,
    dead_letters: Counter,
    /// Messages handled since the last flush.
    pending_delivered: u64,
    /// Signals of every kind popped from the mailbox so far.
    total_dequeued: u64,
    /// Messages reported as sent so far.
    reported_sent: u64,
    /// Every message handled by this actor (answers shutdown barriers).
    pub(crate) total_delivered: u64,
}

impl ActorStats {
    pub(crate) fn new(actor_type: &'static str, actor_id: String) -> Self {
        let t = ("actor_type", actor_type);
        // Read once: the series and the way it is updated must agree.
        let per_actor = PER_ACTOR_LABELS.load(Ordering::Relaxed);
        ActorStats {
            sent: counter!(MESSAGES_SENT, &[t]),
            delivered: counter!(MESSAGES_DELIVERED, &[t]),
            depth: if per_actor {
                metrics::gauge!(MAILBOX_DEPTH, "actor_type" => actor_type, "actor_id" => actor_id)
            } else {
                metrics::gauge!(MAILBOX_DEPTH, &[t])
            },
            per_actor,
            reported_depth: 0,
            handler_time: metrics::histogram!(HANDLER_SECONDS, &[t]),
            failures: counter!(ACTOR_FAILURES, &[t]),
            dead_letters: counter!(DEAD_LETTERS, &[t]),
            pending_delivered: 0,
            total_dequeued: 0,
            reported_sent: 0,
            total_delivered: 0,
        }
    }

    /// Starts timing the next handler if it is a sampled one.
    #[inline]
    pub(crate) fn start_handler(&self) -> Option<Instant> {
        (self.total_delivered % HANDLER_TIME_SAMPLE_EVERY == 0).then(Instant::now)
    }

    #[inline]
    pub(crate) fn end_handler(&mut self, started: Option<Instant>) {
        if let Some(t0) = started {
            self.handler_time.record(t0.elapsed().as_secs_f64());
        }
        self.pending_delivered += 1;
        self.total_delivered += 1;
    }

    /// Publishes counts after a batch.
    ///
    /// Sends are not counted on the send path (that would put a shared counter write on
    /// every tell); they are derived from the queue instead: every message ever accepted
    /// has been dequeued or is still waiting. `dequeued` counts everything this actor
    /// popped in this batch (messages and control signals alike); `depth` and
    /// `signals_pushed` are the mailbox's current length and lifetime count of control
    /// signals. Exact whenever the mailbox is quiet, never decreasing.
    pub(crate) fn flush(&mut self, dequeued: u64, depth: u64, signals_pushed: u64) {
        self.total_dequeued += dequeued;
        let accepted = (self.total_dequeued + depth).saturating_sub(signals_pushed);
        if accepted > self.reported_sent {
            self.sent.increment(accepted - self.reported_sent);
            self.reported_sent = accepted;
        }
        self.delivered.increment(self.pending_delivered);
        if self.per_actor {
            self.depth.set(depth as f64);
        } else if depth != self.reported_depth {
            // The type's series is the sum over its actors: move it by this one's change.
            self.depth
                .increment(depth as f64 - self.reported_depth as f64);
            self.reported_depth = depth;
        }
        self.pending_delivered = 0;
    }

    pub(crate) fn failed(&self) {
        self.failures.increment(1);
    }

    pub(crate) fn dead_letters(&self, n: u64) {
        self.dead_letters.increment(n);
    }
}

impl Drop for ActorStats {
    /// A gone actor's messages no longer wait in its type's sum.
    fn drop(&mut self) {
        if !self.per_actor && self.reported_depth > 0 {
            self.depth.decrement(self.reported_depth as f64);
        }
    }
}
