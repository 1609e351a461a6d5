//! Core executors: one OS thread per core, bound to it with hwloc, running the actors
//! placed on that core and nothing else, so an actor never migrates.
//!
//! Each core has a run queue of actors with pending work: a thread-local deque for actors
//! woken by actors on the same core (no atomics) and a lock-free inject queue for wake-ups
//! from other threads. An idle core spins for a short, configurable time before it parks,
//! as HPC progress engines do: a message from another core is then picked up in well under
//! a microsecond instead of paying an OS wake-up.
//!
//! A core can also host the node's network progress engine (a current-thread Tokio
//! runtime running the transport): then, instead of parking, the idle core blocks in that
//! runtime's I/O driver, and while busy it gives the engine a non-blocking turn every few
//! actor turns. A message from another node then reaches its actor without any thread
//! hand-off.

pub(crate) mod asymmetric_fence;
pub(crate) mod heap;
#[doc(hidden)]
pub mod topology;

use crate::error::NodeError;
use crate::node::NodeHandle;
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};
use topology::HwCore;

/// Something a core can run: an actor with pending work. It reschedules itself if work is
/// left after its turn.
pub(crate) trait Runnable: Send + Sync {
    fn run(self: Arc<Self>);
}

/// Stops every core of a node between two actor turns, for a coordinated checkpoint of
/// the node's correlated set: while the gate is closed no handler runs anywhere on the
/// node, so every actor's state and mailbox can be read consistently.
///
/// A core checks the gate (one relaxed load) before each actor turn and when idle; the
/// closer wakes every core and waits until all of them report paused.
#[derive(Default)]
pub(crate) struct PauseGate {
    requested: AtomicBool,
    paused: std::sync::Mutex<usize>,
    changed: std::sync::Condvar,
}

impl PauseGate {
    #[inline]
    pub(crate) fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }

    /// Called by a core that saw the request: waits here until the gate reopens.
    fn wait_here(&self) {
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        *paused += 1;
        self.changed.notify_all();
        while self.requested.load(Ordering::Acquire) {
            paused = self.changed.wait(paused).unwrap_or_else(|e| e.into_inner());
        }
        *paused -= 1;
        self.changed.notify_all();
    }

    /// Closes the gate and waits until `cores` cores are paused; false (gate reopened)
    /// if that takes longer than `timeout` (a handler that runs for long, or blocks).
    pub(crate) fn close(&self, cores: &[Arc<CoreQueue>], timeout: Duration) -> bool {
        self.requested.store(true, Ordering::SeqCst);
        for q in cores {
            q.wake_always();
        }
        let deadline = Instant::now() + timeout;
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        while *paused < cores.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(paused);
                self.open();
                return false;
            }
            paused = self
                .changed
                .wait_timeout(paused, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Reopens the gate: every paused core resumes.
    pub(crate) fn open(&self) {
        let _guard = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        self.requested.store(false, Ordering::SeqCst);
        self.changed.notify_all();
    }
}

/// After this many runs from the local deque, look at the inject queue first, so wake-ups
/// from other cores are not starved by a busy local ring.
const INJECT_EVERY: u32 = 32;
/// How long a parked core sleeps before re-checking for shutdown on its own.
const PARK_TIMEOUT: Duration = Duration::from_millis(100);

/// The run queue of one core, shared with every thread that wakes actors on it.
pub(crate) struct CoreQueue {
    inject: SegQueue<Arc<dyn Runnable>>,
    sleeping: CachePadded<AtomicBool>,
    shutdown: AtomicBool,
    thread: OnceLock<Thread>,
    /// A network engine waiting to be picked up by this core's thread, and what the core
    /// polls for it while it spins.
    engine_slot: std::sync::Mutex<Option<Engine>>,
    /// The core is blocked inside its engine (wake it through `engine_waker`).
    in_engine: CachePadded<AtomicBool>,
    engine_waker: futures::task::AtomicWaker,
    gate: Arc<PauseGate>,
    /// Messages this core's actors put into mailboxes of their own node, with recovery
    /// on (the recovery layer counts the node's local deliveries from them). Written
    /// only by this core's thread, with a plain store: no locked instruction per message.
    local_sends: CachePadded<AtomicU64>,
    /// Messages whose handler this core's actors ran, for the launcher's stall watchdog
    /// (see `cluster::supervisor_channel`). Written only by this core's thread, once per
    /// batch, with a plain store.
    handled: CachePadded<AtomicU64>,
}

/// Network input an idle engine core can see without a system call (the shared-memory
/// rings): the core spins on it for `idle_spin` before it blocks in its engine.
pub(crate) trait IdleProbe: Send + Sync {
    /// Whether there is anything to poll (else the core blocks at once).
    fn active(&self) -> bool;
    /// The core starts spinning: network tasks that go to sleep now need no wake-up from
    /// outside (the core polls for them).
    fn spins(&self);
    /// Wakes the network tasks that have input; true if any had.
    fn poll(&self) -> bool;
    /// The core stops spinning (to block in its engine or to run actors): input from now
    /// on must wake it. True if input is there already (its tasks were woken).
    fn stops_spinning(&self) -> bool;
}

/// A network engine and what an idle core polls for it.
type Engine = (tokio::runtime::Runtime, Option<Arc<dyn IdleProbe>>);

/// While an engine core spins on its probe, it also gives the engine a non-blocking turn
/// this often (QUIC peers, timers, tasks woken from other threads).
const SPIN_ENGINE_EVERY: Duration = Duration::from_micros(10);

/// Actor turns between two non-blocking network turns on an engine core.
const ENGINE_EVERY: u32 = 16;
/// Longest time an engine core runs actors without giving the network a turn.
const ENGINE_MAX_GAP: Duration = Duration::from_millis(2);

thread_local! {
    /// This core thread's local deque (tasks it scheduled on its own core).
    static LOCAL: RefCell<VecDeque<Arc<dyn Runnable>>> = const { RefCell::new(VecDeque::new()) };
    /// The network engine this thread drives, if any.
    static ENGINE: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
    static IN_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The core queue this thread runs (null on other threads): where `schedule` keeps
    /// a task local, and whose counter `count_local_send` bumps.
    static CURRENT_CORE: std::cell::Cell<*const CoreQueue> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Counts one message put into a mailbox on core `receiver` by the thread running now,
/// if that thread is a core of the same node (its own counter; the only writer): true if
/// counted, false for any other thread (which must count elsewhere).
#[inline]
pub(crate) fn count_local_send(receiver: &CoreQueue) -> bool {
    CURRENT_CORE.with(|c| {
        // SAFETY: only a core's own thread sets the pointer, to the queue its closure
        // owns an `Arc` of, and clears it before that closure ends (or the thread, and
        // this thread-local with it, ends first): the queue outlives every read here.
        let Some(me) = (unsafe { c.get().as_ref() }) else {
            return false;
        };
        if !Arc::ptr_eq(&me.gate, &receiver.gate) {
            return false;
        }
        let c = &me.local_sends;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Release);
        true
    })
}

/// Counts `n` handler calls made by the thread running now, if it is a core thread (actors
/// run on no other).
#[inline]
pub(crate) fn count_handled(n: u64) {
    CURRENT_CORE.with(|c| {
        // SAFETY: as in `count_local_send`: the pointer is this thread's own queue, which
        // outlives every read here.
        if let Some(me) = unsafe { c.get().as_ref() } {
            let h = &me.handled;
            h.store(h.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    })
}

/// Runs `fut` to completion on this thread's network engine, if it has one (so a handler
/// that must wait for the network keeps the network moving); `Err(fut)` otherwise.
pub(crate) fn block_on_engine<F: std::future::Future>(fut: F) -> Result<F::Output, F> {
    if IN_ENGINE.with(|i| i.get()) {
        // Already inside the engine (a network task): it cannot be re-entered.
        return Err(fut);
    }
    ENGINE.with(|e| match e.try_borrow() {
        Ok(engine) => match engine.as_ref() {
            Some(rt) => {
                IN_ENGINE.with(|i| i.set(true));
                let out = rt.block_on(fut);
                IN_ENGINE.with(|i| i.set(false));
                Ok(out)
            }
            None => Err(fut),
        },
        Err(_) => Err(fut),
    })
}

/// Runs `f` inside this thread's network engine when the thread hosts one and is not
/// already in it, plainly otherwise. A network task woken from inside its engine is queued
/// locally; woken from outside, Tokio writes the engine's eventfd so a blocked engine wakes
/// up. On an engine core the engine is never blocked while an actor runs, so that write
/// (and the extra `epoll_wait` it causes) is pure cost: two of the nine system calls of a
/// remote one-way message.
pub(crate) fn in_engine_context<R>(f: impl FnOnce() -> R) -> R {
    if IN_ENGINE.with(|i| i.get()) {
        return f();
    }
    ENGINE.with(|e| match e.try_borrow() {
        Ok(engine) => match engine.as_ref() {
            Some(rt) => {
                IN_ENGINE.with(|i| i.set(true));
                // A ready future: block_on polls it once and returns without running tasks.
                let out = rt.block_on(async { f() });
                IN_ENGINE.with(|i| i.set(false));
                out
            }
            None => f(),
        },
        Err(_) => f(),
    })
}

/// Whether this thread hosts a network engine.
pub(crate) fn has_engine() -> bool {
    ENGINE.with(|e| e.try_borrow().map(|e| e.is_some()).unwrap_or(true))
}

/// Resolves when the core has actor work (or must shut down).
struct IdleWait<'a>(&'a CoreQueue);

impl std::future::Future for IdleWait<'_> {
    type Output = ();
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let q = self.0;
        q.engine_waker.register(cx.waker());
        let local_work = LOCAL.with(|l| !l.borrow().is_empty());
        if local_work
            || !q.inject.is_empty()
            || q.shutdown.load(Ordering::SeqCst)
            || q.gate.is_requested()
        {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

impl CoreQueue {
    fn new(gate: Arc<PauseGate>) -> Self {
        CoreQueue {
            gate,
            inject: SegQueue::new(),
            sleeping: CachePadded::new(AtomicBool::new(false)),
            shutdown: AtomicBool::new(false),
            thread: OnceLock::new(),
            engine_slot: std::sync::Mutex::new(None),
            in_engine: CachePadded::new(AtomicBool::new(false)),
            engine_waker: futures::task::AtomicWaker::new(),
            local_sends: CachePadded::new(AtomicU64::new(0)),
            handled: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// How many messages this core's actors have counted with [`count_local_send`].
    /// SeqCst: the reader's SeqCst store or fence before it and this load must not be
    /// reordered (the store-buffering pattern of `LocalDeliveries::rearm`); the same
    /// instruction as an acquire load on x86-64 and on aarch64 without RCpc.
    pub(crate) fn local_sends(&self) -> u64 {
        self.local_sends.load(Ordering::SeqCst)
    }

    /// How many handler calls this core's actors have made (see [`count_handled`]).
    pub(crate) fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }

    /// Hands this core a network engine to drive from now on (and what to poll for it).
    pub(crate) fn install_engine(
        &self,
        rt: tokio::runtime::Runtime,
        probe: Option<Arc<dyn IdleProbe>>,
    ) {
        *self.engine_slot.lock().unwrap_or_else(|e| e.into_inner()) = Some((rt, probe));
        self.wake();
    }

    fn wake(&self) {
        if self.in_engine.load(Ordering::SeqCst) {
            self.engine_waker.wake();
        }
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Wakes the core's thread whether it is parked, in its engine or running.
    fn wake_always(&self) {
        self.engine_waker.wake();
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Queues `task` to run on this core.
    pub(crate) fn schedule(self: &Arc<Self>, task: Arc<dyn Runnable>) {
        let me = Arc::as_ptr(self);
        let task = LOCAL.with(|l| {
            if CURRENT_CORE.with(|c| c.get()) == me {
                l.borrow_mut().push_back(task);
                None
            } else {
                Some(task)
            }
        });
        match task {
            Some(task) => {
                self.inject.push(task);
                // Pairs with the SeqCst stores of `sleeping`/`in_engine` before the core
                // re-checks the queue: either it sees this task or we see it idle and wake it.
                self.wake();
            }
            // Queued by the engine's own network task on this thread: end the engine's
            // idle wait so the actor runs.
            None if self.in_engine.load(Ordering::Relaxed) => self.engine_waker.wake(),
            None => {}
        }
    }

    fn next_task(&self, turn: u32) -> Option<Arc<dyn Runnable>> {
        if turn % INJECT_EVERY == 0 {
            if let Some(t) = self.inject.pop() {
                return Some(t);
            }
        }
        LOCAL
            .with(|l| l.borrow_mut().pop_front())
            .or_else(|| self.inject.pop())
    }

    fn run_loop(&self, idle_spin: Duration) {
        let mut turn = 0u32;
        let mut has_engine = false;
        let mut probe: Option<Arc<dyn IdleProbe>> = None;
        let mut engine_turn_at = Instant::now();
        loop {
            if self.gate.is_requested() {
                self.gate.wait_here();
            }
            if !has_engine {
                if let Some((rt, p)) = self
                    .engine_slot
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    ENGINE.with(|e| *e.borrow_mut() = Some(rt));
                    has_engine = true;
                    probe = p;
                }
            }
            if let Some(task) = self.next_task(turn) {
                turn = turn.wrapping_add(1);
                task.run();
                // Keep the network moving while actors are busy: one non-blocking turn
                // every few actor turns, and at least every ENGINE_MAX_GAP (one turn can
                // be a batch of many messages), so heartbeats never starve.
                if has_engine
                    && (turn % ENGINE_EVERY == 0 || engine_turn_at.elapsed() >= ENGINE_MAX_GAP)
                {
                    if let Some(p) = &probe {
                        in_engine_context(|| p.poll());
                    }
                    let _ = block_on_engine(tokio::task::yield_now());
                    engine_turn_at = Instant::now();
                }
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if has_engine {
                if let Some(p) = probe.as_ref().filter(|p| p.active()) {
                    if self.spin_on_probe(p.as_ref(), idle_spin) {
                        continue;
                    }
                }
                // Idle: block in the network engine until actor work or a packet arrives.
                self.in_engine.store(true, Ordering::SeqCst);
                let _ = block_on_engine(IdleWait(self));
                self.in_engine.store(false, Ordering::SeqCst);
                continue;
            }
            // Idle: spin briefly, then park until woken.
            let spin_until = Instant::now() + idle_spin;
            let mut found = false;
            'spin: while Instant::now() < spin_until {
                for _ in 0..64 {
                    if !self.inject.is_empty() || self.gate.is_requested() {
                        found = true;
                        break 'spin;
                    }
                    std::hint::spin_loop();
                }
            }
            if found {
                continue;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            if self.inject.is_empty()
                && !self.shutdown.load(Ordering::SeqCst)
                && !self.gate.is_requested()
            {
                std::thread::park_timeout(PARK_TIMEOUT);
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }

    /// An idle engine core: spins for `idle_spin` on its actor queues and on `probe`, with
    /// a non-blocking engine turn when the probe finds input and every
    /// [`SPIN_ENGINE_EVERY`]. True if it found work (go round again), false if the core
    /// may block in its engine (the probe was told so).
    fn spin_on_probe(&self, probe: &dyn IdleProbe, idle_spin: Duration) -> bool {
        let found = self.spin_polling(probe, idle_spin);
        // Whatever ends the spin, readers that slept in it are rung from now on.
        if in_engine_context(|| probe.stops_spinning()) {
            let _ = block_on_engine(tokio::task::yield_now());
            return true;
        }
        found
    }

    fn spin_polling(&self, probe: &dyn IdleProbe, idle_spin: Duration) -> bool {
        probe.spins();
        // First a turn: what the last actor turn queued for the network (its writer
        // tasks) goes out now, not after the first interval.
        let _ = block_on_engine(tokio::task::yield_now());
        let start = Instant::now();
        let mut turn_at = start + SPIN_ENGINE_EVERY;
        loop {
            for _ in 0..32 {
                let local_work = LOCAL.with(|l| !l.borrow().is_empty());
                if local_work
                    || !self.inject.is_empty()
                    || self.gate.is_requested()
                    || self.shutdown.load(Ordering::Acquire)
                {
                    return true;
                }
                // Inside the engine: the woken reader is queued locally, no eventfd write.
                if in_engine_context(|| probe.poll()) {
                    let _ = block_on_engine(tokio::task::yield_now());
                    return true;
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if now.duration_since(start) >= idle_spin {
                break;
            }
            if now >= turn_at {
                let _ = block_on_engine(tokio::task::yield_now());
                turn_at = now + SPIN_ENGINE_EVERY;
            }
        }
        false
    }

    fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.engine_waker.wake();
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// One running core executor thread.
pub(crate) struct CoreExecutor {
    pub(crate) queue: Arc<CoreQueue>,
    pub(crate) hw: Option<HwCore>,
    node_tx: Option<std_mpsc::Sender<NodeHandle>>,
    thread: Option<JoinHandle<()>>,
}

impl CoreExecutor {
    /// Starts the executor thread for core `index`, pinned to `hw` when given.
    pub(crate) fn start(
        index: usize,
        hw: Option<HwCore>,
        idle_spin: Duration,
        gate: Arc<PauseGate>,
    ) -> Result<Self, NodeError> {
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<(), NodeError>>();
        let (node_tx, node_rx) = std_mpsc::channel::<NodeHandle>();
        let queue = Arc::new(CoreQueue::new(gate));
        let q = Arc::clone(&queue);
        let pin_to = hw.clone();
        let thread = std::thread::Builder::new()
            .name(format!("lazarus-core-{index}"))
            .spawn(move || {
                if let Some(core) = &pin_to {
                    if let Err(e) = topology::bind_current_thread(core) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let _ = q.thread.set(std::thread::current());
                CURRENT_CORE.with(|c| c.set(Arc::as_ptr(&q)));
                let _ = ready_tx.send(Ok(()));
                // The node handle exists only once every core has started.
                let Ok(node) = node_rx.recv() else { return };
                NodeHandle::set_current(Some(node));
                q.run_loop(idle_spin);
                NodeHandle::set_current(None);
                // The engine (if any) and what is still queued die with this thread.
                ENGINE.with(|e| e.borrow_mut().take());
                CURRENT_CORE.with(|c| c.set(std::ptr::null()));
                LOCAL.with(|l| l.borrow_mut().clear());
            })
            .map_err(|e| NodeError::Executor(e.to_string()))?;
        ready_rx.recv().map_err(|_| {
            NodeError::Executor(format!("core {index} executor died while starting"))
        })??;
        Ok(CoreExecutor {
            queue,
            hw,
            node_tx: Some(node_tx),
            thread: Some(thread),
        })
    }

    /// Hands the executor its node once the node is complete; the core starts running.
    pub(crate) fn attach(&mut self, node: NodeHandle) {
        if let Some(tx) = self.node_tx.take() {
            let _ = tx.send(node);
        }
    }

    /// Stops the executor thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.node_tx.take();
        self.queue.request_shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        while self.queue.inject.pop().is_some() {}
    }
}

impl Drop for CoreExecutor {
    fn drop(&mut self) {
        self.stop();
    }
}
