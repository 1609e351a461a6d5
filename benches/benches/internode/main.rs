//! Inter-node ping-pong: Lazarus actors on two nodes (QUIC over loopback, mutual TLS)
//! against a raw quinn stream ping-pong with the same TLS setup, in the same run; and the
//! cost of rollback recovery: the same ping-pong between nodes and inside one node with
//! recovery on (logged messages, dependency vectors, a checkpoint every second) against
//! recovery off. Then the shared-memory data path of two nodes on one host: against the
//! same nodes over QUIC, against a plain memcpy of the payload (the physical limit), and
//! with recovery on against off, and the CPU that recovery costs per GB it logs against
//! its floor (one copy and one CRC of the half of the logged bytes that images hold).
//!
//! Both sides run in this process on separate threads, as two nodes / two endpoints, over
//! 127.0.0.1. Each measurement is `K` round trips of an `n`-byte payload each way;
//! latency is half the round trip, bandwidth is `n / (round trip / 2)`. Criterion gives
//! each variant's statistics; the ratios come from paired measurements (baseline and
//! candidate in alternating turns, `lazarus_benches::paired`), because on a shared VM two
//! criterion runs minutes apart differ by more than the effect measured. The ratio table
//! is printed and written to `<criterion dir>/lazarus-internode-summary.md`.

use criterion::{BenchmarkId, Criterion, Throughput};
use lazarus::transport::credentials::{self, Credentials};
use lazarus::transport::shm::DataPath;
use lazarus::{ActorId, ActorRef, Cluster, Node};
use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::machine::Machine;
use lazarus_benches::paired::{paired, Paired};
use lazarus_benches::ping_pong::{free_addrs, memcpy_round_trips, node_spec, Ping, Pong, Run};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"internode benchmark secret 32 by";
const SIZES: [usize; 2] = [8, 1 << 20];

// ---------- Lazarus ----------

struct LazarusPair {
    node0: Cluster,
    node1: Cluster,
    ping: ActorRef<Ping>,
    pong: ActorRef<Pong>,
    /// A pong on node 0, for ping-pong inside one node.
    local_pong: ActorRef<Pong>,
}

fn lazarus_pair(recovery: bool, data_path: DataPath) -> LazarusPair {
    lazarus_pair_spinning(recovery, data_path, None)
}

/// [`lazarus_pair`] whose idle cores spin for `idle_spin` before they sleep (`None`: the
/// runtime's default).
fn lazarus_pair_spinning(
    recovery: bool,
    data_path: DataPath,
    idle_spin: Option<Duration>,
) -> LazarusPair {
    let dir = std::env::temp_dir().join(format!("lazarus-bench-ckpt-{}", std::process::id()));
    let addrs = free_addrs(2);
    let spec = |rank: u16| {
        let checkpoints = recovery.then_some(dir.as_path());
        node_spec(rank, &addrs, SECRET, data_path, idle_spin, checkpoints)
    };
    let s1 = spec(1);
    let t = std::thread::spawn(move || Cluster::start_with(s1, Node::builder()).unwrap());
    let node0 = Cluster::start_with(spec(0), Node::builder()).unwrap();
    let node1 = t.join().unwrap();
    let ping = node0.spawn(Ping::default()).unwrap();
    let local_pong = node0.spawn(Pong).unwrap();
    node1.spawn(Pong).unwrap();
    let pong = node0
        .handle()
        .actor_ref::<Pong>(ActorId::new(1, 0).unwrap())
        .unwrap();
    LazarusPair {
        node0,
        node1,
        ping,
        pong,
        local_pong,
    }
}

impl LazarusPair {
    fn round_trips(&self, size: usize, iters: u64) -> Duration {
        self.round_trips_with(&self.pong, size, iters)
    }

    fn round_trips_with(&self, pong: &ActorRef<Pong>, size: usize, iters: u64) -> Duration {
        let ns = self
            .node0
            .block_on(
                self.ping
                    .ask(Run {
                        pong: pong.clone(),
                        size,
                        iters,
                    })
                    .no_timeout(),
            )
            .unwrap();
        Duration::from_nanos(ns)
    }
}

// ---------- CPU cost of recovery ----------

/// CPU time this process has used so far (user and system, all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: all-zero is a valid `rusage`; `getrusage` fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

const MIB: usize = 1 << 20;
const GB: f64 = 1e9;

/// The floor of recovery's CPU cost, in ns per GB logged: images hold about half of
/// the logged bytes, and the least an image costs per byte is one copy and one CRC.
/// Measured here, on 256 MiB copied and checksummed 1 MiB at a time.
fn floor_ns_per_gb() -> f64 {
    let src = vec![7u8; MIB];
    let mut dst = vec![0u8; MIB];
    let reps = 256;
    let start = Instant::now();
    let mut crc = 0;
    for _ in 0..reps {
        dst.copy_from_slice(std::hint::black_box(&src));
        crc = crc32c::crc32c_append(crc, &dst);
    }
    std::hint::black_box(crc);
    let per_byte = start.elapsed().as_nanos() as f64 / (reps * MIB) as f64;
    0.5 * per_byte * GB
}

/// Extra CPU with recovery on, in ns per GB logged: `iters` 1 MiB round trips on `off`,
/// then on `on`; every message crosses nodes and is logged by its sender once.
fn extra_cpu_ns_per_gb(off: &LazarusPair, on: &LazarusPair, iters: u64) -> f64 {
    let c0 = cpu_seconds();
    off.round_trips(MIB, iters);
    let c1 = cpu_seconds();
    on.round_trips(MIB, iters);
    let c2 = cpu_seconds();
    let logged_gb = (2 * iters as usize * MIB) as f64 / GB;
    ((c2 - c1) - (c1 - c0)) * 1e9 / logged_gb
}

// ---------- raw quinn ----------

struct RawPair {
    rt: tokio::runtime::Runtime,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    _client: quinn::Endpoint,
    _server_thread: std::thread::JoinHandle<()>,
}

/// Binds the calling thread to core `index`, as a one-core node's thread is bound: the
/// raw pair runs where the two Lazarus nodes run (node 0 on core 0, node 1 on core 1).
fn pin_to_core(index: usize) {
    let cores = lazarus::topology::allowed_cores().expect("topology");
    lazarus::topology::bind_current_thread(&cores[index % cores.len()]).expect("pinning");
}

/// A quinn endpoint on a UDP socket with the kernel buffers a Lazarus node's has
/// (`lazarus::transport::udp_socket`): the baseline differs from Lazarus in the runtime
/// only, not in how many datagrams the kernel drops.
fn raw_endpoint(addr: SocketAddr, server: Option<quinn::ServerConfig>) -> quinn::Endpoint {
    lazarus::transport::udp_socket::endpoint(addr, server)
        .unwrap()
        .0
}

fn raw_pair() -> RawPair {
    let addr = free_addrs(1)[0];
    let server_creds = Credentials::for_node(SECRET, 1).unwrap();
    let server_tls =
        quinn::crypto::rustls::QuicServerConfig::try_from(server_creds.server_config().unwrap())
            .unwrap();
    let mut transport = quinn::TransportConfig::default();
    transport.stream_receive_window(quinn::VarInt::from_u32(32 << 20));
    transport.receive_window(quinn::VarInt::from_u32(64 << 20));
    transport.send_window(64 << 20);
    let transport = Arc::new(transport);
    let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(server_tls));
    server_config.transport_config(Arc::clone(&transport));
    // Echo server: its own thread and current-thread runtime, like a node's net thread.
    let server_thread = std::thread::spawn(move || {
        pin_to_core(1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let ep = raw_endpoint(addr, Some(server_config));
            let conn = ep.accept().await.unwrap().await.unwrap();
            let (mut send, mut recv) = conn.accept_bi().await.unwrap();
            let mut buf = vec![0u8; 1 << 21];
            loop {
                let mut len = [0u8; 4];
                if recv.read_exact(&mut len).await.is_err() {
                    break;
                }
                let n = u32::from_le_bytes(len) as usize;
                if recv.read_exact(&mut buf[..n]).await.is_err() {
                    break;
                }
                if send.write_all(&len).await.is_err() || send.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
    });
    // The client runs on the calling thread.
    pin_to_core(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client_creds = Credentials::for_node(SECRET, 0).unwrap();
    let client_tls =
        quinn::crypto::rustls::QuicClientConfig::try_from(client_creds.client_config().unwrap())
            .unwrap();
    let (client, send, recv) = rt.block_on(async {
        let mut ep = raw_endpoint("127.0.0.1:0".parse().unwrap(), None);
        let mut cfg = quinn::ClientConfig::new(Arc::new(client_tls));
        cfg.transport_config(transport);
        ep.set_default_client_config(cfg);
        let conn = loop {
            match ep
                .connect(addr, &credentials::server_name(1))
                .unwrap()
                .await
            {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let (mut send, recv) = conn.open_bi().await.unwrap();
        // Make the stream visible to the server.
        send.write_all(&0u32.to_le_bytes()).await.unwrap();
        (ep, send, recv)
    });
    let mut pair = RawPair {
        rt,
        send,
        recv,
        _client: client,
        _server_thread: server_thread,
    };
    // Consume the empty echo of the opening frame.
    pair.rt.block_on(async {
        let mut len = [0u8; 4];
        pair.recv.read_exact(&mut len).await.unwrap();
    });
    pair
}

impl RawPair {
    fn round_trips(&mut self, size: usize, iters: u64) -> Duration {
        let (send, recv) = (&mut self.send, &mut self.recv);
        self.rt.block_on(async move {
            let payload = vec![1u8; size];
            let mut back = vec![0u8; size];
            let start = Instant::now();
            for _ in 0..iters {
                send.write_all(&(size as u32).to_le_bytes()).await.unwrap();
                send.write_all(&payload).await.unwrap();
                let mut len = [0u8; 4];
                recv.read_exact(&mut len).await.unwrap();
                recv.read_exact(&mut back).await.unwrap();
            }
            start.elapsed()
        })
    }
}

// ---------- measurement ----------

/// How long one turn of a paired comparison lasts, and how many rounds it has.
#[derive(Clone, Copy)]
struct Turns {
    seconds: f64,
    rounds: usize,
}

/// Lazarus against raw quinn: ~150 ms turns (calibrated on 20 round trips), 21 rounds.
const SHORT: Turns = Turns {
    seconds: 0.15,
    rounds: 21,
};
/// Recovery on against off between nodes: each turn spans more than one checkpoint
/// period (1 s), so every turn pays its share of the checkpoints' writes. With 150 ms
/// turns one in seven held a checkpoint and the per-round ratios spread over 0.86-1.18.
const SPANS_CHECKPOINTS: Turns = Turns {
    seconds: 1.5,
    rounds: 15,
};
/// Recovery on against off inside a node: round trips of half a microsecond jitter by a
/// few percent per turn, so more rounds narrow the interval.
const MANY: Turns = Turns {
    seconds: 0.15,
    rounds: 61,
};

/// Round trips per measurement so that one takes about `seconds` (calibrated on 20).
fn iters_for(seconds: f64, mut measure: impl FnMut(u64) -> Duration) -> u64 {
    let per = measure(20).as_secs_f64() / 20.0;
    ((seconds / per) as u64).clamp(5, 2_000_000)
}

/// One paired comparison per size: baseline and candidate alternate, round after round.
fn compare(
    what: &'static str,
    turns: Turns,
    mut baseline: impl FnMut(usize, u64) -> Duration,
    mut candidate: impl FnMut(usize, u64) -> Duration,
) -> Vec<(&'static str, usize, Paired)> {
    SIZES
        .iter()
        .map(|&size| {
            // Calibrated on the slower of the two (memcpy is thousands of times faster).
            let iters = iters_for(turns.seconds, |k| baseline(size, k).max(candidate(size, k)));
            let per_trip = |d: Duration| d.as_nanos() as f64 / iters as f64;
            let p = paired(
                turns.rounds,
                || per_trip(baseline(size, iters)),
                || per_trip(candidate(size, iters)),
            );
            println!(
                "{what} {size} B: {iters} round trips per turn, baseline {:.1} µs, candidate {:.1} µs, ratio {:.3}",
                p.baseline / 1e3,
                p.candidate / 1e3,
                p.ratio
            );
            (what, size, p)
        })
        .collect()
}

fn configure(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
}

/// Criterion's per-benchmark statistics, then the paired comparisons the summary reports.
fn bench(c: &mut Criterion) -> Vec<(&'static str, usize, Paired)> {
    // Recovery off first: once a node with recovery on exists in this process, every
    // tell checks (one relaxed load) whether it is a driver send, and its checkpoints
    // run in the background.
    let lazarus = lazarus_pair(false, DataPath::Quic);
    let mut raw = raw_pair();
    let mut group = c.benchmark_group("internode_pingpong");
    configure(&mut group);
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("raw_quinn", size), &size, |b, &size| {
            b.iter_custom(|iters| raw.round_trips(size, iters))
        });
        group.bench_with_input(BenchmarkId::new("lazarus", size), &size, |b, &size| {
            b.iter_custom(|iters| lazarus.round_trips(size, iters))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("intranode_pingpong");
    configure(&mut group);
    for size in SIZES {
        group.bench_with_input(BenchmarkId::new("recovery_off", size), &size, |b, &size| {
            b.iter_custom(|iters| lazarus.round_trips_with(&lazarus.local_pong, size, iters))
        });
    }
    group.finish();
    let raw = std::cell::RefCell::new(raw);
    let mut results = compare(
        "between nodes: Lazarus / raw quinn",
        SHORT,
        |size, iters| raw.borrow_mut().round_trips(size, iters),
        |size, iters| lazarus.round_trips(size, iters),
    );
    drop(raw);

    let ft = lazarus_pair(true, DataPath::Quic);
    let mut group = c.benchmark_group("internode_pingpong");
    configure(&mut group);
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("recovery_on", size), &size, |b, &size| {
            b.iter_custom(|iters| ft.round_trips(size, iters))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("intranode_pingpong");
    configure(&mut group);
    for size in SIZES {
        group.bench_with_input(BenchmarkId::new("recovery_on", size), &size, |b, &size| {
            b.iter_custom(|iters| ft.round_trips_with(&ft.local_pong, size, iters))
        });
    }
    group.finish();
    results.extend(compare(
        "between nodes: recovery on / off",
        SPANS_CHECKPOINTS,
        |size, iters| lazarus.round_trips(size, iters),
        |size, iters| ft.round_trips(size, iters),
    ));
    results.extend(compare(
        "inside a node: recovery on / off",
        MANY,
        |size, iters| lazarus.round_trips_with(&lazarus.local_pong, size, iters),
        |size, iters| ft.round_trips_with(&ft.local_pong, size, iters),
    ));
    ft.node1.shutdown();
    ft.node0.shutdown();

    // Shared memory between the two nodes (both in this process: the same segment and
    // doorbells as between processes).
    let shm = lazarus_pair(false, DataPath::Shm);
    let mut group = c.benchmark_group("same_host_pingpong");
    configure(&mut group);
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(
            BenchmarkId::new("shared_memory", size),
            &size,
            |b, &size| b.iter_custom(|iters| shm.round_trips(size, iters)),
        );
        group.bench_with_input(BenchmarkId::new("memcpy", size), &size, |b, &size| {
            b.iter_custom(|iters| memcpy_round_trips(size, iters))
        });
    }
    group.finish();
    results.extend(compare(
        SHM_VS_QUIC,
        SHORT,
        |size, iters| lazarus.round_trips(size, iters),
        |size, iters| shm.round_trips(size, iters),
    ));
    results.extend(compare(
        SHM_VS_MEMCPY,
        SHORT,
        memcpy_round_trips,
        |size, iters| shm.round_trips(size, iters),
    ));
    lazarus.node1.shutdown();
    lazarus.node0.shutdown();
    let shm_ft = lazarus_pair(true, DataPath::Shm);
    results.extend(compare(
        SHM_RECOVERY,
        SPANS_CHECKPOINTS,
        |size, iters| shm.round_trips(size, iters),
        |size, iters| shm_ft.round_trips(size, iters),
    ));
    shm_ft.node1.shutdown();
    shm_ft.node0.shutdown();
    shm.node1.shutdown();
    shm.node0.shutdown();

    // CPU, not time: cores that do not spin while they wait, so the process's CPU time
    // is the work done (a spinning core would count the longer wall time of recovery
    // on as CPU).
    let off = lazarus_pair_spinning(false, DataPath::Shm, Some(Duration::ZERO));
    let on = lazarus_pair_spinning(true, DataPath::Shm, Some(Duration::ZERO));
    let iters = iters_for(SPANS_CHECKPOINTS.seconds, |k| on.round_trips(MIB, k));
    let p = paired(SPANS_CHECKPOINTS.rounds, floor_ns_per_gb, || {
        extra_cpu_ns_per_gb(&off, &on, iters)
    });
    println!(
        "{CPU_COST} 1 MiB: {iters} round trips per turn, floor {:.3} CPU s per GB logged, recovery on {:.3} CPU s per GB, ratio {:.2}",
        p.baseline / 1e9,
        p.candidate / 1e9,
        p.ratio
    );
    results.push((CPU_COST, MIB, p));
    on.node1.shutdown();
    on.node0.shutdown();
    off.node1.shutdown();
    off.node0.shutdown();
    results
}

/// The row of recovery's CPU cost: its "times" are CPU ns per GB logged.
const CPU_COST: &str =
    "same host, shared memory: recovery's extra CPU per GB logged / floor (copy + CRC of half)";

const SHM_VS_QUIC: &str = "same host: shared memory / QUIC";
const SHM_VS_MEMCPY: &str = "same host: shared memory / memcpy";
const SHM_RECOVERY: &str = "same host, shared memory: recovery on / off";

/// A comparison's target, as a bound on its time ratio (bandwidth at 1 MiB is the
/// inverse), or `None` for a row that is only reported.
fn target(what: &str, size: usize) -> (&'static str, Option<f64>) {
    let small = size == 8;
    match what {
        SHM_VS_QUIC if small => ("latency ≤ 0.2× QUIC", Some(0.2)),
        SHM_VS_QUIC => ("bandwidth ≥ 10× QUIC", Some(0.1)),
        SHM_VS_MEMCPY if small => ("(reported)", None),
        SHM_VS_MEMCPY => ("bandwidth ≥ 0.25× memcpy", Some(4.0)),
        SHM_RECOVERY => ("(reported; the CPU cost row is the target)", None),
        CPU_COST => ("(reported: extra CPU s per GB against the floor's)", None),
        w if w.starts_with("between nodes: Lazarus") && small => ("latency ≤ 1.2×", Some(1.2)),
        w if w.starts_with("between nodes: Lazarus") => ("bandwidth ≥ 0.9×", Some(1.0 / 0.9)),
        w if w.starts_with("between") && small => ("(reported)", None),
        w if w.starts_with("between") => ("bandwidth ≥ 0.9× off", Some(1.0 / 0.9)),
        _ => ("≤ 1.03× off", Some(1.03)),
    }
}

/// The ratio table (paired medians), printed and written next to criterion's reports.
fn summary(machine: &Machine, results: &[(&'static str, usize, Paired)]) {
    let mut md = format!(
        "Ping-pong over loopback ({}; commit {}). Each row: baseline and candidate timed in \
         alternating turns (Lazarus / raw quinn and the shared-memory comparisons: {} rounds \
         of ~{:.2} s; recovery between nodes: {} rounds of ~{:.2} s, each spanning a \
         checkpoint period; inside a node: {} rounds of ~{:.2} s); medians of the round trip time and \
         median of the per-round ratios with its 95% confidence interval. A target passes \
         only if the whole interval meets it, misses only if none of it does, and is \
         inconclusive otherwise.\n\n\
         | comparison | size | baseline RTT (µs) | candidate RTT (µs) | time ratio (95% CI) | bandwidth ratio | target |\n\
         |---|---|---|---|---|---|---|\n",
        machine.describe(),
        lazarus_benches::machine::git_commit(),
        SHORT.rounds,
        SHORT.seconds,
        SPANS_CHECKPOINTS.rounds,
        SPANS_CHECKPOINTS.seconds,
        MANY.rounds,
        MANY.seconds,
    );
    for (what, size, p) in results.iter().filter(|(w, ..)| *w != CPU_COST) {
        let (target, bound) = target(what, *size);
        let interval = p
            .interval
            .map_or("-".to_string(), |(lo, hi)| format!("{lo:.3}-{hi:.3}"));
        let verdict = bound.map_or("", |b| p.verdict(b).label());
        md.push_str(&format!(
            "| {what} | {size} B | {:.1} | {:.1} | {:.3} ({interval}) | {:.3} | {target}: {verdict} |\n",
            p.baseline / 1e3,
            p.candidate / 1e3,
            p.ratio,
            1.0 / p.ratio,
        ));
    }
    for (what, _, p) in results.iter().filter(|(w, ..)| *w == CPU_COST) {
        let interval = p
            .interval
            .map_or("-".to_string(), |(lo, hi)| format!("{lo:.2}-{hi:.2}"));
        md.push_str(&format!(
            "\n{what}: recovery on costs {:.3} CPU s per GB logged (1 MiB ping-pong over shared \
             memory, cores not spinning, {} rounds of ~{:.1} s, process CPU time on minus off), \
             the floor {:.3} CPU s per GB (one copy and one CRC32C of half the bytes, measured \
             in the same rounds): ratio {:.2} ({interval}).\n",
            p.candidate / 1e9,
            p.rounds,
            SPANS_CHECKPOINTS.seconds,
            p.baseline / 1e9,
            p.ratio,
        ));
    }
    println!("\n{md}");
    let out = criterion_dir().join("lazarus-internode-summary.md");
    if let Err(e) = std::fs::write(&out, md) {
        eprintln!("could not write {}: {e}", out.display());
    }
}

fn main() {
    // Before the raw pair pins this thread to one core.
    let machine = Machine::this();
    let mut c = Criterion::default()
        .output_directory(&criterion_dir())
        .configure_from_args();
    let results = bench(&mut c);
    c.final_summary();
    summary(&machine, &results);
}
