//! `pingpong`: two actors bounce a payload, NetPIPE style, over a sweep of sizes; prints
//! latency (half round trip) and bandwidth per size. Alone, the two actors sit on different
//! cores of one node (intra-node); in a cluster, on nodes 0 and 1 (inter-node).
//!
//! Each bounce flips the payload's bytes in place on the pong side, so the final content
//! proves every round trip happened and nothing was lost or duplicated.
//!
//! `--order-sensitive` makes the pong side an order-sensitive actor: with recovery on, each
//! ball it receives is a logged determinant, and its answer leaves only once the event
//! loggers hold it (the cost measured against a deterministic pong).

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, CoreId, Payload, ReplyTo};
use lazarus_apps::{init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Two actors on different cores bounce a payload over a sweep of sizes.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Smallest payload in bytes.
    #[arg(long, default_value_t = 8)]
    min_size: usize,
    /// Largest payload in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Round trips per size for the smallest size (fewer for large sizes).
    #[arg(long, default_value_t = 10_000)]
    iters: u64,
    /// The pong actor is order-sensitive (its deliveries are determinants).
    #[arg(long)]
    order_sensitive: bool,
    /// In a cluster, put both actors on node 0 (core 0 and its last core) instead of on
    /// nodes 0 and 1: intra-node ping-pong with the cluster's recovery settings.
    #[arg(long)]
    same_node: bool,
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Pong;

#[messages]
impl Pong {
    #[message]
    fn ball(&mut self, payload: Payload, back: ActorRef<Ping>) {
        bounce(payload, &back);
    }
}

/// The same pong, declared order-sensitive.
mod ordered {
    use super::{bounce, Ping};
    use lazarus::{messages, Actor, ActorRef, Payload};
    use serde::{Deserialize, Serialize};

    #[derive(Actor, Serialize, Deserialize, Default)]
    #[actor(order_sensitive)]
    pub struct OrderedPong;

    #[messages]
    impl OrderedPong {
        #[message]
        pub fn ball(&mut self, payload: Payload, back: ActorRef<Ping>) {
            bounce(payload, &back);
        }
    }
}
use ordered::OrderedPong;

/// Touches the data the way a real consumer would (flips every byte) and sends it back.
fn bounce(mut payload: Payload, back: &ActorRef<Ping>) {
    for b in payload.iter_mut() {
        *b = !*b;
    }
    if back.tell(Returned { payload }).is_err() {
        tracing::error!("ping actor is gone");
    }
}

/// The pong side, of either kind.
#[derive(Clone, Serialize, Deserialize)]
enum PongRef {
    Plain(ActorRef<Pong>),
    Ordered(ActorRef<OrderedPong>),
}

impl PongRef {
    fn ball(&self, payload: Payload, back: ActorRef<Ping>) -> bool {
        match self {
            PongRef::Plain(p) => p.tell(Ball { payload, back }).is_ok(),
            PongRef::Ordered(p) => p.tell(ordered::Ball { payload, back }).is_ok(),
        }
    }
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Ping {
    pong: Option<PongRef>,
    left: u64,
    started_ns: u64,
    #[serde(skip)]
    clock: Option<Instant>,
    #[serde(skip)]
    done: ReplyTo<(u64, Payload)>,
}

#[messages]
impl Ping {
    /// Runs `iters` round trips of `size` bytes; replies with (elapsed ns, final payload).
    #[message]
    fn run(
        &mut self,
        pong: PongRef,
        size: usize,
        iters: u64,
        ctx: &mut lazarus::Context<Self>,
        reply: ReplyTo<(u64, Payload)>,
    ) {
        self.done = reply;
        self.left = iters;
        let payload = Payload((0..size).map(|i| i as u8).collect());
        let clock = Instant::now();
        self.clock = Some(clock);
        self.started_ns = 0;
        pong.ball(payload, ctx.myself().clone());
        self.pong = Some(pong);
    }

    #[message]
    fn returned(&mut self, payload: Payload, ctx: &mut lazarus::Context<Self>) {
        self.left -= 1;
        if self.left == 0 {
            let ns = self.clock.map_or(0, |c| c.elapsed().as_nanos() as u64);
            std::mem::take(&mut self.done).send((ns, payload));
        } else if let Some(pong) = &self.pong {
            pong.ball(payload, ctx.myself().clone());
        }
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.min_size == 0 || args.min_size > args.max_size {
        return Err("need 0 < --min-size <= --max-size".into());
    }
    let cluster = Cluster::start()?;
    let (rank, nodes) = (cluster.rank(), cluster.size());
    // Alone (or `--same-node`): ping on core 0, pong on the last core of node 0. In a
    // cluster: ping is node 0's first actor, pong node 1's; other nodes only take part in
    // the barriers.
    let same_node = args.same_node && nodes > 1;
    let (ping, pong, mode) = if same_node && rank != 0 {
        cluster.barrier()?;
        (None, None, String::new())
    } else if nodes == 1 || same_node {
        let far = CoreId(cluster.num_cores() - 1);
        let ping = cluster.spawn_on(CoreId(0), Ping::default())?;
        let pong = if args.order_sensitive {
            PongRef::Ordered(cluster.spawn_on(far, OrderedPong)?)
        } else {
            PongRef::Plain(cluster.spawn_on(far, Pong)?)
        };
        if same_node {
            cluster.barrier()?;
        }
        (
            Some(ping),
            Some(pong),
            format!("intra-node: core 0 <-> core {}", far.0),
        )
    } else {
        match rank {
            0 => {
                cluster.spawn(Ping::default())?;
            }
            1 if args.order_sensitive => {
                cluster.spawn(OrderedPong)?;
            }
            1 => {
                cluster.spawn(Pong)?;
            }
            _ => {}
        }
        cluster.barrier()?;
        let ping_id = ActorId::new(0, 0).ok_or("bad id")?;
        let pong_id = ActorId::new(1, 0).ok_or("bad id")?;
        let refs = if rank == 0 {
            (
                Some(cluster.handle().actor_ref::<Ping>(ping_id)?),
                Some(if args.order_sensitive {
                    PongRef::Ordered(cluster.handle().actor_ref::<OrderedPong>(pong_id)?)
                } else {
                    PongRef::Plain(cluster.handle().actor_ref::<Pong>(pong_id)?)
                }),
            )
        } else {
            (None, None)
        };
        (refs.0, refs.1, "inter-node: node 0 <-> node 1".to_string())
    };
    let (Some(ping), Some(pong)) = (ping, pong) else {
        // Not the measuring node: wait for the measurement to end, then leave.
        cluster.barrier()?;
        cluster.shutdown();
        return Ok(());
    };

    let mut verified = true;
    let mut checksum = 0u64;
    let mut sizes = 0;
    let mut best_latency_us = f64::MAX;
    let mut best_bandwidth = 0f64;
    let mut size = args.min_size;
    println!("# pingpong {mode}");
    println!("# size_bytes iters latency_us bandwidth_MB_per_s");
    while size <= args.max_size {
        // Scale iterations down for big payloads (the flip is O(size)).
        let iters = (args.iters * 8 / size as u64).clamp(20, args.iters);
        let (ns, payload) = cluster.block_on(
            ping.ask(Run {
                pong: pong.clone(),
                size,
                iters,
            })
            .no_timeout(),
        )?;
        // An odd number of flips leaves every byte inverted.
        let flipped = iters % 2 == 1;
        let ok = payload.len() == size
            && payload
                .iter()
                .enumerate()
                .all(|(i, &b)| b == if flipped { !(i as u8) } else { i as u8 });
        verified &= ok;
        checksum = mix(
            mix(checksum, size as u64),
            payload.iter().map(|&b| b as u64).sum(),
        );
        let latency_us = ns as f64 / iters as f64 / 2.0 / 1e3;
        let bandwidth = size as f64 / (latency_us * 1e-6) / 1e6;
        best_latency_us = best_latency_us.min(latency_us);
        best_bandwidth = best_bandwidth.max(bandwidth);
        println!("{size} {iters} {latency_us:.3} {bandwidth:.1}");
        sizes += 1;
        size *= 2;
    }
    if nodes > 1 {
        cluster.barrier()?;
    }
    cluster.shutdown();
    println!(
        "{}",
        ResultLine::new("pingpong")
            .field(
                "mode",
                if mode.starts_with("intra") {
                    "intra-node"
                } else {
                    "inter-node"
                }
            )
            .field(
                "receiver",
                if args.order_sensitive {
                    "order-sensitive"
                } else {
                    "deterministic"
                },
            )
            .field("sizes", sizes)
            .field("min_latency_us", format!("{best_latency_us:.3}"))
            .field("max_bandwidth_MBps", format!("{best_bandwidth:.1}"))
            .field("checksum", format!("{checksum:#018x}"))
            .finish(verified)
    );
    if verified {
        Ok(())
    } else {
        Err("payload corrupted".into())
    }
}
