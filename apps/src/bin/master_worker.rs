//! `master-worker`: workers on every node ask one master (on node 0) for tasks; the master
//! hands them out in the order requests arrive, salts each with a random number and keeps
//! a ledger of who got what. It is order-sensitive on purpose — which worker gets which
//! task depends on timing — so with recovery on its deliveries and draws are logged as
//! determinants and replayed after a failure.
//!
//! The master also runs a timer: every `--epoch-ms` its epoch advances, and every
//! hand-out carries the mark of the epoch it was made in. At each epoch the master audits
//! its ledger in slices for as long as no request is waiting (`ctx.messages_waiting()`,
//! the actor's try-receive), and the number of slices it got done goes into the mark.
//! Where the timer's deliveries fall among the requests, and what each probe found, are
//! nondeterministic too, so with recovery on they are logged and replayed like the
//! arrivals; once every task is handed out the master cancels its timer.
//!
//! When the tasks run out the master winds down in worker order: it receives only from
//! the first worker (selective receive, `ctx.receive_only_from`) until that worker's
//! final report is in, then only from the next, and so on. Each worker's last request
//! (answered with `Stop`) and its report come in its channel's FIFO order, so these
//! deliveries are deterministic and log nothing, even in this order-sensitive actor.
//!
//! Workers run on every node but the master's (with one node, next to it).
//!
//! The RESULT line holds the answer (the sum of every task's result: each task must be
//! done exactly once whatever the order), the ledger's digest, and `consistent`: every
//! worker's own record of the tasks and salts it received equals the master's ledger for
//! it — so no worker saw a hand-out that the master's (possibly recovered) state
//! contradicts.

use clap::Parser;
use lazarus::timer::TimerId;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

/// Hand out tasks in arrival order from one master to workers on every node.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Tasks in total.
    #[arg(long, default_value_t = 20_000)]
    tasks: u64,
    /// Work per task (mixing rounds).
    #[arg(long, default_value_t = 20_000)]
    work: u64,
    /// Workers per node.
    #[arg(long, default_value_t = 1)]
    workers_per_node: u64,
    /// Period of the master's epoch timer, in milliseconds.
    #[arg(long, default_value_t = 5)]
    epoch_ms: u64,
}

/// What the master reports when every worker has finished.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Outcome {
    answer: u64,
    ledger: u64,
    consistent: bool,
    handed_out: u64,
    /// Fewest and most tasks any worker got.
    spread: (u64, u64),
    /// Epochs the timer started.
    epochs: u64,
}

#[derive(Actor, Serialize, Deserialize)]
#[actor(order_sensitive)]
struct Master {
    tasks: u64,
    workers: u64,
    next: u64,
    finished: u64,
    /// Hash chain of every hand-out `(worker, task, salt, time)` in order.
    ledger: u64,
    /// Per worker: tasks handed to it and the hash chain of `(task, salt)`.
    per_worker: BTreeMap<u64, (u64, u64)>,
    answer: u64,
    consistent: bool,
    outcome: Option<Outcome>,
    waiting: ReplyTo<Outcome>,
    epoch: u64,
    /// The current epoch's mark: its number and the audit slices done at its start.
    mark: u64,
    /// Audit slices done so far (each a bit of hashing over the ledger).
    audited: u64,
    epoch_ms: u64,
    /// The armed epoch timer, if any.
    ticking: Option<TimerId>,
    /// Workers per node (worker `i` is actor `first + i % per` of node `i / per`).
    per_node: u64,
    /// Winding down: the index of the worker whose report the master waits for.
    draining: Option<u64>,
}

#[messages]
impl Master {
    /// A worker asks for work, returning its last result if it had one.
    #[message]
    fn request(
        &mut self,
        worker: u64,
        from: ActorRef<Worker>,
        result: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        if let Some(v) = result {
            self.answer = self.answer.wrapping_add(v);
        }
        if self.next >= self.tasks {
            if let Some(timer) = self.ticking.take() {
                ctx.cancel_timer(timer);
            }
            let _ = from.tell(Stop {});
            if self.draining.is_none() {
                self.drain(self.first_worker(), ctx);
            }
            return;
        }
        if self.epoch == 0 {
            self.next_epoch(ctx);
        }
        let task = self.next;
        self.next += 1;
        let salt = ctx.random();
        let at = ctx
            .now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let epoch = self.mark;
        self.ledger = mix(
            mix(mix(mix(mix(self.ledger, worker), task), salt), at),
            epoch,
        );
        let mine = self.per_worker.entry(worker).or_default();
        *mine = (mine.0 + 1, mix(mix(mix(mine.1, task), salt), epoch));
        if from.tell(Task { task, salt, epoch }).is_err() {
            tracing::error!(worker, "worker unreachable");
        }
    }

    /// The epoch timer fired: hand-outs from now on belong to the next epoch.
    #[message]
    fn tick(&mut self, ctx: &mut Context<Self>) {
        self.ticking = None;
        if self.next < self.tasks {
            self.next_epoch(ctx);
        }
    }

    /// A worker got `Stop`: what it received, by its own count.
    #[message]
    fn finished(&mut self, worker: u64, count: u64, digest: u64, ctx: &mut Context<Self>) {
        if self.draining == Some(worker) {
            let next = worker + 1;
            self.drain(next, ctx);
        }
        let handed = self.per_worker.get(&worker).copied().unwrap_or_default();
        if handed != (count, digest) {
            tracing::error!(
                worker,
                ?handed,
                count,
                digest,
                "ledger contradicts the worker"
            );
            self.consistent = false;
        }
        self.finished += 1;
        if self.finished == self.workers {
            let outcome = Outcome {
                answer: self.answer,
                ledger: self.ledger,
                consistent: self.consistent,
                handed_out: self.next,
                spread: (
                    self.per_worker.values().map(|w| w.0).min().unwrap_or(0),
                    self.per_worker.values().map(|w| w.0).max().unwrap_or(0),
                ),
                epochs: self.epoch,
            };
            let _ = self.waiting.take().send(outcome.clone());
            self.outcome = Some(outcome);
        }
    }

    /// Replies once every worker has finished.
    #[message]
    fn wait(&mut self, reply: ReplyTo<Outcome>) {
        match &self.outcome {
            Some(o) => {
                reply.send(o.clone());
            }
            None => self.waiting = reply,
        }
    }
}

impl Master {
    /// The lowest worker index: node 0 has workers only when it is alone.
    fn first_worker(&self) -> u64 {
        if self.workers == self.per_node {
            0
        } else {
            self.per_node
        }
    }

    /// Receives only from worker `index` until its report is in; past the last worker,
    /// from anyone again.
    fn drain(&mut self, index: u64, ctx: &mut Context<Self>) {
        let (node, k) = (index / self.per_node, index % self.per_node);
        let first = u64::from(node == 0);
        let worker = u16::try_from(node)
            .ok()
            .and_then(|node| ActorId::new(node, first + k));
        match worker {
            Some(id) if index < self.first_worker() + self.workers => {
                self.draining = Some(index);
                if let Err(e) = ctx.receive_only_from(id) {
                    tracing::error!("{e}");
                }
            }
            _ => {
                self.draining = Some(u64::MAX);
                ctx.receive_from_anyone();
            }
        }
    }

    fn next_epoch(&mut self, ctx: &mut Context<Self>) {
        self.epoch += 1;
        // Audit while nobody waits for a task, at most a few slices.
        let mut slices = 0u64;
        while slices < 8 && !ctx.messages_waiting() {
            slices += 1;
            self.audited = (0..2_000).fold(mix(self.audited, self.ledger), mix);
        }
        self.mark = mix(self.epoch, slices);
        self.ticking = Some(ctx.send_after(Duration::from_millis(self.epoch_ms), Tick {}));
    }
}

#[derive(Actor, Serialize, Deserialize)]
struct Worker {
    index: u64,
    work: u64,
    master: Option<ActorRef<Master>>,
    received: u64,
    digest: u64,
    /// Tasks that came before `begin` (task, salt, epoch), done once it comes.
    early: Vec<(u64, u64, u64)>,
}

#[messages]
impl Worker {
    #[message]
    fn begin(&mut self, master: ActorRef<Master>, ctx: &mut Context<Self>) {
        let _ = master.tell(Request {
            worker: self.index,
            from: ctx.myself().clone(),
            result: None,
        });
        self.master = Some(master);
        for (task, salt, epoch) in std::mem::take(&mut self.early) {
            self.work_on(task, salt, epoch, ctx);
        }
    }

    /// A task can come before `begin` although the master answers a request that
    /// `begin` sent: after a restart of the master's node, a restored worker's node
    /// replays the master's regenerated messages in channel order only
    /// (docs/recovery.md, "Concurrent recoveries"), so `main`'s tell and the master's
    /// tasks are concurrent there. Kept until `begin`, the worker sends the same
    /// messages in either order, as the determinism contract asks.
    #[message]
    fn task(&mut self, task: u64, salt: u64, epoch: u64, ctx: &mut Context<Self>) {
        if self.master.is_none() {
            self.early.push((task, salt, epoch));
            return;
        }
        self.work_on(task, salt, epoch, ctx);
    }

    #[message]
    fn stop(&mut self) {
        if let Some(m) = &self.master {
            let _ = m.tell(Finished {
                worker: self.index,
                count: self.received,
                digest: self.digest,
            });
        }
    }
}

impl Worker {
    fn work_on(&mut self, task: u64, salt: u64, epoch: u64, ctx: &mut Context<Self>) {
        self.received += 1;
        self.digest = mix(mix(mix(self.digest, task), salt), epoch);
        let value = compute(task, self.work);
        if let Some(m) = &self.master {
            let _ = m.tell(Request {
                worker: self.index,
                from: ctx.myself().clone(),
                result: Some(value),
            });
        }
    }
}

/// One task's result: depends on the task only, never on who computed it or when.
fn compute(task: u64, work: u64) -> u64 {
    (0..work).fold(task, mix)
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank(), cluster.size() as u64);
    let per = args.workers_per_node.max(1);
    // The master has node 0 to itself unless it is alone: a worker next to it would get
    // nearly every task (a local round trip is far shorter than one between nodes).
    let worker_nodes = if size == 1 { 1 } else { size - 1 };
    let has_workers = size == 1 || rank != 0;
    let master_id = ActorId::new(0, 0).ok_or("bad master id")?;
    if rank == 0 {
        let m = cluster.spawn(Master {
            tasks: args.tasks,
            workers: per * worker_nodes,
            next: 0,
            finished: 0,
            ledger: 0,
            per_worker: BTreeMap::new(),
            answer: 0,
            consistent: true,
            outcome: None,
            waiting: ReplyTo::none(),
            epoch: 0,
            mark: 0,
            audited: 0,
            epoch_ms: args.epoch_ms.max(1),
            ticking: None,
            per_node: per,
            draining: None,
        })?;
        expect_id(m, master_id, "master")?;
    }
    // Node 0's workers come after the master in its spawn order.
    let first = u64::from(rank == 0);
    let mut workers = Vec::new();
    for k in (0..per).filter(|_| has_workers) {
        let w = cluster.spawn(Worker {
            index: u64::from(rank) * per + k,
            work: args.work,
            master: None,
            received: 0,
            digest: 0,
            early: Vec::new(),
        })?;
        let id = ActorId::new(rank, first + k).ok_or("too many workers")?;
        workers.push(expect_id(w, id, format!("worker {k}"))?);
    }
    cluster.barrier()?;
    let master = cluster.handle().actor_ref::<Master>(master_id)?;
    let started = cluster.begin_timed_part();
    for w in &workers {
        w.tell(Begin {
            master: master.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let outcome = cluster.block_on(master.ask(Wait {}).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    let expected = (0..args.tasks).fold(0u64, |s, t| s.wrapping_add(compute(t, args.work)));
    let verified =
        outcome.consistent && outcome.answer == expected && outcome.handed_out == args.tasks;
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("master-worker")
            .field("nodes", size)
            .field("workers", per * worker_nodes)
            .field("tasks", args.tasks)
            .hex("answer", outcome.answer)
            .hex("ledger", outcome.ledger)
            .field("consistent", outcome.consistent)
            .field(
                "tasks_per_worker",
                format!("{}..{}", outcome.spread.0, outcome.spread.1),
            )
            .field("epochs", outcome.epochs)
            .elapsed(elapsed)
            .field("tasks_per_s", format!("{:.0}", args.tasks as f64 / elapsed)),
        verified,
        failure: "master-worker result not verified".into(),
    })
}
