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
//! - `actor_ask_cross_core`: the client asks an actor on core 0 to make [`ACTOR_ASKS`]
//!   asks of an actor on core 1, one after the other, and answers with their sum: an
//!   `async fn` handler awaiting each `ctx.ask` (Lazarus), the same with kameo's async
//!   handler awaiting `ActorRef::ask`, and Lazarus's synchronous continuation
//!   (`lazarus_reply_as`: each reply is a message whose handler makes the next ask).
//!   Element: one ask and its reply, actor to actor.
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
mod support;
mod tokio_impl;

use criterion::{BenchmarkId, Criterion, Throughput};
use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::local_messaging::{
    self as spec, ACTIX, ACTOR_ASK, ASK_ROUNDTRIP, KAMEO, LAZARUS, LAZARUS_NO_SPIN,
    LAZARUS_NO_TIMEOUT, LAZARUS_REPLY_AS, RACTOR, SCENARIOS, SPAWN, TELL_CROSS_CORE,
    TELL_SAME_CORE, TOKIO, TOKIO_SPIN,
};
use lazarus_impl::AskVariant;
use std::time::{Duration, SystemTime};

pub use spec::{ACTOR_ASKS, SPAWNS, TELLS};

/// One contender set up for one scenario. Dropping it stops its actors and threads.
pub trait Workload {
    /// Runs `iters` rounds and returns the time they took.
    fn run(&mut self, iters: u64) -> Duration;
}

/// The code that runs `contender` in scenario `group` (the scenarios and contenders are
/// listed in `lazarus_benches::local_messaging`, shared with the results report).
fn workload(group: &str, contender: &str) -> Option<Box<dyn Workload>> {
    Some(match (group, contender) {
        (TELL_SAME_CORE | TELL_CROSS_CORE, _) => {
            let core = usize::from(group == TELL_CROSS_CORE);
            match contender {
                LAZARUS => lazarus_impl::tell(core),
                TOKIO => tokio_impl::tell(core),
                ACTIX => actix_impl::tell(core),
                KAMEO => kameo_impl::tell(core),
                RACTOR => ractor_impl::tell(core),
                _ => return None,
            }
        }
        (ASK_ROUNDTRIP, LAZARUS) => lazarus_impl::ask(AskVariant::Default),
        (ASK_ROUNDTRIP, TOKIO) => tokio_impl::ask(false),
        (ASK_ROUNDTRIP, ACTIX) => actix_impl::ask(),
        (ASK_ROUNDTRIP, KAMEO) => kameo_impl::ask(),
        (ASK_ROUNDTRIP, RACTOR) => ractor_impl::ask(),
        (ASK_ROUNDTRIP, LAZARUS_NO_TIMEOUT) => lazarus_impl::ask(AskVariant::NoTimeout),
        (ASK_ROUNDTRIP, LAZARUS_NO_SPIN) => lazarus_impl::ask(AskVariant::NoSpin),
        (ASK_ROUNDTRIP, TOKIO_SPIN) => tokio_impl::ask(true),
        (SPAWN, LAZARUS) => lazarus_impl::spawn(),
        (SPAWN, TOKIO) => tokio_impl::spawn(),
        (SPAWN, ACTIX) => actix_impl::spawn(),
        (SPAWN, KAMEO) => kameo_impl::spawn(),
        (SPAWN, RACTOR) => ractor_impl::spawn(),
        (ACTOR_ASK, LAZARUS) => lazarus_impl::actor_ask(true),
        (ACTOR_ASK, LAZARUS_REPLY_AS) => lazarus_impl::actor_ask(false),
        (ACTOR_ASK, KAMEO) => kameo_impl::actor_ask(),
        _ => return None,
    })
}

/// The core the client (the bench's main thread) is pinned to while it measures: the
/// requester's core of the ask scenario, the sender's of the tell scenarios, the other
/// core than the spawned actors'. In `tell_same_core` it shares core 0 with both actors on
/// purpose: its two wake-ups per round are then context switches on one CPU rather than
/// cross-core wake-ups, which cost tens of µs each on a VM and would otherwise be a large,
/// contender-independent part of a 10 000-message round.
const CLIENT_CORE: usize = 0;

/// Short runs: 23 benchmarks must finish in a few minutes on a 2-core machine.
fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
        .output_directory(&criterion_dir())
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
        for &name in scenario.contenders {
            // Built on first use (so not at all when filtered out), dropped, and so torn
            // down, before the next contender starts.
            let mut built = None;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter_custom(|iters| {
                    let workload = built.get_or_insert_with(|| {
                        workload(scenario.group, name)
                            .unwrap_or_else(|| panic!("no workload for {}/{name}", scenario.group))
                    });
                    support::pinned_to(CLIENT_CORE, || workload.run(iters))
                })
            });
        }
        group.finish();
    }
    c.final_summary();
    summary(started);
}

/// Prints the table of this run's medians, Lazarus/contender ratios and the issue's
/// targets, and writes it to `<criterion dir>/lazarus-summary.md`.
fn summary(since: SystemTime) {
    let dir = criterion_dir();
    let measured = spec::measured(&dir, since);
    if measured.is_empty() {
        return;
    }
    let machine = lazarus_benches::machine::Machine::this();
    let text = format!(
        "# Lazarus local messaging\n\n\
         Machine: {}. Round: {TELLS} messages (tell), 1 ask, {SPAWNS} spawns, \
         {ACTOR_ASKS} asks actor to actor. Ratio: \
         Lazarus's median time over the contender's (below 1, Lazarus is faster).\n\n{}",
        machine.describe(),
        spec::table(&measured)
    );
    println!("\n{text}");
    let path = dir.join("lazarus-summary.md");
    match std::fs::write(&path, &text) {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
