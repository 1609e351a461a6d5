//! `bank`: money transfers between accounts spread over every node. Each node runs one
//! bank (an order-sensitive actor) holding a block of accounts, and clients that move
//! money between any two accounts of the cluster, one transfer outstanding at a time.
//!
//! A transfer goes to the bank of its source account, which rejects it if the balance
//! does not cover it, or takes the amount off and passes a deposit on to the bank of the
//! target account (possibly itself), which adds it and tells the client it was applied.
//! All of it is tells (a client sends its own reference with each transfer), never asks
//! between nodes: those are not recovered. Whether a withdrawal is rejected depends on
//! the order in which withdrawals and deposits reach a bank; with recovery on, a bank's
//! deliveries are logged as determinants and replayed after a failure.
//!
//! When every client is done, an auditor next to `main` on node 0 collects what each
//! client saw and what each bank did and holds, and checks:
//! - `conserved`: the balances add up to the money the accounts started with;
//! - `answered`: every client got exactly one answer to each of its transfers;
//! - `matched`: the withdrawals the banks applied, the deposits they applied and the
//!   transfers the clients saw applied are the same multiset, and for every client the
//!   answers the banks sent it are the answers it received;
//! - `non_negative`: no balance ever went below zero;
//! - `no_duplicates`: every transfer was withdrawn or rejected exactly once, and every
//!   withdrawal deposited once (counts).
//!
//! Transfers are compared through order-independent tallies (count, wrapping sum and xor
//! of their fingerprints, and the money they moved), so no node has to keep them all.
//!
//! It also reports `early`: answers that reached a client before it had sent the transfer
//! they answer. A failure-free run has none (one transfer is outstanding at a time), and
//! neither has a run in which a node was killed and its peers did not restart meanwhile:
//! the replay delivers a logged answer only once the restored client has made the transfer
//! again (docs/recovery.md, "Sends made again"). When nodes fail together, an answer that a
//! restarted node regenerates may come early; the client keeps it until its turn, so
//! `early` is reported (`causal=false`) but not part of `verified`.
//!
//! The RESULT line holds the digest of the final balances (`balances`); `verified` is all
//! of the checks. Which transfers are rejected, and so the digest, depends on timing and
//! differs between runs; the checks do not.

use clap::Parser;
use lazarus::{messages, Actor, ActorId, ActorRef, Cluster, ClusterSpec, Context, Node, ReplyTo};
use lazarus_apps::ending::{self, Verdict};
use lazarus_apps::{expect_id, init_logging, mix, ResultLine};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Transfers between accounts on every node, checked for conservation of money.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Accounts held by each node's bank.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    accounts_per_node: u64,
    /// What every account holds at the start.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(0..=1_000_000_000))]
    initial_balance: i64,
    /// Clients on each node.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients_per_node: u64,
    /// Transfers per client.
    #[arg(long, default_value_t = 2_000)]
    transfers: u64,
    /// Largest amount of a transfer (amounts are drawn from 1 up to it; above the
    /// balance a withdrawal is rejected).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    max_amount: u64,
    /// Adds the run's duration and throughput (`elapsed_s`, `transfers_per_s`) to the
    /// RESULT.
    #[arg(long)]
    measure: bool,
}

/// Fingerprint of transfer `seq` of client `client`: `amount` to account `to`. The
/// banks and the client compute it alike.
fn transfer_id(client: u64, seq: u64, to: u64, amount: u64) -> u64 {
    mix(
        mix(mix(mix(0x6261_6e6b_2174_7866, client), seq), to),
        amount,
    )
}

/// An order-independent summary of a multiset of transfers: how many, the wrapping sum
/// and the xor of their fingerprints, and the money they moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Tally {
    count: u64,
    sum: u64,
    xor: u64,
    amount: u64,
}

impl Tally {
    /// Adds one transfer.
    fn add(&mut self, transfer: u64, amount: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(transfer);
        self.xor ^= transfer;
        self.amount = self.amount.wrapping_add(amount);
    }

    /// The tally of both multisets.
    fn merge(self, other: Tally) -> Tally {
        Tally {
            count: self.count + other.count,
            sum: self.sum.wrapping_add(other.sum),
            xor: self.xor ^ other.xor,
            amount: self.amount.wrapping_add(other.amount),
        }
    }

    /// The tally of every tally in `tallies`.
    fn of(tallies: impl IntoIterator<Item = Tally>) -> Tally {
        tallies.into_iter().fold(Tally::default(), Tally::merge)
    }
}

/// The answers to one client's transfers, as a bank sent them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Answers {
    applied: Tally,
    rejected: Tally,
}

/// How a transfer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Answer {
    Applied,
    Rejected,
}

/// One transfer, as its client draws it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Transfer {
    from: u64,
    to: u64,
    amount: u64,
}

/// What a client reports when all its transfers are answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ClientReport {
    answered: u64,
    /// Answers to transfers already answered, or never made.
    stray: u64,
    /// Answers that came before the client had sent their transfer.
    early: u64,
    applied: Tally,
    rejected: Tally,
}

impl ClientReport {
    /// Records `answer` to transfer `seq` of client `client`.
    fn record(&mut self, client: u64, seq: u64, transfer: Transfer, answer: Answer) {
        let id = transfer_id(client, seq, transfer.to, transfer.amount);
        self.answered += 1;
        match answer {
            Answer::Applied => self.applied.add(id, transfer.amount),
            Answer::Rejected => self.rejected.add(id, transfer.amount),
        }
    }
}

/// What a bank reports at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct BankReport {
    /// The balances of its accounts, from its first.
    balances: Vec<i64>,
    withdrawals: Tally,
    deposits: Tally,
    /// Per client: the answers sent to it.
    answers: BTreeMap<u64, Answers>,
    /// Updates that left a balance below zero.
    overdrawn: u64,
    /// Withdrawals and deposits for accounts it does not hold.
    stray: u64,
}

/// What the auditor checks the reports against.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Expected {
    clients: u64,
    banks: u64,
    /// Transfers per client.
    transfers: u64,
    accounts: u64,
    /// The money in all accounts together.
    money: i64,
}

/// The auditor's verdict.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Outcome {
    /// Transfers the clients saw applied and rejected.
    applied: u64,
    rejected: u64,
    /// The money in all accounts at the end, and the digest of their balances.
    money: i128,
    balances: u64,
    conserved: bool,
    answered: bool,
    matched: bool,
    non_negative: bool,
    no_duplicates: bool,
    /// Answers that reached their client before it sent the transfer.
    early: u64,
}

impl Outcome {
    /// Whether every invariant holds.
    fn verified(&self) -> bool {
        self.conserved && self.answered && self.matched && self.non_negative && self.no_duplicates
    }
}

/// One node's bank: accounts `first..first + balances.len()`, with
/// `first = index * accounts_per_node`.
#[derive(Actor, Serialize, Deserialize)]
#[actor(order_sensitive)]
struct Bank {
    index: u64,
    accounts_per_node: u64,
    balances: Vec<i64>,
    /// The other nodes' banks, by index.
    others: BTreeMap<u64, ActorRef<Bank>>,
    withdrawals: Tally,
    deposits: Tally,
    answers: BTreeMap<u64, Answers>,
    overdrawn: u64,
    stray: u64,
}

#[messages]
impl Bank {
    /// Transfer `seq` of client `client`: `amount` from account `from` (held here) to
    /// account `to`. The answer goes to `reply_to`, from here if the transfer is rejected,
    /// from the bank of `to` once it is deposited.
    ///
    /// (The client's reference is not called `reply`: the handler table the `messages`
    /// macro generates names the ask's reply slot so, and a field would shadow it.)
    #[allow(clippy::too_many_arguments)]
    #[message]
    fn withdraw(
        &mut self,
        client: u64,
        seq: u64,
        from: u64,
        to: u64,
        amount: u64,
        reply_to: ActorRef<Client>,
        ctx: &mut Context<Self>,
    ) {
        let Some(answer) = self.book_withdrawal(client, seq, from, to, amount) else {
            return;
        };
        if answer == Answer::Rejected {
            if reply_to.tell(Rejected { seq }).is_err() {
                tracing::error!(bank = self.index, client, "client unreachable");
            }
            return;
        }
        let owner = to / self.accounts_per_node;
        let deposit = Deposit {
            client,
            seq,
            to,
            amount,
            reply_to,
        };
        let sent = if owner == self.index {
            ctx.myself().tell(deposit)
        } else if let Some(bank) = self.others.get(&owner) {
            bank.tell(deposit)
        } else {
            tracing::error!(bank = self.index, to, "no bank holds the target account");
            return;
        };
        if sent.is_err() {
            tracing::error!(bank = self.index, owner, "bank unreachable");
        }
    }

    /// The deposit of transfer `seq` of client `client`: `amount` to account `to` (held
    /// here). Tells `reply_to` the transfer is applied.
    #[message]
    fn deposit(&mut self, client: u64, seq: u64, to: u64, amount: u64, reply_to: ActorRef<Client>) {
        if self.book_deposit(client, seq, to, amount) && reply_to.tell(Applied { seq }).is_err() {
            tracing::error!(bank = self.index, client, "client unreachable");
        }
    }

    /// Every client is done: report to `auditor`.
    #[message]
    fn report(&mut self, auditor: ActorRef<Auditor>) {
        let _ = auditor.tell(BankDone {
            bank: self.index,
            report: self.snapshot(),
        });
    }
}

impl Bank {
    /// A bank of `accounts` accounts holding `initial` each.
    fn new(index: u64, accounts: u64, initial: i64, others: BTreeMap<u64, ActorRef<Bank>>) -> Self {
        Bank {
            index,
            accounts_per_node: accounts,
            balances: vec![initial; accounts as usize],
            others,
            withdrawals: Tally::default(),
            deposits: Tally::default(),
            answers: BTreeMap::new(),
            overdrawn: 0,
            stray: 0,
        }
    }

    /// Where account `account` is in `balances`, if it is held here.
    fn slot(&self, account: u64) -> Option<usize> {
        account
            .checked_sub(self.index * self.accounts_per_node)
            .filter(|&i| i < self.accounts_per_node)
            .map(|i| i as usize)
    }

    /// Books the withdrawal of transfer `seq` of `client`: whether it is applied or
    /// rejected, or `None` if account `from` is not held here.
    fn book_withdrawal(
        &mut self,
        client: u64,
        seq: u64,
        from: u64,
        to: u64,
        amount: u64,
    ) -> Option<Answer> {
        let Some(i) = self.slot(from) else {
            tracing::error!(
                bank = self.index,
                client,
                seq,
                from,
                "a withdrawal from another bank's account"
            );
            self.stray += 1;
            return None;
        };
        let id = transfer_id(client, seq, to, amount);
        let answers = self.answers.entry(client).or_default();
        if self.balances[i] < amount as i64 {
            answers.rejected.add(id, amount);
            return Some(Answer::Rejected);
        }
        self.balances[i] -= amount as i64;
        self.withdrawals.add(id, amount);
        if self.balances[i] < 0 {
            tracing::error!(bank = self.index, account = from, "a balance below zero");
            self.overdrawn += 1;
        }
        Some(Answer::Applied)
    }

    /// Books the deposit of transfer `seq` of `client`; whether account `to` is held here.
    fn book_deposit(&mut self, client: u64, seq: u64, to: u64, amount: u64) -> bool {
        let Some(i) = self.slot(to) else {
            tracing::error!(
                bank = self.index,
                client,
                seq,
                to,
                "a deposit to another bank's account"
            );
            self.stray += 1;
            return false;
        };
        let id = transfer_id(client, seq, to, amount);
        self.balances[i] += amount as i64;
        self.deposits.add(id, amount);
        self.answers
            .entry(client)
            .or_default()
            .applied
            .add(id, amount);
        if self.balances[i] < 0 {
            tracing::error!(bank = self.index, account = to, "a balance below zero");
            self.overdrawn += 1;
        }
        true
    }

    /// What it reports.
    fn snapshot(&self) -> BankReport {
        BankReport {
            balances: self.balances.clone(),
            withdrawals: self.withdrawals,
            deposits: self.deposits,
            answers: self.answers.clone(),
            overdrawn: self.overdrawn,
            stray: self.stray,
        }
    }
}

/// One client: `transfers` transfers, each sent when the previous one is answered.
///
/// Only one transfer is outstanding, so in a failure-free run answers arrive in order. A
/// restored node, though, gets the answers its peers logged all at once, possibly before
/// `main`'s `Begin`: the client buffers answers by transfer number and takes them in that
/// order, so what it sends never depends on how its channels interleave.
#[derive(Actor, Serialize, Deserialize)]
struct Client {
    index: u64,
    transfers: u64,
    accounts_per_node: u64,
    max_amount: u64,
    /// The workload generator's state (seeded with the client's index).
    rng: u64,
    /// The number of the last transfer sent, and the transfer while it is unanswered.
    seq: u64,
    outstanding: Option<Transfer>,
    /// Answers that came before their turn, by transfer number.
    early: BTreeMap<u64, Answer>,
    banks: Vec<ActorRef<Bank>>,
    auditor: Option<ActorRef<Auditor>>,
    report: ClientReport,
}

#[messages]
impl Client {
    /// Starts the transfers between the accounts of `banks`; reports to `auditor` when
    /// done.
    #[message]
    fn begin(
        &mut self,
        banks: Vec<ActorRef<Bank>>,
        auditor: ActorRef<Auditor>,
        ctx: &mut Context<Self>,
    ) {
        self.banks = banks;
        self.auditor = Some(auditor);
        self.next(ctx);
        self.take_early(ctx);
    }

    /// Transfer `seq` is applied.
    #[message]
    fn applied(&mut self, seq: u64, ctx: &mut Context<Self>) {
        self.answer(seq, Answer::Applied, ctx);
    }

    /// Transfer `seq` is rejected: its source account did not hold the amount.
    #[message]
    fn rejected(&mut self, seq: u64, ctx: &mut Context<Self>) {
        self.answer(seq, Answer::Rejected, ctx);
    }
}

impl Client {
    /// Keeps `answer` to transfer `seq` until it is the one awaited.
    fn answer(&mut self, seq: u64, answer: Answer, ctx: &mut Context<Self>) {
        if seq > self.seq {
            self.report.early += 1;
        }
        let answered = seq < self.seq || (seq == self.seq && self.outstanding.is_none());
        if seq == 0 || seq > self.transfers || answered || self.early.insert(seq, answer).is_some()
        {
            tracing::error!(client = self.index, seq, ?answer, "a second answer");
            self.report.stray += 1;
            return;
        }
        self.take_early(ctx);
    }

    /// Takes the answers to the outstanding transfer, in transfer order, as far as they
    /// have come.
    fn take_early(&mut self, ctx: &mut Context<Self>) {
        while let Some(transfer) = self.outstanding {
            let Some(answer) = self.early.remove(&self.seq) else {
                return;
            };
            self.outstanding = None;
            self.report.record(self.index, self.seq, transfer, answer);
            self.next(ctx);
        }
    }

    /// Sends the next transfer, or the report once all are answered.
    fn next(&mut self, ctx: &mut Context<Self>) {
        if self.seq >= self.transfers {
            if let Some(a) = &self.auditor {
                let _ = a.tell(ClientDone {
                    client: self.index,
                    report: std::mem::take(&mut self.report),
                });
            }
            return;
        }
        self.seq += 1;
        let accounts = self.accounts_per_node * self.banks.len() as u64;
        let transfer = Transfer {
            from: splitmix(&mut self.rng) % accounts,
            to: splitmix(&mut self.rng) % accounts,
            amount: 1 + splitmix(&mut self.rng) % self.max_amount,
        };
        self.outstanding = Some(transfer);
        let bank = &self.banks[(transfer.from / self.accounts_per_node) as usize];
        if bank
            .tell(Withdraw {
                client: self.index,
                seq: self.seq,
                from: transfer.from,
                to: transfer.to,
                amount: transfer.amount,
                reply_to: ctx.myself().clone(),
            })
            .is_err()
        {
            tracing::error!(client = self.index, "bank unreachable");
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

/// Collects the clients' and then the banks' reports and checks them against each other.
/// It combines them by index, never in arrival order, so it is send-deterministic.
#[derive(Actor, Serialize, Deserialize)]
struct Auditor {
    expected: Expected,
    banks: Vec<ActorRef<Bank>>,
    client_reports: BTreeMap<u64, ClientReport>,
    bank_reports: BTreeMap<u64, BankReport>,
    outcome: Option<Outcome>,
    waiting: ReplyTo<Outcome>,
}

#[messages]
impl Auditor {
    /// Client `client` has all its transfers answered; once every client has, the banks
    /// are asked for their reports.
    #[message]
    fn client_done(&mut self, client: u64, report: ClientReport, ctx: &mut Context<Self>) {
        if self.client_reports.insert(client, report).is_some() {
            tracing::error!(client, "a second report from a client");
            return;
        }
        if self.client_reports.len() as u64 == self.expected.clients {
            for b in &self.banks {
                let _ = b.tell(Report {
                    auditor: ctx.myself().clone(),
                });
            }
        }
        self.complete();
    }

    /// Bank `bank`'s final report.
    #[message]
    fn bank_done(&mut self, bank: u64, report: BankReport) {
        if self.bank_reports.insert(bank, report).is_some() {
            tracing::error!(bank, "a second report from a bank");
        }
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

impl Auditor {
    /// Judges once every report is in. Both kinds are checked: a restored node 0 gets
    /// the banks' logged reports back at once, possibly before its own clients' reports
    /// are redone.
    fn complete(&mut self) {
        let all = self.client_reports.len() as u64 == self.expected.clients
            && self.bank_reports.len() as u64 == self.expected.banks;
        if all && self.outcome.is_none() {
            let outcome = judge(&self.expected, &self.client_reports, &self.bank_reports);
            let _ = self.waiting.take().send(outcome.clone());
            self.outcome = Some(outcome);
        }
    }
}

/// Checks the clients' and the banks' reports against each other and against what the
/// run was set up to do; logs an error naming each invariant that fails.
fn judge(
    expected: &Expected,
    clients: &BTreeMap<u64, ClientReport>,
    banks: &BTreeMap<u64, BankReport>,
) -> Outcome {
    let balances = || banks.values().flat_map(|b| b.balances.iter().copied());

    let money: i128 = balances().map(i128::from).sum();
    let accounts = balances().count() as u64;
    let conserved = money == i128::from(expected.money)
        && accounts == expected.accounts
        && banks.len() as u64 == expected.banks;
    if !conserved {
        tracing::error!(
            money,
            expected = expected.money,
            accounts,
            banks = banks.len(),
            "invariant `conserved` fails: the balances do not add up to the money there was"
        );
    }

    let answered = clients.len() as u64 == expected.clients
        && clients.iter().all(|(c, r)| {
            let ok = r.answered == expected.transfers
                && r.stray == 0
                && r.applied.count + r.rejected.count == r.answered;
            if !ok {
                tracing::error!(
                    client = c,
                    answered = r.answered,
                    stray = r.stray,
                    expected = expected.transfers,
                    "invariant `answered` fails: a client did not get one answer per transfer"
                );
            }
            ok
        });
    if clients.len() as u64 != expected.clients {
        tracing::error!(
            clients = clients.len(),
            expected = expected.clients,
            "invariant `answered` fails: clients missing"
        );
    }

    let withdrawn = Tally::of(banks.values().map(|b| b.withdrawals));
    let deposited = Tally::of(banks.values().map(|b| b.deposits));
    let seen_applied = Tally::of(clients.values().map(|c| c.applied));
    let sent = |c: &u64| Answers {
        applied: Tally::of(
            banks
                .values()
                .filter_map(|b| b.answers.get(c))
                .map(|a| a.applied),
        ),
        rejected: Tally::of(
            banks
                .values()
                .filter_map(|b| b.answers.get(c))
                .map(|a| a.rejected),
        ),
    };
    let mut matched = withdrawn == deposited && deposited == seen_applied;
    if !matched {
        tracing::error!(
            ?withdrawn,
            ?deposited,
            ?seen_applied,
            "invariant `matched` fails: withdrawals, deposits and applied transfers differ"
        );
    }
    let every_client: BTreeSet<u64> = clients
        .keys()
        .copied()
        .chain(banks.values().flat_map(|b| b.answers.keys().copied()))
        .collect();
    for c in &every_client {
        let received = clients.get(c).map_or_else(Answers::default, |r| Answers {
            applied: r.applied,
            rejected: r.rejected,
        });
        let sent = sent(c);
        if received != sent {
            tracing::error!(
                client = c,
                ?received,
                ?sent,
                "invariant `matched` fails: a client's answers are not those the banks sent it"
            );
            matched = false;
        }
    }

    let overdrawn: u64 = banks.values().map(|b| b.overdrawn).sum();
    let lowest = balances().min();
    let non_negative = overdrawn == 0 && lowest.is_none_or(|b| b >= 0);
    if !non_negative {
        tracing::error!(
            overdrawn,
            ?lowest,
            "invariant `non_negative` fails: a balance went below zero"
        );
    }

    let total = expected.clients * expected.transfers;
    let rejected_sent = Tally::of(
        banks
            .values()
            .flat_map(|b| b.answers.values().map(|a| a.rejected)),
    );
    let applied_sent = Tally::of(
        banks
            .values()
            .flat_map(|b| b.answers.values().map(|a| a.applied)),
    );
    let bank_stray: u64 = banks.values().map(|b| b.stray).sum();
    let no_duplicates = withdrawn.count + rejected_sent.count == total
        && deposited.count == withdrawn.count
        && applied_sent.count == deposited.count
        && bank_stray == 0;
    if !no_duplicates {
        tracing::error!(
            total,
            withdrawn = withdrawn.count,
            deposited = deposited.count,
            applied = applied_sent.count,
            rejected = rejected_sent.count,
            stray = bank_stray,
            "invariant `no_duplicates` fails: transfers withdrawn, rejected or deposited other \
             than once"
        );
    }

    let mut account = 0;
    let digest = balances().fold(0, |acc, b| {
        account += 1;
        mix(mix(acc, account), b as u64)
    });
    Outcome {
        applied: seen_applied.count,
        rejected: Tally::of(clients.values().map(|c| c.rejected)).count,
        money,
        balances: digest,
        conserved,
        answered,
        matched,
        non_negative,
        no_duplicates,
        early: clients.values().map(|c| c.early).sum(),
    }
}

fn main() -> std::process::ExitCode {
    init_logging();
    lazarus_apps::exit_with(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let cluster = Cluster::start_with(ClusterSpec::from_env()?, Node::builder())?;
    let (rank, size) = (cluster.rank(), cluster.size() as u64);
    let (apn, cpn) = (args.accounts_per_node, args.clients_per_node);
    let money = (size * apn)
        .try_into()
        .ok()
        .and_then(|accounts: i64| accounts.checked_mul(args.initial_balance))
        .ok_or("the money in all accounts does not fit in an i64")?;
    // Spawn order on every node: its bank, then its clients; node 0 then spawns the
    // auditor. Bank `r` is actor `(r, 0)`, client `r * cpn + c` is `(r, 1 + c)`.
    let bank_id = |b: u64| ActorId::new(b as u16, 0).ok_or("bad bank id");
    let auditor_id = ActorId::new(0, 1 + cpn).ok_or("bad auditor id")?;
    let handle = cluster.handle();
    let others = (0..size)
        .filter(|&b| b != u64::from(rank))
        .map(|b| Ok((b, handle.actor_ref::<Bank>(bank_id(b)?)?)))
        .collect::<Result<BTreeMap<_, _>, Box<dyn std::error::Error>>>()?;
    let bank = cluster.spawn(Bank::new(
        u64::from(rank),
        apn,
        args.initial_balance,
        others,
    ))?;
    expect_id(bank, bank_id(u64::from(rank))?, "bank")?;
    let mut clients = Vec::new();
    for c in 0..cpn {
        let index = u64::from(rank) * cpn + c;
        let client = cluster.spawn(Client {
            index,
            transfers: args.transfers,
            accounts_per_node: apn,
            max_amount: args.max_amount,
            rng: mix(0x6261_6e6b, index),
            seq: 0,
            outstanding: None,
            early: BTreeMap::new(),
            banks: Vec::new(),
            auditor: None,
            report: ClientReport::default(),
        })?;
        let id = ActorId::new(rank, 1 + c).ok_or("bad id")?;
        clients.push(expect_id(client, id, format!("client {c}"))?);
    }
    let banks = (0..size)
        .map(|b| handle.actor_ref::<Bank>(bank_id(b)?))
        .collect::<Result<Vec<_>, _>>()?;
    if rank == 0 {
        let a = cluster.spawn(Auditor {
            expected: Expected {
                clients: cpn * size,
                banks: size,
                transfers: args.transfers,
                accounts: apn * size,
                money,
            },
            banks: banks.clone(),
            client_reports: BTreeMap::new(),
            bank_reports: BTreeMap::new(),
            outcome: None,
            waiting: ReplyTo::none(),
        })?;
        expect_id(a, auditor_id, "auditor")?;
    }
    cluster.barrier()?;
    let auditor = handle.actor_ref::<Auditor>(auditor_id)?;
    let started = cluster.begin_timed_part();
    for c in &clients {
        c.tell(Begin {
            banks: banks.clone(),
            auditor: auditor.clone(),
        })
        .map_err(|e| e.to_string())?;
    }
    // For observers (the kill tests): from here on, this node's clients are at work.
    eprintln!("bank: node {rank}: clients started");
    if rank != 0 {
        return ending::leave_after_rank0(cluster);
    }
    let outcome = cluster.block_on(auditor.ask(Wait {}).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    let transfers = args.transfers * cpn * size;
    let verified = outcome.verified();
    ending::report_and_leave(cluster, || {
        let mut result = ResultLine::new("bank")
            .field("nodes", size)
            .field("accounts", apn * size)
            .field("clients", cpn * size)
            .field("transfers", args.transfers)
            .field("applied", outcome.applied)
            .field("rejected", outcome.rejected)
            .field("money", outcome.money)
            .hex("balances", outcome.balances)
            .field("conserved", outcome.conserved)
            .field("answered", outcome.answered)
            .field("matched", outcome.matched)
            .field("non_negative", outcome.non_negative)
            .field("no_duplicates", outcome.no_duplicates)
            .field("early", outcome.early)
            .field("causal", outcome.early == 0);
        if args.measure {
            result = result.elapsed(elapsed).field(
                "transfers_per_s",
                format!("{:.0}", transfers as f64 / elapsed),
            );
        }
        Verdict {
            result,
            verified,
            failure: "bank result not verified".into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNTS_PER_BANK: u64 = 2;
    const INITIAL: i64 = 100;

    /// The reports of a run of two banks and two clients, the transfers booked in the
    /// order given with the banks' and clients' own bookkeeping.
    struct Run {
        expected: Expected,
        clients: BTreeMap<u64, ClientReport>,
        banks: Vec<Bank>,
    }

    impl Run {
        /// Two clients, three transfers each (`(client, from, to, amount)`, numbered per
        /// client in order): one within an account, one within a bank, one rejected.
        fn good() -> Run {
            let mut run = Run {
                expected: Expected {
                    clients: 2,
                    banks: 2,
                    transfers: 3,
                    accounts: 2 * ACCOUNTS_PER_BANK,
                    money: 2 * ACCOUNTS_PER_BANK as i64 * INITIAL,
                },
                clients: BTreeMap::new(),
                banks: (0..2)
                    .map(|b| Bank::new(b, ACCOUNTS_PER_BANK, INITIAL, BTreeMap::new()))
                    .collect(),
            };
            let mut seq = BTreeMap::new();
            for (client, from, to, amount) in [
                (0, 0, 3, 60),
                (1, 3, 3, 10),
                (0, 1, 0, 30),
                (1, 2, 1, 150),
                (1, 1, 2, 50),
                (0, 0, 2, 70),
            ] {
                let s = seq.entry(client).or_insert(0);
                *s += 1;
                run.transfer(client, *s, Transfer { from, to, amount });
            }
            run
        }

        fn bank_of(&mut self, account: u64) -> &mut Bank {
            &mut self.banks[(account / ACCOUNTS_PER_BANK) as usize]
        }

        fn transfer(&mut self, client: u64, seq: u64, t: Transfer) {
            let answer = self
                .bank_of(t.from)
                .book_withdrawal(client, seq, t.from, t.to, t.amount)
                .unwrap();
            if answer == Answer::Applied {
                assert!(self.bank_of(t.to).book_deposit(client, seq, t.to, t.amount));
            }
            self.clients
                .entry(client)
                .or_default()
                .record(client, seq, t, answer);
        }

        fn judge(&self) -> Outcome {
            let banks = self.banks.iter().map(|b| (b.index, b.snapshot())).collect();
            judge(&self.expected, &self.clients, &banks)
        }
    }

    #[test]
    fn a_good_run_passes() {
        let run = Run::good();
        let o = run.judge();
        assert!(o.verified(), "{o:?}");
        assert_eq!((o.applied, o.rejected), (5, 1));
        assert_eq!(o.money, 400);
    }

    #[test]
    fn lost_money_is_caught() {
        let mut run = Run::good();
        run.banks[1].balances[0] -= 1;
        let o = run.judge();
        assert!(!o.conserved && !o.verified(), "{o:?}");
    }

    #[test]
    fn a_duplicate_deposit_is_caught() {
        let mut run = Run::good();
        // Transfer 1 of client 0 deposited a second time (as a replay might).
        assert!(run.banks[1].book_deposit(0, 1, 3, 60));
        let o = run.judge();
        assert!(!o.conserved && !o.matched && !o.no_duplicates, "{o:?}");
        // Even with the money put right.
        run.banks[1].balances[1] -= 60;
        let o = run.judge();
        assert!(o.conserved && !o.matched && !o.no_duplicates, "{o:?}");
    }

    #[test]
    fn an_unmatched_withdrawal_is_caught() {
        let mut run = Run::good();
        // A withdrawal of a transfer no client made, never deposited.
        assert_eq!(
            run.banks[0].book_withdrawal(0, 4, 1, 2, 5),
            Some(Answer::Applied)
        );
        let o = run.judge();
        assert!(!o.conserved && !o.matched && !o.no_duplicates, "{o:?}");
        // Deposits a bank lost track of: the money adds up, the transfers do not.
        let mut run = Run::good();
        run.banks[1].deposits = Tally::default();
        let o = run.judge();
        assert!(!o.matched && !o.no_duplicates, "{o:?}");
    }

    #[test]
    fn a_negative_balance_is_caught() {
        let mut run = Run::good();
        // Money conserved, but one account below zero.
        run.banks[0].balances[0] -= 500;
        run.banks[0].balances[1] += 500;
        let o = run.judge();
        assert!(o.conserved && o.matched && !o.non_negative, "{o:?}");
        assert!(!o.verified());
    }

    #[test]
    fn a_second_answer_is_caught() {
        let mut run = Run::good();
        run.clients.get_mut(&1).unwrap().stray += 1;
        assert!(!run.judge().answered);
        let mut run = Run::good();
        run.clients.remove(&1);
        assert!(!run.judge().answered);
    }

    #[test]
    fn tallies_ignore_order_but_not_content() {
        let mut a = Tally::default();
        a.add(transfer_id(0, 1, 2, 3), 3);
        a.add(transfer_id(1, 1, 2, 3), 3);
        let mut b = Tally::default();
        b.add(transfer_id(1, 1, 2, 3), 3);
        b.add(transfer_id(0, 1, 2, 3), 3);
        assert_eq!(a, b);
        let mut c = Tally::default();
        c.add(transfer_id(0, 1, 2, 3), 3);
        c.add(transfer_id(1, 2, 2, 3), 3);
        assert_ne!(a, c);
    }
}
