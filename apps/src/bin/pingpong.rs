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
//!
//! `--busy-neighbour` gives the pong an order-sensitive neighbour: a `Chatter` actor on the
//! pong's core answers a continuous stream of small messages from a deterministic
//! `ChatterSource` on the ping's node, one in flight at a time, so with recovery on the
//! pong's node nearly always holds a determinant the event loggers have not acknowledged
//! yet. The stream runs through the whole sweep (it starts before the first timed round
//! trip and stops after the last); the latency measured is still the ping-pong's alone.
//! With a deterministic pong this shows whether the pong's answers wait for determinants
//! its state does not depend on (`LAZARUS_SEND_GATE=set`) or not (`actor`, the default).
//! The RESULT line then adds `neighbour=order-sensitive` and `chatter_msgs` (answers the
//! source received).

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, CoreId, Payload, ReplyTo};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
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
    /// Put a busy order-sensitive actor next to the pong (on its core), fed one small
    /// message at a time from the ping's node for the whole measurement.
    #[arg(long)]
    busy_neighbour: bool,
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

/// The same pong, declared order-sensitive; and the pong's busy order-sensitive neighbour.
mod ordered {
    use super::{bounce, Chatted, ChatterSource, Ping};
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

    /// The pong's order-sensitive neighbour (`--busy-neighbour`): with recovery on, every
    /// message it receives is a determinant of its node.
    #[derive(Actor, Serialize, Deserialize, Default)]
    #[actor(order_sensitive)]
    pub struct Chatter {
        /// Messages answered so far.
        answered: u64,
    }

    #[messages]
    impl Chatter {
        /// Answers message `seq` of the stream to its source.
        #[message]
        pub fn chat(&mut self, seq: u64, back: ActorRef<ChatterSource>) {
            self.answered += 1;
            if back.tell(Chatted { seq }).is_err() {
                tracing::error!("chatter source is gone");
            }
        }
    }
}
use ordered::{Chatter, OrderedPong};

/// Feeds the [`Chatter`] a stream of small messages, the next one when the previous one's
/// answer is back, from the start it is told until it is told to stop.
#[derive(Actor, Serialize, Deserialize, Default)]
struct ChatterSource {
    chatter: Option<ActorRef<Chatter>>,
    /// Sequence number of the message in flight (0: none sent yet).
    sent: u64,
    in_flight: bool,
    stopping: bool,
    /// Answers received.
    answers: u64,
    /// Every answer was the one for the message in flight.
    in_order: bool,
    started: ReplyTo<()>,
    stopped: ReplyTo<(u64, bool)>,
}

#[messages]
impl ChatterSource {
    /// Starts the stream to `chatter`; replies once the first answer is back (the stream
    /// flows, through the event loggers too when recovery is on).
    #[message]
    fn start_chatter(
        &mut self,
        chatter: ActorRef<Chatter>,
        ctx: &mut lazarus::Context<Self>,
        reply: ReplyTo<()>,
    ) {
        self.started = reply;
        self.in_order = true;
        self.chatter = Some(chatter);
        self.send_next(ctx);
    }

    /// An answer from the chatter: counts it and sends the next message, or, once told to
    /// stop, replies to the stop request instead.
    #[message]
    fn chatted(&mut self, seq: u64, ctx: &mut lazarus::Context<Self>) {
        self.in_order &= self.in_flight && seq == self.sent;
        self.in_flight = false;
        self.answers += 1;
        self.started.take().send(());
        if self.stopping {
            self.stopped.take().send((self.answers, self.in_order));
        } else {
            self.send_next(ctx);
        }
    }

    /// Stops the stream; replies with (answers received, all in order) once no message is
    /// in flight any more, so nothing of the stream is left on the way at shutdown.
    #[message]
    fn stop_chatter(&mut self, reply: ReplyTo<(u64, bool)>) {
        self.stopping = true;
        if self.in_flight {
            self.stopped = reply;
        } else {
            reply.send((self.answers, self.in_order));
        }
    }
}

impl ChatterSource {
    fn send_next(&mut self, ctx: &mut lazarus::Context<Self>) {
        let Some(chatter) = &self.chatter else {
            return;
        };
        self.sent += 1;
        let msg = ordered::Chat {
            seq: self.sent,
            back: ctx.myself().clone(),
        };
        if chatter.tell(msg).is_ok() {
            self.in_flight = true;
        } else {
            // No answer will come: let a waiting start go on (the stop reports the loss).
            tracing::error!("chatter is gone");
            self.in_order = false;
            self.started.take().send(());
        }
    }
}

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
            self.done.take().send((ns, payload));
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
    // A ball must fit a message between nodes (63 MiB), with room to spare.
    const MAX_SIZE: usize = 32 << 20;
    if args.max_size > MAX_SIZE {
        return Err(format!("--max-size must be at most {MAX_SIZE} bytes (32 MiB)").into());
    }
    if args.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    let cluster = Cluster::start()?;
    let (rank, nodes) = (cluster.rank(), cluster.size());
    // Alone (or `--same-node`): ping on core 0, pong on the last core of node 0. In a
    // cluster: ping is node 0's first actor, pong node 1's; other nodes only take part in
    // the barriers. With `--busy-neighbour`, the chatter shares the pong's core and its
    // source sits on the ping's node (see `source_core`).
    let same_node = args.same_node && nodes > 1;
    let (ping, pong, neighbour, mode) = if same_node && rank != 0 {
        cluster.barrier()?;
        (None, None, None, String::new())
    } else if nodes == 1 || same_node {
        let far = CoreId(cluster.num_cores() - 1);
        let ping = cluster.spawn_on(CoreId(0), Ping::default())?;
        let pong = if args.order_sensitive {
            PongRef::Ordered(cluster.spawn_on(far, OrderedPong)?)
        } else {
            PongRef::Plain(cluster.spawn_on(far, Pong)?)
        };
        let neighbour = if args.busy_neighbour {
            let chatter = cluster.spawn_on(far, Chatter::default())?;
            let source = cluster.spawn_on(
                source_core(cluster.num_cores(), 2),
                ChatterSource::default(),
            )?;
            Some((source, chatter))
        } else {
            None
        };
        if same_node {
            cluster.barrier()?;
        }
        (
            Some(ping),
            Some(pong),
            neighbour,
            format!("intra-node: core 0 <-> core {}", far.0),
        )
    } else {
        // The neighbour's actors are the second ones of nodes 0 and 1.
        let source_id = ActorId::new(0, 1).ok_or("bad id")?;
        let chatter_id = ActorId::new(1, 1).ok_or("bad id")?;
        let mut source = None;
        match rank {
            0 => {
                cluster.spawn(Ping::default())?;
                if args.busy_neighbour {
                    let s = cluster.spawn_on(
                        source_core(cluster.num_cores(), 1),
                        ChatterSource::default(),
                    )?;
                    source = Some(expect_id(s, source_id, "the chatter source")?);
                }
            }
            1 if args.order_sensitive => {
                cluster.spawn(OrderedPong)?;
            }
            1 => {
                cluster.spawn(Pong)?;
            }
            _ => {}
        }
        if rank == 1 && args.busy_neighbour {
            // The pong, node 1's first spawn, took core 0 (spawns go round-robin from 0).
            let chatter = cluster.spawn_on(CoreId(0), Chatter::default())?;
            expect_id(chatter, chatter_id, "the chatter")?;
        }
        cluster.barrier()?;
        let ping_id = ActorId::new(0, 0).ok_or("bad id")?;
        let pong_id = ActorId::new(1, 0).ok_or("bad id")?;
        let refs = if rank == 0 {
            let neighbour = match source {
                Some(s) => Some((s, cluster.handle().actor_ref::<Chatter>(chatter_id)?)),
                None => None,
            };
            (
                Some(cluster.handle().actor_ref::<Ping>(ping_id)?),
                Some(if args.order_sensitive {
                    PongRef::Ordered(cluster.handle().actor_ref::<OrderedPong>(pong_id)?)
                } else {
                    PongRef::Plain(cluster.handle().actor_ref::<Pong>(pong_id)?)
                }),
                neighbour,
            )
        } else {
            (None, None, None)
        };
        (
            refs.0,
            refs.1,
            refs.2,
            "inter-node: node 0 <-> node 1".to_string(),
        )
    };
    let (Some(ping), Some(pong)) = (ping, pong) else {
        // Not the measuring node: wait for the measurement to end, then leave.
        cluster.barrier()?;
        cluster.shutdown();
        return Ok(());
    };
    // The neighbour's stream flows before the first timed round trip.
    if let Some((source, chatter)) = &neighbour {
        cluster.block_on(
            source
                .ask(StartChatter {
                    chatter: chatter.clone(),
                })
                .no_timeout(),
        )?;
    }

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
        let iters =
            (args.iters.saturating_mul(8) / size as u64).clamp(20.min(args.iters), args.iters);
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
    // Stop the stream after the last timed round trip; it ends with its last answer back.
    let chatter = match &neighbour {
        Some((source, _)) => Some(cluster.block_on(source.ask(StopChatter).no_timeout())?),
        None => None,
    };
    let chatter_ok = chatter.is_none_or(|(_, in_order)| in_order);
    if nodes > 1 {
        cluster.barrier()?;
    }
    let mut result = ResultLine::new("pingpong")
        .field(
            "mode",
            if mode.starts_with("intra") {
                "intra-node"
            } else {
                "inter-node"
            },
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
        .field("checksum", format!("{checksum:#018x}"));
    if let Some((answers, _)) = chatter {
        result = result
            .field("neighbour", "order-sensitive")
            .field("chatter_msgs", answers);
    }
    println!("{}", result.finish(verified && chatter_ok));
    // The RESULT is out before the node may leave: a node killed while it waits to leave
    // is not restarted.
    cluster.shutdown();
    if !verified {
        Err("payload corrupted".into())
    } else if !chatter_ok {
        Err("the neighbour's stream lost or reordered a message".into())
    } else {
        Ok(())
    }
}

/// The core of the ping's node for the chatter source: core 1 when the ping-pong uses
/// fewer than `num_cores` cores there (`used`: 1 inter-node, 2 inside a node), so that the
/// ping's core 0 does only the ping-pong; otherwise core 0, with the ping.
fn source_core(num_cores: usize, used: usize) -> CoreId {
    CoreId(usize::from(num_cores > used))
}
