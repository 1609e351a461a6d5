//! The deterministic simulated cluster: sets running the [`Program`]'s actors on top of
//! one [`NodeRecovery`] each, FIFO links between sets, checkpoints, crashes and restarts,
//! all scheduled by one seeded PRNG on one thread.
//!
//! Model:
//! - **Links.** One link per ordered pair of sets (like the runtime's one QUIC stream per
//!   node pair), made of connections: a new one starts whenever either end has restarted.
//!   A connection is FIFO; packets of an older connection may still arrive after packets
//!   of a newer one (`reorder_connections`), as after a reconnect. Every packet is encoded
//!   to bytes with the runtime's wire encoding and decoded on arrival. Each step picks a
//!   random enabled event, so links progress at random relative speeds: arbitrary delays
//!   and interleavings.
//! - **Inside a set.** Messages between actors of one set bypass the protocol: they sit in
//!   per-channel FIFO queues of the set and are handled at random moments, interleaved with
//!   inter-set deliveries in any order.
//! - **Checkpoints.** A set checkpoints at random moments, independently of the others.
//!   The sim is single-threaded, so the snapshot is an instant consistent cut of the set:
//!   actor states, in-flight intra-set messages, intra-set channel counters and the
//!   protocol snapshot (encoded). It becomes durable at a later random "commit" step; only
//!   then does the protocol announce it (CHECKPOINT_ADVANCE). A crash between the two
//!   discards it: the set restarts from the previous committed one.
//! - **Crashes.** At pre-drawn random steps a set crashes, sometimes together with a second
//!   one, sometimes while it or another set is still recovering, sometimes while it has an
//!   uncommitted checkpoint; at most `max_down` sets are down at once. A crashed set loses
//!   every volatile thing: actors, protocol state (log, queues), intra-set messages. Of the
//!   packets it had in flight a random prefix survives (the rest was still in its buffers).
//!   Packets in flight towards it are lost (`lossy_crash`) or, in the other mode, may
//!   reach its next incarnation. A packet arriving while the set is down is lost.
//! - **Restarts.** A crashed set restarts at a random later step from its last committed
//!   checkpoint with the next incarnation number, and runs the recovery exchange.
//!   Survivors never roll back.
//! - **Order-sensitive actors** (runs with `order_sensitive`). Each set also runs the
//!   event-logging machine: every delivery to such an actor and every value it draws is a
//!   determinant, shipped to the set's loggers (whose stores survive their crashes, as
//!   the runtime's store file survives a process kill); a message to another set leaves
//!   only once the determinants before it are acknowledged. A restored set fetches its
//!   determinants and its order-sensitive actors replay them: a delivery the script does
//!   not name waits in the actor's mailbox. No oracle exists for these runs; instead every
//!   message that ever left a set must be identical to any regeneration of it (no orphan),
//!   and every channel's receiver must end having seen exactly what its sender's final
//!   state says it sent.
//! - **Async handlers** (runs with `awaiting`). A server's call may suspend awaiting
//!   the results of its asks; while it is, the actor takes only a result its call awaits
//!   (others wait in the mailbox, or in their intra-set queue), and the set keeps the
//!   call's record ([`Suspension`]: the state it started from, its message, its effects,
//!   results and values). A checkpoint keeps that state and the record; a restore
//!   re-executes the call from them, skipping the effects the checkpoint holds, before
//!   anything else runs. A result that comes before its ask is made again waits.
//! - **Timers** (order-sensitive actors). An armed timer waits in its actor's timers (the
//!   runtime's own [`TimerState`]: arm number, deadline in steps, message), which a
//!   checkpoint keeps with the delay left and a restore re-arms. The scheduler fires an
//!   actor's pending timers at random steps, earliest deadline first; a fired timer enters
//!   the actor's mailbox as message *n* of its timer channel (*n* = arm number) and its
//!   delivery is a determinant like any other, forced at its logged tick in a replay
//!   (which waits for the re-armed timer to ring). A timer cancelled after it rang is
//!   dropped when it leaves the mailbox, before any delivery decision: it takes no tick.

use super::program::{is_result, may_take, ActorState, Effects, Program, TimerOp};
use super::rng::{mix, Rng};
use lazarus::recovery::{
    next_stashed, Action, Admission, BlockId, ChannelId, CheckpointId, CheckpointRefused, Config,
    Dependence, DependencyRule, Effect, EventLogging, EventMessage, EventRead, EventSnapshot,
    EventStore, Frame, GateRule, Incarnation, LogDump, NodeConfig, NodeImage, NodeRecovery,
    ProtocolStats, Receiving, Sent, SetId, Snapshot, Stashed, Suspension, TimerImage, TimerState,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;

/// One run's parameters, all derived from the seed.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed everything derives from.
    pub seed: u64,
    /// Number of sets.
    pub sets: u16,
    /// Most actors per set.
    pub max_actors: u64,
    /// Most output channels per actor.
    pub max_degree: u64,
    /// Rounds of the program.
    pub rounds: u32,
    /// Crashes to inject.
    pub crashes: u32,
    /// Most sets down at once.
    pub max_down: u16,
    /// Packets in flight towards a crashing set are lost with it.
    pub lossy_crash: bool,
    /// Packets of different connections of a link (a connection ends when either end
    /// restarts) may overtake each other; within a connection they stay FIFO.
    pub reorder_connections: bool,
    /// Relative weight of "take a checkpoint" per set and step (out of ~100s).
    pub checkpoint_weight: u64,
    /// Which dependency requirements bind.
    pub rule: DependencyRule,
    /// Some actors are order-sensitive and their determinants are logged.
    pub order_sensitive: bool,
    /// Event loggers per set.
    pub loggers: u16,
    /// Every incarnation sends its own variant of each message (a broken determinism
    /// contract), for the test of the runtime's checker.
    pub break_contract: bool,
    /// The sender-based log's memory quota in bytes: above it a set asks its heaviest
    /// receivers to checkpoint (CHECKPOINT_REQUEST), and a set asked prefers to.
    pub log_quota: Option<usize>,
    /// Sets dump logged payloads to a logger node (reliable, outside the sets) at random
    /// moments; the logger's acknowledgement comes later (a crash may come first), and a
    /// resend of a dumped message is served from the logger's blocks, which the sets
    /// release and, after a restore, retain as the runtime does.
    pub log_dump: bool,
    /// With `log_dump`: every block is kept by two loggers (a copy), and one of them
    /// restarts once at a random step, empty; each set learns of it at a later step
    /// (`on_logger_lost`), and a set restored afterwards finds the blocks it retains
    /// missing there (`on_blocks_lost`). Resends fall back to the copy.
    pub logger_restart: bool,
    /// With `logger_restart`: once every set has noticed the restart and copied the
    /// blocks it lost back from the other logger (`refillable_blocks`), the other logger
    /// restarts too.
    pub second_logger_restart: bool,
    /// With `second_logger_restart`: about half the refilled blocks go to a third logger
    /// (which never restarts) instead, as when the restarted logger has no room
    /// (`block_relocated`).
    pub relocate_refills: bool,
    /// Event-logging messages carry at most this many determinants (`None`: the
    /// runtime's limit, which these short runs never reach), so batches and loggers'
    /// answers travel in parts.
    pub event_parts: Option<usize>,
    /// The program is a request/answer service with chains of order-sensitive servers
    /// (`Program::service`) instead of the dataflow.
    pub service: bool,
    /// Service clients check causal order (an answer before its request is a failure,
    /// unless a delivery that did not bind lies in its past). Only promised when one set
    /// fails at a time: crashes then wait until no set is down, recovering or still
    /// making again the sends its peers delivered (`one_at_a_time`).
    pub causal_clients: bool,
    /// No crash while a set is down, recovering, or making sends again.
    pub one_at_a_time: bool,
    /// The program is an awaiting service (`Program::awaiting`): servers' handlers are
    /// async, suspended while they await the results of their asks.
    pub awaiting: bool,
    /// A deliberate break of the async-handler rule, to show the sweeps can fail.
    pub mutation: Option<Mutation>,
}

/// A deliberate break of the rule that re-executes suspended async handlers
/// ([`Suspension`]): a sweep with one must fail seeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The checkpoint keeps the actor's state as the suspended handler left it, not the
    /// state it started from: the re-execution applies the handler's changes twice.
    ReexecuteFromLiveState,
    /// The re-execution makes again the effects the checkpoint holds.
    MakeRecordedEffectsAgain,
}

impl SimConfig {
    /// The parameters of `seed`.
    pub fn random(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let sets = rng.range(2, 5) as u16;
        SimConfig {
            seed,
            sets,
            max_actors: rng.range(1, 3),
            max_degree: rng.range(1, 3),
            rounds: rng.range(2, 7) as u32,
            crashes: rng.range(0, 6) as u32,
            max_down: rng.range(1, u64::from(sets)) as u16,
            lossy_crash: rng.chance(1, 2),
            reorder_connections: rng.chance(1, 2),
            checkpoint_weight: rng.range(1, 6),
            rule: DependencyRule::default(),
            order_sensitive: false,
            loggers: 1,
            break_contract: false,
            // Drawn apart so that the other parameters of a seed stay as they were.
            log_quota: {
                let mut q = Rng::new(seed ^ 0x0106_A07A);
                q.chance(1, 2).then(|| q.range(8, 120) as usize)
            },
            log_dump: Rng::new(seed ^ 0x0D0B_10C5).chance(1, 2),
            logger_restart: false,
            second_logger_restart: false,
            relocate_refills: false,
            event_parts: None,
            service: false,
            causal_clients: false,
            one_at_a_time: false,
            awaiting: false,
            mutation: None,
        }
    }

    /// The parameters of `seed` for a run with order-sensitive actors.
    pub fn random_order_sensitive(seed: u64) -> Self {
        let mut cfg = Self::random(seed);
        let mut rng = Rng::new(seed ^ 0x0D0E);
        cfg.order_sensitive = true;
        cfg.loggers = rng.range(1, u64::from(cfg.sets - 1)) as u16;
        // Drawn apart so that the other parameters of a seed stay as they were.
        let mut parts = Rng::new(seed ^ 0x9A27_5E75);
        cfg.event_parts = parts.chance(1, 2).then(|| parts.range(1, 4) as usize);
        cfg
    }

    /// The parameters of `seed` for a run of the service program: order-sensitive
    /// servers forwarding requests to each other (see `Program::service`).
    pub fn random_chains(seed: u64) -> Self {
        let mut cfg = Self::random_order_sensitive(seed);
        cfg.service = true;
        cfg
    }

    /// [`SimConfig::random_chains`] with one failure at a time and clients that check
    /// causal order.
    pub fn random_chains_one_at_a_time(seed: u64) -> Self {
        let mut cfg = Self::random_chains(seed);
        cfg.max_down = 1;
        cfg.one_at_a_time = true;
        cfg.causal_clients = true;
        cfg
    }

    /// The parameters of `seed` for a run of the awaiting service with send-deterministic
    /// servers (see `Program::awaiting`): every crash schedule must end in the
    /// failure-free run's states.
    pub fn random_awaiting(seed: u64) -> Self {
        let mut cfg = Self::random(seed);
        cfg.awaiting = true;
        cfg
    }

    /// The awaiting service with order-sensitive servers: the order of requests and
    /// results is logged as determinants.
    pub fn random_awaiting_order_sensitive(seed: u64) -> Self {
        let mut cfg = Self::random_order_sensitive(seed);
        cfg.awaiting = true;
        cfg
    }

    /// What every set's recovery machine starts and restores with.
    fn node_config(&self) -> NodeConfig {
        NodeConfig {
            nodes: self.sets,
            event_loggers: self.loggers,
            protocol: Config {
                dependency_rule: self.rule,
                log_quota: self.log_quota,
            },
        }
    }

    /// The same run with no crash: the failure-free reference.
    pub fn without_crashes(&self) -> Self {
        SimConfig {
            crashes: 0,
            ..self.clone()
        }
    }
}

/// What travels on a link: the runtime's frames between node recovery machines.
type Packet = Frame<Vec<u8>>;

/// The sender of a timer message in a mailbox: the actor's timer channel (the runtime's
/// `timer::source_of`), whose send index is the timer's arm number.
const TIMER: usize = usize::MAX;

/// Logger processes: two that keep every block (one of them may restart, then the
/// other), and a third that only takes the copies a refill relocates.
const LOGGERS: usize = 3;
/// The logger that takes relocated copies; it never restarts.
const THIRD_LOGGER: u16 = 2;

/// Inter-set messages delivered by the protocol to an order-sensitive actor that may not
/// handle them yet (its replay names another message first), and fired timers, per local
/// actor: `(sender, send index, payload)` in delivery order.
type Mailboxes = BTreeMap<usize, VecDeque<(usize, u64, Vec<u8>)>>;

/// In-flight messages between actors of one set, per (sender, receiver) channel, with
/// their channel index.
type IntraQueues = BTreeMap<(usize, usize), VecDeque<(u64, Vec<u8>)>>;

/// One actor's timers: the runtime's rules ([`TimerState`]), deadlines in simulated steps,
/// the value each rings as its message.
type Timers = TimerState<u64, u64>;

/// What a suspended handler's record keeps: the actor's state before the handler
/// started, the message that started it, and each result it took.
#[derive(Clone, Debug)]
enum Kept {
    State(Box<ActorState>),
    Message {
        from: usize,
        index: u64,
        payload: Vec<u8>,
    },
}

/// The record of a local actor's suspended async handler (the runtime's rule:
/// [`Suspension`]).
type Suspended = Option<Suspension<Kept>>;

/// A set checkpoint in stable storage.
#[derive(Clone, Debug)]
struct Stored {
    id: CheckpointId,
    snapshot: Vec<u8>,
    actors: Vec<ActorState>,
    intra: IntraQueues,
    intra_sent: BTreeMap<(usize, usize), u64>,
    events: EventSnapshot,
    mailbox: Mailboxes,
    /// Per local actor, its timers' image (pending ones with the delay left).
    timers: Vec<TimerImage<u64>>,
    /// The logger processes the set knew (as the runtime's image records them).
    loggers: [u64; LOGGERS],
    /// Per local actor, the record of its suspended handler (its state in `actors` is
    /// then the one the handler started from).
    suspended: Vec<Suspended>,
}

/// One correlated set.
struct Node {
    /// The node's recovery machine, the runtime's own. Without a protocol while the set
    /// is down; its event-logger store is durable and survives the set's crashes.
    rec: NodeRecovery<Vec<u8>>,
    /// Per local actor, which of the set's determinants its packets wait for (as the
    /// runtime tracks it: raised by messages from actors of the set, volatile).
    deps: Vec<Dependence>,
    mailbox: Mailboxes,
    actors: Vec<ActorState>,
    /// Per local actor, its timers.
    timers: Vec<Timers>,
    /// Per local actor, the record of its suspended async handler.
    suspended: Vec<Suspended>,
    intra: IntraQueues,
    intra_sent: BTreeMap<(usize, usize), u64>,
    pending: Option<Stored>,
    committed: Stored,
    incarnation: u32,
    /// A peer asked for a checkpoint (its log is over its quota). Volatile.
    checkpoint_wanted: bool,
    /// A block shipped to the logger and not acknowledged yet, with the incarnation that
    /// took it. Volatile.
    dumping: Option<(LogDump<Vec<u8>>, u32)>,
    /// The logger processes the set has found (a restart it has not noticed yet is not
    /// here). Volatile.
    known_loggers: [u64; LOGGERS],
    /// Blocks the refill skips: the other logger lacks them too (released since the
    /// checkpoint that points into them). Volatile.
    refill_skip: BTreeSet<BlockId>,
}

/// A run's counters and every actor's final state (by global number).
pub type Ended = (SimStats, Vec<ActorState>);

/// Counters of one or many runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimStats {
    /// Simulation steps.
    pub steps: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Crashes while an uncommitted checkpoint was pending.
    pub crashes_mid_checkpoint: u64,
    /// Crashes while some set was recovering.
    pub crashes_during_recovery: u64,
    /// Crashes of two sets at the same step.
    pub simultaneous_crashes: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Packets lost (in flight at a crash, or arriving at a down set).
    pub packets_lost: u64,
    /// Protocol counters summed over all incarnations.
    pub proto: ProtocolStatsSum,
    /// Largest sender log of any set at any time (entries).
    pub peak_log_entries: usize,
    /// Largest sender log of any set at any time (bytes).
    pub peak_log_bytes: usize,
    /// Determinants recorded by order-sensitive actors, all incarnations.
    pub determinants: u64,
    /// Determinants reproduced by restored actors.
    pub determinants_replayed: u64,
    /// Selective receives of order-sensitive actors (no determinant), all incarnations.
    pub selected_deliveries: u64,
    /// Timers armed, all incarnations.
    pub timers_armed: u64,
    /// Timers cancelled (before or after they fired).
    pub timers_cancelled: u64,
    /// Timers fired into a mailbox.
    pub timers_fired: u64,
    /// Timers cancelled after they fired, dropped when they left the mailbox.
    pub timers_dropped: u64,
    /// Timer deliveries handled.
    pub timers_handled: u64,
    /// Timer deliveries a replay was forced to repeat at their logged tick.
    pub timers_replayed: u64,
    /// Parts of loggers' answers to a restored set that were not the last part.
    pub stored_parts: u64,
    /// Blocks of logged payloads dumped to the logger and acknowledged.
    pub blocks_dumped: u64,
    /// Resends served from the logger's blocks.
    pub resends_from_logger: u64,
    /// Of those, resends served from a block's copy (its first logger had restarted).
    pub resends_from_copy: u64,
    /// Logger restarts.
    pub logger_restarts: u64,
    /// Blocks copied back to a restarted logger from the other one.
    pub blocks_refilled: u64,
    /// Of those, blocks copied to the third logger instead (`relocate_refills`).
    pub blocks_relocated: u64,
    /// Resends skipped because their block was gone (never needed in a run that ends
    /// with the failure-free result).
    pub resends_missing: u64,
    /// Checkpoint requests sent because blocks were lost with a logger.
    pub lost_block_requests: u64,
    /// Async handlers that suspended (awaited a result).
    pub suspensions: u64,
    /// Checkpoints that kept a suspended handler's record.
    pub suspended_checkpointed: u64,
    /// Suspended handlers re-executed by a restore.
    pub reexecuted: u64,
    /// Results handed back to them from their records.
    pub results_replayed: u64,
}

/// [`ProtocolStats`] summed.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProtocolStatsSum {
    /// Messages transmitted at first send.
    pub sent: u64,
    /// Regenerated messages suppressed.
    pub suppressed: u64,
    /// Messages resent from logs.
    pub resent: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Messages delivered (including re-deliveries after rollbacks).
    pub delivered: u64,
    /// Deliveries whose requirement did not bind.
    pub relaxed: u64,
    /// Piggybacked bytes.
    pub piggyback_bytes: u64,
    /// Largest piggyback.
    pub max_piggyback: u64,
    /// Stale control messages ignored.
    pub stale_control: u64,
    /// Messages of a replaced incarnation dropped.
    pub stale_messages: u64,
    /// Regenerated messages compared with the delivered copy by the protocol's checker.
    pub regenerations_checked: u64,
    /// Of those, the ones the checker found different.
    pub contract_violations: u64,
    /// CHECKPOINT_REQUESTs sent because a log was over its quota.
    pub checkpoint_requests: u64,
}

impl ProtocolStatsSum {
    fn add(&mut self, s: &ProtocolStats) {
        self.sent += s.sent;
        self.suppressed += s.suppressed;
        self.resent += s.resent;
        self.duplicates += s.duplicates;
        self.delivered += s.delivered;
        self.relaxed += s.relaxed;
        self.piggyback_bytes += s.piggyback_bytes;
        self.max_piggyback = self.max_piggyback.max(s.max_piggyback);
        self.stale_control += s.stale_control;
        self.stale_messages += s.stale_messages;
        self.regenerations_checked += s.regenerations_checked;
        self.contract_violations += s.contract_violations;
        self.checkpoint_requests += s.checkpoint_requests_sent;
    }
}

impl SimStats {
    /// Adds another run's counters.
    pub fn absorb(&mut self, o: &SimStats) {
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.crashes_mid_checkpoint += o.crashes_mid_checkpoint;
        self.crashes_during_recovery += o.crashes_during_recovery;
        self.simultaneous_crashes += o.simultaneous_crashes;
        self.checkpoints += o.checkpoints;
        self.packets_lost += o.packets_lost;
        let p = &o.proto;
        self.proto.sent += p.sent;
        self.proto.suppressed += p.suppressed;
        self.proto.resent += p.resent;
        self.proto.duplicates += p.duplicates;
        self.proto.delivered += p.delivered;
        self.proto.relaxed += p.relaxed;
        self.proto.piggyback_bytes += p.piggyback_bytes;
        self.proto.max_piggyback = self.proto.max_piggyback.max(p.max_piggyback);
        self.proto.stale_control += p.stale_control;
        self.proto.stale_messages += p.stale_messages;
        self.proto.regenerations_checked += p.regenerations_checked;
        self.proto.contract_violations += p.contract_violations;
        self.proto.checkpoint_requests += p.checkpoint_requests;
        self.peak_log_entries = self.peak_log_entries.max(o.peak_log_entries);
        self.peak_log_bytes = self.peak_log_bytes.max(o.peak_log_bytes);
        self.determinants += o.determinants;
        self.determinants_replayed += o.determinants_replayed;
        self.selected_deliveries += o.selected_deliveries;
        self.timers_armed += o.timers_armed;
        self.timers_cancelled += o.timers_cancelled;
        self.timers_fired += o.timers_fired;
        self.timers_dropped += o.timers_dropped;
        self.timers_handled += o.timers_handled;
        self.timers_replayed += o.timers_replayed;
        self.stored_parts += o.stored_parts;
        self.blocks_dumped += o.blocks_dumped;
        self.resends_from_logger += o.resends_from_logger;
        self.resends_from_copy += o.resends_from_copy;
        self.logger_restarts += o.logger_restarts;
        self.blocks_refilled += o.blocks_refilled;
        self.blocks_relocated += o.blocks_relocated;
        self.resends_missing += o.resends_missing;
        self.lost_block_requests += o.lost_block_requests;
        self.suspensions += o.suspensions;
        self.suspended_checkpointed += o.suspended_checkpointed;
        self.reexecuted += o.reexecuted;
        self.results_replayed += o.results_replayed;
    }

    fn add_events(&mut self, ev: &EventLogging) {
        self.determinants += ev.stats().recorded;
        self.determinants_replayed += ev.stats().replayed;
    }
}

/// One connection of a link.
struct Conn {
    epoch: (u32, u32),
    packets: VecDeque<Vec<u8>>,
}

#[derive(Clone, Copy, Debug)]
enum Act {
    Arrive(u16, u16),
    Deliver(u16),
    Intra(u16, usize, usize),
    Mailbox(u16, usize),
    Fire(u16, usize),
    Start(u16, usize),
    Checkpoint(u16),
    Commit(u16),
    Restart(u16),
    Dump(u16),
    DumpAcknowledged(u16),
    /// A logger restarts, empty.
    LoggerRestart(u16),
    /// Set `s` learns that a logger restarted.
    LoggerRestartNoticed(u16),
    /// Set `s` copies a block the restarted logger lost back to it from the other one.
    Refill(u16),
}

/// A simulated cluster.
pub struct World {
    cfg: SimConfig,
    prog: Program,
    rng: Rng,
    nodes: Vec<Node>,
    local_of: Vec<usize>,
    /// Per link, its connections, oldest first: (sender incarnation, receiver
    /// incarnation) and the packets in flight.
    links: Vec<VecDeque<Conn>>,
    crash_at: VecDeque<u64>,
    /// Steps at which an extra crash during a recovery is due.
    crash_soon: Vec<u64>,
    stats: SimStats,
    failure: Option<String>,
    /// With [`SimConfig::break_contract`]: the first thing the checks found wrong (the run
    /// goes on).
    broken: Option<String>,
    trace: Option<Vec<String>>,
    /// Hash of every inter-set message that left its set, by channel and send index.
    left: BTreeMap<(ChannelId, u64), u64>,
    /// The logger nodes' memory: blocks of dumped payloads by logger, set and block.
    logger: BTreeMap<(u16, u16, BlockId), Vec<Vec<u8>>>,
    /// With [`SimConfig::logger_restart`]: the logger that restarts, and the sets that
    /// have not learnt of its restart yet (`None`: it has not restarted).
    logger_restart: Option<(u16, Option<BTreeSet<u16>>)>,
    /// Each logger's process: a restart starts another.
    logger_instances: [u64; LOGGERS],
    /// Messages (channel, send index) whose causal past includes a delivery whose
    /// requirement did not bind (a restarted sender's): the protocol promises no
    /// causal order for them, so a service client takes them early without complaint.
    untrusted: BTreeSet<(ChannelId, u64)>,
    /// Whether the handler running now took such a message (what it sends inherits it).
    handling_untrusted: bool,
}

const STEP_LIMIT: u64 = 2_000_000;

impl World {
    /// A cluster running `prog` with `cfg`; `trace` records every event.
    pub fn new(cfg: SimConfig, prog: Program, trace: bool) -> Self {
        let mut rng = Rng::new(cfg.seed ^ 0xC0FFEE);
        // Which of the two loggers restarts (drawn apart from the run's other choices).
        let cfg_logger_restart = (cfg.log_dump && cfg.logger_restart)
            .then(|| (Rng::new(cfg.seed ^ 0x0010_99E2).range(0, 1) as u16, None));
        let n = cfg.sets;
        let node_config = cfg.node_config();
        let mut local_of = vec![0; prog.actors()];
        let mut nodes = Vec::new();
        for s in 0..n {
            for (i, &a) in prog.members[usize::from(s)].iter().enumerate() {
                local_of[a] = i;
            }
            // Started as the runtime starts a node; a genesis checkpoint committed at
            // once, so that a crash before the first one restarts from the beginning.
            let mut rec = NodeRecovery::new(SetId(s), GateRule::PerActor, EventStore::new());
            rec.start(node_config).expect("valid set id");
            if let (Some(parts), Some(events)) = (cfg.event_parts, rec.events_mut()) {
                events.set_message_limit(parts);
            }
            let genesis = rec.checkpoint(|_| 0).expect("a started node checkpoints");
            let snap = genesis.protocol;
            rec.handle_checkpoint_committed(snap.id, genesis.events)
                .expect("genesis commit");
            let actors: Vec<ActorState> = prog.members[usize::from(s)]
                .iter()
                .map(|&a| prog.initial(a))
                .collect();
            let committed = Stored {
                id: snap.id,
                snapshot: lazarus::wire::encode(&snap).expect("encodable snapshot"),
                actors: actors.clone(),
                intra: BTreeMap::new(),
                intra_sent: BTreeMap::new(),
                events: genesis.events,
                mailbox: BTreeMap::new(),
                timers: vec![TimerImage::default(); actors.len()],
                loggers: [0; LOGGERS],
                suspended: vec![None; actors.len()],
            };
            nodes.push(Node {
                rec,
                deps: vec![Dependence::Below(0); actors.len()],
                mailbox: BTreeMap::new(),
                timers: vec![Timers::default(); actors.len()],
                suspended: vec![None; actors.len()],
                actors,
                intra: BTreeMap::new(),
                intra_sent: BTreeMap::new(),
                pending: None,
                committed,
                incarnation: 0,
                checkpoint_wanted: false,
                dumping: None,
                known_loggers: [0; LOGGERS],
                refill_skip: BTreeSet::new(),
            });
        }
        // Crash moments spread over the run's expected length.
        let horizon = prog.expected_messages() * 3 + 20;
        let mut crash_at: Vec<u64> = (0..cfg.crashes).map(|_| rng.below(horizon)).collect();
        crash_at.sort_unstable();
        World {
            links: (0..usize::from(n) * usize::from(n))
                .map(|_| VecDeque::new())
                .collect(),
            cfg,
            prog,
            rng,
            nodes,
            local_of,
            crash_at: crash_at.into(),
            crash_soon: Vec::new(),
            stats: SimStats::default(),
            failure: None,
            broken: None,
            trace: trace.then(Vec::new),
            left: BTreeMap::new(),
            logger: BTreeMap::new(),
            logger_restart: cfg_logger_restart,
            logger_instances: [0; LOGGERS],
            untrusted: BTreeSet::new(),
            handling_untrusted: false,
        }
    }

    fn note(&mut self, what: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>6} {}", self.stats.steps, what()));
        }
    }

    fn fail(&mut self, what: String) {
        self.note(|| format!("FAILURE: {what}"));
        if self.cfg.break_contract {
            // Broken on purpose: run on, so the runtime's checker sees the whole replay.
            self.broken.get_or_insert(what);
            return;
        }
        if self.failure.is_none() && self.trace.is_some() {
            // Where every actor stood, for the reader of the trace.
            let mut lines = Vec::new();
            for (s, node) in self.nodes.iter().enumerate() {
                for (i, st) in node.actors.iter().enumerate() {
                    let a = self.prog.members[s][i];
                    let timers = node.timers.get(i);
                    lines.push(format!("  S{s} actor {a}: {st:?}, timers {timers:?}"));
                }
            }
            for line in lines {
                self.note(|| line);
            }
        }
        self.failure.get_or_insert(what);
    }

    fn link(&self, from: u16, to: u16) -> usize {
        usize::from(from) * usize::from(self.cfg.sets) + usize::from(to)
    }

    fn alive(&self, s: u16) -> bool {
        self.nodes[usize::from(s)].rec.protocol().is_some()
    }

    /// Runs to quiescence, then checks the result against `expected` (the oracle), then
    /// checkpoints every set once more and checks that every log is empty.
    /// Without an oracle (order-sensitive runs) the channel-consistency check applies.
    pub fn run(self, expected: Option<&[ActorState]>) -> (Result<SimStats, String>, Vec<String>) {
        let (result, trace) = self.run_keeping_states(expected);
        (result.map(|(stats, _)| stats), trace)
    }

    /// [`World::run`], returning every actor's final state too (by global number).
    pub fn run_keeping_states(
        mut self,
        expected: Option<&[ActorState]>,
    ) -> (Result<Ended, String>, Vec<String>) {
        self.run_to_quiescence(true);
        if self.failure.is_none() {
            self.check_quiescent_state(expected);
        }
        if self.failure.is_none() {
            self.final_checkpoints();
        }
        self.collect_stats();
        if self.failure.is_none() && self.stats.proto.contract_violations > 0 {
            // Every regeneration matched what left the set (checked above): the checker
            // saw a difference that is not there.
            self.fail(format!(
                "the contract checker reported {} violations in a run that kept the contract",
                self.stats.proto.contract_violations
            ));
        }
        let trace = self.trace.take().unwrap_or_default();
        let states = (0..self.prog.actors())
            .map(|a| {
                let set = usize::from(self.prog.set_of[a]);
                // A set down at the end (a failed run) has no actors.
                let st = self.nodes[set].actors.get(self.local_of[a]);
                st.cloned().unwrap_or_else(|| self.prog.initial(a))
            })
            .collect();
        match self.failure {
            Some(f) => (Err(f), trace),
            None => (Ok((self.stats, states)), trace),
        }
    }

    fn enabled(&self, acts: &mut Vec<(u64, Act)>) {
        acts.clear();
        match &self.logger_restart {
            Some((l, None)) if self.logger.keys().any(|(at, _, _)| at == l) => {
                acts.push((1, Act::LoggerRestart(*l)));
            }
            // The second restart, of the other logger, once the first is made good.
            Some((l, Some(unaware)))
                if unaware.is_empty()
                    && self.cfg.second_logger_restart
                    && self.stats.logger_restarts == 1
                    && self.nodes.iter().all(|n| {
                        n.rec.protocol().is_some_and(|p| {
                            (p.refillable_blocks(*l).iter()).all(|(b, _)| n.refill_skip.contains(b))
                        })
                    }) =>
            {
                acts.push((1, Act::LoggerRestart(1 - *l)));
            }
            _ => {}
        }
        let n = self.cfg.sets;
        for from in 0..n {
            for to in 0..n {
                if self.links[self.link(from, to)]
                    .iter()
                    .any(|c| !c.packets.is_empty())
                {
                    acts.push((10, Act::Arrive(from, to)));
                }
            }
        }
        for s in 0..n {
            let node = &self.nodes[usize::from(s)];
            let Some(proto) = node.rec.protocol() else {
                acts.push((4, Act::Restart(s)));
                continue;
            };
            if proto.has_deliverable() {
                acts.push((10, Act::Deliver(s)));
            }
            for (&(a, b), q) in &node.intra {
                if let Some((index, payload)) = q.front() {
                    if self.may_deliver(s, b, a, *index, payload) {
                        acts.push((10, Act::Intra(s, a, b)));
                    }
                }
            }
            for (&local, q) in &node.mailbox {
                if self.mailbox_pick(s, local, q).is_some() {
                    acts.push((10, Act::Mailbox(s, local)));
                }
            }
            // A lower weight than deliveries: timers often stay pending across
            // checkpoints and crashes, and ring in the middle of other traffic.
            for (local, t) in node.timers.iter().enumerate() {
                if t.has_pending() {
                    acts.push((4, Act::Fire(s, local)));
                }
            }
            let fetching = node.rec.events().is_some_and(|e| e.is_fetching());
            for (i, st) in node.actors.iter().enumerate() {
                let a = self.prog.members[usize::from(s)][i];
                let held_back = fetching && self.prog.sensitive[a];
                if !st.started && !held_back {
                    acts.push((10, Act::Start(s, a)));
                }
            }
            if node.pending.is_some() {
                acts.push((3, Act::Commit(s)));
            }
            if self.cfg.log_dump {
                if node.dumping.is_some() {
                    acts.push((5, Act::DumpAcknowledged(s)));
                } else if proto.log_stats().payload_bytes > 0 {
                    acts.push((3, Act::Dump(s)));
                }
            }
            // Like the runtime's dump thread, a set reports a restart it found only
            // after marking the block in flight dumped.
            if let Some((l, Some(unaware))) = &self.logger_restart {
                if unaware.contains(&s) && node.dumping.is_none() {
                    acts.push((3, Act::LoggerRestartNoticed(s)));
                } else if !unaware.contains(&s)
                    && self.cfg.second_logger_restart
                    && proto
                        .refillable_blocks(*l)
                        .iter()
                        .any(|(b, _)| !node.refill_skip.contains(b))
                {
                    acts.push((3, Act::Refill(s)));
                }
            }
        }
    }

    fn run_to_quiescence(&mut self, allow_crashes: bool) {
        let mut acts = Vec::new();
        loop {
            if self.failure.is_some() {
                return;
            }
            if self.stats.steps > STEP_LIMIT {
                self.fail("no quiescence after the step limit (livelock)".into());
                return;
            }
            self.enabled(&mut acts);
            if acts.is_empty() {
                return;
            }
            self.stats.steps += 1;
            if allow_crashes && self.maybe_crash() {
                continue;
            }
            // Checkpoints happen while the application makes progress; offering them when
            // only commits are pending would let checkpoint -> commit -> checkpoint go on
            // forever.
            let working = acts.iter().any(|(_, a)| !matches!(a, Act::Commit(_)));
            for s in (0..self.cfg.sets).filter(|_| working) {
                let node = &self.nodes[usize::from(s)];
                if node.rec.protocol().is_some() && node.pending.is_none() {
                    // A requested checkpoint comes soon, not at once: the requester
                    // keeps sending meanwhile.
                    let asked = if node.checkpoint_wanted { 20 } else { 0 };
                    acts.push((self.cfg.checkpoint_weight + asked, Act::Checkpoint(s)));
                }
            }
            let total: u64 = acts.iter().map(|a| a.0).sum();
            let mut pick = self.rng.below(total);
            let mut chosen = acts[0].1;
            for &(w, a) in &acts {
                if pick < w {
                    chosen = a;
                    break;
                }
                pick -= w;
            }
            self.perform(chosen);
        }
    }

    /// Injects the crashes due at this step; returns whether one happened.
    fn maybe_crash(&mut self) -> bool {
        let step = self.stats.steps;
        let due_scheduled = self.crash_at.front().is_some_and(|&t| t <= step);
        let due_soon = self.crash_soon.iter().any(|&t| t <= step);
        if !due_scheduled && !due_soon {
            return false;
        }
        if self.cfg.one_at_a_time
            && self.nodes.iter().any(|n| {
                n.rec
                    .protocol()
                    .is_none_or(|p| p.is_recovering() || p.next_regeneration().is_some())
            })
        {
            // Later: a set is still down or catching up.
            return false;
        }
        if due_scheduled {
            self.crash_at.pop_front();
        } else {
            self.crash_soon.retain(|&t| t > step);
        }
        let down = (0..self.cfg.sets).filter(|&s| !self.alive(s)).count() as u16;
        if down >= self.cfg.max_down {
            return false;
        }
        // Prefer a set with an uncommitted checkpoint half of the time.
        let alive: Vec<u16> = (0..self.cfg.sets).filter(|&s| self.alive(s)).collect();
        let mid: Vec<u16> = alive
            .iter()
            .copied()
            .filter(|&s| self.nodes[usize::from(s)].pending.is_some())
            .collect();
        let victim = if !mid.is_empty() && self.rng.chance(1, 2) {
            mid[self.rng.below(mid.len() as u64) as usize]
        } else {
            alive[self.rng.below(alive.len() as u64) as usize]
        };
        self.crash(victim);
        // Sometimes a second set goes down at the same moment.
        if down + 1 < self.cfg.max_down && self.rng.chance(1, 3) {
            let others: Vec<u16> = (0..self.cfg.sets).filter(|&s| self.alive(s)).collect();
            if !others.is_empty() {
                let second = others[self.rng.below(others.len() as u64) as usize];
                self.stats.simultaneous_crashes += 1;
                self.crash(second);
            }
        }
        true
    }

    fn crash(&mut self, s: u16) {
        let recovering = (0..self.cfg.sets).any(|x| {
            self.nodes[usize::from(x)]
                .rec
                .protocol()
                .is_some_and(|p| p.is_recovering())
        });
        let node = &mut self.nodes[usize::from(s)];
        let mid = node.pending.is_some();
        let rec = std::mem::replace(
            &mut node.rec,
            NodeRecovery::new(SetId(s), GateRule::PerActor, EventStore::new()),
        );
        let (proto, events, store) = rec.into_parts();
        // The logger store is durable; the rest is lost with the set.
        node.rec = NodeRecovery::new(SetId(s), GateRule::PerActor, store);
        if let Some(p) = proto {
            self.stats.proto.add(&p.stats());
            let l = p.log_stats();
            self.stats.peak_log_entries = self.stats.peak_log_entries.max(l.peak_entries);
            self.stats.peak_log_bytes = self.stats.peak_log_bytes.max(l.peak_bytes);
        }
        node.actors.clear();
        node.timers.clear();
        node.suspended.clear();
        node.intra.clear();
        node.intra_sent.clear();
        node.pending = None;
        node.checkpoint_wanted = false;
        node.dumping = None;
        node.refill_skip.clear();
        if let Some(ev) = events {
            self.stats.add_events(&ev);
        }
        node.deps.clear();
        node.mailbox.clear();
        self.stats.crashes += 1;
        self.stats.crashes_mid_checkpoint += u64::from(mid);
        self.stats.crashes_during_recovery += u64::from(recovering);
        self.note(|| {
            format!("CRASH S{s} (mid-checkpoint: {mid}, someone recovering: {recovering})")
        });
        for other in 0..self.cfg.sets {
            // What it had in flight: a random prefix made it out.
            let out = self.link(s, other);
            if let Some(conn) = self.links[out].back_mut() {
                let len = conn.packets.len() as u64;
                let keep = self.rng.range(0, len) as usize;
                self.stats.packets_lost += len - keep as u64;
                conn.packets.truncate(keep);
            }
            if self.cfg.lossy_crash {
                let inbound = self.link(other, s);
                for conn in self.links[inbound].drain(..) {
                    self.stats.packets_lost += conn.packets.len() as u64;
                }
            }
        }
    }

    fn perform(&mut self, act: Act) {
        match act {
            Act::Arrive(from, to) => self.arrive(from, to),
            Act::Deliver(s) => self.deliver(s),
            Act::Intra(s, a, b) => self.intra(s, a, b),
            Act::Mailbox(s, local) => self.deliver_from_mailbox(s, local),
            Act::Fire(s, local) => self.fire(s, local),
            Act::Start(s, a) => {
                self.handling_untrusted = false;
                let out = self.run_actor(s, a, |prog, st, draw| prog.start(a, st, draw));
                self.note(|| format!("S{s} start actor {a}"));
                self.apply(s, a, out);
            }
            Act::Checkpoint(s) => self.checkpoint(s),
            Act::Commit(s) => self.commit(s),
            Act::Restart(s) => self.restart(s),
            Act::Dump(s) => self.dump(s),
            Act::DumpAcknowledged(s) => self.dump_acknowledged(s),
            Act::LoggerRestart(l) => self.logger_restarts(l),
            Act::LoggerRestartNoticed(s) => self.logger_restart_noticed(s),
            Act::Refill(s) => self.refill(s),
        }
        self.flush_events();
        self.release_blocks();
    }

    /// Set `s` ships a block of its log to the logger, which keeps it at once; the
    /// acknowledgement is a later step.
    fn dump(&mut self, s: u16) {
        let max = self.rng.range(1, 40) as usize;
        let node = &mut self.nodes[usize::from(s)];
        let Some(p) = node.rec.protocol_mut() else {
            return;
        };
        let Some(dump) = p.take_log_dump(max) else {
            return;
        };
        self.logger
            .insert((0, s, dump.block), dump.payloads.clone());
        if self.cfg.logger_restart {
            self.logger
                .insert((1, s, dump.block), dump.payloads.clone());
        }
        let what = format!(
            "S{s} dumps block {:?}: {} messages to {}",
            dump.block,
            dump.entries.len(),
            dump.to
        );
        node.dumping = Some((dump, node.incarnation));
        self.note(|| what);
    }

    /// The logger's acknowledgement of set `s`'s block arrives: the entries' payloads
    /// leave the set's memory.
    fn dump_acknowledged(&mut self, s: u16) {
        let node = &mut self.nodes[usize::from(s)];
        let (Some(p), Some((dump, incarnation))) = (node.rec.protocol_mut(), node.dumping.take())
        else {
            return;
        };
        if incarnation != node.incarnation {
            return;
        }
        // With a logger restart every block has a copy at the second logger; else half
        // the blocks name a copy (kept in logger 0's memory only: no logger fails).
        let copy = (self.cfg.logger_restart || self.rng.chance(1, 2)).then_some(1);
        let n = p.log_dumped(&dump, 0, copy);
        self.stats.blocks_dumped += 1;
        self.note(|| format!("S{s} block {:?} acknowledged: {n} payloads out", dump.block));
    }

    /// Logger `l` restarts: every block it kept is gone; the sets learn of it later.
    fn logger_restarts(&mut self, l: u16) {
        self.logger.retain(|(at, _, _), _| *at != l);
        self.logger_restart = Some((l, Some((0..self.cfg.sets).collect())));
        self.logger_instances[usize::from(l)] += 1;
        self.stats.logger_restarts += 1;
        self.note(|| format!("LOGGER {l} RESTARTS, empty"));
    }

    /// Set `s` finds that the logger restarted: the blocks it dumped there before are
    /// lost; the receivers of messages only those blocks held are asked to checkpoint.
    fn logger_restart_noticed(&mut self, s: u16) {
        let Some((l, Some(unaware))) = &mut self.logger_restart else {
            return;
        };
        let l = *l;
        unaware.remove(&s);
        let instance = self.logger_instances[usize::from(l)];
        let node = &mut self.nodes[usize::from(s)];
        node.known_loggers[usize::from(l)] = instance;
        let Some(p) = node.rec.protocol_mut() else {
            return;
        };
        let asks = p.on_logger_lost(l);
        self.stats.lost_block_requests += asks.len() as u64;
        self.note(|| format!("S{s} finds logger {l} restarted: {} requests", asks.len()));
        self.execute(s, asks);
    }

    /// Set `s` copies one block the restarted logger lost back to it from the other
    /// logger, as the runtime's dump thread does between dumps.
    fn refill(&mut self, s: u16) {
        let Some((l, _)) = self.logger_restart else {
            return;
        };
        let node = &mut self.nodes[usize::from(s)];
        let Some(p) = node.rec.protocol_mut() else {
            return;
        };
        let todo = p.refillable_blocks(l);
        let Some(&(block, from)) = todo.iter().find(|(b, _)| !node.refill_skip.contains(b)) else {
            return;
        };
        let Some(payloads) = self.logger.get(&(from, s, block)).cloned() else {
            node.refill_skip.insert(block);
            self.note(|| format!("S{s} skips block {block:?}: logger {from} lacks it too"));
            return;
        };
        self.stats.blocks_refilled += 1;
        if self.cfg.relocate_refills && self.rng.chance(1, 2) {
            // The restarted logger has no room: the copy goes to the third logger.
            self.logger.insert((THIRD_LOGGER, s, block), payloads);
            p.block_relocated(l, THIRD_LOGGER, block);
            self.stats.blocks_relocated += 1;
            self.note(|| {
                format!("S{s} copies block {block:?} to logger {THIRD_LOGGER} from {from}")
            });
            return;
        }
        self.logger.insert((l, s, block), payloads);
        p.block_restored(l, block);
        self.note(|| format!("S{s} copies block {block:?} back to logger {l} from {from}"));
    }

    /// The logger lets go of the blocks the sets no longer point into.
    fn release_blocks(&mut self) {
        for s in 0..self.cfg.sets {
            let released = match self.nodes[usize::from(s)].rec.protocol_mut() {
                Some(p) => p.take_released_blocks(),
                None => continue,
            };
            for (l, block) in released {
                if self.logger.remove(&(l, s, block)).is_some() {
                    self.note(|| format!("logger {l} lets go of S{s}'s block {block:?}"));
                }
            }
        }
    }

    /// Whether actor `b` of set `s` may handle the message `index` from `from` now. Only
    /// order-sensitive actors are ever held back: until started, while their set fetches
    /// its determinants, and when their replay names another message.
    fn may_deliver(&self, s: u16, b: usize, from: usize, index: u64, payload: &[u8]) -> bool {
        let node = &self.nodes[usize::from(s)];
        let st = &node.actors[self.local_of[b]];
        if self.prog.is_async(b) && !may_take(st, from, payload) {
            return false;
        }
        if !self.prog.sensitive[b] {
            return true;
        }
        let fetching = node.rec.events().is_none_or(|e| e.is_fetching());
        if fetching || !st.started {
            return false;
        }
        if let Some(only) = st.receive_only {
            // A selective receive: the named channel's next message, whatever the log
            // holds (it holds nothing for this delivery).
            return from == only;
        }
        node.rec
            .may_admit(self.prog.ids[b], st.clock + 1, self.channel(from, b), index)
    }

    /// The position in `q` of the message local actor `local` may handle next, or of a
    /// timer cancelled after it rang (to drop), if any: the runtime's rule
    /// (`recovery::next_stashed`).
    fn mailbox_pick(
        &self,
        s: u16,
        local: usize,
        q: &VecDeque<(usize, u64, Vec<u8>)>,
    ) -> Option<usize> {
        let b = self.prog.members[usize::from(s)][local];
        let timers = &self.nodes[usize::from(s)].timers[local];
        let seen_as = q.iter().map(|(from, index, payload)| match *from {
            TIMER => Stashed::Timer {
                cancelled: timers.is_cancelled(*index),
            },
            _ if is_result(payload) => Stashed::Result { given_up: false },
            from => Stashed::Message { from },
        });
        let suspended = self.nodes[usize::from(s)].actors[local].call.is_some();
        let receiving = if suspended {
            Receiving::Results
        } else {
            Receiving::Anything
        };
        next_stashed(seen_as, receiving, |pos, _| {
            let (from, index, payload) = &q[pos];
            self.may_deliver(s, b, *from, *index, payload)
        })
    }

    /// Runs `body` (a handler or start of actor `a` of set `s`) with the draw source of an
    /// order-sensitive actor: replayed values from the script, else fresh values, logged.
    fn run_actor(
        &mut self,
        s: u16,
        a: usize,
        body: impl FnOnce(&Program, &mut ActorState, &mut dyn FnMut(u64) -> u64) -> Effects,
    ) -> Effects {
        let id = self.prog.ids[a];
        let local = self.local_of[a];
        let step = self.stats.steps;
        let node = &mut self.nodes[usize::from(s)];
        let rng = &mut self.rng;
        let mut diverged = None;
        let out = {
            let rec = &mut node.rec;
            // As the runtime does: the actor depends on each event it records or replays.
            let dep = &mut node.deps[local];
            let mut draw = |tick: u64| -> u64 {
                // Every third event is a mailbox probe (`ctx.messages_waiting()`): a
                // "waiting" answer is logged, empty ones lazily, as runs. The others are
                // half random numbers, half clock reads.
                let read = if tick % 3 == 0 {
                    rec.probe(id, tick, || rng.chance(1, 2)).map(|r| EventRead {
                        value: u64::from(r.value),
                        depends: r.depends,
                        replayed: r.replayed,
                        diverged: r.diverged,
                    })
                } else {
                    rec.read_value(id, tick, || {
                        if rng.chance(1, 2) {
                            rng.next_u64()
                        } else {
                            step
                        }
                    })
                };
                let Some(read) = read else {
                    return 0;
                };
                if let Some(e) = read.diverged {
                    diverged.get_or_insert(e.to_string());
                    return 0;
                }
                *dep = dep.join(read.depends);
                read.value
            };
            // A suspended handler reads its values through its record: a re-execution
            // gets the ones it read before, without recording them again.
            let mut record = node.suspended.get_mut(local).and_then(Option::as_mut);
            let mut read = |tick: u64| match record.as_mut() {
                Some(r) => r.value(|| draw(tick)),
                None => draw(tick),
            };
            let had = node.actors[local].violation.is_some();
            let out = body(&self.prog, &mut node.actors[local], &mut read);
            let st = &node.actors[local];
            (out, if had { None } else { st.violation.clone() })
        };
        let (out, violated) = out;
        if let Some(v) = violated {
            self.note(|| format!("S{s} actor {a}: {v}"));
        }
        if let Some(e) = diverged {
            self.fail(format!("S{s}: {e}"));
        }
        out
    }

    /// Handles an inter-set or intra-set message for actor `b`: ticks an order-sensitive
    /// actor's event clock and records (or replays) the delivery determinant first.
    fn handle(&mut self, s: u16, b: usize, from: usize, index: u64, payload: &[u8]) -> Effects {
        if !self.prog.is_async(b) {
            return self.handle_inner(s, b, from, index, payload);
        }
        // An async handler: a message that starts a call opens a record with the state
        // it starts from; a result goes into the record of the call it resumes.
        let local = self.local_of[b];
        let node = &mut self.nodes[usize::from(s)];
        let kept = Kept::Message {
            from,
            index,
            payload: payload.to_vec(),
        };
        let mut opened = false;
        match &mut node.suspended[local] {
            Some(record) if is_result(payload) => record.result(index, kept),
            None if !is_result(payload) => {
                let before = Kept::State(Box::new(node.actors[local].clone()));
                node.suspended[local] = Some(Suspension::new(before, kept));
                opened = true;
            }
            // The program reports it as a violation.
            _ => {}
        }
        let out = self.handle_inner(s, b, from, index, payload);
        let out = self.effects_of_call(s, b, out);
        let node = &self.nodes[usize::from(s)];
        self.stats.suspensions += u64::from(opened && node.suspended[local].is_some());
        out
    }

    /// Passes the effects of a step of async actor `b`'s handler through its record:
    /// those a re-execution makes again are dropped (the checkpoint holds them). Drops
    /// the record once the call has completed.
    fn effects_of_call(&mut self, s: u16, b: usize, mut out: Effects) -> Effects {
        let local = self.local_of[b];
        let node = &mut self.nodes[usize::from(s)];
        let suspended = node.actors[local].call.is_some();
        let Some(record) = node.suspended[local].as_mut() else {
            return out;
        };
        let again = self.cfg.mutation == Some(Mutation::MakeRecordedEffectsAgain);
        out.sends
            .retain(|_| record.effect() == Effect::Make || again);
        out.timers
            .retain(|_| record.effect() == Effect::Make || again);
        if !suspended {
            node.suspended[local] = None;
        }
        out
    }

    /// Runs actor `b`'s handler for a message (the body of [`World::handle`]).
    fn handle_inner(
        &mut self,
        s: u16,
        b: usize,
        from: usize,
        index: u64,
        payload: &[u8],
    ) -> Effects {
        let trusted = !self.untrusted.contains(&(self.channel(from, b), index));
        self.handling_untrusted = !trusted;
        if self.prog.sensitive[b] {
            let id = self.prog.ids[b];
            let channel = self.channel(from, b);
            let node = &mut self.nodes[usize::from(s)];
            let st = &mut node.actors[self.local_of[b]];
            st.clock += 1;
            let tick = st.clock;
            let selective = st.receive_only;
            let lb = self.local_of[b];
            if let Some(only) = selective {
                if only != from {
                    self.fail(format!(
                        "S{s}: actor {b} receiving only from {only} handled a message from {from}"
                    ));
                    return Effects::default();
                }
                // A selective receive is determined by the channel's FIFO order: nothing is
                // logged, and a replay must not hold a determinant for this tick.
                match node.rec.admit_selected(id, tick) {
                    Some(Ok(())) => self.stats.selected_deliveries += 1,
                    Some(Err(e)) => {
                        self.fail(format!("S{s}: actor {b}: {e}"));
                        return Effects::default();
                    }
                    None => return Effects::default(),
                }
            } else {
                match node.rec.admit_delivery(id, tick, channel, index) {
                    Admission::Recorded {
                        depends,
                        diverged: None,
                    } => {
                        // As the runtime does: the actor now depends on its own event.
                        node.deps[lb] = node.deps[lb].join(depends);
                    }
                    Admission::Replayed => {
                        node.deps[lb] = Dependence::Set;
                        self.stats.timers_replayed += u64::from(from == TIMER);
                    }
                    Admission::Recorded {
                        diverged: Some(e), ..
                    } => {
                        self.fail(format!("S{s}: {e}"));
                        return Effects::default();
                    }
                    Admission::NotNow => {
                        self.fail(format!(
                            "S{s}: actor {b} at tick {tick} handled {channel:?}#{index}, which \
                             its replay does not name now"
                        ));
                        return Effects::default();
                    }
                }
            }
        }
        if from == TIMER {
            return self.handle_timer(s, b, index, payload);
        }
        let strict = trusted && self.cfg.causal_clients;
        self.run_actor(s, b, |prog, st, draw| {
            prog.handle(b, st, from, index, payload, strict, draw)
        })
    }

    /// Handles timer `seq` of actor `b`, its delivery admitted (a timer cancelled after it
    /// rang never is: it is dropped before, see `deliver_from_mailbox`).
    fn handle_timer(&mut self, s: u16, b: usize, seq: u64, payload: &[u8]) -> Effects {
        let local = self.local_of[b];
        if !self.nodes[usize::from(s)].timers[local].handle(seq) {
            self.fail(format!(
                "S{s}: timer {b}#{seq} was admitted after it was cancelled"
            ));
            return Effects::default();
        }
        let Some(value) = payload.try_into().ok().map(u64::from_le_bytes) else {
            self.fail(format!("S{s}: timer {b}#{seq} rang an undecodable value"));
            return Effects::default();
        };
        self.stats.timers_handled += 1;
        self.run_actor(s, b, |prog, st, _| prog.handle_timer(b, st, seq, value))
    }

    /// The earliest-deadline pending timer of local actor `local` rings: into the mailbox.
    fn fire(&mut self, s: u16, local: usize) {
        let node = &mut self.nodes[usize::from(s)];
        let Some((seq, value)) = node.timers.get_mut(local).and_then(Timers::fire_next) else {
            return;
        };
        node.mailbox.entry(local).or_default().push_back((
            TIMER,
            seq,
            value.to_le_bytes().to_vec(),
        ));
        self.stats.timers_fired += 1;
        let b = self.prog.members[usize::from(s)][local];
        self.note(|| format!("S{s} timer {b}#{seq} rings"));
    }

    /// Carries out what a start or handler of actor `a` of set `s` did: its timer
    /// operations (the program numbers its timers; the arm numbers must agree), then its
    /// sends.
    fn apply(&mut self, s: u16, a: usize, out: Effects) {
        let now = self.stats.steps;
        for op in out.timers {
            let timers = &mut self.nodes[usize::from(s)].timers[self.local_of[a]];
            match op {
                TimerOp::Arm { seq, delay, value } => {
                    let armed = timers.arm(now + delay, value);
                    self.stats.timers_armed += 1;
                    if armed != seq {
                        self.fail(format!(
                            "S{s}: actor {a} armed timer {seq}, its timers numbered it {armed}"
                        ));
                    }
                    self.note(|| format!("S{s} actor {a} arms timer #{seq} (+{delay})"));
                }
                TimerOp::Cancel(seq) => {
                    let live = timers.cancel(seq);
                    self.stats.timers_cancelled += 1;
                    if !live {
                        self.fail(format!(
                            "S{s}: actor {a} cancelled timer {seq}, which was not live"
                        ));
                    }
                    self.note(|| format!("S{s} actor {a} cancels timer #{seq}"));
                }
            }
        }
        self.route(s, a, out.sends);
    }

    /// The channel from `from` (an actor, or [`TIMER`]: `to`'s timer channel) to `to`.
    fn channel(&self, from: usize, to: usize) -> ChannelId {
        let to = self.prog.ids[to];
        let from = match from {
            TIMER => lazarus::timer::source_of(to),
            a => self.prog.ids[a],
        };
        ChannelId::new(from, to)
    }

    fn deliver_from_mailbox(&mut self, s: u16, local: usize) {
        let node = &self.nodes[usize::from(s)];
        let Some(pos) = node
            .mailbox
            .get(&local)
            .and_then(|q| self.mailbox_pick(s, local, q))
        else {
            return;
        };
        let node = &mut self.nodes[usize::from(s)];
        let Some((from, index, payload)) = node.mailbox.get_mut(&local).and_then(|q| q.remove(pos))
        else {
            return;
        };
        if node.mailbox.get(&local).is_some_and(|q| q.is_empty()) {
            node.mailbox.remove(&local);
        }
        let b = self.prog.members[usize::from(s)][local];
        // A timer cancelled after it rang is dropped as it leaves the mailbox, before any
        // delivery decision (the runtime's `cancelled_timer`): it takes no tick, since a
        // replay may cancel it before it rings, and then it never comes.
        let timers = &mut self.nodes[usize::from(s)].timers[local];
        if from == TIMER && timers.is_cancelled(index) {
            timers.handle(index);
            self.stats.timers_dropped += 1;
            self.note(|| format!("S{s} timer {b}#{index} dropped (cancelled after it rang)"));
            return;
        }
        self.note(|| format!("S{s} mailbox {from}->{b}#{index}"));
        let out = self.handle(s, b, from, index, &payload);
        self.apply(s, b, out);
    }

    /// Ships determinant batches and lets out the packets whose determinants are stable.
    fn flush_events(&mut self) {
        for s in 0..self.cfg.sets {
            let node = &mut self.nodes[usize::from(s)];
            if node.rec.events().is_none() {
                continue;
            }
            node.rec.flush_events();
            self.transmit(s);
        }
    }

    /// Puts the frames set `s`'s recovery machine has to send on their links.
    fn transmit(&mut self, s: u16) {
        while let Some((to, packet)) = self.nodes[usize::from(s)].rec.poll_transmit() {
            self.push(s, to.0, packet);
        }
    }

    /// Sends a protocol frame from `s` to `to` behind the frames its gate holds.
    fn send_behind_held(&mut self, s: u16, to: u16, packet: Packet) {
        self.nodes[usize::from(s)]
            .rec
            .send_behind_held(SetId(to), packet);
        self.transmit(s);
    }

    fn arrive(&mut self, from: u16, to: u16) {
        let l = self.link(from, to);
        self.links[l].retain(|c| !c.packets.is_empty());
        let conns = self.links[l].len() as u64;
        if conns == 0 {
            return;
        }
        let pick = if self.cfg.reorder_connections {
            self.rng.below(conns) as usize
        } else {
            0
        };
        let via = Incarnation(self.links[l][pick].epoch.0);
        let Some(bytes) = self.links[l][pick].packets.pop_front() else {
            return;
        };
        if !self.alive(to) {
            self.stats.packets_lost += 1;
            self.note(|| format!("S{from}->S{to} lost (S{to} is down)"));
            return;
        }
        let packet: Packet = match lazarus::wire::decode(&bytes) {
            Ok(p) => p,
            Err(e) => return self.fail(format!("packet does not decode: {e}")),
        };
        let rec = &mut self.nodes[usize::from(to)].rec;
        match packet {
            Frame::Message { meta, payload } => {
                let (ch, idx, inc) = (meta.channel, meta.send_index, meta.sender_incarnation.0);
                let depend = self.trace.is_some().then(|| format!("{:?}", meta.depend));
                let r = rec.handle_message(SetId(from), via, meta, payload);
                self.note(|| {
                    format!(
                        "S{from}->S{to} msg {ch:?}#{idx} (sender incarnation {inc}, depends on \
                         {}): {r:?}",
                        depend.unwrap_or_default()
                    )
                });
                if let Err(e) = r {
                    self.fail(format!("S{to} refused a message from S{from}: {e}"));
                }
            }
            Frame::Events(message) => {
                let kind = message.kind();
                if matches!(
                    message,
                    EventMessage::Stored {
                        complete: false,
                        ..
                    }
                ) {
                    self.stats.stored_parts += 1;
                }
                let dbg = self.trace.is_some().then(|| format!("{message:?}"));
                match rec.handle_events(SetId(from), message) {
                    Ok(r) => {
                        self.note(|| {
                            format!(
                                "S{from}->S{to} event {kind} {} -> {r:?}",
                                dbg.unwrap_or_default(),
                            )
                        });
                        self.transmit(to);
                    }
                    Err(e) => self.fail(format!("S{to} refused event {kind} from S{from}: {e}")),
                }
            }
            Frame::Control(message) => {
                let kind = message.kind();
                let dbg = self.trace.is_some().then(|| format!("{message:?}"));
                match rec.handle_control(SetId(from), message) {
                    Ok(Some(outcome)) => {
                        if outcome.stale_dropped > 0 {
                            self.note(|| {
                                format!(
                                    "S{to} dropped {} queued from S{from}'s older incarnations",
                                    outcome.stale_dropped
                                )
                            });
                        }
                        self.note(|| {
                            format!(
                                "S{from}->S{to} {kind} {} -> {} actions",
                                dbg.unwrap_or_default(),
                                outcome.actions.len()
                            )
                        });
                        if outcome.checkpoint_wanted {
                            self.nodes[usize::from(to)].checkpoint_wanted = true;
                        }
                        self.execute(to, outcome.actions);
                    }
                    Ok(None) => self.fail(format!("S{to} has no protocol but is up")),
                    Err(e) => self.fail(format!("S{to} refused {kind} from S{from}: {e}")),
                }
            }
        }
    }

    fn deliver(&mut self, s: u16) {
        let node = &mut self.nodes[usize::from(s)];
        let Some(d) = node.rec.protocol_mut().and_then(|p| p.poll_delivery()) else {
            return;
        };
        if !d.binding {
            self.untrusted.insert((d.channel, d.send_index));
        }
        let (Some(to), Some(from)) = (
            self.prog.actor(d.channel.to),
            self.prog.actor(d.channel.from),
        ) else {
            return self.fail(format!("S{s} delivered on unknown channel {:?}", d.channel));
        };
        if self.prog.set_of[to] != s || self.prog.set_of[from] != d.from.0 {
            return self.fail(format!("S{s} delivered {:?} from {}", d.channel, d.from));
        }
        let node = &mut self.nodes[usize::from(s)];
        let local = self.local_of[to];
        let holding = node.mailbox.get(&local).is_some_and(|q| !q.is_empty());
        let ordered = self.prog.sensitive[to] || self.prog.is_async(to);
        if ordered && (holding || !self.may_deliver(s, to, from, d.send_index, &d.payload)) {
            self.note(|| format!("S{s} hold {:?}#{} in the mailbox", d.channel, d.send_index));
            self.nodes[usize::from(s)]
                .mailbox
                .entry(local)
                .or_default()
                .push_back((from, d.send_index, d.payload));
            return;
        }
        let out = self.handle(s, to, from, d.send_index, &d.payload);
        self.note(|| {
            format!(
                "S{s} deliver {:?}#{} (interval {}{})",
                d.channel,
                d.send_index,
                d.interval,
                if d.relaxed { ", relaxed" } else { "" }
            )
        });
        self.apply(s, to, out);
    }

    fn intra(&mut self, s: u16, a: usize, b: usize) {
        let node = &mut self.nodes[usize::from(s)];
        let Some((index, payload)) = node.intra.get_mut(&(a, b)).and_then(|q| q.pop_front()) else {
            return;
        };
        let out = self.handle(s, b, a, index, &payload);
        self.note(|| format!("S{s} intra {a}->{b}#{index}"));
        self.apply(s, b, out);
    }

    /// Sends the messages actor `a` of set `s` produced.
    fn route(&mut self, s: u16, a: usize, out: Vec<(usize, Vec<u8>)>) {
        for (b, payload) in out {
            let dst = self.prog.set_of[b];
            let node = &mut self.nodes[usize::from(s)];
            if dst == s {
                let index = node.intra_sent.entry((a, b)).or_default();
                *index += 1;
                let index = *index;
                node.intra
                    .entry((a, b))
                    .or_default()
                    .push_back((index, payload));
                // As the runtime does: a message inside the set is an event of the set,
                // and messages leaving the set wait for the determinants it depends on.
                let sender = node.deps[self.local_of[a]];
                node.rec.on_local_deliveries(1, Some(sender));
                if self.handling_untrusted {
                    let channel = ChannelId::new(self.prog.ids[a], self.prog.ids[b]);
                    self.untrusted.insert((channel, index));
                }
                // ... and the receiver depends on what its sender depended on.
                let carried = node.deps[self.local_of[a]];
                let lb = self.local_of[b];
                node.deps[lb] = node.deps[lb].join(carried);
                continue;
            }
            let channel = ChannelId::new(self.prog.ids[a], self.prog.ids[b]);
            let mut payload = payload;
            if self.cfg.break_contract {
                // Each incarnation sends its own variant of every message.
                payload[4] ^= node.incarnation as u8;
            }
            let hash = payload_hash(&payload);
            let la = self.local_of[a];
            let sender = Some((self.prog.ids[a], node.deps[la]));
            let sent = node.rec.handle_send(SetId(dst), channel, payload, sender);
            match sent {
                Ok(Sent::Logged {
                    send_index, needed, ..
                }) => {
                    // The actor now depends on no fewer determinants than its message.
                    if node.deps[la] == Dependence::Set {
                        node.deps[la] = Dependence::Below(needed);
                    }
                    if self.handling_untrusted {
                        self.untrusted.insert((channel, send_index));
                    }
                    self.transmit(s);
                }
                Ok(Sent::Suppressed { send_index: index }) => {
                    if self.handling_untrusted {
                        self.untrusted.insert((channel, index));
                    }
                    self.note(|| format!("S{s} suppress {channel:?}#{index}"));
                    self.check_same_as_left(channel, index, hash);
                }
                Ok(Sent::NoProtocol) => self.fail(format!("S{s} sends while it is down")),
                Err(e) => self.fail(format!("S{s} refused a send: {e}")),
            }
        }
        let node = &mut self.nodes[usize::from(s)];
        if let Some(p) = node.rec.protocol_mut() {
            let l = p.log_stats();
            self.stats.peak_log_entries = self.stats.peak_log_entries.max(l.entries);
            self.stats.peak_log_bytes = self.stats.peak_log_bytes.max(l.bytes());
            let asks = p.poll_log_quota();
            if !asks.is_empty() {
                self.note(|| format!("S{s} log over its quota: {} requests", asks.len()));
                self.execute(s, asks);
            }
        }
    }

    /// A regenerated message must equal the one that left before under the same channel
    /// and index: a survivor may have delivered that one.
    fn check_same_as_left(&mut self, channel: ChannelId, index: u64, hash: u64) {
        match self.left.get(&(channel, index)) {
            Some(&h) if h != hash => self.fail(format!(
                "orphan: {channel:?}#{index} was regenerated with other contents than the \
                 message that left its set before"
            )),
            Some(_) => {}
            None => {
                self.left.insert((channel, index), hash);
            }
        }
    }

    fn push(&mut self, from: u16, to: u16, packet: Packet) {
        if let Frame::Message { meta, payload } = &packet {
            self.check_same_as_left(meta.channel, meta.send_index, payload_hash(payload));
        }
        match lazarus::wire::encode(&packet) {
            Ok(bytes) => {
                let l = self.link(from, to);
                let epoch = (
                    self.nodes[usize::from(from)].incarnation,
                    self.nodes[usize::from(to)].incarnation,
                );
                if self.links[l].back().is_none_or(|c| c.epoch != epoch) {
                    self.links[l].push_back(Conn {
                        epoch,
                        packets: VecDeque::new(),
                    });
                }
                if let Some(c) = self.links[l].back_mut() {
                    c.packets.push_back(bytes);
                }
            }
            Err(e) => self.fail(format!("packet does not encode: {e}")),
        }
    }

    fn execute(&mut self, s: u16, actions: Vec<Action<Vec<u8>>>) {
        for a in actions {
            match a {
                Action::Send { to, meta, payload } => {
                    self.note(|| {
                        format!("S{s} resend {:?}#{} to {to}", meta.channel, meta.send_index)
                    });
                    self.send_behind_held(s, to.0, Frame::Message { meta, payload });
                }
                Action::SendDumped { to, meta, at } => {
                    // From the first logger that has the block, as the runtime fetches.
                    let found = at.locations().enumerate().find_map(|(k, l)| {
                        let block = self.logger.get(&(l, s, at.block))?;
                        Some((k, block.get(at.slot as usize)?.clone()))
                    });
                    if found.as_ref().is_some_and(|(k, _)| *k > 0) {
                        self.stats.resends_from_copy += 1;
                    }
                    let payload = found.map(|(_, p)| p);
                    let Some(payload) = payload else {
                        // Released at the loggers since the checkpoint this set restored
                        // (a stale ROLLBACK of a peer's older incarnation asks for what
                        // the peer's newer checkpoint covers): skipped, as the runtime
                        // does. If the peer did need it, its recovery never completes and
                        // the run fails at quiescence.
                        self.stats.resends_missing += 1;
                        self.note(|| {
                            format!(
                                "S{s} cannot resend {:?}#{} to {to}: block {:?} is gone",
                                meta.channel, meta.send_index, at.block
                            )
                        });
                        continue;
                    };
                    self.stats.resends_from_logger += 1;
                    self.note(|| {
                        format!(
                            "S{s} resend {:?}#{} to {to} from the logger",
                            meta.channel, meta.send_index
                        )
                    });
                    self.send_behind_held(s, to.0, Frame::Message { meta, payload });
                }
                Action::Control { to, message } => {
                    self.send_behind_held(s, to.0, Frame::Control(message))
                }
            }
        }
    }

    fn checkpoint(&mut self, s: u16) {
        let node = &mut self.nodes[usize::from(s)];
        let image = match node
            .rec
            .checkpoint(|id| clock_of(&self.prog, &node.actors, id))
        {
            Ok(image) => image,
            Err(CheckpointRefused::NotReady) => return,
            Err(e) => return self.fail(format!("S{s} checkpoint refused: {e}")),
        };
        let snap = image.protocol;
        node.checkpoint_wanted = false;
        let id = snap.id;
        let snapshot = match lazarus::wire::encode(&snap) {
            Ok(b) => b,
            Err(e) => return self.fail(format!("snapshot does not encode: {e}")),
        };
        // An actor whose handler is suspended goes in with the state the handler started
        // from, and the handler's record.
        let actors = node
            .actors
            .iter()
            .zip(&node.suspended)
            .map(|(st, record)| match record.as_ref().map(|r| &r.before) {
                Some(_) if self.cfg.mutation == Some(Mutation::ReexecuteFromLiveState) => {
                    st.clone()
                }
                Some(Kept::State(before)) => (**before).clone(),
                _ => st.clone(),
            })
            .collect();
        let kept = node.suspended.iter().filter(|r| r.is_some()).count() as u64;
        self.stats.suspended_checkpointed += kept;
        node.pending = Some(Stored {
            id,
            snapshot,
            actors,
            suspended: node.suspended.clone(),
            intra: node.intra.clone(),
            intra_sent: node.intra_sent.clone(),
            events: image.events,
            mailbox: node.mailbox.clone(),
            timers: node
                .timers
                .iter()
                .map(|t| {
                    let Ok(image) = t.image(self.stats.steps, |&v| Ok::<_, Infallible>(v));
                    image
                })
                .collect(),
            loggers: node.known_loggers,
        });
        self.note(|| {
            format!(
                "S{s} checkpoint {id:?} taken ({} log entries)",
                snap.log_entries()
            )
        });
    }

    fn commit(&mut self, s: u16) {
        let node = &mut self.nodes[usize::from(s)];
        if node.rec.protocol().is_none() {
            return;
        }
        let Some(stored) = node.pending.take() else {
            return;
        };
        let id = stored.id;
        let events = stored.events;
        node.committed = stored;
        self.stats.checkpoints += 1;
        match node.rec.handle_checkpoint_committed(id, events) {
            Ok(actions) => {
                self.note(|| format!("S{s} checkpoint {id:?} committed"));
                self.execute(s, actions);
                self.transmit(s);
            }
            Err(e) => self.fail(format!("S{s} commit {id:?}: {e}")),
        }
    }

    fn restart(&mut self, s: u16) {
        let config = self.cfg.node_config();
        let node = &mut self.nodes[usize::from(s)];
        node.incarnation += 1;
        let snap: Snapshot<Vec<u8>> = match lazarus::wire::decode(&node.committed.snapshot) {
            Ok(x) => x,
            Err(e) => return self.fail(format!("snapshot does not decode: {e}")),
        };
        let image = NodeImage {
            protocol: snap,
            events: node.committed.events,
        };
        // The same restore as the runtime's: protocol and event logging back from the
        // image, ROLLBACKs to send, determinant fetches queued.
        let mut actions = match node
            .rec
            .restore(image, Incarnation(node.incarnation), config)
        {
            Ok(actions) => actions,
            Err(e) => return self.fail(format!("S{s} restore: {e}")),
        };
        if let (Some(parts), Some(events)) = (self.cfg.event_parts, node.rec.events_mut()) {
            events.set_message_limit(parts);
        }
        // Every logger keeps the blocks the log points into at any logger (one relocated
        // after the checkpoint is where the image does not say), as the runtime asks.
        let keep: BTreeSet<BlockId> = node
            .rec
            .protocol()
            .map(|p| p.dumped_blocks().into_iter().map(|(_, b)| b).collect())
            .unwrap_or_default();
        self.logger
            .retain(|(_, set, b), _| *set != s || keep.contains(b));
        let lacks: BTreeMap<u16, BTreeSet<BlockId>> = (0..LOGGERS as u16)
            .map(|l| {
                let lacked = keep
                    .iter()
                    .filter(|&&b| !self.logger.contains_key(&(l, s, b)));
                (l, lacked.copied().collect())
            })
            .collect();
        let node = &mut self.nodes[usize::from(s)];
        let Some(proto) = node.rec.protocol_mut() else {
            return self.fail(format!("S{s} restored without a protocol"));
        };
        let located = proto.locate_restored_blocks(&lacks, LOGGERS as u16);
        // Blocks missing at the process the image knew were released since the
        // checkpoint; at another process, lost with its restart.
        let image_knew = node.committed.loggers;
        let missing = located
            .into_iter()
            .filter(|&(l, _)| image_knew[usize::from(l)] != self.logger_instances[usize::from(l)]);
        for (l, blocks) in missing {
            let asks = proto.on_blocks_lost(l, &blocks);
            self.stats.lost_block_requests += asks.len() as u64;
            actions.extend(asks);
        }
        // The new incarnation's client connects to the current processes.
        node.known_loggers = self.logger_instances;
        // A new incarnation learns of the restart from the logger, not as a change.
        if let Some((_, Some(unaware))) = &mut self.logger_restart {
            unaware.remove(&s);
        }
        let node = &mut self.nodes[usize::from(s)];
        node.actors = node.committed.actors.clone();
        // A restored actor's state depends only on determinants its checkpoint holds.
        node.deps = vec![Dependence::Below(0); node.actors.len()];
        node.intra = node.committed.intra.clone();
        node.intra_sent = node.committed.intra_sent.clone();
        node.mailbox = node.committed.mailbox.clone();
        // Pending timers are armed again, each due its delay left.
        node.timers = node
            .committed
            .timers
            .iter()
            .map(|image| {
                let mut t = Timers::default();
                let Ok(_) = t.restore(image, self.stats.steps, |&v| Ok::<_, Infallible>(v));
                t
            })
            .collect();
        node.suspended = node.committed.suspended.clone();
        let inc = node.incarnation;
        let ckpt = node.committed.id;
        self.note(|| format!("RESTART S{s} incarnation {inc} from {ckpt:?}"));
        for local in 0..self.nodes[usize::from(s)].actors.len() {
            self.reexecute(s, local);
        }
        // As the runtime: the determinant fetches, then the ROLLBACKs behind them.
        self.execute(s, actions);
        self.transmit(s);
        // Sometimes another failure hits while this recovery is under way.
        if self.rng.chance(1, 3) {
            let at = self.stats.steps + self.rng.range(1, 40);
            self.crash_soon.push(at);
        }
    }

    /// Re-executes local actor `local`'s suspended handler from its record, as the
    /// runtime does on restore: its message, then each recorded result in order, from the
    /// state it started from; the effects the checkpoint holds are skipped, the values it
    /// read are read back, nothing is admitted or recorded again.
    fn reexecute(&mut self, s: u16, local: usize) {
        let node = &mut self.nodes[usize::from(s)];
        let Some(record) = node.suspended[local].take() else {
            return;
        };
        // Positions back at the start, as a record read from a checkpoint.
        let mut record = record.rewound();
        let b = self.prog.members[usize::from(s)][local];
        let Kept::Message {
            from,
            index,
            payload,
        } = record.message.clone()
        else {
            return self.fail(format!("S{s}: actor {b}'s record holds no message"));
        };
        let mut steps = vec![(from, index, payload)];
        while let Some((_, kept)) = record.next_replayed() {
            match kept {
                Kept::Message {
                    from,
                    index,
                    payload,
                } => steps.push((*from, *index, payload.clone())),
                Kept::State(_) => return self.fail(format!("S{s}: a result of {b} is a state")),
            }
        }
        self.stats.reexecuted += 1;
        self.stats.results_replayed += steps.len() as u64 - 1;
        self.nodes[usize::from(s)].suspended[local] = Some(record);
        self.handling_untrusted = false;
        for (from, index, payload) in steps {
            if self.prog.sensitive[b] {
                // The event clock moves as it did; the delivery is not admitted again.
                self.nodes[usize::from(s)].actors[local].clock += 1;
            }
            let out = self.run_actor(s, b, |prog, st, draw| {
                prog.handle(b, st, from, index, &payload, false, draw)
            });
            let out = self.effects_of_call(s, b, out);
            self.note(|| format!("S{s} re-executes {b}: {from}->{b}#{index}"));
            self.apply(s, b, out);
        }
        let node = &self.nodes[usize::from(s)];
        let what = match &node.suspended[local] {
            None => Some("completed a call its record left suspended".to_string()),
            Some(r) => r.check_replayed().err().map(|e| e.to_string()),
        };
        if let Some(what) = what {
            self.fail(format!("S{s}: actor {b}'s re-execution {what}"));
        }
    }

    fn check_quiescent_state(&mut self, expected: Option<&[ActorState]>) {
        for s in 0..self.cfg.sets {
            let node = &self.nodes[usize::from(s)];
            let Some(p) = node.rec.protocol() else {
                return self.fail(format!("S{s} is down at quiescence"));
            };
            if p.is_recovering() {
                let waiting: Vec<SetId> = p.awaiting().collect();
                return self.fail(format!("S{s} still waits for answers from {waiting:?}"));
            }
            if node.rec.events().is_some_and(|e| e.is_fetching()) {
                return self.fail(format!("S{s} still waits for its determinants"));
            }
            if !node.rec.held_len() == 0 {
                return self.fail(format!(
                    "S{s} holds messages whose determinants never became stable"
                ));
            }
            if let Some((local, q)) = node.mailbox.iter().find(|(_, q)| !q.is_empty()) {
                let held: Vec<(usize, u64)> = q.iter().map(|(f, i, _)| (*f, *i)).collect();
                let st = &node.actors[*local];
                return self.fail(format!(
                    "S{s} holds messages its replay never asked for: actor {} holds \
                     (sender, index) {held:?}, at tick {}, receiving only from {:?}; the \
                     protocol holds {} (interval {}): {}",
                    self.prog.members[usize::from(s)][*local],
                    st.clock,
                    st.receive_only,
                    p.queued(),
                    p.interval(),
                    p.describe_waiting(8)
                ));
            }
            if p.queued() > 0 {
                return self.fail(format!(
                    "S{s} holds {} undeliverable messages ({} channels blocked on the \
                     dependency rule, interval {}): deadlock or lost message: {}",
                    p.queued(),
                    p.blocked(),
                    p.interval(),
                    p.describe_waiting(8)
                ));
            }
        }
        for s in 0..self.cfg.sets {
            let node = &self.nodes[usize::from(s)];
            for (i, &a) in self.prog.members[usize::from(s)].iter().enumerate() {
                let st = &node.actors[i];
                if let Some(v) = &st.violation {
                    return self.fail(format!("application saw: {v}"));
                }
                // What the actor believes of its timers is what its timers hold: every
                // one armed rang and was handled, or was cancelled.
                let timers = &node.timers[i];
                if timers.armed() != st.timers_armed
                    || !timers.live().is_empty()
                    || !st.timers_live.is_empty()
                {
                    return self.fail(format!(
                        "actor {a} of S{s} ended believing it armed {} timers, {:?} live; its \
                         timers say {} armed, {:?} live",
                        st.timers_armed,
                        st.timers_live,
                        timers.armed(),
                        timers.live()
                    ));
                }
                match expected {
                    Some(expected) if *st != expected[a] => {
                        return self.fail(format!(
                            "actor {a} of S{s} ended in another state than the failure-free \
                             run:\n  got      {st:?}\n  expected {:?}",
                            expected[a]
                        ));
                    }
                    Some(_) => {}
                    None if !self.prog.finished(a, st) => {
                        return self.fail(format!("actor {a} of S{s} did not finish: {st:?}"));
                    }
                    None => {}
                }
            }
        }
        if expected.is_none() {
            self.check_channels();
        }
    }

    /// Every channel's receiver saw exactly the sequence its sender's final state says it
    /// sent (count and hash chain).
    fn check_channels(&mut self) {
        let state = |w: &World, a: usize| -> ActorState {
            let s = usize::from(w.prog.set_of[a]);
            w.nodes[s].actors[w.local_of[a]].clone()
        };
        for a in 0..self.prog.actors() {
            let sender = state(self, a);
            for (k, &b) in self.prog.outputs[a].iter().enumerate() {
                let Some(pos) = self.prog.inputs[b].iter().position(|&x| x == a) else {
                    return self.fail(format!("channel {a}->{b} missing from the inputs"));
                };
                let got = state(self, b).received_on(pos);
                if sender.sent[k] != got {
                    return self.fail(format!(
                        "channel {a}->{b}: the sender's state says it sent {:?} (count, hash), \
                         the receiver delivered {got:?}",
                        sender.sent[k]
                    ));
                }
            }
        }
    }

    /// Every set checkpoints once more; once the CHECKPOINT_ADVANCEs are through, every
    /// log must be empty: nothing is kept that no one can need.
    fn final_checkpoints(&mut self) {
        for s in 0..self.cfg.sets {
            if let Some(stored) = self.nodes[usize::from(s)].pending.take() {
                // An older pending checkpoint is superseded by this one.
                drop(stored);
            }
            self.checkpoint(s);
            self.commit(s);
        }
        self.run_to_quiescence(false);
        for s in 0..self.cfg.sets {
            let node = &self.nodes[usize::from(s)];
            if let Some(p) = node.rec.protocol() {
                let l = p.log_stats();
                if l.entries != 0 {
                    return self.fail(format!(
                        "S{s} still logs {} messages ({} bytes) after every set checkpointed",
                        l.entries,
                        l.bytes()
                    ));
                }
            }
            if !node.rec.logger_store().is_empty() {
                return self.fail(format!(
                    "S{s} still keeps {} determinants of others after every set checkpointed",
                    node.rec.logger_store().len()
                ));
            }
        }
    }

    fn collect_stats(&mut self) {
        for node in &self.nodes {
            if let Some(ev) = node.rec.events() {
                self.stats.add_events(ev);
            }
            if let Some(p) = node.rec.protocol() {
                self.stats.proto.add(&p.stats());
                let l = p.log_stats();
                self.stats.peak_log_entries = self.stats.peak_log_entries.max(l.peak_entries);
                self.stats.peak_log_bytes = self.stats.peak_log_bytes.max(l.peak_bytes);
            }
        }
    }
}

/// Runs seed `seed` (with `cfg` as drawn from it, possibly adjusted): the program's oracle,
/// the failure-free reference run, and the run with crashes. Returns the crash run's
/// counters, or what went wrong, with the event trace when `trace` is set.
pub fn run_seed(cfg: SimConfig, trace: bool) -> (Result<SimStats, String>, Vec<String>) {
    let prog = program_of(&cfg);
    let oracle = (!cfg.order_sensitive && !cfg.awaiting).then(|| prog.oracle());
    let reference = World::new(cfg.without_crashes(), prog.clone(), trace);
    let (result, ref_trace) = reference.run_keeping_states(oracle.as_deref());
    let reference_states = match result {
        Ok((_, states)) => Some(states),
        Err(e) => return (Err(format!("failure-free run: {e}")), ref_trace),
    };
    // An awaiting service without order-sensitive servers has no oracle of its own: it
    // must end as its failure-free run did.
    let expected = match oracle {
        Some(o) => Some(o),
        None if cfg.awaiting && !cfg.order_sensitive => reference_states,
        None => None,
    };
    World::new(cfg, prog, trace).run(expected.as_deref())
}

/// The program seed `cfg.seed` runs.
fn program_of(cfg: &SimConfig) -> Program {
    let mut rng = Rng::new(cfg.seed ^ 0xA11CE);
    if cfg.awaiting {
        let ops = rng.range(2, 2 + u64::from(cfg.rounds) * 2);
        let max_actors = cfg.max_actors.max(2);
        return Program::awaiting(&mut rng, cfg.sets, max_actors, ops, cfg.order_sensitive);
    }
    if cfg.service {
        let ops = rng.range(2, 2 + u64::from(cfg.rounds) * 2);
        return Program::service(&mut rng, cfg.sets, cfg.max_actors.max(2), ops);
    }
    let mut prog = Program::random(
        &mut rng,
        cfg.sets,
        cfg.max_actors,
        cfg.max_degree,
        cfg.rounds,
    );
    if cfg.order_sensitive {
        prog.make_order_sensitive(&mut rng);
    }
    prog
}

/// Runs `cfg` (with [`SimConfig::break_contract`] set, typically) up to quiescence or the
/// first thing the simulator's own checks find wrong: the counters, and that finding.
pub fn run_counting(cfg: SimConfig) -> (SimStats, Option<String>) {
    let prog = program_of(&cfg);
    let mut world = World::new(cfg, prog, false);
    world.run_to_quiescence(true);
    world.collect_stats();
    (world.stats, world.failure.or(world.broken))
}

/// The event clock of actor `id` among a set's `actors`.
fn clock_of(prog: &Program, actors: &[ActorState], id: lazarus::ActorId) -> u64 {
    prog.actor(id)
        .and_then(|a| {
            let set = usize::from(prog.set_of[a]);
            let local = prog.members[set].iter().position(|&x| x == a)?;
            actors.get(local).map(|st| st.clock)
        })
        .unwrap_or(0)
}

fn payload_hash(payload: &[u8]) -> u64 {
    payload
        .iter()
        .fold(payload.len() as u64, |h, &b| mix(h ^ u64::from(b)))
}
