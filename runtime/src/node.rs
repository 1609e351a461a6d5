//! A node: one OS process's executors, its actors, and how they start and stop.
//!
//! [`Node::builder`] discovers the cores this process may use (hwloc), starts one pinned
//! executor per core, and returns a [`Node`]. Actors are placed with [`Node::spawn_on`]
//! (a chosen core) or [`Node::spawn`] (round-robin) and never migrate. [`Node::shutdown`]
//! drains every mailbox before stopping the actors and the executors.

use crate::actor::actor_ref::ActorRef;
use crate::actor::exited_actors::ExitedActors;
use crate::actor::lifecycle::ActorCell;
use crate::actor::mailbox::Mailbox;
use crate::actor::registry::Registry;
use crate::actor::supervision::{FailureHook, SupervisionEvent};
use crate::actor::Actor;
use crate::actor_id::ActorId;
use crate::error::{NodeError, SpawnError};
use crate::executor::topology::{self, HwCore};
use crate::executor::CoreExecutor;
use crate::executor::{CoreQueue, PauseGate};
use crate::recovery::hooks::RecoveryHooks;
use crate::telemetry;
use crate::transport::frame::{Envelope, RemoteError};
use crate::transport::Transport;
use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Index of one of the node's core executors, `0..node.num_cores()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoreId(pub usize);

/// Configures and starts a [`Node`].
pub struct NodeBuilder {
    rank: u16,
    cores: Option<usize>,
    pin: bool,
    ask_timeout: Duration,
    drain_timeout: Duration,
    on_failure: Option<FailureHook>,
    idle_spin: Duration,
    core_offset: usize,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            rank: 0,
            cores: None,
            pin: true,
            ask_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
            on_failure: None,
            idle_spin: Duration::from_micros(50),
            core_offset: 0,
        }
    }
}

impl NodeBuilder {
    /// This node's rank in its cluster (the top bits of every [`ActorId`] it creates).
    pub fn rank(mut self, rank: u16) -> Self {
        self.rank = rank;
        self
    }

    /// Runs `n` core executors, on the first `n` allowed cores. Default: all allowed cores.
    pub fn cores(mut self, n: usize) -> Self {
        self.cores = Some(n);
        self
    }

    /// Starts at the `k`-th allowed core (wrapping), so that several nodes sharing a host
    /// take different cores.
    pub fn core_offset(mut self, k: usize) -> Self {
        self.core_offset = k;
        self
    }

    /// Whether to bind each executor thread to its core (default `true`). Turn off only
    /// where binding is not permitted; actors still never migrate between executors.
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// How long an idle core busy-polls for work before it parks (default 50 µs). Longer
    /// spins cut cross-core latency for chatty apps at the price of CPU time when idle;
    /// zero parks at once.
    pub fn idle_spin(mut self, spin: Duration) -> Self {
        self.idle_spin = spin;
        self
    }

    /// How long an `ask` waits for its reply unless the call says otherwise (default 30 s).
    pub fn ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// How long [`Node::shutdown`] waits for mailboxes to drain before stopping actors
    /// anyway (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Called on the failed actor's core each time an actor fails. The default logs the
    /// event at error level (it is always logged).
    pub fn on_failure(mut self, hook: impl Fn(&SupervisionEvent) + Send + Sync + 'static) -> Self {
        self.on_failure = Some(Arc::new(hook));
        self
    }

    /// Discovers the cores, starts the executors and returns the running node.
    pub fn build(self) -> Result<Node, NodeError> {
        crate::executor::heap::configure();
        let mut hw = topology::allowed_cores()?;
        let offset = self.core_offset % hw.len();
        hw.rotate_left(offset);
        let n = self.cores.unwrap_or(hw.len());
        if n == 0 {
            return Err(NodeError::NoCores);
        }
        if n > hw.len() {
            return Err(NodeError::NotEnoughCores {
                requested: n,
                available: hw.len(),
            });
        }
        let mut executors = Vec::with_capacity(n);
        let gate = Arc::new(PauseGate::default());
        for (i, core) in hw.into_iter().take(n).enumerate() {
            executors.push(CoreExecutor::start(
                i,
                self.pin.then_some(core),
                self.idle_spin,
                Arc::clone(&gate),
            )?);
        }
        let main_rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| NodeError::Executor(e.to_string()))?;
        let inner = NodeInner {
            rank: self.rank,
            cores: executors.iter().map(|e| Arc::clone(&e.queue)).collect(),
            hw: executors.iter().map(|e| e.hw.clone()).collect(),
            registry: Registry::default(),
            next_seq: AtomicU64::new(0),
            next_core: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            on_failure: self.on_failure,
            ask_timeout: self.ask_timeout,
            live: AtomicUsize::new(0),
            exited: tokio::sync::Notify::new(),
            gone: Mutex::new(ExitedActors::default()),
            transport: OnceLock::new(),
            recovery: crossbeam_utils::CachePadded::new(OnceLock::new()),
            gate,
            windows: crate::window::Windows::default(),
        };
        let handle = NodeHandle {
            inner: Arc::new(inner),
        };
        for e in &mut executors {
            e.attach(handle.clone());
        }
        Ok(Node {
            handle,
            executors,
            main_rt: Some(main_rt),
            drain_timeout: self.drain_timeout,
        })
    }
}

struct NodeInner {
    rank: u16,
    cores: Vec<Arc<CoreQueue>>,
    hw: Vec<Option<HwCore>>,
    registry: Registry,
    next_seq: AtomicU64,
    next_core: AtomicUsize,
    shutting_down: AtomicBool,
    on_failure: Option<FailureHook>,
    ask_timeout: Duration,
    live: AtomicUsize,
    exited: tokio::sync::Notify,
    /// Local actors known to have exited (in this process, or before the checkpoint a
    /// restarted node came back from): a reference to one resolves to a stopped actor,
    /// as the reference its holder kept did, instead of failing to decode.
    gone: Mutex<ExitedActors>,
    transport: OnceLock<Arc<Transport>>,
    /// The node's recovery hooks: none with recovery off. Every tell reads it, from any
    /// core: on a cache line of its own, so that writes to the fields around it (the
    /// handle's reference count, the counters) do not make each read a miss.
    recovery: crossbeam_utils::CachePadded<OnceLock<Arc<dyn RecoveryHooks>>>,
    gate: Arc<PauseGate>,
    /// The node's one-sided windows.
    windows: crate::window::Windows,
}

/// A cloneable handle to a running node: spawn actors, look them up. Handlers reach it
/// through [`crate::Context::node`].
#[derive(Clone)]
pub struct NodeHandle {
    inner: Arc<NodeInner>,
}

thread_local! {
    static CURRENT: RefCell<Option<NodeHandle>> = const { RefCell::new(None) };
}

/// Makes a node the thread's current one until dropped (then the previous one is back).
pub(crate) struct CurrentNode(Option<NodeHandle>);

impl CurrentNode {
    pub(crate) fn enter(node: &NodeHandle) -> Self {
        CurrentNode(NodeHandle::set_current(Some(node.clone())))
    }
}

impl Drop for CurrentNode {
    fn drop(&mut self) {
        NodeHandle::set_current(self.0.take());
    }
}

impl NodeHandle {
    /// The node whose executor (or [`Node::block_on`]) is running on this thread.
    pub fn current() -> Option<NodeHandle> {
        CURRENT.with(|c| c.borrow().clone())
    }

    pub(crate) fn set_current(node: Option<NodeHandle>) -> Option<NodeHandle> {
        CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), node))
    }

    /// This node's rank.
    pub fn rank(&self) -> u16 {
        self.inner.rank
    }

    /// How many core executors this node runs.
    pub fn num_cores(&self) -> usize {
        self.inner.cores.len()
    }

    /// The processing units (OS indices) core `core` is pinned to, if pinned.
    pub fn core_pus(&self, core: CoreId) -> Option<&[u32]> {
        self.inner
            .hw
            .get(core.0)?
            .as_ref()
            .map(|c| c.pus.as_slice())
    }

    /// Number of live actors.
    pub fn num_actors(&self) -> usize {
        self.inner.registry.len()
    }

    /// Spawns `actor` on the next core in round-robin order.
    pub fn spawn<A: Actor>(&self, actor: A) -> Result<ActorRef<A>, SpawnError> {
        let core = self.inner.next_core.fetch_add(1, Ordering::Relaxed) % self.num_cores();
        self.spawn_on(CoreId(core), actor)
    }

    /// Spawns `actor` on core `core`, where it stays for its whole life.
    ///
    /// Called from inside a handler or hook of an actor of this node, the new actor is
    /// that actor's child and is named after it ([`ActorId::child`]); with recovery on, a
    /// child alive at a checkpoint is rebuilt from its image when the node restarts.
    pub fn spawn_on<A: Actor>(&self, core: CoreId, actor: A) -> Result<ActorRef<A>, SpawnError> {
        let parent = crate::actor::lifecycle::current_actor()
            .filter(|p| p.rank() == self.inner.rank)
            .and_then(|p| self.inner.registry.get(p));
        if let Some(parent) = &parent {
            // A re-executed async handler's spawn made before its checkpoint: the child
            // was restored from that checkpoint.
            if let Some(n) = crate::actor::reexecution::spawn_skipped() {
                crate::actor::reexecution::drop_skipped(actor);
                let id = ActorId::child(parent.id(), n);
                return Ok(self.lookup::<A>(id).unwrap_or_else(|| self.stopped_ref(id)));
            }
        }
        let id = match parent {
            Some(parent) => ActorId::child(parent.id(), parent.next_child()),
            None => {
                let seq = self.inner.next_seq.fetch_add(1, Ordering::Relaxed);
                if seq >= crate::actor_id::SPAWN_SEQ_LIMIT {
                    return Err(SpawnError::IdsExhausted);
                }
                ActorId::new(self.inner.rank, seq).ok_or(SpawnError::IdsExhausted)?
            }
        };
        let cell = self.spawn_cell(core, id, Some(actor))?;
        Ok(ActorRef::from_cell(cell))
    }

    /// Puts a cell for actor `id` of type `A` on core `core` into the registry: with
    /// `actor`, a new actor, started (or deferred while the node is being restored);
    /// without, a vacant one, not started, that the caller fills from a checkpoint image
    /// and wakes ([`crate::actor::actor_kind`]).
    pub(crate) fn spawn_cell<A: Actor>(
        &self,
        core: CoreId,
        id: ActorId,
        actor: Option<A>,
    ) -> Result<Arc<ActorCell<A>>, SpawnError> {
        let inner = &self.inner;
        let Some(executor) = inner.cores.get(core.0) else {
            telemetry::spawn_error("no_such_core");
            return Err(SpawnError::NoSuchCore {
                requested: core.0,
                available: inner.cores.len(),
            });
        };
        if inner.shutting_down.load(Ordering::Acquire) {
            telemetry::spawn_error("shutting_down");
            return Err(SpawnError::ShuttingDown);
        }
        if inner.registry.get(id).is_some() {
            telemetry::spawn_error("id_taken");
            return Err(SpawnError::IdTaken(id));
        }
        let vacant = actor.is_none();
        let mailbox = Mailbox::new(id, inner.ask_timeout, inner.recovery.get().is_some());
        let cell = ActorCell::new(actor, mailbox, Arc::clone(executor), core, self.clone());
        inner.registry.insert(cell.clone());
        inner.live.fetch_add(1, Ordering::AcqRel);
        if vacant {
            // The restore that asked for it fills and starts it.
            return Ok(cell);
        }
        // A restarted node starts its actors once their checkpointed states are back.
        let deferred = match self.recovery() {
            Some(layer) => {
                if id.is_child() {
                    crate::actor::actor_kind::check_registered::<A>();
                    // Logged messages may have waited for it (a replaying handler).
                    layer.child_spawned(self, id);
                }
                layer.defer_start(cell.clone())
            }
            None => false,
        };
        if !deferred && self.has_exited(id) {
            // A restarted `main` spawning again an actor that had exited before the
            // checkpoint: it stays exited, as it was in the run being recovered.
            use crate::actor::lifecycle::Control;
            Arc::clone(&cell).retire();
        } else if !deferred {
            // Run on_start now rather than at the first message.
            cell.notify();
        }
        Ok(cell)
    }

    /// A reference to actor `id` of type `A`: a live local actor, or an actor of another
    /// node of the cluster (not checked until a message reaches that node).
    ///
    /// A local actor that has exited gives a reference to a stopped actor (sends fail
    /// with [`crate::SendError::ActorStopped`]), like the reference kept by whoever held
    /// it before: a message or checkpointed state naming it still decodes.
    pub fn actor_ref<A: Actor>(&self, id: ActorId) -> Result<ActorRef<A>, String> {
        if id.rank() == self.inner.rank {
            if let Some(live) = self.lookup::<A>(id) {
                return Ok(live);
            }
            if self.has_exited(id) {
                return Ok(self.stopped_ref(id));
            }
            return Err(format!(
                "no live actor {id} of type {} on this node",
                A::NAME
            ));
        }
        match self.transport() {
            Some(t) if (id.rank() as usize) < t.size() => {
                Ok(ActorRef::remote(id, self.clone(), self.inner.ask_timeout))
            }
            Some(t) => Err(format!(
                "actor {id} names node {} but the cluster has {} nodes",
                id.rank(),
                t.size()
            )),
            None => Err(format!(
                "actor {id} is on node {} but this node runs alone",
                id.rank()
            )),
        }
    }

    /// The node's one-sided windows.
    pub(crate) fn windows(&self) -> &crate::window::Windows {
        &self.inner.windows
    }

    /// The transport, when this node is part of a cluster.
    pub fn transport(&self) -> Option<Arc<Transport>> {
        self.inner.transport.get().cloned()
    }

    /// Makes core `core` drive the network engine `rt`, polling `probe` while it spins.
    pub(crate) fn install_engine(
        &self,
        core: CoreId,
        rt: tokio::runtime::Runtime,
        probe: Option<Arc<dyn crate::executor::IdleProbe>>,
    ) -> bool {
        match self.inner.cores.get(core.0) {
            Some(q) => {
                q.install_engine(rt, probe);
                true
            }
            None => false,
        }
    }

    pub(crate) fn set_transport(&self, t: Arc<Transport>) {
        let _ = self.inner.transport.set(t);
    }

    /// The node's recovery hooks, when recovery is on.
    #[inline]
    pub(crate) fn recovery(&self) -> Option<&Arc<dyn RecoveryHooks>> {
        self.inner.recovery.get()
    }

    /// Whether the node runs with recovery on.
    pub fn recovers(&self) -> bool {
        self.inner.recovery.get().is_some()
    }

    /// Installs the node's recovery hooks (once, before the first frame can arrive and
    /// before any actor is spawned: each mailbox notes at its creation whether its node
    /// recovers).
    pub(crate) fn set_recovery(&self, hooks: Arc<dyn RecoveryHooks>) {
        if self.inner.live.load(Ordering::Acquire) > 0 {
            tracing::error!("recovery installed on a node that has actors already: their messages are not logged");
        }
        let _ = self.inner.recovery.set(hooks);
    }

    /// The node's core queues.
    #[cfg(test)]
    pub(crate) fn cores(&self) -> &[Arc<CoreQueue>] {
        &self.inner.cores
    }

    /// Messages the node's core threads counted as put into mailboxes of this node
    /// (`executor::count_local_send`), summed over its cores.
    pub(crate) fn local_sends(&self) -> u64 {
        self.inner.cores.iter().map(|q| q.local_sends()).sum()
    }

    /// Stops every core between two actor turns; false if they did not all stop within
    /// `timeout` (then none is stopped).
    pub(crate) fn pause_cores(&self, timeout: Duration) -> bool {
        self.inner.gate.close(&self.inner.cores, timeout)
    }

    /// The coordination step of a set checkpoint alone: pauses every core of the node
    /// between two actor turns and resumes them; returns how long that took, or `None`
    /// if the cores did not all pause within `timeout`. For benchmarks.
    pub fn measure_checkpoint_coordination(&self, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        if !self.pause_cores(timeout) {
            return None;
        }
        self.resume_cores();
        Some(started.elapsed())
    }

    /// Whether a checkpoint is stopping the cores (a handler that waits should stop
    /// waiting).
    pub(crate) fn pause_requested(&self) -> bool {
        self.inner.gate.is_requested()
    }

    /// Lets the cores run again after [`NodeHandle::pause_cores`].
    pub(crate) fn resume_cores(&self) {
        self.inner.gate.open();
    }

    /// Every registered actor.
    pub(crate) fn controls(&self) -> Vec<Arc<dyn crate::actor::lifecycle::Control>> {
        self.inner.registry.snapshot()
    }

    /// Messages whose handler ran on this node so far (all cores).
    pub(crate) fn handled_messages(&self) -> u64 {
        self.inner.cores.iter().map(|q| q.handled()).sum()
    }

    /// The actors whose mailboxes hold messages, for a stall report: `mailboxes: N of M
    /// hold messages: ID=DEPTH ...`, at most `limit` of them, deepest first.
    pub(crate) fn mailbox_summary(&self, limit: usize) -> String {
        let controls = self.controls();
        let mut full: Vec<(usize, String)> = controls
            .iter()
            .map(|c| (c.depth(), c.id().to_string()))
            .filter(|(depth, _)| *depth > 0)
            .collect();
        full.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let shown: Vec<String> = full
            .iter()
            .take(limit)
            .map(|(depth, id)| format!("{id}={depth}"))
            .collect();
        let more = match full.len().saturating_sub(limit) {
            0 => String::new(),
            n => format!(" (and {n} more)"),
        };
        format!(
            "mailboxes: {} of {} hold messages{}{}{more}",
            full.len(),
            controls.len(),
            if shown.is_empty() { "" } else { ": " },
            shown.join(" ")
        )
    }

    /// Delivers a message that arrived from node `from` (with its channel stamp when the
    /// recovery layer delivers it); returns the addressee's mailbox depth afterwards (the
    /// transport slows its reading when it is high).
    pub(crate) fn deliver_remote(
        &self,
        env: Envelope,
        _from: u16,
        stamp: Option<crate::actor::mailbox::Stamp>,
    ) -> Result<usize, RemoteError> {
        let control = self
            .inner
            .registry
            .get(env.to)
            .ok_or(RemoteError::UnknownActor(env.to))?;
        Arc::clone(&control).deliver_encoded(&env, stamp)?;
        Ok(control.depth())
    }

    /// Enqueues an encoded message for a local actor as if the current thread had told
    /// it (the reply of an actor's ask whose slot went through an encoding).
    pub(crate) fn tell_encoded(&self, env: &Envelope) -> Result<(), RemoteError> {
        let control = self
            .inner
            .registry
            .get(env.to)
            .ok_or(RemoteError::UnknownActor(env.to))?;
        control.tell_encoded(env)
    }

    /// Records local actors as exited (see [`NodeHandle::actor_ref`]).
    pub(crate) fn mark_exited(&self, ids: impl IntoIterator<Item = ActorId>) {
        let mut gone = self.inner.gone.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            gone.insert(id);
        }
    }

    /// Records every actor of `exited` as exited (a restored checkpoint's).
    pub(crate) fn mark_all_exited(&self, exited: &ExitedActors) {
        let mut gone = self.inner.gone.lock().unwrap_or_else(|e| e.into_inner());
        gone.merge(exited);
    }

    /// Whether local actor `id` is known to have exited.
    pub(crate) fn has_exited(&self, id: ActorId) -> bool {
        let gone = self.inner.gone.lock().unwrap_or_else(|e| e.into_inner());
        gone.contains(id)
    }

    /// A reference to local actor `id`, which has exited: a cell that is never
    /// registered or run and refuses every message as stopped.
    fn stopped_ref<A: Actor>(&self, id: ActorId) -> ActorRef<A> {
        let mailbox = Mailbox::new(id, self.inner.ask_timeout, self.recovers());
        mailbox.set_status(crate::actor::mailbox::Status::Stopped);
        let core = CoreId(0);
        let cell = ActorCell::new(
            None,
            mailbox,
            Arc::clone(&self.inner.cores[core.0]),
            core,
            self.clone(),
        );
        ActorRef::from_cell(cell)
    }

    /// Every local actor known to have exited: those `main` spawned and those spawned
    /// by actors, whose parents may have exited too, so their ids cannot be derived
    /// from a checkpointed parent.
    pub(crate) fn exited_actors(&self) -> ExitedActors {
        let gone = self.inner.gone.lock().unwrap_or_else(|e| e.into_inner());
        gone.clone()
    }

    /// The control of live local actor `id`.
    pub(crate) fn control(&self, id: ActorId) -> Option<Arc<dyn crate::actor::lifecycle::Control>> {
        self.inner.registry.get(id)
    }

    /// Mailbox depth of live local actor `id`.
    pub(crate) fn mailbox_depth(&self, id: ActorId) -> Option<usize> {
        self.inner.registry.get(id).map(|c| c.depth())
    }

    /// A reference to live actor `id` of type `A` on this node.
    pub fn lookup<A: Actor>(&self, id: ActorId) -> Option<ActorRef<A>> {
        self.inner.registry.lookup::<A>(id).map(ActorRef::from_cell)
    }

    pub(crate) fn report_failure(&self, event: &SupervisionEvent) {
        if let Some(layer) = self.recovery() {
            // The set rolls back as one unit: end this process now, the supervisor
            // restarts it from the last checkpoint and the peers replay.
            layer.actor_failed(event);
        }
        if let Some(hook) = &self.inner.on_failure {
            hook(event);
        }
    }

    pub(crate) fn deregister(&self, id: ActorId) {
        self.mark_exited([id]);
        if self.inner.registry.remove(id) {
            self.inner.live.fetch_sub(1, Ordering::AcqRel);
            self.inner.exited.notify_waiters();
        }
    }

    /// Waits until every mailbox is empty and no handler runs, or `timeout` passes.
    /// Returns whether the node went quiet.
    ///
    /// Rounds of barriers: each actor answers its barrier, with its count of handled
    /// messages, once everything enqueued before the barrier is handled. Two consecutive
    /// rounds with identical counts for the same actors mean no handler ran in between,
    /// so no handler can have sent anything that is still waiting.
    async fn drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut previous: Option<Vec<(ActorId, u64)>> = None;
        loop {
            let mut round = Vec::new();
            for control in self.inner.registry.snapshot() {
                let id = control.id();
                if let Some(rx) = control.barrier() {
                    round.push((id, rx));
                }
            }
            let mut counts = Vec::with_capacity(round.len());
            for (id, rx) in round {
                let left = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, rx).await {
                    Ok(Ok(n)) => counts.push((id, n)),
                    Ok(Err(_)) => {} // stopped meanwhile: nothing left to drain there
                    Err(_) => return false,
                }
            }
            counts.sort_unstable();
            if previous.as_ref() == Some(&counts) {
                return true;
            }
            previous = Some(counts);
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Asks every actor to stop and waits until all have exited or `timeout` passes.
    async fn stop_all(&self, timeout: Duration) -> bool {
        self.inner.shutting_down.store(true, Ordering::Release);
        for control in self.inner.registry.snapshot() {
            control.request_stop();
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let exited = self.inner.exited.notified();
            if self.inner.live.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, exited).await.is_err() {
                return false;
            }
        }
    }
}

/// What [`Node::shutdown`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every mailbox was empty and no handler was running when actors were stopped.
    pub drained: bool,
    /// Every actor ran its stop hook and exited before the executors stopped.
    pub all_stopped: bool,
}

/// A running node. Dropping it stops it without draining; call [`Node::shutdown`] to drain.
pub struct Node {
    handle: NodeHandle,
    executors: Vec<CoreExecutor>,
    main_rt: Option<tokio::runtime::Runtime>,
    drain_timeout: Duration,
}

impl Node {
    /// A builder with default settings: rank 0, all allowed cores, pinned.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// A handle for spawning and lookups, cheap to clone.
    pub fn handle(&self) -> &NodeHandle {
        &self.handle
    }

    /// See [`NodeHandle::num_cores`].
    pub fn num_cores(&self) -> usize {
        self.handle.num_cores()
    }

    /// See [`NodeHandle::spawn`].
    pub fn spawn<A: Actor>(&self, actor: A) -> Result<ActorRef<A>, SpawnError> {
        self.handle.spawn(actor)
    }

    /// See [`NodeHandle::spawn_on`].
    pub fn spawn_on<A: Actor>(&self, core: CoreId, actor: A) -> Result<ActorRef<A>, SpawnError> {
        self.handle.spawn_on(core, actor)
    }

    /// Runs `fut` to completion on the calling thread (not one of the core executors), with
    /// timers available, e.g. to await `ask`s from `main`.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        if let Some(layer) = self.handle.recovery() {
            // A restarted node's main waits for something: its actors must run.
            layer.main_waits(&self.handle);
        }
        let previous = NodeHandle::set_current(Some(self.handle.clone()));
        let rt = self.main_rt.as_ref().expect("runtime present until drop");
        let out = rt.block_on(fut);
        NodeHandle::set_current(previous);
        out
    }

    /// Waits (up to the drain timeout) until every mailbox is empty and no handler runs.
    /// Returns whether the node went quiet.
    pub fn drain(&self) -> bool {
        let handle = self.handle.clone();
        let timeout = self.drain_timeout;
        self.block_on(async move { handle.drain(timeout).await })
    }

    /// Drains every mailbox (up to the drain timeout), stops every actor (running its
    /// `on_stop` hook), then stops the executors.
    pub fn shutdown(mut self) -> ShutdownReport {
        let handle = self.handle.clone();
        let timeout = self.drain_timeout;
        let report = self.block_on(async move {
            let drained = handle.drain(timeout).await;
            if !drained {
                tracing::warn!(
                    ?timeout,
                    "mailboxes did not drain before the timeout; stopping anyway"
                );
            }
            let all_stopped = handle.stop_all(timeout).await;
            ShutdownReport {
                drained,
                all_stopped,
            }
        });
        self.stop_executors();
        self.executors.clear();
        report
    }

    fn stop_executors(&mut self) {
        for e in &mut self.executors {
            e.stop();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.executors.is_empty() {
            let handle = self.handle.clone();
            self.block_on(async move { handle.stop_all(Duration::from_secs(5)).await });
            self.stop_executors();
            self.executors.clear();
        }
    }
}
