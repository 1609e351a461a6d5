//! Set checkpoint coordination: the time to stop every core of a node between two actor
//! turns and let them go again (what a coordinated checkpoint of a correlated set costs
//! before any state is serialized), against the number of busy actors on the node, 1 to
//! 256. The baseline in the same run is the node with a single actor; the target is
//! ≤ 200 µs at 64 actors.
//!
//! Every actor keeps a token moving around a ring of all actors (spread over the cores),
//! so the cores are busy when the pause is requested, as in a real run.
//!
//! The counts and the summary table are shared with the results report
//! (`lazarus_benches::coordination`); criterion's command-line options (e.g.
//! `--measurement-time`) override the defaults set here.

use criterion::{BenchmarkId, Criterion};
use lazarus::{messages, Actor, ActorRef, Node};
use lazarus_benches::coordination::{self, ACTORS, FUNCTION, GROUP};
use lazarus_benches::criterion_data::criterion_dir;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Hop {
    next: Option<ActorRef<Hop>>,
    hops: u64,
}

#[messages]
impl Hop {
    #[message]
    fn link(&mut self, next: ActorRef<Hop>) {
        self.next = Some(next);
    }

    #[message]
    fn token(&mut self) {
        self.hops += 1;
        if let Some(n) = &self.next {
            let _ = n.tell(Token);
        }
    }
}

fn ring(node: &Node, k: usize) -> Vec<ActorRef<Hop>> {
    let actors: Vec<_> = (0..k)
        .map(|_| node.spawn(Hop::default()).unwrap())
        .collect();
    for (i, a) in actors.iter().enumerate() {
        a.tell(Link {
            next: actors[(i + 1) % k].clone(),
        })
        .unwrap();
    }
    // A few tokens per core keep every core busy.
    for a in actors.iter().take(4.min(k)) {
        a.tell(Token).unwrap();
    }
    actors
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group(GROUP);
    for k in ACTORS {
        let node = Node::builder().build().unwrap();
        let actors = ring(&node, k);
        group.bench_with_input(BenchmarkId::new(FUNCTION, k), &k, |b, _| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += node
                        .handle()
                        .measure_checkpoint_coordination(Duration::from_secs(5))
                        .expect("every core pauses");
                    // Let the ring run between two checkpoints.
                    std::thread::sleep(Duration::from_micros(200));
                }
                total
            })
        });
        for a in &actors {
            a.stop();
        }
        node.shutdown();
    }
    group.finish();
}

fn main() {
    let started = SystemTime::now();
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .output_directory(&criterion_dir())
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
    let measured = coordination::measured(&criterion_dir(), started);
    if measured.is_empty() {
        return;
    }
    let md = coordination::table(&measured);
    println!("\nSet checkpoint coordination (pause + resume of every core):\n{md}");
    let out = criterion_dir().join("lazarus-coordination-summary.md");
    if let Err(e) = std::fs::write(&out, md) {
        eprintln!("could not write {}: {e}", out.display());
    }
}
