//! `ring`: N actors in a ring spread over all cores pass a token M hops.
//!
//! Every actor folds its index into the token's checksum; the answer is verified against
//! the same fold computed sequentially.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, Node, ReplyTo};
use lazarus_apps::{init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Pass a token around a ring of actors spread over all cores.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Actors in the ring (default: 4 per core).
    #[arg(long)]
    actors: Option<usize>,
    /// Token hops (messages) in total.
    #[arg(long, default_value_t = 1_000_000)]
    hops: u64,
    /// Cores to use (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
}

#[derive(Actor, Serialize, Deserialize)]
struct RingNode {
    index: u64,
    next: Option<ActorRef<RingNode>>,
    first: Option<ActorRef<RingNode>>,
    #[serde(skip)]
    done: ReplyTo<u64>,
}

#[messages]
impl RingNode {
    #[message]
    fn link(&mut self, next: ActorRef<RingNode>, first: ActorRef<RingNode>) {
        self.next = Some(next);
        self.first = Some(first);
    }

    /// Starts the token; replies with the checksum when the last hop arrives.
    #[message]
    fn start(&mut self, hops: u64, reply: ReplyTo<u64>) {
        self.done = reply;
        self.forward(hops, 0);
    }

    #[message]
    fn token(&mut self, left: u64, sum: u64) {
        self.forward(left, mix(sum, self.index));
    }

    #[message]
    fn finished(&mut self, sum: u64) {
        std::mem::take(&mut self.done).send(sum);
    }
}

impl RingNode {
    fn forward(&mut self, left: u64, sum: u64) {
        let sent = if left == 0 {
            self.first
                .as_ref()
                .map(|f| f.tell(Finished { sum }).is_ok())
        } else {
            self.next.as_ref().map(|n| {
                n.tell(Token {
                    left: left - 1,
                    sum,
                })
                .is_ok()
            })
        };
        if sent != Some(true) {
            tracing::error!(
                index = self.index,
                "ring is broken: token could not be forwarded"
            );
        }
    }
}

fn expected_checksum(actors: u64, hops: u64) -> u64 {
    // Hop k (1-based) lands on actor k mod N.
    (1..=hops).fold(0, |sum, k| mix(sum, k % actors))
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut builder = Node::builder();
    if let Some(c) = args.cores {
        builder = builder.cores(c);
    }
    let node = builder.build()?;
    let cores = node.num_cores();
    let actors = args.actors.unwrap_or(4 * cores).max(1);
    let ring: Vec<ActorRef<RingNode>> = (0..actors)
        .map(|i| {
            node.spawn(RingNode {
                index: i as u64,
                next: None,
                first: None,
                done: ReplyTo::none(),
            })
        })
        .collect::<Result<_, _>>()?;
    for (i, a) in ring.iter().enumerate() {
        a.tell(Link {
            next: ring[(i + 1) % actors].clone(),
            first: ring[0].clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    let checksum = node.block_on(ring[0].ask(Start { hops: args.hops }).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    node.shutdown();

    let verified = checksum == expected_checksum(actors as u64, args.hops);
    println!(
        "{}",
        ResultLine::new("ring")
            .field("nodes", 1)
            .field("cores", cores)
            .field("actors", actors)
            .field("hops", args.hops)
            .field("checksum", format!("{checksum:#018x}"))
            .field("elapsed_s", format!("{elapsed:.6}"))
            .field("hops_per_s", format!("{:.0}", args.hops as f64 / elapsed))
            .finish(verified)
    );
    if verified {
        Ok(())
    } else {
        Err("checksum mismatch".into())
    }
}
