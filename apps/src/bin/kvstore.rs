//! `kvstore`: a sharded key-value service. Shards (order-sensitive actors, spread over
//! every node) hold the keys; clients on every node run a deterministic pseudo-random mix
//! of gets and puts over a small key space, one request outstanding at a time, so clients
//! of different nodes contend on the same keys and what each of them reads depends on the
//! order in which requests reach a shard. Each put is stamped with a version drawn from
//! `ctx.now()` and `ctx.random()`. With recovery on, a shard's deliveries and draws are
//! logged as determinants and replayed after a failure.
//!
//! A get answers the value the shard holds for the key, a put the value it replaced (and
//! the version it stamped). Requests and replies are tells (a client sends its own
//! reference with each request), never asks between nodes: those are not recovered.
//!
//! When every client is done, a coordinator next to `main` on node 0 collects what each
//! client received and what each shard sent and holds, and checks:
//! - `consistent`: for every client and shard, the hash chain of the replies the client
//!   received from that shard equals the chain of the replies the shard sent it (a
//!   recovered shard whose state contradicts a reply a client already holds shows here);
//! - `history`: the final store is the one the puts' replies imply: for each key, the puts
//!   chain from "absent" through each replaced value to exactly the value the store ends
//!   with, each value replaced at most once.
//!
//! The RESULT line holds the digest of every client's replies (`replies`) and of the final
//! store (`store`); `verified` is `consistent && history` with every request answered
//! exactly once. Both digests depend on timing (arrival order, clock, random draws), so
//! they differ between runs; the checks do not.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::UNIX_EPOCH;

/// A sharded key-value store under a mixed get/put load from clients on every node.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Requests per client.
    #[arg(long, default_value_t = 1_000)]
    ops: u64,
    /// Size of the key space (small, so that clients contend on the same keys).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// Percentage of requests that are puts (the others are gets).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=100))]
    write_percent: u64,
    /// Shards on each node.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    shards_per_node: u64,
    /// Clients on each node.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients_per_node: u64,
    /// Adds the run's duration and throughput (`elapsed_s`, `ops_per_s`) to the RESULT.
    #[arg(long)]
    measure: bool,
}

/// A stored value: what the writer put, who wrote it (client and request number, which
/// make it unique) and the version the shard stamped on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Value {
    data: u64,
    writer: u64,
    seq: u64,
    version: u64,
}

/// One request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    Get { key: u64 },
    Put { key: u64, data: u64 },
}

impl Op {
    fn key(self) -> u64 {
        match self {
            Op::Get { key } | Op::Put { key, .. } => key,
        }
    }
}

/// Fingerprint of one reply, computed the same way by the shard that sends it and the
/// client that receives it.
fn reply_hash(shard: u64, seq: u64, key: u64, found: Option<Value>, stamped: u64) -> u64 {
    let h = mix(mix(mix(0x6b76_7374_6f72_6521, shard), seq), key);
    let h = match found {
        None => mix(h, 0),
        Some(v) => v.fold_into(mix(h, 1)),
    };
    mix(h, stamped)
}

impl Value {
    /// `acc` extended with every field of the value.
    fn fold_into(&self, acc: u64) -> u64 {
        mix(
            mix(mix(mix(acc, self.data), self.writer), self.seq),
            self.version,
        )
    }
}

/// Appends one reply to a `(count, chain)` record.
fn extend(record: &mut (u64, u64), reply: u64) {
    *record = (record.0 + 1, mix(record.1, reply));
}

/// A put as its client saw it: the value it replaced and the value it stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PutRecord {
    key: u64,
    replaced: Option<Value>,
    stored: Value,
}

/// What a client reports when it has done all its requests.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ClientReport {
    answered: u64,
    /// Replies that did not answer the request outstanding.
    stray: u64,
    /// Hash chain of every reply received, in order.
    chain: u64,
    /// Per shard: replies received from it and their hash chain.
    per_shard: BTreeMap<u64, (u64, u64)>,
    puts: Vec<PutRecord>,
}

/// What a shard reports at the end.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ShardReport {
    /// Per client: replies sent to it and their hash chain.
    per_client: BTreeMap<u64, (u64, u64)>,
    served: u64,
    store: BTreeMap<u64, Value>,
}

/// The coordinator's verdict.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Outcome {
    replies: u64,
    store: u64,
    consistent: bool,
    history: bool,
    answered: u64,
    served: u64,
    stray: u64,
    puts: u64,
}

/// One shard: the keys `k` with `k % shards == index`.
#[derive(Actor, Serialize, Deserialize)]
#[actor(order_sensitive)]
struct Shard {
    index: u64,
    store: BTreeMap<u64, Value>,
    per_client: BTreeMap<u64, (u64, u64)>,
    served: u64,
}

#[messages]
impl Shard {
    /// Request `seq` of client `client`; the reply goes to `from`.
    #[message]
    fn request(
        &mut self,
        client: u64,
        seq: u64,
        op: Op,
        from: ActorRef<Client>,
        ctx: &mut Context<Self>,
    ) {
        let key = op.key();
        let found = self.store.get(&key).copied();
        let stamped = match op {
            Op::Get { .. } => 0,
            Op::Put { data, .. } => {
                let at = ctx
                    .now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let version = mix(at, ctx.random());
                let value = Value {
                    data,
                    writer: client,
                    seq,
                    version,
                };
                self.store.insert(key, value);
                version
            }
        };
        self.served += 1;
        extend(
            self.per_client.entry(client).or_default(),
            reply_hash(self.index, seq, key, found, stamped),
        );
        let reply = Answer {
            shard: self.index,
            seq,
            key,
            found,
            stamped,
        };
        if from.tell(reply).is_err() {
            tracing::error!(shard = self.index, client, "client unreachable");
        }
    }

    /// Every client is done: report to `coordinator`.
    #[message]
    fn report(&mut self, coordinator: ActorRef<Coordinator>) {
        let report = ShardReport {
            per_client: self.per_client.clone(),
            served: self.served,
            store: self.store.clone(),
        };
        let _ = coordinator.tell(ShardDone {
            shard: self.index,
            report,
        });
    }
}

/// A shard's reply, as the client keeps it until it is the one awaited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Reply {
    shard: u64,
    key: u64,
    found: Option<Value>,
    stamped: u64,
}

/// One client: `ops` requests, each sent when the previous one is answered.
///
/// Only one request is outstanding, so in a failure-free run replies arrive in request
/// order. A restored node, though, gets the replies its peers logged all at once, possibly
/// before `main`'s `Begin`: the client buffers replies by request number and takes them
/// in that order, so what it sends never depends on how its channels interleave.
#[derive(Actor, Serialize, Deserialize)]
struct Client {
    index: u64,
    ops: u64,
    keys: u64,
    write_percent: u64,
    /// The workload generator's state (seeded with the client's index).
    rng: u64,
    /// The number of the last request sent, and what it asked while it is unanswered.
    seq: u64,
    outstanding: Option<Op>,
    /// Replies that came before their turn, by request number.
    early: BTreeMap<u64, Reply>,
    shards: Vec<ActorRef<Shard>>,
    coordinator: Option<ActorRef<Coordinator>>,
    report: ClientReport,
}

#[messages]
impl Client {
    /// Starts the workload against `shards`; reports to `coordinator` when done.
    #[message]
    fn begin(
        &mut self,
        shards: Vec<ActorRef<Shard>>,
        coordinator: ActorRef<Coordinator>,
        ctx: &mut Context<Self>,
    ) {
        self.shards = shards;
        self.coordinator = Some(coordinator);
        self.next(ctx);
        self.take_early(ctx);
    }

    /// Shard `shard`'s reply to request `seq` on `key`: the value it found, and for a put
    /// the version it stamped on the new value.
    #[message]
    fn answer(
        &mut self,
        shard: u64,
        seq: u64,
        key: u64,
        found: Option<Value>,
        stamped: u64,
        ctx: &mut Context<Self>,
    ) {
        let reply = Reply {
            shard,
            key,
            found,
            stamped,
        };
        let answered = seq < self.seq || (seq == self.seq && self.outstanding.is_none());
        if seq > self.ops || answered || self.early.insert(seq, reply).is_some() {
            tracing::error!(client = self.index, shard, seq, "a second reply");
            self.report.stray += 1;
            return;
        }
        self.take_early(ctx);
    }
}

impl Client {
    fn shard_of(&self, key: u64) -> u64 {
        key % self.shards.len() as u64
    }

    /// Takes the replies to the outstanding request, in request order, as far as they
    /// have come.
    fn take_early(&mut self, ctx: &mut Context<Self>) {
        while let Some(op) = self.outstanding {
            let Some(reply) = self.early.remove(&self.seq) else {
                return;
            };
            self.outstanding = None;
            self.take(op, reply);
            self.next(ctx);
        }
    }

    /// Records `reply` as the answer to request `self.seq`, which asked `op`.
    fn take(&mut self, op: Op, reply: Reply) {
        let Reply {
            shard,
            key,
            found,
            stamped,
        } = reply;
        let seq = self.seq;
        if key != op.key() || shard != self.shard_of(key) {
            tracing::error!(
                client = self.index,
                shard,
                seq,
                "a reply to another request"
            );
            self.report.stray += 1;
        }
        let h = reply_hash(shard, seq, key, found, stamped);
        self.report.answered += 1;
        self.report.chain = mix(self.report.chain, h);
        extend(self.report.per_shard.entry(shard).or_default(), h);
        if let Op::Put { data, .. } = op {
            self.report.puts.push(PutRecord {
                key,
                replaced: found,
                stored: Value {
                    data,
                    writer: self.index,
                    seq,
                    version: stamped,
                },
            });
        }
    }

    /// Sends the next request, or the report once all are answered.
    fn next(&mut self, ctx: &mut Context<Self>) {
        if self.seq >= self.ops {
            if let Some(c) = &self.coordinator {
                let _ = c.tell(ClientDone {
                    client: self.index,
                    report: std::mem::take(&mut self.report),
                });
            }
            return;
        }
        self.seq += 1;
        let r = splitmix(&mut self.rng);
        let key = r % self.keys;
        let op = if (r >> 32) % 100 < self.write_percent {
            Op::Put {
                key,
                data: mix(self.index, self.seq),
            }
        } else {
            Op::Get { key }
        };
        self.outstanding = Some(op);
        let shard = &self.shards[self.shard_of(key) as usize];
        if shard
            .tell(Request {
                client: self.index,
                seq: self.seq,
                op,
                from: ctx.myself().clone(),
            })
            .is_err()
        {
            tracing::error!(client = self.index, "shard unreachable");
        }
    }
}

/// The workload generator (splitmix64).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Collects the clients' and then the shards' reports and checks them against each other.
/// It combines them by index, never in arrival order, so it is send-deterministic.
#[derive(Actor, Serialize, Deserialize)]
struct Coordinator {
    clients: u64,
    shards: Vec<ActorRef<Shard>>,
    client_reports: BTreeMap<u64, ClientReport>,
    shard_reports: BTreeMap<u64, ShardReport>,
    outcome: Option<Outcome>,
    waiting: ReplyTo<Outcome>,
}

#[messages]
impl Coordinator {
    /// Client `client` has done all its requests; once every client has, the shards are
    /// asked for their reports.
    #[message]
    fn client_done(&mut self, client: u64, report: ClientReport, ctx: &mut Context<Self>) {
        self.client_reports.insert(client, report);
        if self.client_reports.len() as u64 == self.clients {
            for s in &self.shards {
                let _ = s.tell(Report {
                    coordinator: ctx.myself().clone(),
                });
            }
        }
        self.complete();
    }

    /// Shard `shard`'s final report.
    #[message]
    fn shard_done(&mut self, shard: u64, report: ShardReport) {
        self.shard_reports.insert(shard, report);
        self.complete();
    }

    /// Replies once every report is in.
    #[message]
    fn wait(&mut self, reply: ReplyTo<Outcome>) {
        match &self.outcome {
            Some(o) => {
                reply.send(o.clone());
            }
            None => self.waiting = reply,
        }
    }
}

impl Coordinator {
    /// Judges once every report is in. Both kinds are checked: a restored node 0 gets
    /// the shards' logged reports back at once, possibly before its own clients' reports
    /// are redone.
    fn complete(&mut self) {
        let all = self.client_reports.len() as u64 == self.clients
            && self.shard_reports.len() == self.shards.len();
        if all && self.outcome.is_none() {
            let outcome = self.judge();
            let _ = self.waiting.take().send(outcome.clone());
            self.outcome = Some(outcome);
        }
    }

    fn judge(&self) -> Outcome {
        let clients = &self.client_reports;
        let shards = &self.shard_reports;
        let mut consistent = true;
        for (c, cr) in clients {
            for (s, sr) in shards {
                let received = cr.per_shard.get(s).copied().unwrap_or_default();
                let sent = sr.per_client.get(c).copied().unwrap_or_default();
                if received != sent {
                    tracing::error!(
                        client = c,
                        shard = s,
                        ?received,
                        ?sent,
                        "a client holds replies its shard contradicts"
                    );
                    consistent = false;
                }
            }
        }
        let store: BTreeMap<u64, Value> = shards
            .values()
            .flat_map(|r| r.store.iter().map(|(k, v)| (*k, *v)))
            .collect();
        let mut puts: BTreeMap<u64, Vec<PutRecord>> = BTreeMap::new();
        for r in clients.values().flat_map(|c| &c.puts) {
            puts.entry(r.key).or_default().push(*r);
        }
        let keys: BTreeSet<u64> = store.keys().chain(puts.keys()).copied().collect();
        let history = keys.iter().all(|k| {
            let ok = explains(puts.get(k).map_or(&[], Vec::as_slice), store.get(k));
            if !ok {
                tracing::error!(key = k, "the final store is not what the puts replaced");
            }
            ok
        });
        Outcome {
            replies: clients
                .iter()
                .fold(0, |acc, (c, r)| mix(mix(mix(acc, *c), r.answered), r.chain)),
            store: store
                .iter()
                .fold(0, |acc, (k, v)| v.fold_into(mix(acc, *k))),
            consistent,
            history,
            answered: clients.values().map(|c| c.answered).sum(),
            served: shards.values().map(|s| s.served).sum(),
            stray: clients.values().map(|c| c.stray).sum(),
            puts: clients.values().map(|c| c.puts.len() as u64).sum(),
        }
    }
}

/// Whether the puts on one key, each knowing the value it replaced, form a single chain
/// from "absent" that ends with `last` (the value the store holds) — each value replaced
/// at most once, every put on the chain.
fn explains(puts: &[PutRecord], last: Option<&Value>) -> bool {
    let mut successor: BTreeMap<Option<Value>, Value> = BTreeMap::new();
    for p in puts {
        if successor.insert(p.replaced, p.stored).is_some() {
            return false;
        }
    }
    let mut at: Option<Value> = None;
    let mut steps = 0;
    while let Some(next) = successor.get(&at) {
        at = Some(*next);
        steps += 1;
        if steps > puts.len() {
            return false;
        }
    }
    steps == puts.len() && at.as_ref() == last
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank(), cluster.size() as u64);
    let (spn, cpn) = (args.shards_per_node, args.clients_per_node);
    // Spawn order on every node: its shards, then its clients; node 0 then spawns the
    // coordinator. Shard `r * spn + k` is actor `(r, k)`, client `r * cpn + c` is `(r, spn + c)`.
    let shard_id = |s: u64| ActorId::new((s / spn) as u16, s % spn).ok_or("bad shard id");
    let coordinator_id = ActorId::new(0, spn + cpn).ok_or("bad coordinator id")?;
    for k in 0..spn {
        let s = cluster.spawn(Shard {
            index: u64::from(rank) * spn + k,
            store: BTreeMap::new(),
            per_client: BTreeMap::new(),
            served: 0,
        })?;
        expect_id(
            s,
            ActorId::new(rank, k).ok_or("bad id")?,
            format!("shard {k}"),
        )?;
    }
    let mut clients = Vec::new();
    for c in 0..cpn {
        let index = u64::from(rank) * cpn + c;
        let client = cluster.spawn(Client {
            index,
            ops: args.ops,
            keys: args.keys,
            write_percent: args.write_percent,
            rng: mix(0x6b76, index),
            seq: 0,
            outstanding: None,
            early: BTreeMap::new(),
            shards: Vec::new(),
            coordinator: None,
            report: ClientReport::default(),
        })?;
        let id = ActorId::new(rank, spn + c).ok_or("bad id")?;
        clients.push(expect_id(client, id, format!("client {c}"))?);
    }
    let handle = cluster.handle();
    let shards = (0..spn * size)
        .map(|s| handle.actor_ref::<Shard>(shard_id(s)?))
        .collect::<Result<Vec<_>, _>>()?;
    if rank == 0 {
        let c = cluster.spawn(Coordinator {
            clients: cpn * size,
            shards: shards.clone(),
            client_reports: BTreeMap::new(),
            shard_reports: BTreeMap::new(),
            outcome: None,
            waiting: ReplyTo::none(),
        })?;
        expect_id(c, coordinator_id, "coordinator")?;
    }
    cluster.barrier()?;
    let coordinator = handle.actor_ref::<Coordinator>(coordinator_id)?;
    let started = cluster.begin_timed_part();
    for c in &clients {
        c.tell(Begin {
            shards: shards.clone(),
            coordinator: coordinator.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    // For observers (the kill tests): from here on, this node's clients are at work.
    eprintln!("kvstore: node {rank}: clients started");
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let outcome = cluster.block_on(coordinator.ask(Wait {}).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    let requests = args.ops * cpn * size;
    let verified = outcome.consistent
        && outcome.history
        && outcome.answered == requests
        && outcome.served == requests
        && outcome.stray == 0;
    ending::report_and_leave(cluster, || {
        let mut result = ResultLine::new("kvstore")
            .field("nodes", size)
            .field("shards", spn * size)
            .field("clients", cpn * size)
            .field("ops", args.ops)
            .field("keys", args.keys)
            .field("answered", outcome.answered)
            .field("puts", outcome.puts)
            .hex("replies", outcome.replies)
            .hex("store", outcome.store)
            .field("consistent", outcome.consistent)
            .field("history", outcome.history);
        if args.measure {
            result = result
                .elapsed(elapsed)
                .field("ops_per_s", format!("{:.0}", requests as f64 / elapsed));
        }
        Verdict {
            result,
            verified,
            failure: "kvstore result not verified".into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(writer: u64, seq: u64) -> Value {
        Value {
            data: 0,
            writer,
            seq,
            version: 7,
        }
    }

    fn put(replaced: Option<Value>, stored: Value) -> PutRecord {
        PutRecord {
            key: 0,
            replaced,
            stored,
        }
    }

    #[test]
    fn a_chain_of_puts_from_absent_explains_its_last_value() {
        let puts = [put(Some(v(1, 1)), v(2, 1)), put(None, v(1, 1))];
        assert!(explains(&puts, Some(&v(2, 1))));
        assert!(explains(&[], None));
    }

    #[test]
    fn a_store_the_puts_do_not_explain_is_caught() {
        // Ends elsewhere.
        let puts = [put(None, v(1, 1)), put(Some(v(1, 1)), v(2, 1))];
        assert!(!explains(&puts, Some(&v(1, 1))));
        assert!(!explains(&[], Some(&v(1, 1))));
        // One value replaced twice (two clients read the same "previous").
        let forked = [put(None, v(1, 1)), put(None, v(2, 1))];
        assert!(!explains(&forked, Some(&v(2, 1))));
        // A put off the chain.
        let off = [put(None, v(1, 1)), put(Some(v(9, 9)), v(2, 1))];
        assert!(!explains(&off, Some(&v(1, 1))));
        // Versions are part of a value's identity.
        let mut restamped = v(1, 1);
        restamped.version = 8;
        assert!(!explains(&[put(None, v(1, 1))], Some(&restamped)));
    }
}
