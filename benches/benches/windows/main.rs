//! One-sided windows between two nodes of one host, in the same run as their baselines:
//! a get of `n` bytes against an actor ping-pong of `n` bytes each way between the same two
//! nodes (the message round trip a get replaces) and against a plain copy of `n` bytes
//! (what a get through shared memory could approach); an epoch of one put of `n` bytes and
//! a fence on both nodes against the same ping-pong; and recovery on against off for both.
//!
//! Both nodes run in this process on separate threads over 127.0.0.1, with the default data
//! path (shared memory between nodes of one host): puts and gets go direct, the origin
//! writing or reading the target's part itself through its gate; fences are messages. One
//! more pair over QUIC gives the message path's get (the target's network thread applies
//! it), as between hosts. Every comparison is paired
//! (`lazarus_benches::paired`): baseline and candidate alternate, round after round, and
//! the ratio is the median of the per-round ratios with its 95% confidence interval. The
//! table is printed and written to `<criterion dir>/lazarus-windows-summary.md`.
//!
//! With recovery on, `main`'s get answers are kept at their target for the whole run (a
//! restarted `main` asks again), so the recovery comparison of gets uses 8-byte gets.
//!
//! First, an app: `jacobi2d` on 4 nodes under `lazarus run` (release binaries), one strip
//! of rows per node, halos put into the neighbours' window parts with a fence per step
//! (`--halo put`) against the same decomposition with halos sent as messages between one
//! tile actor per node (`--tiles 1x4 --cores 1`), recovery off and on (1 s checkpoints);
//! elapsed time of the steps, runs interleaved, medians of the per-repetition ratios
//! (`LAZARUS_BENCH_REPS`, default 5). It runs before the in-process pairs exist.

use lazarus::transport::shm::DataPath;
use lazarus::{ActorId, ActorRef, Cluster, Node, Window};
use lazarus_benches::criterion_data::criterion_dir;
use lazarus_benches::interleaved::{measure, Samples, Variant};
use lazarus_benches::machine::Machine;
use lazarus_benches::paired::{paired, Paired};
use lazarus_benches::ping_pong::{free_addrs, memcpy_round_trips, node_spec, Ping, Pong, Run};
use lazarus_benches::runs::Launch;
use lazarus_benches::target::{build_release, Bins};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"windows benchmark secret 32 byte";
const SIZES: [usize; 2] = [8, 1 << 20];
/// Rounds per comparison, and the seconds one side of a round takes.
const ROUNDS: usize = 15;
const SECONDS: f64 = 0.3;

/// Two nodes with a window of bytes, a ping-pong pair, and node 1's `main` thread, which
/// fences on request.
struct Pair {
    node0: Cluster,
    window: Window<u8>,
    ping: ActorRef<Ping>,
    pong: ActorRef<Pong>,
    fences: mpsc::Sender<u64>,
    fenced: mpsc::Receiver<()>,
    _node1: std::thread::JoinHandle<Cluster>,
}

fn pair(recovery: bool, path: DataPath) -> Pair {
    let dir = std::env::temp_dir().join(format!(
        "lazarus-bench-windows-{}-{recovery}-{path:?}",
        std::process::id()
    ));
    let addrs = free_addrs(2);
    let spec = |rank: u16| {
        let checkpoints = recovery.then_some(dir.as_path());
        node_spec(rank, &addrs, SECRET, path, None, checkpoints)
    };
    let (fences, todo) = mpsc::channel::<u64>();
    let (done, fenced) = mpsc::channel();
    let s1 = spec(1);
    let node1 = std::thread::spawn(move || {
        let node1 = Cluster::start_with(s1, Node::builder()).unwrap();
        node1.spawn(Pong).unwrap();
        let window = node1.window::<u8>(1 << 20).unwrap();
        while let Ok(k) = todo.recv() {
            for _ in 0..k {
                window.fence().unwrap();
            }
            let _ = done.send(());
        }
        node1
    });
    let node0 = Cluster::start_with(spec(0), Node::builder()).unwrap();
    let window = node0.window::<u8>(1 << 20).unwrap();
    let ping = node0.spawn(Ping::default()).unwrap();
    let pong = node0
        .handle()
        .actor_ref::<Pong>(ActorId::new(1, 0).unwrap())
        .unwrap();
    Pair {
        node0,
        window,
        ping,
        pong,
        fences,
        fenced,
        _node1: node1,
    }
}

impl Pair {
    fn ping_pong(&self, size: usize, iters: u64) -> Duration {
        let run = Run {
            pong: self.pong.clone(),
            size,
            iters,
        };
        let ns = self
            .node0
            .block_on(self.ping.ask(run).no_timeout())
            .unwrap();
        Duration::from_nanos(ns)
    }

    fn gets(&self, size: usize, iters: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(self.window.get(1, 0, size).unwrap());
        }
        start.elapsed()
    }

    /// `iters` epochs: node 0 puts `size` bytes into node 1's part, both fence.
    fn put_epochs(&self, size: usize, iters: u64) -> Duration {
        let values = vec![7u8; size];
        self.fences.send(iters).unwrap();
        let start = Instant::now();
        for _ in 0..iters {
            self.window.put(1, 0, &values).unwrap();
            self.window.fence().unwrap();
        }
        self.fenced.recv().unwrap();
        start.elapsed()
    }
}

/// Operations per turn so that one turn takes about [`SECONDS`] (calibrated on 20).
fn iters_for(mut measure: impl FnMut(u64) -> Duration) -> u64 {
    let per = measure(20).as_secs_f64() / 20.0;
    ((SECONDS / per) as u64).clamp(5, 2_000_000)
}

/// A paired comparison at `size`: time per operation of both, alternating.
fn compare(
    what: &'static str,
    size: usize,
    mut baseline: impl FnMut(usize, u64) -> Duration,
    mut candidate: impl FnMut(usize, u64) -> Duration,
) -> (&'static str, usize, Paired) {
    let iters = iters_for(|k| baseline(size, k).max(candidate(size, k)));
    let per = |d: Duration| d.as_nanos() as f64 / iters as f64;
    let p = paired(
        ROUNDS,
        || per(baseline(size, iters)),
        || per(candidate(size, iters)),
    );
    println!(
        "{what} {size} B: {iters} per turn, baseline {:.1} µs, candidate {:.1} µs, ratio {:.3}",
        p.baseline / 1e3,
        p.candidate / 1e3,
        p.ratio
    );
    (what, size, p)
}

/// `jacobi2d` halos: the grid and steps of every variant.
const JACOBI: &[&str] = &["--n", "1024", "--iters", "2000"];

/// `jacobi2d` on 4 nodes with `halo` (`message`: one tile actor per node) and recovery
/// off or on with 1 s checkpoints.
fn jacobi(halo: &str, recovery: bool) -> Variant {
    let mut args = JACOBI.to_vec();
    match halo {
        "put" => args.extend(["--halo", "put"]),
        _ => args.extend(["--tiles", "1x4", "--cores", "1"]),
    }
    let mut launch = Launch::new("jacobi2d", 4, &args);
    launch.recovery = recovery.then_some(Duration::from_secs(1));
    Variant {
        name: match (halo, recovery) {
            ("put", false) => "jacobi2d put halos, recovery off",
            ("put", true) => "jacobi2d put halos, recovery on",
            (_, false) => "jacobi2d message halos, recovery off",
            (_, true) => "jacobi2d message halos, recovery on",
        },
        launch,
        field: "elapsed_s",
    }
}

/// The jacobi2d rows of the summary: each compares variant `candidate` with `baseline`
/// (indices into the variants of `main`).
fn jacobi_rows(s: &Samples, reps: usize) -> String {
    let mut md = format!(
        "`jacobi2d {}` on 4 nodes under `lazarus run` (release), one strip of rows per node; \
         elapsed time of the steps, medians of {reps} interleaved runs, ratios the medians of \
         the per-run ratios.\n\n\
         | comparison | baseline (ms) | candidate (ms) | ratio |\n\
         |---|---|---|---|\n",
        JACOBI.join(" "),
    );
    for (what, baseline, candidate) in [
        ("put halos / message halos, recovery off", 0, 1),
        ("put halos / message halos, recovery on", 2, 3),
        ("message halos, recovery on / off", 0, 2),
        ("put halos, recovery on / off", 1, 3),
    ] {
        md.push_str(&format!(
            "| {what} | {:.1} | {:.1} | {:.3} |\n",
            s.median(baseline) * 1e3,
            s.median(candidate) * 1e3,
            s.ratio(candidate, baseline),
        ));
    }
    md.push('\n');
    md
}

fn main() {
    // Warnings (a wait that reports what it waits for) reach stderr.
    lazarus_apps::init_logging();
    let machine = Machine::this();
    let reps: usize = std::env::var("LAZARUS_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let jacobi_md = match build_release().and_then(|()| {
        let variants = [
            jacobi("message", false),
            jacobi("put", false),
            jacobi("message", true),
            jacobi("put", true),
        ];
        measure(&Bins::release(), &variants, reps)
    }) {
        Ok(samples) => jacobi_rows(&samples, reps),
        Err(e) => format!("jacobi2d halos: not measured: {e}\n\n"),
    };
    let mut results = Vec::new();
    {
        let off = pair(false, DataPath::default());
        let quic = pair(false, DataPath::Quic);
        for size in SIZES {
            results.push(compare(
                "get / actor ping-pong",
                size,
                |s, k| off.ping_pong(s, k),
                |s, k| off.gets(s, k),
            ));
            results.push(compare(
                "get / memcpy there and back",
                size,
                memcpy_round_trips,
                |s, k| off.gets(s, k),
            ));
            results.push(compare(
                "get, shared memory / message path (QUIC)",
                size,
                |s, k| quic.gets(s, k),
                |s, k| off.gets(s, k),
            ));
            results.push(compare(
                "put + fence epoch / actor ping-pong",
                size,
                |s, k| off.ping_pong(s, k),
                |s, k| off.put_epochs(s, k),
            ));
        }
        let on = pair(true, DataPath::default());
        results.push(compare(
            "get, recovery on / off",
            8,
            |s, k| off.gets(s, k),
            |s, k| on.gets(s, k),
        ));
        for size in SIZES {
            results.push(compare(
                "put + fence epoch, recovery on / off",
                size,
                |s, k| off.put_epochs(s, k),
                |s, k| on.put_epochs(s, k),
            ));
        }
        // The clusters end with the process.
        std::mem::forget((off, quic, on));
    }
    let mut md = format!(
        "One-sided windows between two nodes of one host ({}; commit {}): puts and gets \
         through shared memory (the direct path) unless the row says QUIC. Each row: baseline and candidate timed in alternating turns ({ROUNDS} rounds of \
         ~{SECONDS} s); medians of the time per operation and the median of the per-round \
         ratios (candidate / baseline) with its 95% confidence interval.\n\n\
         | comparison | size | baseline (µs) | candidate (µs) | ratio (95% CI) |\n\
         |---|---|---|---|---|\n",
        machine.describe(),
        lazarus_benches::machine::git_commit(),
    );
    for (what, size, p) in &results {
        let interval = p
            .interval
            .map_or("-".to_string(), |(lo, hi)| format!("{lo:.3}-{hi:.3}"));
        md.push_str(&format!(
            "| {what} | {size} B | {:.2} | {:.2} | {:.3} ({interval}) |\n",
            p.baseline / 1e3,
            p.candidate / 1e3,
            p.ratio,
        ));
    }
    md.push('\n');
    md.push_str(&jacobi_md);
    // The pairs' checkpoint directories (the recovery-on pair's hold a second of logged
    // 1 MiB puts per image): the clusters are never shut down, so nothing else removes them.
    let mine = format!("lazarus-bench-windows-{}-", std::process::id());
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&mine) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    println!("\n{md}");
    let out = criterion_dir().join("lazarus-windows-summary.md");
    if let Err(e) = std::fs::create_dir_all(criterion_dir()).and_then(|()| std::fs::write(&out, md))
    {
        eprintln!("could not write {}: {e}", out.display());
    }
}
