//! What every contender shares: thread pinning, the receiver's counting logic, and the
//! thread-per-core Tokio layout that mirrors a Lazarus node.

use lazarus::topology::{allowed_cores, bind_current_thread, HwCore};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

/// The cores this process may use, read once before any thread is pinned: hwloc derives
/// the process's allowed set from its threads' bindings, so asking later (with the main
/// thread pinned) would report fewer cores.
pub fn machine_cores() -> &'static [HwCore] {
    static CORES: OnceLock<Vec<HwCore>> = OnceLock::new();
    CORES.get_or_init(|| {
        let cores = allowed_cores().expect("hwloc topology");
        assert!(
            cores.len() >= 2,
            "these benchmarks need 2 cores, found {}",
            cores.len()
        );
        cores
    })
}

/// Binds the calling thread to core `core` with Lazarus's own hwloc binding, the one its
/// executors use, so that every contender's threads sit where Lazarus's do.
pub fn pin_to(core: usize) {
    bind_current_thread(&machine_cores()[core]).expect("pin thread");
}

/// Runs `f` on the calling thread pinned to core `core`, then lets the thread run anywhere
/// again: a Lazarus node must be built from an unpinned thread to see every core.
pub fn pinned_to<R>(core: usize, f: impl FnOnce() -> R) -> R {
    pin_to(core);
    let out = f();
    let all = HwCore {
        logical_index: 0,
        pus: machine_cores()
            .iter()
            .flat_map(|c| c.pus.iter().copied())
            .collect(),
    };
    bind_current_thread(&all).expect("unpin thread");
    out
}

/// The receiver's state, shared by every contender so that each does the same work: count
/// and sum the `u64`s, and answer the pending request once the count reaches its target.
/// Targets are absolute counts, so the request may arrive before, among or after the
/// messages it waits for.
#[derive(Serialize, Deserialize)]
pub struct Counter<R> {
    count: u64,
    sum: u64,
    target: u64,
    #[serde(skip)]
    waiting: Option<R>,
}

impl<R> Default for Counter<R> {
    fn default() -> Self {
        Counter {
            count: 0,
            sum: 0,
            target: 0,
            waiting: None,
        }
    }
}

impl<R> Counter<R> {
    /// Counts one message; returns the reply slot and count when the target is reached.
    #[inline]
    pub fn add(&mut self, amount: u64) -> Option<(R, u64)> {
        self.count += 1;
        self.sum = self.sum.wrapping_add(amount);
        if self.count == self.target {
            self.waiting.take().map(|r| (r, self.count))
        } else {
            None
        }
    }

    /// Registers a request for `target` messages; answers at once if already reached.
    pub fn expect(&mut self, target: u64, reply: R) -> Option<(R, u64)> {
        if self.count >= target {
            Some((reply, self.count))
        } else {
            self.target = target;
            self.waiting = Some(reply);
            None
        }
    }
}

/// Two pinned threads, each driving a current-thread Tokio runtime (the layout of a
/// Lazarus node), plus the client's runtime. Used by the Tokio baseline, kameo and ractor.
pub struct Cores {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The client's runtime, like `Node::block_on`'s.
    pub client: Runtime,
}

impl Cores {
    pub fn new(name: &str) -> Cores {
        let mut cores = Cores {
            handles: Vec::new(),
            stops: Vec::new(),
            threads: Vec::new(),
            client: current_thread_runtime(),
        };
        for core in 0..2 {
            let (handle_tx, handle_rx) = std::sync::mpsc::channel();
            let (stop_tx, stop_rx) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-core-{core}"))
                .spawn(move || {
                    pin_to(core);
                    let rt = current_thread_runtime();
                    handle_tx.send(rt.handle().clone()).expect("bench alive");
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                })
                .expect("spawn core thread");
            cores
                .handles
                .push(handle_rx.recv().expect("core thread started"));
            cores.stops.push(stop_tx);
            cores.threads.push(thread);
        }
        cores
    }

    /// The runtime of core `core`.
    pub fn core(&self, core: usize) -> &Handle {
        &self.handles[core]
    }
}

impl Drop for Cores {
    fn drop(&mut self) {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What Lazarus's executors and `Node::block_on` run on: current-thread, timers enabled.
pub fn current_thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// Times `iters` rounds of `round`.
pub fn timed(iters: u64, mut round: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        round();
    }
    start.elapsed()
}
