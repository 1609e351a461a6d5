//! `transfer`: read-modify-write money transfers made by async handlers that await each
//! other across nodes.
//!
//! Every node holds a ledger (accounts, a plain actor), a teller and a client. A teller's
//! `async fn transfer` takes the amount from the source account and awaits it, then puts
//! it into the target account and awaits that (`ctx.ask(&from, Take {..}).await?;
//! ctx.ask(&to, Put {..}).await?`), the two ledgers on any nodes. A client's `async fn
//! batch` makes its transfers through the teller of the next node, a few at a time
//! (`join_all`), and awaits each: a client's handler awaits a teller's handler, which
//! awaits the ledgers. With `--think-us`, a teller also sleeps between the take and the
//! put (`ctx.sleep(..).await`). Node 0's `main` asks every client for a batch at a time, then
//! audits the ledgers.
//!
//! Each client draws its transfers from its own seed, so the ledgers' final balances are
//! known in advance: `main` computes them and checks that money was neither made nor
//! lost, every transfer was taken and put exactly once, and every balance is the
//! expected one (`verified=true`). With recovery on, nodes SIGKILLed mid-run are restored
//! with their suspended handlers re-executed (docs/recovery.md, "Suspended async
//! handlers"), and the run ends with the same balances.

use clap::Parser;
use futures::future::join_all;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Money transfers by async handlers across nodes.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Transfers per client (one client per node).
    #[arg(long, default_value_t = 2000)]
    transfers: u64,
    /// Accounts per node.
    #[arg(long, default_value_t = 16)]
    accounts: usize,
    /// Transfers a client has in flight at once.
    #[arg(long, default_value_t = 4)]
    window: u64,
    /// Transfers per client in each of `main`'s asks.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// A teller sleeps this many microseconds between the take and the put
    /// (`ctx.sleep`): its think time, with the money taken and not yet put.
    #[arg(long, default_value_t = 0)]
    think_us: u64,
}

/// What every account holds at the start.
const OPENING: i64 = 1_000;

/// An account: its node and its number there.
type Account = (usize, usize);

/// One node's accounts. Takes and puts commute, so the balances do not depend on the
/// order the tellers' asks arrive in.
#[derive(Actor, Serialize, Deserialize)]
struct Ledger {
    balances: Vec<i64>,
    takes: u64,
    puts: u64,
}

#[messages]
impl Ledger {
    /// Takes `amount` out of `account` (it may go below zero); returns what was taken.
    #[message]
    fn take(&mut self, account: usize, amount: i64) -> Result<i64, String> {
        let balance = self
            .balances
            .get_mut(account)
            .ok_or(format!("no account {account}"))?;
        *balance -= amount;
        self.takes += 1;
        Ok(amount)
    }

    /// Puts `amount` into `account`.
    #[message]
    fn put(&mut self, account: usize, amount: i64) -> Result<(), String> {
        let balance = self
            .balances
            .get_mut(account)
            .ok_or(format!("no account {account}"))?;
        *balance += amount;
        self.puts += 1;
        Ok(())
    }

    /// The balances, takes and puts.
    #[message]
    fn audit(&mut self) -> (Vec<i64>, u64, u64) {
        (self.balances.clone(), self.takes, self.puts)
    }
}

/// Moves money between accounts for one client.
#[derive(Actor, Serialize, Deserialize)]
struct Teller {
    ledgers: Vec<ActorRef<Ledger>>,
    think: Duration,
}

#[messages]
impl Teller {
    /// Takes `amount` from `from`, then puts what was taken into `to`.
    #[message]
    async fn transfer(
        &mut self,
        from: Account,
        to: Account,
        amount: i64,
        ctx: &mut Context<Self>,
    ) -> Result<(), String> {
        let (source, target) = match (self.ledgers.get(from.0), self.ledgers.get(to.0)) {
            (Some(s), Some(t)) => (s.clone(), t.clone()),
            _ => return Err(format!("no node {} or {}", from.0, to.0)),
        };
        let take = Take {
            account: from.1,
            amount,
        };
        let taken = ctx.ask(&source, take).await.map_err(|e| e.to_string())??;
        if !self.think.is_zero() {
            ctx.sleep(self.think).await;
        }
        let put = Put {
            account: to.1,
            amount: taken,
        };
        ctx.ask(&target, put).await.map_err(|e| e.to_string())?
    }
}

/// Makes its transfers through one teller, drawn from its own seed.
#[derive(Actor, Serialize, Deserialize)]
struct Client {
    teller: ActorRef<Teller>,
    draws: Draws,
    made: u64,
    failed: u64,
}

#[messages]
impl Client {
    /// Makes `count` transfers, `window` at a time; returns how many it has made in all.
    #[message]
    async fn batch(&mut self, count: u64, window: u64, ctx: &mut Context<Self>) -> u64 {
        let mut left = count;
        while left > 0 {
            let now = left.min(window.max(1));
            left -= now;
            let asks: Vec<_> = (0..now)
                .map(|_| {
                    let (from, to, amount) = self.draws.next();
                    ctx.ask(&self.teller, Transfer { from, to, amount })
                })
                .collect();
            for outcome in join_all(asks).await {
                match outcome.map_err(|e| e.to_string()).and_then(|r| r) {
                    Ok(()) => self.made += 1,
                    Err(e) => {
                        tracing::error!("a transfer failed: {e}");
                        self.failed += 1;
                    }
                }
            }
        }
        self.made
    }

    /// Transfers made and failed.
    #[message]
    fn tally(&mut self) -> (u64, u64) {
        (self.made, self.failed)
    }
}

/// A client's transfers: a xorshift generator over the cluster's accounts.
#[derive(Clone, Serialize, Deserialize)]
struct Draws {
    state: u64,
    nodes: usize,
    accounts: usize,
}

impl Draws {
    fn new(client: usize, nodes: usize, accounts: usize) -> Draws {
        Draws {
            state: mix(0x7472_616e_7366_6572, client as u64) | 1,
            nodes,
            accounts,
        }
    }

    fn below(&mut self, bound: usize) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        (self.state % bound.max(1) as u64) as usize
    }

    /// The next transfer: source, target (any accounts, the same one possibly) and
    /// amount.
    fn next(&mut self) -> (Account, Account, i64) {
        let from = (self.below(self.nodes), self.below(self.accounts));
        let to = (self.below(self.nodes), self.below(self.accounts));
        let amount = 1 + self.below(100) as i64;
        (from, to, amount)
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank() as usize, cluster.size());
    let accounts = args.accounts.max(1);
    // Node r's ledger, teller and client are its actors 0, 1 and 2.
    let id = |node: usize, n: u64| ActorId::new(node as u16, n).ok_or("no such actor id");
    let ledger = cluster.spawn(Ledger {
        balances: vec![OPENING; accounts],
        takes: 0,
        puts: 0,
    })?;
    expect_id(ledger, id(rank, 0)?, "ledger")?;
    let ledgers = (0..size)
        .map(|r| Ok(cluster.handle().actor_ref::<Ledger>(id(r, 0)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let teller = cluster.spawn(Teller {
        ledgers,
        think: Duration::from_micros(args.think_us),
    })?;
    expect_id(teller, id(rank, 1)?, "teller")?;
    // Each client goes through the next node's teller: every transfer crosses nodes.
    let next_teller = cluster
        .handle()
        .actor_ref::<Teller>(id((rank + 1) % size, 1)?)?;
    let client = cluster.spawn(Client {
        teller: next_teller,
        draws: Draws::new(rank, size, accounts),
        made: 0,
        failed: 0,
    })?;
    expect_id(client, id(rank, 2)?, "client")?;
    cluster.barrier()?;
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let clients = (0..size)
        .map(|r| Ok(cluster.handle().actor_ref::<Client>(id(r, 2)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let started = cluster.begin_timed_part();
    let mut left = args.transfers;
    while left > 0 {
        let count = left.min(args.batch.max(1));
        left -= count;
        let window = args.window;
        let asks = clients
            .iter()
            .map(|c| c.ask(Batch { count, window }).no_timeout());
        for made in cluster.block_on(join_all(asks)) {
            made?;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut tallies = Vec::new();
    for c in &clients {
        tallies.push(cluster.block_on(c.ask(Tally).no_timeout())?);
    }
    let mut audits = Vec::new();
    for r in 0..size {
        let ledger = cluster.handle().actor_ref::<Ledger>(id(r, 0)?)?;
        audits.push(cluster.block_on(ledger.ask(Audit).no_timeout())?);
    }
    let expected = expected_balances(size, accounts, args.transfers);
    let total: i64 = audits.iter().flat_map(|a| &a.0).sum();
    let takes: u64 = audits.iter().map(|a| a.1).sum();
    let puts: u64 = audits.iter().map(|a| a.2).sum();
    let made: u64 = tallies.iter().map(|t| t.0).sum();
    let failed: u64 = tallies.iter().map(|t| t.1).sum();
    let transfers = args.transfers * size as u64;
    let conserved = total == OPENING * (size * accounts) as i64;
    let exactly_once = takes == transfers && puts == transfers && made == transfers;
    let balances_match = audits.iter().map(|a| &a.0).eq(expected.iter());
    let checksum = audits
        .iter()
        .flat_map(|a| &a.0)
        .fold(mix(0, size as u64), |acc, b| mix(acc, *b as u64));
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("transfer")
            .field("nodes", size)
            .field("accounts", accounts)
            .field("transfers", transfers)
            .field("think_us", args.think_us)
            .field("made", made)
            .field("failed", failed)
            .field("takes", takes)
            .field("puts", puts)
            .hex("checksum", checksum)
            .elapsed(elapsed)
            .field(
                "transfers_per_s",
                format!("{:.0}", transfers as f64 / elapsed.max(1e-9)),
            )
            .field("conserved", conserved)
            .field("exactly_once", exactly_once)
            .field("balances_match", balances_match),
        verified: conserved && exactly_once && balances_match && failed == 0,
        failure: "money was made or lost, a transfer was booked twice or not at all, or a \
                  balance differs from the expected one"
            .into(),
    })
}

/// The balances every ledger must end with: each client's transfers replayed in order.
fn expected_balances(nodes: usize, accounts: usize, transfers: u64) -> Vec<Vec<i64>> {
    let mut balances = vec![vec![OPENING; accounts]; nodes];
    for client in 0..nodes {
        let mut draws = Draws::new(client, nodes, accounts);
        for _ in 0..transfers {
            let (from, to, amount) = draws.next();
            balances[from.0][from.1] -= amount;
            balances[to.0][to.1] += amount;
        }
    }
    balances
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_balances_conserve_the_money() {
        let b = expected_balances(4, 16, 1000);
        assert_eq!(b.iter().flatten().sum::<i64>(), OPENING * 64);
        assert_ne!(b, vec![vec![OPENING; 16]; 4], "money moved");
    }
}
