//! Local messaging: Lazarus against a plain Tokio baseline and against actix, kameo and
//! ractor, all doing the same work in the same run.
//!
//! Scenarios (criterion groups; one round is timed, criterion reports per element):
//! - `tell_same_core`: a sender actor on core 0 tells [`TELLS`] `u64` messages to a
//!   receiver on core 0, which answers a pending request (deferred reply) once it has
//!   counted them all. Element: one message.
//! - `tell_cross_core`: the same with the receiver on core 1.
//! - `ask_roundtrip_cross_core`: a client on core 0 asks an actor on core 1 and awaits the
//!   reply, again and again. Element: one round trip.
//! - `spawn`: the client spawns [`SPAWNS`] actors on core 1 and sends each one message,
//!   which it forwards to a collector before stopping itself; the collector answers once
//!   all have arrived. Element: one actor's whole life.
//!
//! Fairness. Every contender runs on the layout of a Lazarus node: one OS thread per core,
//! pinned with Lazarus's own hwloc binding. Lazarus runs its own executors there; the
//! others a current-thread Tokio runtime each (actix: its System thread and one Arbiter
//! thread, on actix-rt's default runtimes). The client is the bench's main thread, pinned
//! while it measures (see [`CLIENT_CORE`]), awaiting on a current-thread runtime
//! of its own (for Lazarus `Node::block_on`, which is exactly that). Every mailbox is
//! unbounded (Lazarus has no other kind; kameo is given `mailbox::unbounded`, actix's
//! `do_send` ignores capacity, ractor's is unbounded), every receiver runs the same
//! [`support::Counter`], and every deferred reply is a oneshot. kameo and ractor are not
//! run on a multi-thread runtime: work stealing would let both actors share one worker, so
//! "cross-core" would not be cross-core; spawning each actor onto its own core's runtime
//! makes them do exactly what the others do. One difference is Lazarus's by design: its
//! idle cores spin (50 µs by default) before they park, where Tokio's park at once; the ask
//! scenario therefore also runs Lazarus without spinning and a spinning Tokio baseline, to
//! show what the difference is made of.
//!
//! After criterion, `main` prints a table of medians, Lazarus/contender ratios and the
//! issue's targets (PASS/MISS), and writes it to `<criterion dir>/lazarus-summary.md`.

mod actix_impl;
mod kameo_impl;
mod lazarus_impl;
mod ractor_impl;
mod summary;
mod support;
mod tokio_impl;

use criterion::{BenchmarkId, Criterion, Throughput};
use lazarus_impl::AskVariant;
use std::time::{Duration, SystemTime};

/// Messages per round of the tell scenarios (a burst that stays in the caches).
pub const TELLS: u64 = 10_000;
/// Actors per round of the spawn scenario.
pub const SPAWNS: u64 = 100;

/// Contender names: criterion bench ids (so directory names) and table rows.
pub const LAZARUS: &str = "lazarus";
pub const TOKIO: &str = "tokio_mpsc";
pub const ACTIX: &str = "actix";
pub const KAMEO: &str = "kameo";
pub const RACTOR: &str = "ractor";
/// Diagnostic variants of the ask scenario (see `lazarus_impl::AskVariant` and
/// `tokio_impl::ask`): they explain the ratios, the targets do not use them.
pub const LAZARUS_NO_TIMEOUT: &str = "lazarus_no_timeout";
pub const LAZARUS_NO_SPIN: &str = "lazarus_no_spin";
pub const TOKIO_SPIN: &str = "tokio_mpsc_spin";

/// One contender set up for one scenario. Dropping it stops its actors and threads.
pub trait Workload {
    /// Runs `iters` rounds and returns the time they took.
    fn run(&mut self, iters: u64) -> Duration;
}

type Make = fn() -> Box<dyn Workload>;

/// The core the client (the bench's main thread) is pinned to while it measures: the
/// requester's core of the ask scenario, the sender's of the tell scenarios, the other
/// core than the spawned actors'. In `tell_same_core` it shares core 0 with both actors on
/// purpose: its two wake-ups per round are then context switches on one CPU rather than
/// cross-core wake-ups, which cost tens of µs each on a VM and would otherwise be a large,
/// contender-independent part of a 10 000-message round.
const CLIENT_CORE: usize = 0;

/// A criterion group: every contender doing the same rounds.
pub struct Scenario {
    pub group: &'static str,
    /// Elements in one round (criterion's throughput unit).
    pub elements: u64,
    /// What an element is, for the table.
    pub unit: &'static str,
    pub contenders: &'static [(&'static str, Make)],
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        group: "tell_same_core",
        elements: TELLS,
        unit: "msg",
        contenders: &[
            (LAZARUS, || lazarus_impl::tell(0)),
            (TOKIO, || tokio_impl::tell(0)),
            (ACTIX, || actix_impl::tell(0)),
            (KAMEO, || kameo_impl::tell(0)),
            (RACTOR, || ractor_impl::tell(0)),
        ],
    },
    Scenario {
        group: "tell_cross_core",
        elements: TELLS,
        unit: "msg",
        contenders: &[
            (LAZARUS, || lazarus_impl::tell(1)),
            (TOKIO, || tokio_impl::tell(1)),
            (ACTIX, || actix_impl::tell(1)),
            (KAMEO, || kameo_impl::tell(1)),
            (RACTOR, || ractor_impl::tell(1)),
        ],
    },
    Scenario {
        group: "ask_roundtrip_cross_core",
        elements: 1,
        unit: "ask",
        contenders: &[
            (LAZARUS, || lazarus_impl::ask(AskVariant::Default)),
            (TOKIO, || tokio_impl::ask(false)),
            (ACTIX, actix_impl::ask),
            (KAMEO, kameo_impl::ask),
            (RACTOR, ractor_impl::ask),
            (LAZARUS_NO_TIMEOUT, || {
                lazarus_impl::ask(AskVariant::NoTimeout)
            }),
            (LAZARUS_NO_SPIN, || lazarus_impl::ask(AskVariant::NoSpin)),
            (TOKIO_SPIN, || tokio_impl::ask(true)),
        ],
    },
    Scenario {
        group: "spawn",
        elements: SPAWNS,
        unit: "actor",
        contenders: &[
            (LAZARUS, lazarus_impl::spawn),
            (TOKIO, tokio_impl::spawn),
            (ACTIX, actix_impl::spawn),
            (KAMEO, kameo_impl::spawn),
            (RACTOR, ractor_impl::spawn),
        ],
    },
];

/// Short runs: 23 benchmarks must finish in a few minutes on a 2-core machine.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
        .output_directory(&summary::criterion_dir())
        .configure_from_args()
}

fn main() {
    // Read the topology while no thread is pinned (see `support::machine_cores`).
    support::machine_cores();
    let started = SystemTime::now();
    let mut c = config();
    for scenario in SCENARIOS {
        let mut group = c.benchmark_group(scenario.group);
        group.throughput(Throughput::Elements(scenario.elements));
        for (name, make) in scenario.contenders {
            // Built on first use (so not at all when filtered out), dropped, and so torn
            // down, before the next contender starts.
            let mut workload = None;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| {
                    let workload = workload.get_or_insert_with(make);
                    support::pinned_to(CLIENT_CORE, || workload.run(iters))
                })
            });
        }
        group.finish();
    }
    c.final_summary();
    summary::report(started);
}
