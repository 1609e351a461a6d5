//! Set checkpoint coordination: the time to stop every core of a node between two actor
//! turns and let them go again (what a coordinated checkpoint of a correlated set costs
//! before any state is serialized), against the number of busy actors on the node, 1 to
//! 256. The baseline in the same run is the node with a single actor; the target is
//! ≤ 200 µs at 64 actors.
//!
//! Every actor keeps a token moving around a ring of all actors (spread over the cores),
//! so the cores are busy when the pause is requested, as in a real run.

use criterion::{BenchmarkId, Criterion};
use lazarus::{messages, Actor, ActorRef, Node};
use serde::{Deserialize, Serialize};
use std::time::Duration;

const COUNTS: [usize; 5] = [1, 16, 64, 128, 256];

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
    let mut group = c.benchmark_group("checkpoint_coordination");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for k in COUNTS {
        let node = Node::builder().build().unwrap();
        let actors = ring(&node, k);
        group.bench_with_input(BenchmarkId::new("busy_actors", k), &k, |b, _| {
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

fn median_ns(k: usize) -> Option<f64> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/criterion/checkpoint_coordination/busy_actors/{k}/new/estimates.json"
    ));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn summary() {
    let base = median_ns(1);
    let mut md = String::from(
        "| busy actors on the node | coordination (µs, median) | vs 1 actor | target |\n|---|---|---|---|\n",
    );
    for k in COUNTS {
        let Some(ns) = median_ns(k) else { continue };
        let target = if k == 64 {
            if ns <= 200_000.0 {
                "≤ 200 µs: PASS"
            } else {
                "≤ 200 µs: MISS"
            }
        } else {
            ""
        };
        md.push_str(&format!(
            "| {k} | {:.1} | {:.2} | {target} |\n",
            ns / 1e3,
            base.map_or(f64::NAN, |b| ns / b)
        ));
    }
    println!("\nSet checkpoint coordination (pause + resume of every core):\n{md}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/criterion/lazarus-coordination-summary.md");
    let _ = std::fs::write(out, md);
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    summary();
}
