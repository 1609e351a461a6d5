//! The CPU time an app spends in its numerical kernel, per node, and the CPU time of the
//! whole process over the app's timed part: the apps' measurement mode for separating
//! what the computation costs from what the runtime around it costs.
//!
//! Wall-time ratios on a shared VM vary by ±5-15% between runs, mostly because the memory
//! bandwidth a stencil sweep gets varies; the runtime's own work does not. A node sums the
//! *thread CPU time* of every kernel call ([`KernelTime::measure`]), so neither preemption
//! nor other nodes sharing its cores count, reads its *process CPU time* (every thread:
//! cores, network, checkpoint writer) when the timed part starts and when its share of it
//! ends, and prints both in a `KERNEL` line ([`KernelTime::line`]). The process CPU of the
//! window minus the kernel's is what the runtime cost while the app computed; start-up,
//! gathering the result and shutting down are outside it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Thread CPU nanoseconds spent in the kernel, summed over this process's threads, and
/// the process's CPU time over the timed window. Measures nothing until
/// [`KernelTime::enable`]d: each measurement reads the thread's CPU clock twice, a system
/// call (~0.6 µs on a VM), too much to pay unasked at fine grain.
#[derive(Debug, Default)]
pub struct KernelTime {
    enabled: AtomicBool,
    nanos: AtomicU64,
    calls: AtomicU64,
    /// Process CPU nanoseconds at [`KernelTime::start_window`] and at the latest
    /// [`KernelTime::end_window`].
    window_start: AtomicU64,
    window_end: AtomicU64,
}

impl KernelTime {
    /// An empty, disabled account (for a `static`).
    pub const fn new() -> Self {
        KernelTime {
            enabled: AtomicBool::new(false),
            nanos: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            window_start: AtomicU64::new(0),
            window_end: AtomicU64::new(0),
        }
    }

    /// Starts measuring.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether [`KernelTime::enable`] was called.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Runs `kernel` and, when enabled, adds the CPU time the calling thread spent in it.
    pub fn measure<R>(&self, kernel: impl FnOnce() -> R) -> R {
        if !self.is_enabled() {
            return kernel();
        }
        let start = cpu_nanos(libc::CLOCK_THREAD_CPUTIME_ID);
        let out = kernel();
        let spent = cpu_nanos(libc::CLOCK_THREAD_CPUTIME_ID).saturating_sub(start);
        self.nanos.fetch_add(spent, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// The timed part starts: reads the process's CPU clock.
    pub fn start_window(&self) {
        if self.is_enabled() {
            let now = cpu_nanos(libc::CLOCK_PROCESS_CPUTIME_ID);
            self.window_start.store(now, Ordering::Relaxed);
            self.window_end.store(now, Ordering::Relaxed);
        }
    }

    /// Part of this node's work in the timed part is done (a tile's last step): the
    /// window ends at the last such call.
    pub fn end_window(&self) {
        if self.is_enabled() {
            let now = cpu_nanos(libc::CLOCK_PROCESS_CPUTIME_ID);
            self.window_end.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Kernel CPU seconds measured so far.
    pub fn seconds(&self) -> f64 {
        self.nanos.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Process CPU seconds between [`KernelTime::start_window`] and the last
    /// [`KernelTime::end_window`].
    pub fn window_seconds(&self) -> f64 {
        let (start, end) = (
            self.window_start.load(Ordering::Relaxed),
            self.window_end.load(Ordering::Relaxed),
        );
        end.saturating_sub(start) as f64 / 1e9
    }

    /// `KERNEL app=<app> rank=<rank> cpu_s=<kernel> window_cpu_s=<process> calls=<n>`:
    /// what each node prints when its part is done (`lazarus_benches::runs::Run::kernel_cpu`
    /// sums them). After a restart it counts only the replacement process.
    pub fn line(&self, app: &str, rank: u16) -> String {
        format!(
            "KERNEL app={app} rank={rank} cpu_s={:.6} window_cpu_s={:.6} calls={}",
            self.seconds(),
            self.window_seconds(),
            self.calls.load(Ordering::Relaxed)
        )
    }
}

/// CPU time (user + system) of `clock`, in nanoseconds; 0 if it cannot be read.
fn cpu_nanos(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call, and the
    // thread and process CPU clocks exist on every Linux; on failure `ts` is left as
    // zero, which we report as 0.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ms: u64) {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[test]
    fn busy_work_is_counted_and_sleeping_is_not() {
        let account = KernelTime::new();
        account.measure(|| spin(5));
        assert_eq!(
            account.line("x", 0).split(' ').next_back(),
            Some("calls=0"),
            "disabled"
        );
        account.enable();
        account.measure(|| spin(60));
        account.measure(|| std::thread::sleep(std::time::Duration::from_millis(200)));
        let s = account.seconds();
        // The spin ran ~60 ms of CPU (less if the thread was preempted); the sleep added
        // next to nothing, so the total is far below the 260 ms of wall time.
        assert!(s > 0.01 && s < 0.15, "kernel CPU {s} s");
        assert_eq!(
            account
                .line("demo", 3)
                .split(' ')
                .take(3)
                .collect::<Vec<_>>(),
            ["KERNEL", "app=demo", "rank=3"]
        );
    }

    #[test]
    fn the_window_holds_the_whole_process_and_ends_at_the_last_finish() {
        let account = KernelTime::new();
        account.enable();
        account.start_window();
        // Work outside any kernel, on another thread: the window counts it.
        std::thread::spawn(|| spin(60)).join().unwrap();
        account.end_window();
        let at_first_end = account.window_seconds();
        account.measure(|| spin(20));
        account.end_window();
        let window = account.window_seconds();
        assert!(at_first_end > 0.01, "window {at_first_end} s");
        assert!(window > at_first_end, "a later end extends the window");
        assert!(
            window >= account.seconds(),
            "the kernel ran inside the window"
        );
    }
}
