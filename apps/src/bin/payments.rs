//! `payments`: order-sensitive async handlers, whose results change what they do next
//! depending on the order they come in.
//!
//! Every node holds a bank (accounts that refuse overdrafts) and a payer. A payer's
//! `async fn pay` keeps `--window` payments in flight (`FuturesUnordered`) and takes their
//! outcomes as they come: each payment withdraws from one bank and awaits it, then
//! deposits into another and awaits that. Every outcome is mixed into the payer's draw
//! state, so the next payment's accounts and amount depend on which earlier payments
//! completed first; a bank's answer (paid or refused) depends on the order withdrawals
//! and deposits reach it. With `--patience-us`, a payer races each wait for an outcome
//! against a sleep (`select`): when the sleep ends first it notes a wait (mixed into its
//! draw state too) and waits again; the sleep that lost is given up. Both actors are `#[actor(order_sensitive)]`: with recovery on,
//! the order a payer takes its results in is logged like its messages' (determinants),
//! and a restored payer takes them again in that order. Node 0's `main` asks every payer
//! for a round of payments at a time, then audits the banks.
//!
//! What was paid depends on the run's timing, so the check is against the payers' own
//! journals: money was neither made nor lost, no balance went below zero, every
//! withdrawal was matched by one deposit and every payment answered exactly once
//! (settled or refused), and every balance equals its opening plus what the payers'
//! journals say went in and out (`verified=true`). A restored payer that made other
//! payments than its first life, already applied by surviving banks, breaks the last.

use clap::Parser;
use futures::future::{select, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Payments by order-sensitive async handlers, against banks that refuse overdrafts.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Payments per payer (one payer per node).
    #[arg(long, default_value_t = 2000)]
    payments: u64,
    /// Accounts per bank.
    #[arg(long, default_value_t = 8)]
    accounts: usize,
    /// Payments a payer has in flight at once.
    #[arg(long, default_value_t = 6)]
    window: usize,
    /// Payments per payer in each of `main`'s asks.
    #[arg(long, default_value_t = 250)]
    round: u64,
    /// A payer waits this many microseconds for an outcome before it notes a wait and
    /// waits again (`ctx.sleep` raced against the outcomes); 0: it just waits.
    #[arg(long, default_value_t = 0)]
    patience_us: u64,
}

/// What every account holds at the start; payments are up to a third of it, so some are
/// refused.
const OPENING: i64 = 300;

/// An account: its node and its number there.
type Account = (usize, usize);

/// One node's accounts. A withdrawal larger than the balance is refused: whether one is
/// paid depends on the order withdrawals and deposits arrive in.
#[derive(Actor, Serialize, Deserialize)]
#[actor(order_sensitive)]
struct Bank {
    balances: Vec<i64>,
    withdrawals: u64,
    refusals: u64,
    deposits: u64,
}

/// A bank's books at the end.
#[derive(Serialize, Deserialize, Debug)]
struct Books {
    balances: Vec<i64>,
    withdrawals: u64,
    refusals: u64,
    deposits: u64,
}

#[messages]
impl Bank {
    /// Takes `amount` out of `account` if it holds that much: whether it did.
    #[message]
    fn withdraw(&mut self, account: usize, amount: i64) -> Result<bool, String> {
        let balance = self
            .balances
            .get_mut(account)
            .ok_or(format!("no account {account}"))?;
        if *balance < amount {
            self.refusals += 1;
            return Ok(false);
        }
        *balance -= amount;
        self.withdrawals += 1;
        Ok(true)
    }

    /// Puts `amount` into `account`.
    #[message]
    fn deposit(&mut self, account: usize, amount: i64) -> Result<(), String> {
        let balance = self
            .balances
            .get_mut(account)
            .ok_or(format!("no account {account}"))?;
        *balance += amount;
        self.deposits += 1;
        Ok(())
    }

    /// The books.
    #[message]
    fn audit(&mut self) -> Books {
        Books {
            balances: self.balances.clone(),
            withdrawals: self.withdrawals,
            refusals: self.refusals,
            deposits: self.deposits,
        }
    }
}

/// One payment.
#[derive(Clone, Copy, Debug)]
struct Payment {
    from: Account,
    to: Account,
    amount: i64,
}

/// How a payment ended.
enum Outcome {
    /// Withdrawn and deposited.
    Settled,
    /// The source account held too little.
    Refused,
    /// An ask failed (never in a correct run).
    Failed(String),
}

/// Makes payments between any accounts of the cluster, its next ones drawn from what
/// came back so far.
#[derive(Actor, Serialize, Deserialize)]
#[actor(order_sensitive)]
struct Payer {
    banks: Vec<ActorRef<Bank>>,
    accounts: usize,
    /// How long it waits for an outcome before it notes a wait (zero: no limit).
    patience: Duration,
    /// Waits that ended before an outcome came.
    waits: u64,
    /// The draw state: mixed with every outcome, in the order they come.
    state: u64,
    settled: u64,
    refused: u64,
    failed: u64,
    /// Per account of the cluster (node-major): what its settled payments moved in (+)
    /// and out (-).
    journal: Vec<i64>,
}

/// A payer's totals at the end.
#[derive(Serialize, Deserialize, Debug)]
struct Totals {
    waits: u64,
    settled: u64,
    refused: u64,
    failed: u64,
    journal: Vec<i64>,
}

#[messages]
impl Payer {
    /// Makes `count` payments, `window` at a time, taking each outcome as it comes;
    /// returns how many it has made in all.
    #[message]
    async fn pay(&mut self, count: u64, window: usize, ctx: &mut Context<Self>) -> u64 {
        let ctx = &*ctx;
        let banks = self.banks.clone();
        let mut in_flight = FuturesUnordered::new();
        let mut left = count;
        loop {
            while in_flight.len() < window.max(1) && left > 0 {
                left -= 1;
                let payment = self.draw();
                in_flight.push(settle(ctx, &banks, payment));
            }
            let next = if self.patience.is_zero() || in_flight.is_empty() {
                in_flight.next().await
            } else {
                match select(in_flight.next(), ctx.sleep(self.patience)).await {
                    Either::Left((next, _sleep_given_up)) => next,
                    Either::Right(((), _)) => {
                        self.waits += 1;
                        self.state = mix(self.state, 0x77a1);
                        continue;
                    }
                }
            };
            let Some((payment, outcome)) = next else {
                break;
            };
            let code = match outcome {
                Outcome::Settled => {
                    self.settled += 1;
                    let nodes = banks.len();
                    let at = |(node, n): Account| node * self.accounts + n;
                    if let Some(out) = self.journal.get_mut(at(payment.from)) {
                        *out -= payment.amount;
                    }
                    if let Some(into) = self.journal.get_mut(at(payment.to)) {
                        *into += payment.amount;
                    }
                    debug_assert_eq!(self.journal.len(), nodes * self.accounts);
                    1
                }
                Outcome::Refused => {
                    self.refused += 1;
                    2
                }
                Outcome::Failed(e) => {
                    tracing::error!("a payment failed: {e}");
                    self.failed += 1;
                    3
                }
            };
            // The order outcomes come in decides the payments drawn after them.
            self.state = mix(self.state, payment.amount as u64 ^ code << 32);
        }
        self.settled + self.refused + self.failed
    }

    /// The payer's totals and journal.
    #[message]
    fn tally(&mut self) -> Totals {
        Totals {
            waits: self.waits,
            settled: self.settled,
            refused: self.refused,
            failed: self.failed,
            journal: self.journal.clone(),
        }
    }
}

impl Payer {
    /// The next payment, from the draw state: any two accounts (the same one possibly),
    /// up to a third of an opening balance.
    fn draw(&mut self) -> Payment {
        let mut below = |bound: usize| {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            (self.state % bound.max(1) as u64) as usize
        };
        let nodes = self.banks.len();
        let from = (below(nodes), below(self.accounts));
        let to = (below(nodes), below(self.accounts));
        let amount = 1 + below(OPENING as usize / 3) as i64;
        Payment { from, to, amount }
    }
}

/// One payment: withdraw, await; if paid, deposit, await.
async fn settle(ctx: &Context<Payer>, banks: &[ActorRef<Bank>], p: Payment) -> (Payment, Outcome) {
    let (Some(source), Some(target)) = (banks.get(p.from.0), banks.get(p.to.0)) else {
        return (
            p,
            Outcome::Failed(format!("no bank {} or {}", p.from.0, p.to.0)),
        );
    };
    let withdraw = Withdraw {
        account: p.from.1,
        amount: p.amount,
    };
    let paid = match ctx.ask(source, withdraw).await {
        Ok(Ok(paid)) => paid,
        Ok(Err(e)) => return (p, Outcome::Failed(e)),
        Err(e) => return (p, Outcome::Failed(e.to_string())),
    };
    if !paid {
        return (p, Outcome::Refused);
    }
    let deposit = Deposit {
        account: p.to.1,
        amount: p.amount,
    };
    let outcome = match ctx.ask(target, deposit).await {
        Ok(Ok(())) => Outcome::Settled,
        Ok(Err(e)) => Outcome::Failed(e),
        Err(e) => Outcome::Failed(e.to_string()),
    };
    (p, outcome)
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
    // Node r's bank and payer are its actors 0 and 1.
    let id = |node: usize, n: u64| ActorId::new(node as u16, n).ok_or("no such actor id");
    let bank = cluster.spawn(Bank {
        balances: vec![OPENING; accounts],
        withdrawals: 0,
        refusals: 0,
        deposits: 0,
    })?;
    expect_id(bank, id(rank, 0)?, "bank")?;
    let banks = (0..size)
        .map(|r| Ok(cluster.handle().actor_ref::<Bank>(id(r, 0)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let payer = cluster.spawn(Payer {
        banks,
        accounts,
        patience: Duration::from_micros(args.patience_us),
        waits: 0,
        state: mix(0x7061_796d_656e_7473, rank as u64) | 1,
        settled: 0,
        refused: 0,
        failed: 0,
        journal: vec![0; size * accounts],
    })?;
    expect_id(payer, id(rank, 1)?, "payer")?;
    cluster.barrier()?;
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let payers = (0..size)
        .map(|r| Ok(cluster.handle().actor_ref::<Payer>(id(r, 1)?)?))
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;
    let started = cluster.begin_timed_part();
    let mut left = args.payments;
    while left > 0 {
        let count = left.min(args.round.max(1));
        left -= count;
        let window = args.window;
        let asks = payers
            .iter()
            .map(|p| p.ask(Pay { count, window }).no_timeout());
        for made in cluster.block_on(futures::future::join_all(asks)) {
            made?;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut tallies = Vec::new();
    for p in &payers {
        tallies.push(cluster.block_on(p.ask(Tally).no_timeout())?);
    }
    let mut books = Vec::new();
    for r in 0..size {
        let bank = cluster.handle().actor_ref::<Bank>(id(r, 0)?)?;
        books.push(cluster.block_on(bank.ask(Audit).no_timeout())?);
    }
    let check = check(&books, &tallies, accounts, args.payments * size as u64);
    ending::report_and_leave(cluster, || Verdict {
        result: ResultLine::new("payments")
            .field("nodes", size)
            .field("accounts", accounts)
            .field("payments", check.payments)
            .field("settled", check.settled)
            .field("refused", check.refused)
            .field("failed", check.failed)
            .field("waits", tallies.iter().map(|t| t.waits).sum::<u64>())
            .elapsed(elapsed)
            .field(
                "payments_per_s",
                format!("{:.0}", check.payments as f64 / elapsed.max(1e-9)),
            )
            .field("conserved", check.conserved)
            .field("no_overdraft", check.no_overdraft)
            .field("exactly_once", check.exactly_once)
            .field("journals_match", check.journals_match),
        verified: check.verified(),
        failure: "money was made or lost, an account went below zero, a payment was \
                  booked twice or not at all, or a balance differs from the payers' journals"
            .into(),
    })
}

/// The invariants over the banks' books and the payers' tallies.
struct Check {
    payments: u64,
    settled: u64,
    refused: u64,
    failed: u64,
    conserved: bool,
    no_overdraft: bool,
    exactly_once: bool,
    journals_match: bool,
}

impl Check {
    fn verified(&self) -> bool {
        self.conserved
            && self.no_overdraft
            && self.exactly_once
            && self.journals_match
            && self.failed == 0
    }
}

fn check(books: &[Books], tallies: &[Totals], accounts: usize, payments: u64) -> Check {
    let balances = books.iter().flat_map(|b| &b.balances);
    let total: i64 = balances.clone().sum();
    let settled: u64 = tallies.iter().map(|t| t.settled).sum();
    let refused: u64 = tallies.iter().map(|t| t.refused).sum();
    let failed: u64 = tallies.iter().map(|t| t.failed).sum();
    let withdrawals: u64 = books.iter().map(|b| b.withdrawals).sum();
    let refusals: u64 = books.iter().map(|b| b.refusals).sum();
    let deposits: u64 = books.iter().map(|b| b.deposits).sum();
    let expected = (0..books.len() * accounts).map(|a| {
        let moved: i64 = tallies
            .iter()
            .map(|t| t.journal.get(a).copied().unwrap_or(i64::MIN / 4))
            .sum();
        OPENING + moved
    });
    Check {
        payments,
        settled,
        refused,
        failed,
        conserved: total == OPENING * (books.len() * accounts) as i64,
        no_overdraft: balances.clone().all(|b| *b >= 0),
        exactly_once: withdrawals == settled
            && deposits == settled
            && refusals == refused
            && settled + refused + failed == payments,
        journals_match: balances.copied().eq(expected),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn books(balances: Vec<i64>, withdrawals: u64, refusals: u64) -> Books {
        Books {
            balances,
            withdrawals,
            refusals,
            deposits: withdrawals,
        }
    }

    #[test]
    fn the_check_holds_for_consistent_books_and_fails_for_a_payment_the_journal_lacks() {
        // One settled payment of 10 from node 0's account 0 to node 1's account 1.
        let tally = Totals {
            waits: 0,
            settled: 1,
            refused: 1,
            failed: 0,
            journal: vec![-10, 0, 0, 10],
        };
        let good = [
            books(vec![OPENING - 10, OPENING], 1, 1),
            books(vec![OPENING, OPENING + 10], 0, 0),
        ];
        assert!(check(&good, std::slice::from_ref(&tally), 2, 2).verified());
        // The banks applied another payment than the journal holds (a restored payer
        // that drew differently).
        let other = [
            books(vec![OPENING - 10, OPENING + 10], 1, 1),
            books(vec![OPENING, OPENING], 0, 0),
        ];
        let c = check(&other, std::slice::from_ref(&tally), 2, 2);
        assert!(c.conserved && c.exactly_once && !c.journals_match);
    }
}
