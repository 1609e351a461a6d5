//! Core executors: one OS thread per core, bound to it with hwloc, running the actors
//! placed on that core and nothing else, so an actor never migrates.
//!
//! Each core has a run queue of actors with pending work: a thread-local deque for actors
//! woken by actors on the same core (no atomics) and a lock-free inject queue for wake-ups
//! from other threads. An idle core spins for a short, configurable time before it parks,
//! as HPC progress engines do: a message from another core is then picked up in well under
//! a microsecond instead of paying an OS wake-up.

use crate::error::NodeError;
use crate::node::NodeHandle;
use crate::topology::{self, HwCore};
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// Something a core can run: an actor with pending work. It reschedules itself if work is
/// left after its turn.
pub(crate) trait Runnable: Send + Sync {
    fn run(self: Arc<Self>);
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
}

thread_local! {
    /// The core queue this thread runs (null on other threads) and its local deque.
    static LOCAL: RefCell<(*const CoreQueue, VecDeque<Arc<dyn Runnable>>)> =
        const { RefCell::new((std::ptr::null(), VecDeque::new())) };
}

impl CoreQueue {
    fn new() -> Self {
        CoreQueue {
            inject: SegQueue::new(),
            sleeping: CachePadded::new(AtomicBool::new(false)),
            shutdown: AtomicBool::new(false),
            thread: OnceLock::new(),
        }
    }

    /// Queues `task` to run on this core.
    pub(crate) fn schedule(self: &Arc<Self>, task: Arc<dyn Runnable>) {
        let me = Arc::as_ptr(self);
        let task = LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            if l.0 == me {
                l.1.push_back(task);
                None
            } else {
                Some(task)
            }
        });
        if let Some(task) = task {
            self.inject.push(task);
            // Pairs with the SeqCst store of `sleeping` before the core re-checks the queue:
            // either the core sees this task or we see it asleep and wake it.
            if self.sleeping.load(Ordering::SeqCst) {
                if let Some(t) = self.thread.get() {
                    t.unpark();
                }
            }
        }
    }

    fn next_task(&self, turn: u32) -> Option<Arc<dyn Runnable>> {
        if turn % INJECT_EVERY == 0 {
            if let Some(t) = self.inject.pop() {
                return Some(t);
            }
        }
        LOCAL
            .with(|l| l.borrow_mut().1.pop_front())
            .or_else(|| self.inject.pop())
    }

    fn run_loop(&self, idle_spin: Duration) {
        let mut turn = 0u32;
        loop {
            if let Some(task) = self.next_task(turn) {
                turn = turn.wrapping_add(1);
                task.run();
                continue;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            // Idle: spin briefly, then park until woken.
            let spin_until = Instant::now() + idle_spin;
            let mut found = false;
            'spin: while Instant::now() < spin_until {
                for _ in 0..64 {
                    if !self.inject.is_empty() {
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
            if self.inject.is_empty() && !self.shutdown.load(Ordering::SeqCst) {
                std::thread::park_timeout(PARK_TIMEOUT);
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }

    fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
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
    ) -> Result<Self, NodeError> {
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<(), NodeError>>();
        let (node_tx, node_rx) = std_mpsc::channel::<NodeHandle>();
        let queue = Arc::new(CoreQueue::new());
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
                LOCAL.with(|l| l.borrow_mut().0 = Arc::as_ptr(&q));
                let _ = ready_tx.send(Ok(()));
                // The node handle exists only once every core has started.
                let Ok(node) = node_rx.recv() else { return };
                NodeHandle::set_current(Some(node));
                q.run_loop(idle_spin);
                NodeHandle::set_current(None);
                // Drop what is still queued here, on this thread.
                LOCAL.with(|l| {
                    let mut l = l.borrow_mut();
                    l.0 = std::ptr::null();
                    l.1.clear();
                });
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
