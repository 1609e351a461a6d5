//! One-sided windows under crashes: a seeded cluster of nodes that run an SPMD program of
//! puts, gets, accumulates and fetch-and-ops in fenced epochs on the real
//! [`Member`] machine and gate words, with checkpoints copied a piece at a time,
//! same-host origins writing into targets' parts themselves, and crashes at any step.
//!
//! The program, per node and epoch, issues (from its state, which folds in everything it
//! read, so a wrong value changes everything after it):
//! - a put of `W` elements to every other node, into the slot of the epoch's parity that
//!   belongs to this origin (no two origins write one element in one epoch);
//! - gets of a slot of the other parity (written in the previous epoch, not in this one);
//! - in epochs `e % 3 != 2`, accumulates (sums) into the accumulate region of random
//!   nodes, and fetch-and-ops there whose answers are only checked for stability;
//! - in epochs `e % 3 == 2`, gets of the accumulate region (nobody accumulates then).
//!
//! - in epochs after the first, a get of its own slot of the other parity (what its peers
//!   put into it in the previous epoch), and in epochs `e % 3 == 2` of its own accumulate
//!   region: a node reads its own part through gets, which a restarted `main` can ask
//!   again.
//!
//! After each fence it folds the answers of its gets (by index). That is the contract of
//! docs/semantics.md, so every interleaving gives the same parts, states and answers: the
//! run's result is compared with a failure-free run of the same seed.
//!
//! The program is either an actor, whose state and position are in its node's image, or
//! the node's `main` ([`WindowSimConfig::main_reruns`]), which is in no image: after a
//! restart it runs again from its start, its operations and fences numbered again.
//!
//! Checkpoints close the node's gate, wait until it is drained, copy the part in pieces
//! over several steps, take the origins' records, and reopen; a crash loses the node's
//! memory, its frames in flight and its records, and leaves its half-done direct put in
//! its target's part and its inside counter raised until the target hears of the death.
//! [`WindowMutation`] removes one rule to show that a sweep fails without it.

use crate::rng::{mix, Rng};
use lazarus_proto::actor_id::ActorId;
use lazarus_proto::window::{
    drained, Closed, ElementType, GateWord, MainFence, Member, MemberImage, Op, OpKind, OpMeta,
    ReduceOp, Reply, Shape, WindowFrame, WindowId,
};
use std::collections::{BTreeMap, VecDeque};

/// Elements per put slot.
const W: u64 = 2;
/// Elements of the accumulate region.
const A: u64 = 4;

/// A rule taken out, to show the sweep catches its absence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowMutation {
    /// Origins do not look at the gate's closed bit: they write while a checkpoint copies
    /// the part (the paper's remedy removed).
    IgnoreCheckpointGate,
    /// Origins write into a target of another epoch (the fence's delay removed).
    IgnoreEpochGate,
    /// Targets drop `main`'s answers once its origin's checkpoint has issued past them,
    /// like an actor's: a restarted `main`, which runs from its start, asks in vain.
    ReleaseMainAnswers,
}

/// One run's shape.
#[derive(Clone, Debug)]
pub struct WindowSimConfig {
    /// The seed of everything.
    pub seed: u64,
    /// Member nodes.
    pub nodes: u16,
    /// The host of each node: nodes of one host go direct.
    pub hosts: Vec<u16>,
    /// Epochs (fences) of the program.
    pub epochs: u64,
    /// Gets per node and epoch.
    pub gets: u64,
    /// Accumulates per node and epoch (in epochs that have them).
    pub accumulates: u64,
    /// Percent chance per step that a node with no checkpoint in progress starts one.
    pub checkpoint_percent: u64,
    /// Crashes in the run.
    pub crashes: u64,
    /// A rule taken out.
    pub mutation: Option<WindowMutation>,
    /// The program is the node's `main`, which a restart runs again from its start;
    /// otherwise an actor, restored with its image.
    pub main_reruns: bool,
}

impl WindowSimConfig {
    /// A random shape for `seed`: 2 to 4 nodes on one or two hosts, up to two crashes.
    pub fn random(seed: u64) -> Self {
        let mut rng = Rng::new(mix(seed ^ 0x77_1D_0F));
        let nodes = rng.range(2, 4) as u16;
        let two_hosts = rng.chance(1, 3);
        let hosts = (0..nodes)
            .map(|n| if two_hosts { n % 2 } else { 0 })
            .collect();
        WindowSimConfig {
            seed,
            nodes,
            hosts,
            epochs: rng.range(4, 9),
            gets: rng.range(1, 3),
            accumulates: rng.range(1, 3),
            checkpoint_percent: rng.range(1, 6),
            crashes: rng.range(0, 2),
            mutation: None,
            main_reruns: rng.chance(1, 2),
        }
    }
}

/// What a run did, summed over a sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowSimStats {
    /// Runs.
    pub runs: u64,
    /// Operations applied by their origins in the targets' memory.
    pub direct: u64,
    /// Operations sent over the message path.
    pub messages: u64,
    /// Direct attempts the gate sent to the message path because a checkpoint was
    /// copying the part.
    pub refused_checkpointing: u64,
    /// Direct attempts the gate sent to the message path because of the target's epoch.
    pub refused_epoch: u64,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Crashes.
    pub crashes: u64,
    /// Re-executed gets answered from a target's log.
    pub answers_from_log: u64,
    /// Operations held at a target for a later epoch.
    pub held: u64,
    /// Operations a restarted `main` issued again that its image had issued.
    pub replayed: u64,
}

impl WindowSimStats {
    /// Adds another run's counts.
    pub fn absorb(&mut self, o: &WindowSimStats) {
        self.runs += o.runs;
        self.direct += o.direct;
        self.messages += o.messages;
        self.refused_checkpointing += o.refused_checkpointing;
        self.refused_epoch += o.refused_epoch;
        self.checkpoints += o.checkpoints;
        self.crashes += o.crashes;
        self.answers_from_log += o.answers_from_log;
        self.held += o.held;
        self.replayed += o.replayed;
    }
}

/// A node's program state: what it has folded in, and where it is.
#[derive(Clone, Debug, PartialEq)]
struct App {
    /// Epochs completed.
    epoch: u64,
    /// Operations of the current epoch issued.
    cursor: usize,
    /// The fold of everything it read.
    state: u64,
    /// It called the fence of its epoch.
    fenced: bool,
    /// Answers of the current epoch's operations, by (target, origin, index).
    answers: BTreeMap<(u16, ActorId, u64), Vec<u8>>,
    /// Which of them are fetch-and-ops (their answers depend on arrival order: checked
    /// for stability, not folded).
    fetches: Vec<(u16, ActorId, u64)>,
    /// The operations of the epoch that answer.
    asked: Vec<(u16, ActorId, u64)>,
    /// A restarted `main` called a fence its node had completed: it returns once the
    /// epoch's answers are in.
    fence_done_before: bool,
}

impl App {
    fn start() -> App {
        App {
            epoch: 0,
            cursor: 0,
            state: 1,
            fenced: false,
            answers: BTreeMap::new(),
            fetches: Vec::new(),
            asked: Vec::new(),
            fence_done_before: false,
        }
    }
}

/// A record an origin leaves in the target's memory after a direct operation.
#[derive(Clone, Debug)]
struct Record {
    from: u16,
    meta: OpMeta,
    kind: OpKind,
    answer: Option<Vec<u8>>,
}

/// A direct operation in progress at its origin, one step at a time.
#[derive(Clone, Debug)]
struct Direct {
    target: u16,
    /// The target's incarnation it started on: a dead target's memory takes nothing.
    target_life: u64,
    meta: OpMeta,
    op: Op,
    stage: Stage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Raise the origin's inside counter at the target.
    Raise,
    /// Read the gate word.
    Check,
    /// Write (or read) the first half.
    First,
    /// Write the second half and leave the record.
    Second,
    /// Lower the counter.
    Lower,
}

/// A checkpoint in progress.
#[derive(Clone, Debug)]
struct Copying {
    /// Pieces copied so far.
    copy: Vec<u8>,
    /// Bytes copied.
    done: usize,
}

#[derive(Clone, Debug)]
struct Saved {
    image: MemberImage,
    part: Vec<u8>,
    app: App,
    /// The last index the program had issued per target (for the mutation).
    issued: BTreeMap<u16, u64>,
}

struct Node {
    alive: bool,
    life: u64,
    member: Member,
    part: Vec<u8>,
    gate: GateWord,
    inside: Vec<u64>,
    records: VecDeque<Record>,
    app: App,
    direct: Option<Direct>,
    copying: Option<Copying>,
    uncommitted: Option<Saved>,
    committed: Saved,
    restart_at: Option<u64>,
    /// The last index the program issued per target.
    issued: BTreeMap<u16, u64>,
}

/// The final outcome of a run: every part, every state, every get answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    parts: Vec<Vec<u8>>,
    states: Vec<u64>,
    answers: BTreeMap<(u16, ActorId, u64), Vec<u8>>,
}

struct World {
    cfg: WindowSimConfig,
    shape: Shape,
    rng: Rng,
    step: u64,
    nodes: Vec<Node>,
    queues: BTreeMap<(u16, u16), VecDeque<WindowFrame>>,
    crashes_left: u64,
    /// The memory (part, gate word) of each node's earlier incarnations: origins that
    /// mapped it before the restart still read and write it.
    graveyard: BTreeMap<(u16, u64), (Vec<u8>, GateWord)>,
    /// First answer delivered per get (any incarnation): a later one must be the same.
    answers: BTreeMap<(u16, ActorId, u64), Vec<u8>>,
    /// First answer delivered per fetch-and-op, with its target's incarnation: a
    /// re-execution answered by the same incarnation must get the same (after both the
    /// origin and the target fail, the order of fetch-and-ops may change: see
    /// docs/semantics.md).
    fetched: BTreeMap<(u16, ActorId, u64), (u64, Vec<u8>)>,
    /// The incarnation of the target that answered each operation last.
    answered_by: BTreeMap<(u16, ActorId, u64), u64>,
    stats: WindowSimStats,
    trace: Option<Vec<String>>,
}

/// The program's actor on node `rank`: `main`, or an actor in the node's image.
fn actor(cfg: &WindowSimConfig, rank: u16) -> Option<ActorId> {
    if cfg.main_reruns {
        Some(ActorId::main_of(rank))
    } else {
        ActorId::new(rank, 1)
    }
}

fn le(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
}

/// The element where origin `origin`'s slot of parity `parity` starts.
fn slot(nodes: u16, parity: u64, origin: u16) -> u64 {
    parity * u64::from(nodes) * W + u64::from(origin) * W
}

/// The first element of the accumulate region.
fn acc_base(nodes: u16) -> u64 {
    2 * u64::from(nodes) * W
}

/// The operations node `rank` issues in `epoch` from `state`, as (target, op).
fn program(cfg: &WindowSimConfig, rank: u16, epoch: u64, state: u64) -> Vec<(u16, Op)> {
    let n = cfg.nodes;
    let mut rng = Rng::new(mix(cfg.seed ^ mix(state ^ (epoch << 16) ^ u64::from(rank))));
    let mut ops = Vec::new();
    let parity = epoch % 2;
    for target in (0..n).filter(|&t| t != rank) {
        let values: Vec<u64> = (0..W).map(|k| mix(state ^ k ^ u64::from(target))).collect();
        ops.push((
            target,
            Op {
                kind: OpKind::Put,
                elem: ElementType::U64,
                offset: slot(n, parity, rank),
                count: W,
                operand: le(&values),
            },
        ));
    }
    let quiet = epoch % 3 == 2;
    let get = |offset, count| Op {
        kind: OpKind::Get,
        elem: ElementType::U64,
        offset,
        count,
        operand: Vec::new(),
    };
    if epoch > 0 {
        // What the peers put into its own part in the previous epoch.
        ops.push((rank, get(slot(n, 1 - parity, 0), u64::from(n) * W)));
    }
    if quiet {
        ops.push((rank, get(acc_base(n), A)));
    }
    for _ in 0..cfg.gets {
        let target = rng.below(u64::from(n)) as u16;
        let (offset, count) = if quiet {
            (acc_base(n), A)
        } else {
            let from = rng.below(u64::from(n)) as u16;
            (slot(n, 1 - parity, from), W)
        };
        ops.push((
            target,
            Op {
                kind: OpKind::Get,
                elem: ElementType::U64,
                offset,
                count,
                operand: Vec::new(),
            },
        ));
    }
    if !quiet {
        for k in 0..cfg.accumulates {
            let target = rng.below(u64::from(n)) as u16;
            let at = acc_base(n) + rng.below(A);
            let kind = if k == 1 {
                OpKind::FetchAndOp(ReduceOp::Sum)
            } else {
                OpKind::Accumulate(ReduceOp::Sum)
            };
            ops.push((
                target,
                Op {
                    kind,
                    elem: ElementType::U64,
                    offset: at,
                    count: 1,
                    operand: le(&[state % 1000 + 1]),
                },
            ));
        }
    }
    // The order of issue is part of the program too.
    let len = ops.len();
    for i in (1..len).rev() {
        ops.swap(i, rng.below(i as u64 + 1) as usize);
    }
    ops
}

impl World {
    fn new(cfg: WindowSimConfig, trace: bool) -> World {
        let n = cfg.nodes;
        let len = acc_base(n) + A;
        let shape = Shape {
            window: WindowId(0),
            elem: ElementType::U64,
            lens: vec![len; usize::from(n)],
        };
        let app = App::start();
        let nodes = (0..n)
            .map(|rank| {
                let member = Member::new(shape.clone(), rank).expect("a member of its window");
                let part = vec![0; len as usize * 8];
                let committed = Saved {
                    image: member.image(),
                    part: part.clone(),
                    app: app.clone(),
                    issued: BTreeMap::new(),
                };
                Node {
                    alive: true,
                    life: 0,
                    member,
                    part,
                    gate: GateWord::open_at(0).expect("epoch 0"),
                    inside: vec![0; usize::from(n)],
                    records: VecDeque::new(),
                    app: app.clone(),
                    direct: None,
                    copying: None,
                    uncommitted: None,
                    committed,
                    restart_at: None,
                    issued: BTreeMap::new(),
                }
            })
            .collect();
        World {
            rng: Rng::new(cfg.seed),
            crashes_left: cfg.crashes,
            cfg,
            shape,
            step: 0,
            nodes,
            queues: BTreeMap::new(),
            graveyard: BTreeMap::new(),
            answers: BTreeMap::new(),
            fetched: BTreeMap::new(),
            answered_by: BTreeMap::new(),
            stats: WindowSimStats {
                runs: 1,
                ..WindowSimStats::default()
            },
            trace: trace.then(Vec::new),
        }
    }

    fn log(&mut self, line: impl FnOnce() -> String) {
        if let Some(t) = &mut self.trace {
            t.push(format!("{:>6} {}", self.step, line()));
        }
    }

    fn collect(&mut self, rank: u16) {
        while let Some(t) = self.nodes[usize::from(rank)].member.poll_transmit() {
            if t.to == rank {
                // An answer to one of the node's own actors.
                if let WindowFrame::Answer {
                    origin,
                    index,
                    values,
                } = t.frame
                {
                    let node = &mut self.nodes[usize::from(rank)];
                    if node
                        .member
                        .handle_answer(rank, origin, index, &values)
                        .unwrap_or(false)
                    {
                        node.app.answers.insert((rank, origin, index), values);
                    }
                }
                continue;
            }
            // A frame for a dead node is lost (the transport drops it with the
            // connection); its next incarnation gets what it needs from the restart.
            if !self.nodes[usize::from(t.to)].alive {
                continue;
            }
            self.queues
                .entry((rank, t.to))
                .or_default()
                .push_back(t.frame);
        }
    }

    fn finished(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.alive && n.app.epoch == self.cfg.epochs && n.copying.is_none())
            && self.queues.values().all(VecDeque::is_empty)
            && self.nodes.iter().all(|n| n.records.is_empty())
    }

    /// Runs to the end; the outcome, or why the run failed.
    fn run(&mut self) -> Result<Outcome, String> {
        let limit = 200_000;
        while !self.finished() {
            self.step += 1;
            if self.step > limit {
                return Err(format!("no end after {limit} steps: {}", self.waiting()));
            }
            let progressed = self.one_step()?;
            if !progressed && self.nodes.iter().all(|n| n.alive) && !self.anything_enabled() {
                return Err(format!("stuck: {}", self.waiting()));
            }
        }
        for rank in 0..self.cfg.nodes {
            let node = &self.nodes[usize::from(rank)];
            let stats = node.member.stats();
            self.stats.answers_from_log += stats.answered_again;
            if stats.held != 0 {
                return Err(format!(
                    "node {rank} ends with {} held operations",
                    stats.held
                ));
            }
        }
        Ok(Outcome {
            parts: self.nodes.iter().map(|n| n.part.clone()).collect(),
            states: self.nodes.iter().map(|n| n.app.state).collect(),
            answers: self.answers.clone(),
        })
    }

    fn waiting(&self) -> String {
        let mut out = String::new();
        for (r, n) in self.nodes.iter().enumerate() {
            out.push_str(&format!(
                "[node {r} alive={} epoch={} member_epoch={} fenced={} cursor={} direct={:?} copying={} awaiting={:?} inside={:?} gate={:?}] ",
                n.alive,
                n.app.epoch,
                n.member.epoch(),
                n.app.fenced,
                n.app.cursor,
                n.direct.as_ref().map(|d| (d.target, d.stage)),
                n.copying.is_some(),
                n.member.awaiting(),
                n.inside,
                (n.gate.epoch(), n.gate.is_closed()),
            ));
        }
        out
    }

    fn anything_enabled(&self) -> bool {
        self.queues.values().any(|q| !q.is_empty())
            || self.nodes.iter().any(|n| {
                !n.records.is_empty()
                    || n.direct.is_some()
                    || n.copying.is_some()
                    || n.uncommitted.is_some()
                    || (n.app.epoch < self.cfg.epochs && !n.app.fenced)
                    || n.app.fence_done_before
                    || n.member.fence_ready()
            })
    }

    /// One scheduling decision. Returns whether anything happened.
    fn one_step(&mut self) -> Result<bool, String> {
        let n = self.cfg.nodes;
        // Restarts that are due.
        for rank in 0..n {
            if self.nodes[usize::from(rank)]
                .restart_at
                .is_some_and(|at| at <= self.step)
            {
                self.restart(rank)?;
                return Ok(true);
            }
        }
        let pick = self.rng.below(100);
        if pick < 1 && self.crashes_left > 0 && !self.finished_apps() {
            let victim = self.rng.below(u64::from(n)) as u16;
            if self.nodes[usize::from(victim)].alive {
                self.crash(victim);
                return Ok(true);
            }
        }
        let rank = self.rng.below(u64::from(n)) as u16;
        if !self.nodes[usize::from(rank)].alive {
            return Ok(false);
        }
        let choice = self.rng.below(100);
        if choice < self.cfg.checkpoint_percent {
            return self.checkpoint_step(rank);
        }
        if choice < 40 {
            return self.deliver_to(rank);
        }
        if choice < 55 {
            return self.network_step(rank);
        }
        if self.nodes[usize::from(rank)].copying.is_some() {
            return self.checkpoint_step(rank);
        }
        self.app_step(rank)
    }

    fn finished_apps(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| n.alive && n.app.epoch == self.cfg.epochs)
    }

    /// The node's network thread: one frame from some peer.
    fn deliver_to(&mut self, rank: u16) -> Result<bool, String> {
        if self.nodes[usize::from(rank)].copying.is_some() {
            // A node copying its image applies nothing (the window's lock).
            return Ok(false);
        }
        let froms: Vec<u16> = (0..self.cfg.nodes)
            .filter(|&f| self.queues.get(&(f, rank)).is_some_and(|q| !q.is_empty()))
            .collect();
        if froms.is_empty() {
            return self.network_step(rank);
        }
        let from = froms[self.rng.below(froms.len() as u64) as usize];
        let frame = self
            .queues
            .get_mut(&(from, rank))
            .and_then(VecDeque::pop_front)
            .ok_or("a queue emptied under the scheduler")?;
        self.log(|| format!("{from}->{rank} {frame:?}"));
        let node = &mut self.nodes[usize::from(rank)];
        let before = node.member.stats();
        let is_op = matches!(frame, WindowFrame::Op { .. });
        let got = node
            .member
            .handle_frame(from, frame, &mut node.part)
            .map_err(|e| format!("node {rank} refused a frame from {from}: {e}"))?;
        let after = node.member.stats();
        if is_op && after.held > before.held {
            self.stats.held += 1;
        }
        if let Some((origin, index, values)) = got {
            node.app.answers.insert((from, origin, index), values);
            let life = self.nodes[usize::from(from)].life;
            self.answered_by.insert((from, origin, index), life);
        }
        self.collect(rank);
        self.network_step(rank)?;
        Ok(true)
    }

    /// The node's network thread: records of direct operations, and the fence.
    fn network_step(&mut self, rank: u16) -> Result<bool, String> {
        let node = &mut self.nodes[usize::from(rank)];
        if node.copying.is_some() {
            return Ok(false);
        }
        let mut progressed = false;
        while let Some(r) = node.records.pop_front() {
            node.member
                .handle_direct(r.from, r.meta, r.kind, r.answer)
                .map_err(|e| format!("node {rank} refused a direct record: {e}"))?;
            progressed = true;
        }
        if let Some(epoch) = node
            .member
            .poll_fence(&mut node.part)
            .map_err(|e| format!("node {rank}'s fence: {e}"))?
        {
            node.gate = node.gate.advance().ok_or("epoch overflow")?;
            self.collect(rank);
            // A restarted `main` that has not called this fence again (its image had)
            // finds it done when it does.
            let app = &self.nodes[usize::from(rank)].app;
            let called = app.fenced && !app.fence_done_before && app.epoch + 1 == epoch;
            if called || !self.cfg.main_reruns {
                self.fence_done(rank, epoch)?;
            }
            progressed = true;
        }
        self.collect(rank);
        Ok(progressed)
    }

    /// The node's fence completed: it folds what the epoch gave it.
    fn fence_done(&mut self, rank: u16, epoch: u64) -> Result<(), String> {
        let lives: Vec<u64> = self.nodes.iter().map(|n| n.life).collect();
        let node = &mut self.nodes[usize::from(rank)];
        let closed = epoch - 1;
        let app = &mut node.app;
        if app.epoch != closed || !app.fenced {
            return Err(format!(
                "node {rank}'s fence completed epoch {closed}, its program is at {} (fenced {})",
                app.epoch, app.fenced
            ));
        }
        let mut state = app.state;
        let fetches = std::mem::take(&mut app.fetches);
        // The epoch's answers; one that came before its operation was issued again (a
        // restarted node's awaited answer, resent at once) waits for its epoch.
        let epoch_answers: Vec<_> = app
            .asked
            .iter()
            .filter_map(|k| app.answers.remove(k).map(|v| (*k, v)))
            .collect();
        for (key, values) in epoch_answers {
            let (target, origin, index) = key;
            let fetch = fetches.contains(&key);
            // The incarnation of the target that gave this answer.
            let target_life = self
                .answered_by
                .get(&key)
                .copied()
                .unwrap_or(lives[usize::from(target)]);
            let first = if fetch {
                let (life, first) = self
                    .fetched
                    .entry(key)
                    .or_insert((target_life, values.clone()));
                if *life != target_life {
                    continue;
                }
                first
            } else {
                self.answers.entry(key).or_insert(values.clone())
            };
            if *first != values {
                return Err(format!(
                    "operation {index} of {origin} on node {target} answered {:?}, before {:?}",
                    words(&values).collect::<Vec<_>>(),
                    words(first).collect::<Vec<_>>()
                ));
            }
            if !fetch {
                for v in words(&values) {
                    state = mix(state ^ v);
                }
                if let Some(t) = &mut self.trace {
                    t.push(format!(
                        "{:>6} node {rank} folds answer {index} of node {target}: {:?}",
                        self.step,
                        words(&values).collect::<Vec<_>>()
                    ));
                }
            }
        }
        app.state = state;
        app.epoch = epoch;
        if let Some(t) = &mut self.trace {
            t.push(format!(
                "{:>6} node {rank} folds epoch {closed}: state {state:#x}",
                self.step
            ));
        }
        app.cursor = 0;
        app.fenced = false;
        app.fence_done_before = false;
        app.asked.clear();
        Ok(())
    }

    /// The node's program: one operation, one step of a direct one, or its fence.
    fn app_step(&mut self, rank: u16) -> Result<bool, String> {
        if self.nodes[usize::from(rank)].direct.is_some() {
            return self.direct_step(rank);
        }
        let cfg = self.cfg.clone();
        let node = &mut self.nodes[usize::from(rank)];
        let app = &node.app;
        if app.fence_done_before && app.asked.iter().all(|k| app.answers.contains_key(k)) {
            let epoch = app.epoch + 1;
            self.log(|| {
                format!(
                    "node {rank}: main's fence of epoch {} done before",
                    epoch - 1
                )
            });
            self.fence_done(rank, epoch)?;
            return Ok(true);
        }
        if app.epoch >= cfg.epochs || app.fenced {
            return Ok(false);
        }
        let ops = program(&cfg, rank, app.epoch, app.state);
        if app.cursor == ops.len() {
            let fence = if cfg.main_reruns {
                node.member.main_fence()
            } else {
                MainFence::New
            };
            match fence {
                MainFence::New => node
                    .member
                    .fence()
                    .map_err(|e| format!("node {rank}'s fence: {e}"))?,
                MainFence::Resume => {}
                MainFence::Done => node.app.fence_done_before = true,
            }
            node.app.fenced = true;
            self.collect(rank);
            self.network_step(rank)?;
            return Ok(true);
        }
        let (target, op) = ops[app.cursor].clone();
        node.app.cursor += 1;
        let origin = actor(&cfg, rank).ok_or("no actor id")?;
        let issued = node
            .member
            .issue(origin, target, &op)
            .map_err(|e| format!("node {rank} issue: {e}"))?;
        self.log(|| format!("node {rank} issues {issued:?} to {target}: {op:?}"));
        let key = (target, issued.meta.origin, issued.meta.index);
        self.stats.replayed += u64::from(issued.replayed);
        let last = self.nodes[usize::from(rank)]
            .issued
            .entry(target)
            .or_insert(0);
        *last = (*last).max(issued.meta.index);
        if matches!(op.kind, OpKind::FetchAndOp(_)) {
            self.nodes[usize::from(rank)].app.fetches.push(key);
        }
        if op.kind.answers() {
            self.nodes[usize::from(rank)].app.asked.push(key);
        } else if issued.replayed {
            // Done before the image: applied, or in the image's log.
            return Ok(true);
        }
        if target == rank {
            let node = &mut self.nodes[usize::from(rank)];
            node.member
                .handle_op(rank, issued.meta, op, Reply::Answer, &mut node.part)
                .map_err(|e| format!("node {rank} on its own part: {e}"))?;
            self.collect(rank);
            return Ok(true);
        }
        let same_host = cfg.hosts[usize::from(rank)] == cfg.hosts[usize::from(target)];
        if same_host && issued.direct {
            let target_life = self.nodes[usize::from(target)].life;
            self.nodes[usize::from(rank)].direct = Some(Direct {
                target,
                target_life,
                meta: issued.meta,
                op,
                stage: Stage::Raise,
            });
            return self.direct_step(rank);
        }
        self.stats.messages += 1;
        let node = &mut self.nodes[usize::from(rank)];
        node.member.send_op(target, issued.meta, op);
        self.collect(rank);
        Ok(true)
    }

    /// One step of the node's direct operation in its target's memory: the memory of
    /// the incarnation it started on, which outlives a crash (its gate frozen) until the
    /// node restarts, and after that is the old mapping the origin still holds.
    fn direct_step(&mut self, rank: u16) -> Result<bool, String> {
        let Some(mut d) = self.nodes[usize::from(rank)].direct.take() else {
            return Ok(false);
        };
        let t = usize::from(d.target);
        let current = self.nodes[t].life == d.target_life;
        let mutation = self.cfg.mutation;
        match d.stage {
            Stage::Raise => {
                if current {
                    self.nodes[t].inside[usize::from(rank)] += 1;
                }
                d.stage = Stage::Check;
            }
            Stage::Check => {
                let gate = if current {
                    self.nodes[t].gate
                } else {
                    self.graveyard[&(d.target, d.target_life)].1
                };
                let verdict = match mutation {
                    Some(WindowMutation::IgnoreCheckpointGate) => {
                        gate.reopen().admits(d.meta.epoch)
                    }
                    Some(WindowMutation::IgnoreEpochGate) => gate.admits(gate.epoch()),
                    None | Some(WindowMutation::ReleaseMainAnswers) => gate.admits(d.meta.epoch),
                };
                if verdict.is_ok() {
                    d.stage = Stage::First;
                } else {
                    match verdict {
                        Err(Closed::Checkpointing) => self.stats.refused_checkpointing += 1,
                        _ => self.stats.refused_epoch += 1,
                    }
                    if current {
                        let c = &mut self.nodes[t].inside[usize::from(rank)];
                        *c = c.saturating_sub(1);
                    }
                    self.log(|| {
                        format!(
                            "node {rank}: gate of {} refused {:?}: {verdict:?}",
                            d.target, d.meta
                        )
                    });
                    self.stats.messages += 1;
                    let node = &mut self.nodes[usize::from(rank)];
                    node.member.send_op(d.target, d.meta, d.op);
                    self.collect(rank);
                    return Ok(true);
                }
            }
            Stage::First | Stage::Second => {
                let range =
                    d.op.check(&self.shape, d.target)
                        .map_err(|e| format!("a checked operation: {e}"))?;
                let half = (range.end - range.start) / 16 * 8;
                let first = d.stage == Stage::First;
                let (from, to) = if first {
                    (range.start, range.start + half)
                } else {
                    (range.start + half, range.end)
                };
                let memory = if current {
                    &mut self.nodes[t].part
                } else {
                    &mut self
                        .graveyard
                        .get_mut(&(d.target, d.target_life))
                        .ok_or("an old memory lost")?
                        .0
                };
                match d.op.kind {
                    OpKind::Put => {
                        let (a, b) = (from - range.start, to - range.start);
                        memory[from..to].copy_from_slice(&d.op.operand[a..b]);
                    }
                    OpKind::Get => {
                        // A get reads all at once, at its second step.
                        if !first {
                            d.op.operand = memory[range.clone()].to_vec();
                        }
                    }
                    _ => return Err(format!("{:?} went direct", d.op.kind)),
                }
                if first {
                    d.stage = Stage::Second;
                } else {
                    let answer = (d.op.kind == OpKind::Get).then(|| d.op.operand.clone());
                    if current {
                        self.nodes[t].records.push_back(Record {
                            from: rank,
                            meta: d.meta,
                            kind: d.op.kind,
                            answer: answer.clone(),
                        });
                    }
                    if let Some(values) = answer {
                        self.nodes[usize::from(rank)]
                            .app
                            .answers
                            .insert((d.target, d.meta.origin, d.meta.index), values);
                    }
                    d.stage = Stage::Lower;
                }
            }
            Stage::Lower => {
                if current {
                    let c = &mut self.nodes[t].inside[usize::from(rank)];
                    *c = c.saturating_sub(1);
                }
                self.stats.direct += 1;
                self.log(|| format!("node {rank}: direct {:?} to {} done", d.meta, d.target));
                return Ok(true);
            }
        }
        self.nodes[usize::from(rank)].direct = Some(d);
        Ok(true)
    }

    /// One step of the node's checkpoint, or its commit, or its start.
    fn checkpoint_step(&mut self, rank: u16) -> Result<bool, String> {
        let node = &mut self.nodes[usize::from(rank)];
        if let Some(saved) = node.uncommitted.take() {
            node.member.checkpoint_committed(&saved.image);
            if self.cfg.mutation == Some(WindowMutation::ReleaseMainAnswers) {
                if let Some(main) = actor(&self.cfg, rank).filter(|_| self.cfg.main_reruns) {
                    for (&target, &last) in saved.issued.iter().filter(|(t, _)| **t != rank) {
                        self.queues.entry((rank, target)).or_default().push_back(
                            WindowFrame::AnswersTaken {
                                answers: vec![(main, last)],
                            },
                        );
                    }
                }
            }
            let node = &mut self.nodes[usize::from(rank)];
            node.committed = saved;
            self.stats.checkpoints += 1;
            self.log(|| format!("node {rank}: checkpoint committed"));
            self.collect(rank);
            return Ok(true);
        }
        let part_len = node.part.len();
        match &mut node.copying {
            None => {
                // The node's cores stop between operations (a direct one is a call).
                if node.direct.is_some() {
                    return Ok(false);
                }
                node.gate = node.gate.close();
                node.copying = Some(Copying {
                    copy: Vec::with_capacity(part_len),
                    done: 0,
                });
                self.log(|| format!("node {rank}: checkpoint closes the gate"));
                Ok(true)
            }
            Some(c) => {
                let gate_respected =
                    self.cfg.mutation != Some(WindowMutation::IgnoreCheckpointGate);
                if c.done == 0 && gate_respected && !drained(&node.inside) {
                    return Ok(false);
                }
                if c.done < part_len {
                    let piece = (part_len / 3).max(8);
                    let end = (c.done + piece).min(part_len);
                    c.copy.extend_from_slice(&node.part[c.done..end]);
                    c.done = end;
                    return Ok(true);
                }
                let copy = std::mem::take(&mut c.copy);
                node.copying = None;
                while let Some(r) = node.records.pop_front() {
                    node.member
                        .handle_direct(r.from, r.meta, r.kind, r.answer)
                        .map_err(|e| format!("node {rank} refused a direct record: {e}"))?;
                }
                let saved = Saved {
                    image: node.member.image(),
                    part: copy,
                    app: node.app.clone(),
                    issued: node.issued.clone(),
                };
                node.uncommitted = Some(saved);
                node.gate = node.gate.reopen();
                self.log(|| format!("node {rank}: image taken, gate open"));
                Ok(true)
            }
        }
    }

    fn crash(&mut self, rank: u16) {
        self.crashes_left -= 1;
        self.stats.crashes += 1;
        let delay = self.rng.range(1, 300);
        self.log(|| format!("node {rank} CRASHES (restart in {delay})"));
        let r = usize::from(rank);
        let node = &mut self.nodes[r];
        self.stats.answers_from_log += node.member.stats().answered_again;
        node.alive = false;
        node.restart_at = Some(self.step + delay);
        node.copying = None;
        node.uncommitted = None;
        node.records.clear();
        // Its half-done direct operation stays half done in its target's memory.
        node.direct = None;
        self.queues
            .retain(|(from, to), _| *from != rank && *to != rank);
        // The survivors hear of the death: its counters at their gates are reset.
        for other in &mut self.nodes {
            other.inside[r] = 0;
        }
    }

    fn restart(&mut self, rank: u16) -> Result<(), String> {
        let r = usize::from(rank);
        let saved = self.nodes[r].committed.clone();
        let member = Member::restore(saved.image.clone())
            .map_err(|e| format!("node {rank} restore: {e}"))?;
        let node = &mut self.nodes[r];
        let old = (std::mem::take(&mut node.part), node.gate);
        self.graveyard.insert((rank, node.life), old);
        let node = &mut self.nodes[r];
        node.alive = true;
        node.life += 1;
        node.records.clear();
        node.restart_at = None;
        node.gate = GateWord::open_at(saved.image.epoch()).ok_or("epoch overflow")?;
        node.inside = vec![0; usize::from(self.cfg.nodes)];
        node.member = member;
        node.part = saved.part.clone();
        node.issued = saved.issued.clone();
        node.app = if self.cfg.main_reruns {
            App::start()
        } else {
            saved.app.clone()
        };
        self.log(|| format!("node {rank} RESTARTS at epoch {}", saved.image.epoch()));
        self.collect(rank);
        Ok(())
    }
}

/// Runs one seed; with `trace`, the steps are returned too.
pub fn run_window_seed(
    cfg: WindowSimConfig,
    trace: bool,
) -> (Result<WindowSimStats, String>, Vec<String>) {
    let reference = {
        let mut quiet = cfg.clone();
        quiet.crashes = 0;
        quiet.checkpoint_percent = 0;
        quiet.mutation = None;
        let mut w = World::new(quiet, trace);
        match w.run() {
            Ok(outcome) => (outcome, w.trace.take().unwrap_or_default()),
            Err(e) => return (Err(format!("the failure-free run failed: {e}")), Vec::new()),
        }
    };
    let (reference, reference_trace) = reference;
    let mut world = World::new(cfg, trace);
    let result = world.run().and_then(|outcome| {
        if outcome.parts != reference.parts {
            return Err(format!(
                "parts differ from the failure-free run: {:?} vs {:?}",
                outcome
                    .parts
                    .iter()
                    .map(|p| words(p).collect::<Vec<_>>())
                    .collect::<Vec<_>>(),
                reference
                    .parts
                    .iter()
                    .map(|p| words(p).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            ));
        }
        if outcome.states != reference.states {
            return Err(format!(
                "program states differ from the failure-free run: {:?} vs {:?}",
                outcome.states, reference.states
            ));
        }
        if outcome.answers != reference.answers {
            return Err("get answers differ from the failure-free run".to_string());
        }
        Ok(world.stats)
    });
    let mut trace = world.trace.take().unwrap_or_default();
    // The failure-free run's folds, to find where a failed run left it.
    trace.extend(
        reference_trace
            .into_iter()
            .filter(|l| l.contains(" folds "))
            .map(|l| format!("reference {l}")),
    );
    (result, trace)
}
