//! A cluster `main` on the public API: every node spawns its share of a ring of actors,
//! a token goes round the ring across the nodes, rank 0 checks the sum it brings back,
//! prints a `RESULT` line, and all nodes leave together.
//!
//! One node: `cargo run --example cluster_ring` (`cargo test` runs it too). Four, under
//! the launcher, surviving a SIGKILL of any node:
//!
//! ```sh
//! cargo build --release -p lazarus-cli -p lazarus --example cluster_ring
//! target/release/lazarus run -n 4 --ft on -- target/release/examples/cluster_ring
//! ```

use lazarus::prelude::*;
use serde::{Deserialize, Serialize};

/// Hops the token makes.
const HOPS: u64 = 20_000;

/// One actor of the ring: it adds its index to the token and passes it on.
#[derive(Actor, Serialize, Deserialize)]
struct Hop {
    index: u64,
    next: Option<ActorRef<Hop>>,
    first: Option<ActorRef<Hop>>,
    // The first actor keeps `main`'s ask here until the token is back.
    done: ReplyTo<u64>,
}

#[messages]
impl Hop {
    #[message]
    fn link(&mut self, next: ActorRef<Hop>, first: ActorRef<Hop>) {
        self.next = Some(next);
        self.first = Some(first);
    }

    #[message]
    fn start(&mut self, reply: ReplyTo<u64>) {
        self.done = reply;
        self.pass(HOPS, 0);
    }

    #[message]
    fn token(&mut self, left: u64, sum: u64) {
        self.pass(left, sum + self.index);
    }

    #[message]
    fn back(&mut self, sum: u64) {
        self.done.take().send(sum);
    }
}

impl Hop {
    fn pass(&mut self, left: u64, sum: u64) {
        let sent = match (left, &self.first, &self.next) {
            (0, Some(first), _) => first.tell(Back { sum }).is_ok(),
            (_, _, Some(next)) => next
                .tell(Token {
                    left: left - 1,
                    sum,
                })
                .is_ok(),
            _ => false,
        };
        if !sent {
            eprintln!("actor {}: the ring is broken", self.index);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Alone, or the node the launcher (or Slurm) started: rank and peers from the
    // environment.
    let cluster = Cluster::start()?;
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    let actors = 2 * size;
    // Ids are (rank, spawn order): actor i is the (i / size)-th spawned on node i % size,
    // so every node can name every actor without asking.
    let id_of = |i: usize| ActorId::new((i % size) as u16, (i / size) as u64).ok_or("too many");
    let mine: Vec<usize> = (0..actors).filter(|i| i % size == rank).collect();
    for &i in &mine {
        let hop = cluster.spawn(Hop {
            index: i as u64,
            next: None,
            first: None,
            done: ReplyTo::none(),
        })?;
        assert_eq!(hop.id(), id_of(i)?, "spawned in order");
    }
    let at = |i: usize| -> Result<ActorRef<Hop>, Box<dyn std::error::Error>> {
        Ok(cluster.handle().actor_ref::<Hop>(id_of(i)?)?)
    };
    for &i in &mine {
        let link = Link {
            next: at((i + 1) % actors)?,
            first: at(0)?,
        };
        at(i)?.tell(link).map_err(|e| e.to_string())?;
    }
    // Every node has linked its actors before the token starts.
    cluster.barrier()?;
    if rank != 0 {
        return cluster.leave_after_rank0();
    }
    let sum = cluster.block_on(at(0)?.ask(Start {}).no_timeout())?;
    // Hop k (from 1) lands on actor k mod actors, which adds its index.
    let expected: u64 = (1..=HOPS).map(|k| k % actors as u64).sum();
    cluster.report_and_leave(|| Verdict {
        result: ResultLine::new("cluster_ring")
            .field("nodes", size)
            .field("actors", actors)
            .field("sum", sum),
        verified: sum == expected,
        failure: format!("the token brought back {sum}, expected {expected}"),
    })
}

#[test]
fn the_token_goes_round_the_ring_and_rank_0_reports() {
    main().expect("the example runs");
}
