//! `npb-is`: the NPB IS kernel (integer ranking) as a distributed bucket sort over worker
//! actors on all nodes and cores, with NPB's partial verification every iteration and a
//! full verification of the final sort.
//!
//! Every worker owns a contiguous slice of the key array, generated from its own seed.
//! Each of the 10 iterations takes two all-to-all exchanges:
//! - `Counts`: after NPB's two key modifications, every worker shares the sizes of the
//!   buckets (high bits of the key) in its slice, plus the values at the NPB test positions
//!   it owns. Everyone adds the sizes up and splits the buckets into one contiguous range
//!   per worker holding about equally many keys (as the NPB MPI version does).
//! - `Keys`: every worker sends each worker the keys that fall in its bucket range. A
//!   worker then counts its keys per value; with the number of keys in earlier buckets
//!   this gives the global rank of every value it owns, and it checks the test keys whose
//!   value it owns against NPB's reference ranks.
//!
//! After the last iteration each worker also places its keys at their ranks (NPB's
//! `full_verify`) and reports whether they come out sorted, which positions they cover and
//! checksums; the collector on rank 0 checks that the workers' ranges tile the whole array
//! in order. Keys, ranks and checks are integers, so the outcome is the same for every
//! number of nodes and workers.
//!
//! Shares arrive tagged with a step number and are kept until their step comes (during a
//! recovery replay, shares of many future steps may be waiting). A worker handles at most
//! one step per message and follows each step with one `Resume` to itself, so no handler
//! runs long and what a worker sends, to itself included, depends only on the steps done.

use clap::Parser;
use lazarus::{messages, Actor, ActorRef, Context, ReplyTo};
use lazarus_apps::ending::Verdict;
use lazarus_apps::npb::driver::{self, Done, Kernel};
use lazarus_apps::npb::exchange::Exchanges;
use lazarus_apps::npb::is::{self, MAX_ITERATIONS, TEST_ARRAY_SIZE};
use lazarus_apps::npb::{split, Class, Placement};
use lazarus_apps::{init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// NPB IS: distributed integer ranking with NPB's partial and full verification. Runs on
/// any number of nodes N >= 1 (alone, under `lazarus run -n N` or under Slurm) with at most
/// one worker per bucket (512 for class S, 1024 otherwise); the outcome is the same for
/// every N.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Problem class: S (2^16 keys below 2^11), W (2^20 below 2^16) or A (2^23 below 2^19).
    #[arg(long, value_enum, ignore_case = true, default_value_t = Class::S)]
    class: Class,
    /// Workers in the whole cluster (default: one per core of every node).
    #[arg(long)]
    workers: Option<usize>,
    /// Cores to use on each node (default: all this process may use).
    #[arg(long)]
    cores: Option<usize>,
}

/// What a worker contributes to an exchange.
#[derive(Debug, Serialize, Deserialize)]
enum Data {
    /// Bucket sizes of the sender's slice, and `(test number, key)` for the NPB test
    /// positions in it.
    Counts {
        sizes: Vec<u32>,
        tests: Vec<(u8, u32)>,
    },
    /// The sender's keys that fall in the receiver's buckets.
    Keys(Vec<u32>),
}

/// What a worker learnt from the `Counts` exchange of the current iteration.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Split {
    /// Every worker's bucket range.
    ranges: Vec<Range<usize>>,
    /// Keys in buckets before ours: the rank of our smallest possible value.
    offset: u64,
    /// The test keys, by test number.
    tests: Vec<(u8, u32)>,
}

/// Owns a slice of the key array and ranks a range of key values in step with the others.
#[derive(Actor, Serialize, Deserialize)]
struct Worker {
    index: usize,
    placement: Placement,
    class: Class,
    /// Position of `keys[0]` in the key array.
    first: usize,
    keys: Vec<u32>,
    /// Current iteration (1-based).
    iteration: usize,
    /// The exchange this worker waits for: `2 (iteration - 1)` for counts, one more for
    /// keys.
    step: u64,
    split: Split,
    /// Shares of the steps not handled yet; early ones wait here for their step.
    pending: Exchanges<Data>,
    /// Whether `Start` has come: before it, shares from faster workers are only stored.
    started: bool,
    peers: Vec<ActorRef<Worker>>,
    collector: Option<ActorRef<Collector>>,
}

#[messages]
impl Worker {
    /// Resolves the other workers and the collector, then starts the first iteration.
    #[message]
    fn start(&mut self, ctx: &mut Context<Self>) {
        self.peers = self.placement.peers(ctx.node());
        self.collector = Some(Placement::collector_on(ctx.node()));
        self.started = true;
        self.begin_iteration();
        self.progress(ctx);
    }

    /// Worker `from`'s contribution to exchange `step`.
    #[message]
    fn share(&mut self, ctx: &mut Context<Self>, step: u64, from: usize, data: Data) {
        // Anything else would be a protocol bug; failing loudly beats a silent hang (the
        // failure hook ends the process).
        assert!(
            step >= self.step && from < self.placement.workers && from != self.index,
            "worker {}: share of step {step} from {from} while at step {}",
            self.index,
            self.step
        );
        self.pending.deposit(step, from, data);
        if self.started {
            self.progress(ctx);
        }
    }

    /// Handles the next step if it is complete (the worker sends this to itself after each
    /// step, so that one handler never does more than one step's work).
    #[message]
    fn resume(&mut self, ctx: &mut Context<Self>) {
        self.progress(ctx);
    }
}

impl Worker {
    fn params(&self) -> is::Params {
        is::params(self.class)
    }

    fn workers(&self) -> usize {
        self.placement.workers
    }

    /// NPB's modifications, then the bucket sizes and test keys of our slice.
    fn begin_iteration(&mut self) {
        let p = self.params();
        let mine = self.first..self.first + self.keys.len();
        for (at, key) in is::modifications(&p, self.iteration) {
            if mine.contains(&at) {
                self.keys[at - self.first] = key;
            }
        }
        let tests: Vec<(u8, u32)> = (0..TEST_ARRAY_SIZE)
            .filter(|&i| mine.contains(&p.test_index[i]))
            .map(|i| (i as u8, self.keys[p.test_index[i] - self.first]))
            .collect();
        let mut sizes = vec![0u32; p.buckets()];
        for &k in &self.keys {
            sizes[(k >> p.bucket_shift()) as usize] += 1;
        }
        let data: Vec<Data> = (0..self.workers())
            .map(|_| Data::Counts {
                sizes: sizes.clone(),
                tests: tests.clone(),
            })
            .collect();
        self.publish(data);
    }

    /// Sends `data[w]` to every other worker `w` and keeps our own.
    fn publish(&mut self, data: Vec<Data>) {
        for (w, d) in data.into_iter().enumerate() {
            if w == self.index {
                self.pending.deposit(self.step, w, d);
            } else {
                self.peers[w]
                    .tell(Share {
                        step: self.step,
                        from: self.index,
                        data: d,
                    })
                    .unwrap_or_else(|e| panic!("worker {}: peer {w} unreachable: {e}", self.index));
            }
        }
    }

    /// Handles the current step if every share is in. Every step handled is followed by
    /// exactly one `Resume` to ourselves, whatever has arrived meanwhile: each handler does
    /// at most one step's work, and the messages a worker sends itself depend, like those
    /// it sends the others, only on the steps it has done (recovery replays rely on it).
    fn progress(&mut self, ctx: &mut Context<Self>) {
        let Some(shares) = self.pending.take(self.step) else {
            return;
        };
        let counts = self.step % 2 == 0;
        self.step += 1;
        if counts {
            self.on_counts(shares);
        } else {
            self.on_keys(shares);
        }
        ctx.myself()
            .tell(Resume)
            .unwrap_or_else(|e| panic!("worker {}: cannot resume: {e}", self.index));
    }

    /// Splits the buckets and sends every worker the keys of its buckets.
    fn on_counts(&mut self, shares: Vec<Data>) {
        let p = self.params();
        let mut sizes = vec![0u64; p.buckets()];
        let mut tests = Vec::new();
        for data in shares {
            let Data::Counts { sizes: s, tests: t } = data else {
                panic!("worker {}: keys where counts were due", self.index);
            };
            for (total, part) in sizes.iter_mut().zip(s) {
                *total += u64::from(part);
            }
            tests.extend(t);
        }
        tests.sort_unstable();
        let ranges = is::bucket_ranges(&sizes, self.workers());
        let mut owner = vec![0usize; p.buckets()];
        for (w, r) in ranges.iter().enumerate() {
            owner[r.clone()].fill(w);
        }
        let mut outgoing: Vec<Vec<u32>> = vec![Vec::new(); self.workers()];
        for &k in &self.keys {
            outgoing[owner[(k >> p.bucket_shift()) as usize]].push(k);
        }
        self.split = Split {
            offset: sizes[..ranges[self.index].start].iter().sum(),
            ranges,
            tests,
        };
        self.publish(outgoing.into_iter().map(Data::Keys).collect());
    }

    /// Ranks our key values, checks the test keys we own, and after the last iteration
    /// verifies the sort of our keys.
    fn on_keys(&mut self, shares: Vec<Data>) {
        let p = self.params();
        let buckets = self.split.ranges[self.index].clone();
        let values =
            (buckets.start << p.bucket_shift()) as u32..(buckets.end << p.bucket_shift()) as u32;
        let received: Vec<Vec<u32>> = shares
            .into_iter()
            .map(|d| match d {
                Data::Keys(k) => k,
                Data::Counts { .. } => panic!("worker {}: counts where keys were due", self.index),
            })
            .collect();
        // ranks[v] = number of keys <= value `values.start + v` in the whole array (NPB's
        // key_buff1 after its prefix sum).
        let mut ranks = vec![0u64; values.len()];
        for &k in received.iter().flatten() {
            assert!(
                values.contains(&k),
                "worker {}: key {k} outside {values:?}",
                self.index
            );
            ranks[(k - values.start) as usize] += 1;
        }
        let mut running = self.split.offset;
        for r in ranks.iter_mut() {
            running += *r;
            *r = running;
        }
        let checks: Vec<Check> = self
            .split
            .tests
            .iter()
            .filter(|&&(_, k)| is::checked(&p, k) && values.contains(&(k - 1)))
            .map(|&(i, k)| {
                let rank = ranks[(k - 1 - values.start) as usize];
                let expected = is::expected_rank(self.class, &p, i as usize, self.iteration);
                (i, rank, rank == expected)
            })
            .collect();
        let collector = self.collector.as_ref().expect("started");
        collector
            .tell(Partial {
                iteration: self.iteration,
                from: self.index,
                checks,
            })
            .unwrap_or_else(|e| panic!("worker {}: collector unreachable: {e}", self.index));
        if self.iteration < MAX_ITERATIONS {
            self.iteration += 1;
            self.begin_iteration();
            return;
        }
        let report = self.full_verify(&received, &values, ranks);
        collector
            .tell(Full { report })
            .unwrap_or_else(|e| panic!("worker {}: collector unreachable: {e}", self.index));
    }

    /// NPB's `full_verify` on our part of the array: every key goes to the position its
    /// value's rank says (counting down within equal keys), then the result must be
    /// sorted and cover exactly the positions `offset..offset + count`.
    fn full_verify(
        &self,
        received: &[Vec<u32>],
        values: &Range<u32>,
        mut ranks: Vec<u64>,
    ) -> FullReport {
        let offset = self.split.offset;
        let count: usize = received.iter().map(Vec::len).sum();
        let mut sorted: Vec<Option<u32>> = vec![None; count];
        let mut misplaced = 0u64;
        for &k in received.iter().flatten() {
            let slot = &mut ranks[(k - values.start) as usize];
            *slot -= 1;
            match slot.checked_sub(offset).map(|i| i as usize) {
                Some(i) if i < count && sorted[i].is_none() => sorted[i] = Some(k),
                _ => misplaced += 1,
            }
        }
        let sorted: Vec<u32> = sorted.into_iter().flatten().collect();
        let out_of_order = sorted.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        FullReport {
            from: self.index,
            offset,
            count: count as u64,
            smallest: sorted.first().copied(),
            largest: sorted.last().copied(),
            out_of_order: out_of_order + misplaced,
            generated_sum: self.keys.iter().map(|&k| u64::from(k)).sum(),
            ranked_sum: sorted.iter().map(|&k| u64::from(k)).sum(),
        }
    }
}

/// One partial verification check: `(test number, rank found, passed)`.
type Check = (u8, u64, bool);

/// How the run fared, as the collector found it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Outcome {
    /// Checks passed: partial ones plus one for the full verification (NPB's
    /// `passed_verification`).
    passed: usize,
    /// Whether the full verification passed.
    full: bool,
    /// What went wrong, for the error message.
    failures: Vec<String>,
    /// Fingerprint of the rank of every test key in every iteration, in order: the same
    /// for every decomposition of a correct run.
    ranks: u64,
}

/// Lives on rank 0: counts the partial verification results and checks the final sort.
#[derive(Actor, Serialize, Deserialize)]
struct Collector {
    class: Class,
    /// Per iteration: each worker's checks, once arrived.
    partial: Vec<Vec<Option<Vec<Check>>>>,
    /// Each worker's final report, once arrived.
    full: Vec<Option<FullReport>>,
    missing: usize,
    done: ReplyTo<Outcome>,
}

/// A worker's part of the full verification.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FullReport {
    from: usize,
    /// The first position of the sorted array the worker's keys occupy.
    offset: u64,
    /// How many keys it ranked.
    count: u64,
    /// Its smallest and largest key (none if it ranked no key).
    smallest: Option<u32>,
    largest: Option<u32>,
    /// Adjacent pairs out of order after placing keys at their ranks, plus keys whose rank
    /// fell outside the worker's positions or onto an occupied one.
    out_of_order: u64,
    /// Sum of the keys of its slice of the key array, and of the keys it ranked: over all
    /// workers the two must agree (no key lost or duplicated in the exchange).
    generated_sum: u64,
    ranked_sum: u64,
}

#[messages]
impl Collector {
    /// Worker `from`'s partial verification checks of `iteration`: `(test, rank, passed)`.
    #[message]
    fn partial(&mut self, iteration: usize, from: usize, checks: Vec<Check>) {
        let slot = &mut self.partial[iteration - 1][from];
        assert!(
            slot.is_none(),
            "worker {from} reported iteration {iteration} twice"
        );
        *slot = Some(checks);
        self.missing -= 1;
        self.reply_if_done();
    }

    /// A worker's part of the full verification.
    #[message]
    fn full(&mut self, report: FullReport) {
        let slot = &mut self.full[report.from];
        assert!(
            slot.is_none(),
            "worker {} sent its final report twice",
            report.from
        );
        *slot = Some(report);
        self.missing -= 1;
        self.reply_if_done();
    }

    /// Replies with the outcome once every report is in.
    #[message]
    fn wait(&mut self, reply: ReplyTo<Outcome>) {
        self.done = reply;
        self.reply_if_done();
    }
}

impl Collector {
    fn reply_if_done(&mut self) {
        if self.missing > 0 || !self.done.is_requested() {
            return;
        }
        let outcome = self.judge();
        self.done.take().send(outcome);
    }

    fn judge(&self) -> Outcome {
        let mut outcome = Outcome::default();
        for (it, reports) in self.partial.iter().enumerate() {
            let mut checks: Vec<Check> = reports.iter().flatten().flatten().copied().collect();
            checks.sort_unstable();
            // Every test key is ranked by exactly one worker: the owner of its value.
            let mut seen = [0usize; TEST_ARRAY_SIZE];
            for &(i, rank, ok) in &checks {
                outcome.ranks = mix(mix(outcome.ranks, u64::from(i)), rank);
                seen[i as usize] += 1;
                if ok {
                    outcome.passed += 1;
                } else {
                    outcome.failures.push(format!(
                        "iteration {}: test key {i} has rank {rank}",
                        it + 1
                    ));
                }
            }
            for (i, n) in seen.iter().enumerate() {
                if *n != 1 {
                    outcome.failures.push(format!(
                        "iteration {}: test key {i} checked {n} times",
                        it + 1
                    ));
                }
            }
        }
        let reports: Vec<&FullReport> = self.full.iter().flatten().collect();
        let mut full_ok = true;
        let mut position = 0u64;
        let mut largest_so_far: Option<u32> = None;
        for r in &reports {
            full_ok &= r.out_of_order == 0 && r.offset == position;
            position += r.count;
            if let (Some(prev), Some(first)) = (largest_so_far, r.smallest) {
                full_ok &= prev <= first;
            }
            largest_so_far = r.largest.or(largest_so_far);
        }
        let total_keys = is::params(self.class).total_keys() as u64;
        let generated: u64 = reports.iter().map(|r| r.generated_sum).sum();
        let ranked: u64 = reports.iter().map(|r| r.ranked_sum).sum();
        full_ok &= position == total_keys && generated == ranked;
        if full_ok {
            outcome.passed += 1;
        } else {
            outcome.failures.push(format!(
                "full verification: {} of {total_keys} keys placed, {} out of order, key sums \
                 {generated} generated vs {ranked} ranked",
                position,
                reports.iter().map(|r| r.out_of_order).sum::<u64>()
            ));
        }
        outcome.full = full_ok;
        outcome
    }
}

/// IS's parts for the shared driver.
struct Is {
    class: Class,
    params: is::Params,
    /// `--workers`.
    workers: Option<usize>,
}

impl Kernel for Is {
    type Collector = Collector;
    type Worker = Worker;
    type Start = Start;
    type Wait = Wait;
    const START: Start = Start;
    const WAIT: Wait = Wait;

    fn workers(&self, nodes: usize, cores: usize) -> usize {
        driver::one_per_core(self.workers, nodes, cores, self.params.buckets())
    }

    fn collector(&self, placement: &Placement) -> Collector {
        let workers = placement.workers;
        Collector {
            class: self.class,
            partial: vec![vec![None; workers]; MAX_ITERATIONS],
            full: vec![None; workers],
            missing: workers * (MAX_ITERATIONS + 1),
            done: ReplyTo::none(),
        }
    }

    /// Key generation is NPB's untimed `create_seq`, here for this worker's slice only.
    fn worker(&mut self, w: usize, placement: &Placement) -> Worker {
        let slice = split(self.params.total_keys(), placement.workers, w);
        Worker {
            index: w,
            placement: *placement,
            class: self.class,
            first: slice.start,
            keys: is::generate(&self.params, slice),
            iteration: 1,
            step: 0,
            split: Split::default(),
            pending: Exchanges::new(placement.workers),
            started: false,
            peers: Vec::new(),
            collector: None,
        }
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let class = args.class;
    let params = is::params(class);
    driver::check_count("--workers", args.workers, params.buckets())?;
    let kernel = Is {
        class,
        params,
        workers: args.workers,
    };
    // NPB ranks once untimed before timing: that pass only rewrites the two keys that
    // iteration 1 rewrites again identically, so it is left out.
    // Rank 0 reports before the cluster shuts down: the RESULT is out before any node may leave.
    driver::run(kernel, args.cores, |done| {
        let Done {
            outcome,
            elapsed,
            nodes,
            workers,
        } = done;
        let verified = outcome.passed == is::PASSES && outcome.failures.is_empty();
        println!(
            "NPB IS class {class}: 2^{} keys below 2^{} over {workers} workers on {nodes} nodes",
            params.total_keys_log2, params.max_key_log2
        );
        for f in &outcome.failures {
            println!("  failed: {f}");
        }
        Verdict {
            result: ResultLine::new("npb-is")
                .field("class", class)
                .field("nodes", nodes)
                .field("workers", workers)
                .field("keys", params.total_keys())
                .field("iterations", MAX_ITERATIONS)
                .field("partial_passed", outcome.passed - usize::from(outcome.full))
                .field("partial_checks", TEST_ARRAY_SIZE * MAX_ITERATIONS)
                .field("full_verify", outcome.full)
                .field("passed", format!("{}/{}", outcome.passed, is::PASSES))
                .hex("ranks", outcome.ranks)
                .elapsed(elapsed)
                .field("mops", format!("{:.2}", is::mops(&params, elapsed))),
            verified,
            failure: format!(
                "verification failed: {} of {} checks passed",
                outcome.passed,
                is::PASSES
            ),
        }
    })
}
