//! `ring`: N actors in a ring spread over all nodes and cores pass a token M hops.
//!
//! Every actor folds its index into the token's checksum; the answer is verified against
//! the same fold computed sequentially.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};

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
        self.done.take().send(sum);
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
    let mut spec = ClusterSpec::from_env()?;
    if let Some(c) = args.cores {
        spec.cores = Some(c);
    }
    let cluster = Cluster::start_with(spec, Node::builder())?;
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    let cores = cluster.num_cores();
    // Every node must agree on the ring size: it defaults to 4 actors per core of node 0's
    // shape, so pass --actors explicitly when nodes differ.
    let actors = args.actors.unwrap_or(4 * cores * size).max(1);
    // Each node lists its share up front: a bound keeps a typo from exhausting memory.
    const MAX_ACTORS: usize = 1 << 24;
    if actors > MAX_ACTORS {
        return Err(format!("--actors must be at most {MAX_ACTORS}").into());
    }
    // Actor i lives on node i % size as that node's (i / size)-th actor, so its id is
    // known everywhere without any lookup service.
    let id_of =
        |i: usize| ActorId::new((i % size) as u16, (i / size) as u64).ok_or("too many actors");
    let mine: Vec<usize> = (0..actors).filter(|i| i % size == rank).collect();
    for &i in &mine {
        let r = cluster.spawn(RingNode {
            index: i as u64,
            next: None,
            first: None,
            done: ReplyTo::none(),
        })?;
        expect_id(r, id_of(i)?, format!("actor {i}"))?;
    }
    let resolve = |i: usize| -> Result<ActorRef<RingNode>, Box<dyn std::error::Error>> {
        Ok(cluster.handle().actor_ref::<RingNode>(id_of(i)?)?)
    };
    for &i in &mine {
        resolve(i)?
            .tell(Link {
                next: resolve((i + 1) % actors)?,
                first: resolve(0)?,
            })
            .map_err(|e| e.to_string())?;
    }
    // Nobody sends to a remote actor before it exists.
    cluster.barrier()?;
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let started = cluster.begin_timed_part();
    let checksum = cluster.block_on(resolve(0)?.ask(Start { hops: args.hops }).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    let verified = checksum == expected_checksum(actors as u64, args.hops);
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("ring")
            .field("nodes", size)
            .field("cores", cores)
            .field("actors", actors)
            .field("hops", args.hops)
            .hex("checksum", checksum)
            .elapsed(elapsed)
            .field("hops_per_s", format!("{:.0}", args.hops as f64 / elapsed)),
        verified,
        failure: "checksum mismatch".into(),
    })
}
