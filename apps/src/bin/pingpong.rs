//! `pingpong`: two actors on different cores bounce a payload, NetPIPE style, over a sweep
//! of sizes; prints latency (half round trip) and bandwidth per size.
//!
//! Each bounce flips the payload's bytes in place on the pong side, so the final content
//! proves every round trip happened and nothing was lost or duplicated.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, CoreId, Node, ReplyTo};
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
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Pong;

#[messages]
impl Pong {
    #[message]
    fn ball(&mut self, mut payload: Vec<u8>, back: ActorRef<Ping>) {
        // Touch the data the way a real consumer would: flip every byte.
        for b in payload.iter_mut() {
            *b = !*b;
        }
        if back.tell(Returned { payload }).is_err() {
            tracing::error!("ping actor is gone");
        }
    }
}

#[derive(Actor, Serialize, Deserialize, Default)]
struct Ping {
    pong: Option<ActorRef<Pong>>,
    left: u64,
    started_ns: u64,
    #[serde(skip)]
    clock: Option<Instant>,
    #[serde(skip)]
    done: ReplyTo<(u64, Vec<u8>)>,
}

#[messages]
impl Ping {
    /// Runs `iters` round trips of `size` bytes; replies with (elapsed ns, final payload).
    #[message]
    fn run(
        &mut self,
        pong: ActorRef<Pong>,
        size: usize,
        iters: u64,
        ctx: &mut lazarus::Context<Self>,
        reply: ReplyTo<(u64, Vec<u8>)>,
    ) {
        self.done = reply;
        self.left = iters;
        let payload: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let clock = Instant::now();
        self.clock = Some(clock);
        self.started_ns = 0;
        let _ = pong.tell(Ball {
            payload,
            back: ctx.myself().clone(),
        });
        self.pong = Some(pong);
    }

    #[message]
    fn returned(&mut self, payload: Vec<u8>, ctx: &mut lazarus::Context<Self>) {
        self.left -= 1;
        if self.left == 0 {
            let ns = self.clock.map_or(0, |c| c.elapsed().as_nanos() as u64);
            std::mem::take(&mut self.done).send((ns, payload));
        } else if let Some(pong) = &self.pong {
            let _ = pong.tell(Ball {
                payload,
                back: ctx.myself().clone(),
            });
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
    let node = Node::builder().build()?;
    let far = CoreId(node.num_cores() - 1);
    let ping = node.spawn_on(CoreId(0), Ping::default())?;
    let pong = node.spawn_on(far, Pong)?;

    let mut verified = true;
    let mut checksum = 0u64;
    let mut sizes = 0;
    let mut best_latency_us = f64::MAX;
    let mut best_bandwidth = 0f64;
    let mut size = args.min_size;
    println!("# pingpong intra-node: core 0 <-> core {}", far.0);
    println!("# size_bytes iters latency_us bandwidth_MB_per_s");
    while size <= args.max_size {
        // Scale iterations down for big payloads (the flip is O(size)).
        let iters = (args.iters * 8 / size as u64).clamp(20, args.iters);
        let (ns, payload) = node.block_on(
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
    node.shutdown();
    println!(
        "{}",
        ResultLine::new("pingpong")
            .field("mode", "intra-node")
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
