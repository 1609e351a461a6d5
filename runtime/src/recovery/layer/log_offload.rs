//! The node's side of the logger nodes: the dump thread that moves blocks of the log
//! over the dump threshold to a logger (proactively, off the message path), the fetch of
//! dumped payloads for resends, and what a restored node tells the loggers to keep.
//!
//! Thresholds follow the logger-nodes paper: dumping starts at three quarters of the
//! quota and goes on, block after block, until the log is under half of it. A logger that
//! declines (full) or cannot be reached is skipped for the next; one that cannot be
//! reached is taken for lost: the peers whose messages only it kept are asked to
//! checkpoint (which releases them), and while no logger is left the quota falls back
//! to checkpoint requests alone. A lost logger is probed once a second and used again
//! when it answers (the launcher restarts a logger that died); a logger found restarted
//! (another process behind its address, empty) counts as lost for every block sent to
//! it before.

use super::{event, RecoveryLayer};
use crate::logger_node::client::RequestError;
use crate::logger_node::{LoggerClient, LoggerRequest, LoggerResponse};
use crate::payload::Payload;
use crate::recovery::{Action, BlockId, DumpRef, Frame, LogDump, MessageMeta};
use crate::transport::frame::Envelope;
use metrics::counter;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Blocks dumped to logger nodes.
pub const BLOCKS_DUMPED: &str = "lazarus_log_blocks_dumped_total";
/// Payload bytes dumped to logger nodes.
pub const BYTES_DUMPED: &str = "lazarus_log_bytes_dumped_total";
/// Blocks fetched back from logger nodes for resends.
pub const BLOCKS_FETCHED: &str = "lazarus_log_blocks_fetched_total";
/// Logged messages that could not be resent: their block was lost with its logger.
pub const RESENDS_LOST: &str = "lazarus_log_resends_lost_total";
/// Logger nodes found unreachable.
pub const LOGGERS_LOST: &str = "lazarus_loggers_lost_total";
/// Logger nodes found restarted (another, empty process behind the address).
pub const LOGGERS_RESTARTED: &str = "lazarus_loggers_restarted_total";
/// Blocks copied back to a restarted logger from their other logger (with copies).
pub const BLOCKS_REFILLED: &str = "lazarus_log_blocks_refilled_total";
/// Of those, blocks the restarted logger had no room for, copied to a third logger.
pub const BLOCKS_RELOCATED: &str = "lazarus_log_blocks_relocated_total";

/// Whether the log holds more than `limit` bytes in a way a dump can help with: more
/// than a quarter of `quota` is payloads in memory. Only payloads can go; the entries'
/// vectors are kept down by checkpoint requests instead (a run of small messages whose
/// vectors alone are over the limit would otherwise dump blocks of a few bytes, and
/// hold its senders back for good).
pub(super) fn dump_would_help(
    stats: &crate::recovery::LogStats,
    limit: usize,
    quota: usize,
) -> bool {
    stats.bytes() > limit && stats.payload_bytes > quota / 4
}

/// Whether a dump that started should take another block: the log is still over
/// `target` and more than an eighth of `quota` is payloads in memory. Without the second
/// condition, a log whose vectors alone are over `target` would dump, block after block,
/// the few bytes of payload that arrived during the previous store.
fn dump_continues(stats: &crate::recovery::LogStats, target: usize, quota: usize) -> bool {
    stats.bytes() > target && stats.payload_bytes > quota / 8
}

/// Blocks copied back to a restarted logger per turn of the dump thread, so that the
/// dumps go on meanwhile.
const REFILL_PER_TURN: usize = 4;

/// Largest block the node dumps at once.
const BLOCK_BYTES: usize = 4 << 20;

/// How often the dump thread compares the log with its threshold.
const DUMP_POLL: Duration = Duration::from_millis(10);

/// How long the node keeps its quota by checkpoint requests after every logger declined
/// a block.
const FULL_BACKOFF: Duration = Duration::from_secs(1);

/// How long a store waits for its logger's answer.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the dump thread asks a lost logger whether it is back, and how long it
/// waits for the answer.
const PROBE_EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a fetch for a resend waits: it runs under the layer's lock, possibly on a
/// network task, so it must stay well under the peers' failure timeout.
const FETCH_TIMEOUT: Duration = Duration::from_secs(1);

/// The node's connections to its loggers and what it did with them.
pub(crate) struct LogOffload {
    client: LoggerClient,
    /// Loggers found unreachable (not used until a probe finds them back).
    lost: Vec<AtomicBool>,
    /// Lost loggers the protocol has been told of.
    reported: Vec<AtomicBool>,
    /// When the dump thread last probed the lost loggers.
    last_probe: Mutex<Instant>,
    /// With copies: loggers found restarted (or back) whose lost blocks are being
    /// copied back to them from their other loggers.
    refilling: Mutex<BTreeSet<u16>>,
    /// Blocks copied back so far, per logger being refilled.
    refilled: Mutex<BTreeMap<u16, u64>>,
    /// Blocks the refill of a logger skips: their other logger does not have them
    /// either (released since the checkpoint a restored node points into them from).
    refill_skip: Mutex<BTreeSet<(u16, BlockId)>>,
    /// Loggers being refilled that declined a copy (full): the rest of their refill goes
    /// to third loggers.
    refill_full: Mutex<BTreeSet<u16>>,
    /// When every logger last declined a block (all full): for [`FULL_BACKOFF`] the quota
    /// is kept by checkpoint requests, whose releases make room at the loggers.
    all_declined: Mutex<Option<Instant>>,
    /// Whether the dump thread dumps: from its start, or in a restored node once the
    /// loggers were told which blocks its image points into (until then the quota is
    /// kept by checkpoint requests and no sender waits for a dump).
    dumping: AtomicBool,
    /// The last block fetched, for the resends that follow it in the same block.
    fetched: Mutex<Option<FetchedBlock>>,
    pub(crate) blocks_dumped: AtomicU64,
    pub(crate) bytes_dumped: AtomicU64,
    pub(crate) blocks_fetched: AtomicU64,
    pub(crate) blocks_refilled: AtomicU64,
    pub(crate) blocks_relocated: AtomicU64,
    pub(crate) resends_lost: AtomicU64,
}

impl LogOffload {
    /// Connects (lazily) to the loggers at `addrs` as node `rank` of the cluster whose
    /// secret is `secret`.
    pub(crate) fn new(
        rank: u16,
        addrs: Vec<std::net::SocketAddr>,
        secret: &[u8],
    ) -> Result<Self, String> {
        let creds = crate::transport::credentials::Credentials::for_node(secret, rank)
            .map_err(|e| e.to_string())?;
        let lost = addrs.iter().map(|_| AtomicBool::new(false)).collect();
        let reported = addrs.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(LogOffload {
            client: LoggerClient::start(addrs, &creds)?,
            lost,
            reported,
            last_probe: Mutex::new(Instant::now()),
            refilling: Mutex::new(BTreeSet::new()),
            refilled: Mutex::new(BTreeMap::new()),
            refill_skip: Mutex::new(BTreeSet::new()),
            refill_full: Mutex::new(BTreeSet::new()),
            all_declined: Mutex::new(None),
            dumping: AtomicBool::new(false),
            fetched: Mutex::new(None),
            blocks_dumped: AtomicU64::new(0),
            bytes_dumped: AtomicU64::new(0),
            blocks_fetched: AtomicU64::new(0),
            blocks_refilled: AtomicU64::new(0),
            blocks_relocated: AtomicU64::new(0),
            resends_lost: AtomicU64::new(0),
        })
    }

    /// Whether some logger is reachable and the loggers did not all decline a block in
    /// the last [`FULL_BACKOFF`].
    pub(crate) fn available(&self) -> bool {
        let full = self
            .all_declined
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| at.elapsed() < FULL_BACKOFF);
        !full && self.lost.iter().any(|l| !l.load(Ordering::Acquire))
    }

    /// The payload of a dumped entry, from its block at its logger or else at the one
    /// with the copy.
    fn payload(&self, rank: u16, at: &DumpRef) -> Result<Envelope, String> {
        let mut cached = self.fetched.lock().unwrap_or_else(|e| e.into_inner());
        let hit = cached
            .as_ref()
            .filter(|((_, b), _)| *b == at.block)
            .map(|(_, entries)| Arc::clone(entries));
        let block = match hit {
            Some(b) => b,
            None => {
                let mut why = Vec::new();
                let mut found = None;
                for logger in at.locations() {
                    match self.fetch(rank, logger, at.block) {
                        Ok(entries) => {
                            found = Some((logger, entries));
                            break;
                        }
                        Err(e) => why.push(e),
                    }
                }
                let Some((logger, entries)) = found else {
                    return Err(why.join("; "));
                };
                self.blocks_fetched.fetch_add(1, Ordering::Relaxed);
                counter!(BLOCKS_FETCHED).increment(1);
                let b = Arc::new(entries);
                *cached = Some(((logger, at.block), Arc::clone(&b)));
                b
            }
        };
        block
            .get(at.slot as usize)
            .cloned()
            .ok_or_else(|| format!("slot {} is not in the block", at.slot))
    }

    /// Block `block` of node `rank`, from logger `logger`.
    fn fetch(&self, rank: u16, logger: u16, block: BlockId) -> Result<Vec<Envelope>, String> {
        if self.is_lost(logger) {
            return Err(format!("logger {logger} is lost"));
        }
        let answer = self
            .client
            .request(logger, LoggerRequest::Fetch { rank, block }, FETCH_TIMEOUT)
            .map_err(|e| {
                self.lose(logger, &e);
                e.to_string()
            })?;
        let bytes = match answer {
            LoggerResponse::Block(b) => b,
            LoggerResponse::Missing => {
                return Err(format!("logger {logger} does not have the block"))
            }
            other => return Err(format!("logger {logger} answered {other:?}")),
        };
        postcard::from_bytes(&bytes)
            .map_err(|e| format!("block from logger {logger} is malformed: {e}"))
    }

    /// Ships `block` to `copies` distinct loggers (fewer if fewer take it), trying them
    /// from `first` on: the loggers that kept it (none when every logger declined or is
    /// lost).
    fn store(
        &self,
        rank: u16,
        block: BlockId,
        bytes: Vec<u8>,
        first: u16,
        copies: u16,
    ) -> Vec<u16> {
        let n = self.client.loggers();
        let mut by = Vec::new();
        let mut declined = false;
        for k in 0..n {
            if by.len() >= usize::from(copies.max(1)) {
                break;
            }
            let logger = (first + k) % n;
            if self.is_lost(logger) {
                continue;
            }
            let request = LoggerRequest::Store {
                rank,
                block,
                bytes: Payload(bytes.clone()),
            };
            match self.client.request(logger, request, STORE_TIMEOUT) {
                Ok(LoggerResponse::Stored) => by.push(logger),
                Ok(LoggerResponse::Declined { .. }) => declined = true,
                Ok(other) => {
                    tracing::warn!("logger {logger} answered a store with {other:?}");
                }
                Err(e) => self.lose(logger, &e),
            }
        }
        // Full loggers (not lost ones: those are probed and used again once they answer).
        if by.is_empty() && declined {
            *self.all_declined.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        by
    }

    /// Whether `logger` is lost. A logger number outside the configured ones (an image
    /// written by a run with more loggers) names blocks nobody can fetch: lost too.
    fn is_lost(&self, logger: u16) -> bool {
        self.lost
            .get(usize::from(logger))
            .is_none_or(|l| l.load(Ordering::Acquire))
    }

    fn lose(&self, logger: u16, why: &RequestError) {
        let Some(lost) = self.lost.get(usize::from(logger)) else {
            return;
        };
        if !lost.swap(true, Ordering::AcqRel) {
            counter!(LOGGERS_LOST).increment(1);
            tracing::error!("logger {logger} is lost ({why}): no more blocks go to it");
        }
    }

    /// Asks each lost logger, at most once per [`PROBE_EVERY`], whether it answers
    /// again; returns those that do (they are used again from now on).
    fn probe_lost(&self) -> Vec<u16> {
        {
            let mut last = self.last_probe.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() < PROBE_EVERY {
                return Vec::new();
            }
            *last = Instant::now();
        }
        let mut back = Vec::new();
        for logger in 0..self.client.loggers() {
            let i = usize::from(logger);
            if !self.lost[i].load(Ordering::Acquire) {
                continue;
            }
            if let Ok(LoggerResponse::Hello { .. }) =
                self.client
                    .request(logger, LoggerRequest::Hello, PROBE_TIMEOUT)
            {
                tracing::warn!("logger {logger} answers again: blocks go to it again");
                self.lost[i].store(false, Ordering::Release);
                self.reported[i].store(false, Ordering::Release);
                back.push(logger);
            }
        }
        back
    }

    /// Tells each logger which of `rank`'s blocks to drop.
    fn release(&self, rank: u16, blocks: Vec<(u16, BlockId)>) {
        let mut per: BTreeMap<u16, Vec<BlockId>> = BTreeMap::new();
        for (l, b) in blocks {
            per.entry(l).or_default().push(b);
        }
        for (logger, blocks) in per {
            if self.is_lost(logger) {
                continue;
            }
            let request = LoggerRequest::Release { rank, blocks };
            if let Err(e) = self.client.request(logger, request, STORE_TIMEOUT) {
                self.lose(logger, &e);
            }
        }
    }

    /// After a restore: every logger keeps those of `rank`'s blocks that the restored
    /// log points into at *any* logger (a block relocated after the checkpoint is kept
    /// where the image does not say) and drops the rest. Returns, by logger that
    /// answered, the blocks of `blocks` it does not have.
    fn retain(&self, rank: u16, blocks: BTreeSet<BlockId>) -> BTreeMap<u16, BTreeSet<BlockId>> {
        let mut lacks = BTreeMap::new();
        for logger in 0..self.client.loggers() {
            if self.is_lost(logger) {
                continue;
            }
            let request = LoggerRequest::Retain {
                rank,
                blocks: blocks.iter().copied().collect(),
            };
            match self.client.request(logger, request, STORE_TIMEOUT) {
                Ok(LoggerResponse::Retained { missing }) => {
                    lacks.insert(logger, missing.into_iter().collect());
                }
                Ok(other) => tracing::warn!("logger {logger} answered a retain with {other:?}"),
                Err(e) => self.lose(logger, &e),
            }
        }
        lacks
    }
}

/// How a store of a block's copy went.
enum Stored {
    Yes,
    /// The logger is full.
    Declined,
    /// The logger answered something else, or is lost.
    Failed,
}

/// How the copy of one block back to a restarted logger went.
enum Refill {
    Copied,
    /// The other logger does not have it either: released since the checkpoint that
    /// points into it (or lost too); skipped.
    NotThere,
    /// No logger took the copy, or one failed or is gone: the refill ends.
    Failed,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A block fetched from a logger: (logger, block) and its payloads by slot.
type FetchedBlock = ((u16, BlockId), Arc<Vec<Envelope>>);

impl RecoveryLayer {
    /// Per logger, the process its client last connected to (empty without loggers).
    pub(crate) fn logger_instances(&self) -> Vec<Option<u64>> {
        self.offload.get().map_or_else(Vec::new, |o| {
            (0..o.client.loggers())
                .map(|l| o.client.instance(l))
                .collect()
        })
    }

    /// Connects the node to the logger nodes of [`RecoveryConfig::loggers`](super::RecoveryConfig)
    /// and starts the dump thread (nothing without loggers or without a quota).
    pub(crate) fn start_log_offload(self: &Arc<Self>, secret: &[u8]) -> Result<(), String> {
        let (Some(quota), false) = (self.config.log_quota, self.config.loggers.is_empty()) else {
            return Ok(());
        };
        let offload = LogOffload::new(self.rank, self.config.loggers.clone(), secret)?;
        if self.offload.set(offload).is_err() {
            return Err("the log offload is started already".into());
        }
        let layer = Arc::clone(self);
        std::thread::Builder::new()
            .name("lazarus-log-dump".into())
            .spawn(move || layer.dump_loop(quota))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Whether the quota is kept by dumping to loggers (else by checkpoint requests).
    pub(crate) fn dumps_to_loggers(&self) -> bool {
        (self.offload.get()).is_some_and(|o| o.dumping.load(Ordering::Acquire) && o.available())
    }

    fn dump_loop(&self, quota: usize) {
        let Some(offload) = self.offload.get() else {
            return;
        };
        let threshold = quota / 4 * 3;
        let target = quota / 2;
        let first = self.rank % offload.client.loggers().max(1);
        let mut retained = self.config.incarnation == 0;
        offload.dumping.store(retained, Ordering::Release);
        while !self.stop.load(Ordering::Acquire) {
            self.report_lost_loggers(offload);
            if !retained {
                // A restored node: its lost incarnation's blocks that the checkpoint does
                // not point into are garbage at the loggers.
                let (blocks, then) = {
                    let state = self.lock();
                    let blocks = state.recovery.protocol().map(|p| p.dumped_blocks());
                    (blocks, state.logger_instances.clone())
                };
                if let Some(blocks) = blocks {
                    let lacks = offload.retain(self.rank, blocks.iter().map(|&(_, b)| b).collect());
                    let missing = match self.lock().recovery.protocol_mut() {
                        Some(p) => p.locate_restored_blocks(&lacks, offload.client.loggers()),
                        None => BTreeMap::new(),
                    };
                    for (logger, gone) in missing {
                        // Missing at the process the image knew: released since the
                        // checkpoint (its entries are covered). At another one: lost
                        // with a restart. At a logger this run does not have: nobody
                        // can fetch it.
                        let known = then.get(usize::from(logger)).copied().flatten();
                        if logger >= offload.client.loggers()
                            || known != offload.client.instance(logger)
                        {
                            self.report_blocks_lost(logger, &gone);
                        }
                    }
                    // What the image knew lost, and what was lost since: copied back.
                    for logger in 0..offload.client.loggers() {
                        let lost = (self.lock().recovery.protocol())
                            .is_some_and(|p| !p.refillable_blocks(logger).is_empty());
                        if lost {
                            self.schedule_refill(offload, logger);
                        }
                    }
                    retained = true;
                    offload.dumping.store(true, Ordering::Release);
                }
            }
            for logger in offload.probe_lost() {
                event(self.rank, &format!("logger-back logger={logger}"));
                self.schedule_refill(offload, logger);
            }
            self.refill(offload);
            let released = match self.lock().recovery.protocol_mut() {
                Some(p) => p.take_released_blocks(),
                None => Vec::new(),
            };
            if !released.is_empty() {
                offload.release(self.rank, released);
            }
            if !retained || !offload.available() {
                std::thread::sleep(DUMP_POLL);
                continue;
            }
            let over = (self.lock().recovery.protocol())
                .is_some_and(|p| dump_would_help(&p.log_stats(), threshold, quota));
            if over {
                self.dump_until(offload, target, quota, first);
            }
            std::thread::sleep(DUMP_POLL);
        }
    }

    /// Dumps blocks until the log is under `target` bytes, or what is left in memory is
    /// too little payload to be worth a block ([`dump_continues`]).
    fn dump_until(&self, offload: &LogOffload, target: usize, quota: usize, first: u16) {
        loop {
            let taken = {
                let mut state = self.lock();
                let Some(p) = state.recovery.protocol_mut() else {
                    return;
                };
                if !dump_continues(&p.log_stats(), target, quota) {
                    return;
                }
                p.take_log_dump(BLOCK_BYTES).map(|d| (d, p.incarnation()))
            };
            let Some((dump, incarnation)) = taken else {
                return;
            };
            let Ok(bytes) = postcard::to_allocvec(&dump.payloads) else {
                return;
            };
            let copies = self.config.logger_copies;
            let by = offload.store(self.rank, dump.block, bytes, first, copies);
            let dumped = {
                let mut state = self.lock();
                match (state.recovery.protocol_mut(), &by[..]) {
                    (Some(p), [logger, more @ ..]) if p.incarnation() == incarnation => {
                        p.log_dumped(&dump, *logger, more.first().copied());
                        true
                    }
                    _ => false,
                }
            };
            if dumped {
                self.note_dump(offload, &dump);
            }
            // After `log_dumped`: a logger this store found restarted may have kept the
            // block before its restart, and then it is lost with the others.
            self.report_lost_loggers(offload);
            // Under a fast sender the dump never catches up: refills go between blocks.
            self.refill(offload);
            if !dumped {
                return;
            }
        }
    }

    /// Tells the protocol of the loggers found lost since the last call (by a store, a
    /// release or a fetch): the peers whose messages only lost loggers kept are asked to
    /// checkpoint.
    fn report_lost_loggers(&self, offload: &LogOffload) {
        for logger in 0..offload.client.loggers() {
            if offload.client.take_restarted(logger) {
                counter!(LOGGERS_RESTARTED).increment(1);
                self.schedule_refill(offload, logger);
                let asks = match self.lock().recovery.protocol_mut() {
                    Some(p) => p.on_logger_lost(logger),
                    None => Vec::new(),
                };
                self.announce_loss(&format!("logger-restarted logger={logger}"), asks);
            }
        }
        for (logger, lost) in offload.lost.iter().enumerate() {
            if !lost.load(Ordering::Acquire)
                || offload.reported[logger].swap(true, Ordering::AcqRel)
            {
                continue;
            }
            let asks = match self.lock().recovery.protocol_mut() {
                Some(p) => p.on_logger_lost(logger as u16),
                None => {
                    offload.reported[logger].store(false, Ordering::Release);
                    continue;
                }
            };
            self.announce_loss(&format!("logger-lost logger={logger}"), asks);
        }
    }

    /// Puts a loss of dumped blocks on the timeline (`what`, then how many receivers
    /// are asked to checkpoint) and sends those CHECKPOINT_REQUESTs.
    fn announce_loss(&self, what: &str, asks: Vec<Action<Envelope>>) {
        event(
            self.rank,
            &format!("{what} checkpoint_requests={}", asks.len()),
        );
        if !asks.is_empty() {
            self.send_actions_now(asks);
        }
    }

    /// With copies, blocks lost at `logger` are to be copied back there from their other
    /// logger, so that losing that one too loses nothing.
    fn schedule_refill(&self, offload: &LogOffload, logger: u16) {
        if self.config.logger_copies >= 2 {
            lock(&offload.refilling).insert(logger);
        }
    }

    /// Copies back up to [`REFILL_PER_TURN`] lost blocks to each logger being refilled:
    /// fetched from the logger with the other copy, stored as they are (the same id),
    /// then no longer lost. A logger that declines (full) has the rest of its blocks
    /// copied to third loggers instead; when none takes one, or a copy fails, the refill
    /// ends, and the receivers of what is left with one copy are asked to checkpoint.
    fn refill(&self, offload: &LogOffload) {
        let targets: Vec<u16> = lock(&offload.refilling).iter().copied().collect();
        for logger in targets {
            if offload.is_lost(logger) {
                continue;
            }
            let todo = match self.lock().recovery.protocol() {
                Some(p) => p.refillable_blocks(logger),
                None => continue,
            };
            let skip = lock(&offload.refill_skip).clone();
            let todo: Vec<(BlockId, u16)> = (todo.into_iter())
                .filter(|&(b, _)| !skip.contains(&(logger, b)))
                .collect();
            let mut ended = todo.len() <= REFILL_PER_TURN;
            for &(block, from) in todo.iter().take(REFILL_PER_TURN) {
                match self.refill_block(offload, logger, block, from) {
                    Refill::Copied => {}
                    Refill::NotThere => {
                        lock(&offload.refill_skip).insert((logger, block));
                    }
                    Refill::Failed => {
                        ended = true;
                        break;
                    }
                }
            }
            if ended {
                lock(&offload.refilling).remove(&logger);
                lock(&offload.refill_full).remove(&logger);
                let skipped: BTreeSet<(u16, BlockId)> = {
                    let mut all = lock(&offload.refill_skip);
                    let mine = all.iter().filter(|&&(l, _)| l == logger).copied().collect();
                    all.retain(|&(l, _)| l != logger);
                    mine
                };
                let n = lock(&offload.refilled).remove(&logger).unwrap_or(0);
                let (left, asks) = match self.lock().recovery.protocol_mut() {
                    Some(p) => (p.refillable_blocks(logger), p.on_refill_abandoned(logger)),
                    None => (Vec::new(), Vec::new()),
                };
                // Skipped blocks are missing at the other logger too: no copy at all.
                let missing = (left.iter())
                    .filter(|&&(b, _)| skipped.contains(&(logger, b)))
                    .count();
                let single = left.len() - missing;
                event(
                    self.rank,
                    &format!(
                        "logger-refilled logger={logger} blocks={n} left={single} missing={missing}"
                    ),
                );
                let what = if single > 0 {
                    format!("logger-refill-abandoned logger={logger} single_copy={single}")
                } else {
                    format!("logger-refill-missing logger={logger} blocks={missing}")
                };
                if !left.is_empty() {
                    self.announce_loss(&what, asks);
                }
            }
        }
    }

    /// Copies `block` from logger `from` back to logger `to`, which lost it; if `to` has
    /// no room for it (it declined once in this refill), to a third logger instead,
    /// which the block's references then name in `to`'s place.
    fn refill_block(&self, offload: &LogOffload, to: u16, block: BlockId, from: u16) -> Refill {
        let fetch = LoggerRequest::Fetch {
            rank: self.rank,
            block,
        };
        let bytes = match offload.client.request(from, fetch, FETCH_TIMEOUT) {
            Ok(LoggerResponse::Block(bytes)) => bytes,
            Ok(LoggerResponse::Missing) => return Refill::NotThere,
            Ok(other) => {
                tracing::warn!("refill of logger {to}: logger {from} answered {other:?}");
                return Refill::Failed;
            }
            Err(e) => {
                offload.lose(from, &e);
                return Refill::Failed;
            }
        };
        let full = lock(&offload.refill_full).contains(&to);
        if !full {
            match self.store_copy(offload, to, block, &bytes) {
                Stored::Yes => {
                    if let Some(p) = self.lock().recovery.protocol_mut() {
                        p.block_restored(to, block);
                    }
                    return self.refilled(offload, to);
                }
                Stored::Declined => {
                    // Full: this and the refill's next blocks go to a third logger.
                    lock(&offload.refill_full).insert(to);
                }
                Stored::Failed => return Refill::Failed,
            }
        }
        let third =
            (0..offload.client.loggers()).filter(|&l| l != to && l != from && !offload.is_lost(l));
        for other in third {
            if let Stored::Yes = self.store_copy(offload, other, block, &bytes) {
                if let Some(p) = self.lock().recovery.protocol_mut() {
                    p.block_relocated(to, other, block);
                }
                offload.blocks_relocated.fetch_add(1, Ordering::Relaxed);
                counter!(BLOCKS_RELOCATED).increment(1);
                return self.refilled(offload, to);
            }
        }
        Refill::Failed
    }

    /// Stores a copy of `block` at logger `at`.
    fn store_copy(&self, offload: &LogOffload, at: u16, block: BlockId, bytes: &Payload) -> Stored {
        let store = LoggerRequest::Store {
            rank: self.rank,
            block,
            bytes: bytes.clone(),
        };
        match offload.client.request(at, store, STORE_TIMEOUT) {
            Ok(LoggerResponse::Stored) => Stored::Yes,
            Ok(LoggerResponse::Declined { .. }) => Stored::Declined,
            Ok(other) => {
                tracing::warn!("a copy of block {block:?} to logger {at}: it answered {other:?}");
                Stored::Failed
            }
            Err(e) => {
                offload.lose(at, &e);
                Stored::Failed
            }
        }
    }

    /// One more block of logger `to`'s refill has two copies again.
    fn refilled(&self, offload: &LogOffload, to: u16) -> Refill {
        offload.blocks_refilled.fetch_add(1, Ordering::Relaxed);
        counter!(BLOCKS_REFILLED).increment(1);
        *lock(&offload.refilled).entry(to).or_default() += 1;
        Refill::Copied
    }

    /// A logger does not have `blocks` that the restored checkpoint points into (it was
    /// restarted since): their receivers are asked to checkpoint.
    fn report_blocks_lost(&self, logger: u16, blocks: &[BlockId]) {
        let asks = match self.lock().recovery.protocol_mut() {
            Some(p) => p.on_blocks_lost(logger, blocks),
            None => return,
        };
        self.announce_loss(
            &format!("logger-blocks-lost logger={logger} blocks={}", blocks.len()),
            asks,
        );
    }

    fn note_dump(&self, offload: &LogOffload, dump: &LogDump<Envelope>) {
        offload.blocks_dumped.fetch_add(1, Ordering::Relaxed);
        offload
            .bytes_dumped
            .fetch_add(dump.bytes as u64, Ordering::Relaxed);
        counter!(BLOCKS_DUMPED).increment(1);
        counter!(BYTES_DUMPED).increment(dump.bytes as u64);
    }

    /// The frame of a resend whose payload is at a logger, fetched from there; `None`
    /// (with an error: that peer cannot recover this message) when its logger lost it.
    pub(super) fn dumped_frame(
        &self,
        to: u16,
        meta: MessageMeta,
        at: DumpRef,
    ) -> Option<(u16, Frame<Envelope>)> {
        let Some(offload) = self.offload.get() else {
            tracing::error!(
                "a resend to node {to} names a logger block, but this node has no loggers"
            );
            return None;
        };
        match offload.payload(self.rank, &at) {
            Ok(payload) => Some((to, Frame::Message { meta, payload })),
            Err(why) => {
                offload.resends_lost.fetch_add(1, Ordering::Relaxed);
                counter!(RESENDS_LOST).increment(1);
                tracing::error!(
                    "cannot resend message {} of {:?} to node {to}: its payload was at logger {} ({why}); if node {to} still needs it (its checkpoint does not cover it), its recovery cannot complete",
                    meta.send_index,
                    meta.channel,
                    at.logger
                );
                None
            }
        }
    }

    /// `blocks_dumped=.. bytes_dumped=.. blocks_fetched=.. resends_lost=..
    /// blocks_refilled=.. blocks_relocated=..` for the final report (zeros without
    /// loggers).
    pub(crate) fn offload_report(&self) -> String {
        let [d, b, f, l, r, m] = self.offload.get().map_or([0; 6], |o| {
            [
                &o.blocks_dumped,
                &o.bytes_dumped,
                &o.blocks_fetched,
                &o.resends_lost,
                &o.blocks_refilled,
                &o.blocks_relocated,
            ]
            .map(|n| n.load(Ordering::Relaxed))
        });
        format!(
            "blocks_dumped={d} bytes_dumped={b} blocks_fetched={f} resends_lost={l} \
             blocks_refilled={r} blocks_relocated={m}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{dump_continues, dump_would_help};
    use crate::recovery::LogStats;

    const QUOTA: usize = 64 << 10;

    fn log(payload_bytes: usize, vector_bytes: usize) -> LogStats {
        LogStats {
            payload_bytes,
            vector_bytes,
            ..LogStats::default()
        }
    }

    #[test]
    fn a_log_over_its_threshold_in_payloads_starts_a_dump() {
        assert!(dump_would_help(
            &log(40 << 10, 20 << 10),
            QUOTA / 4 * 3,
            QUOTA
        ));
        // Under the threshold: nothing to do yet.
        assert!(!dump_would_help(
            &log(20 << 10, 10 << 10),
            QUOTA / 4 * 3,
            QUOTA
        ));
    }

    #[test]
    fn a_log_over_its_threshold_in_vectors_is_left_to_checkpoint_requests() {
        assert!(!dump_would_help(
            &log(4 << 10, 80 << 10),
            QUOTA / 4 * 3,
            QUOTA
        ));
    }

    #[test]
    fn a_dump_stops_when_what_is_left_is_vectors_and_a_few_new_payloads() {
        let target = QUOTA / 2;
        assert!(dump_continues(&log(30 << 10, 20 << 10), target, QUOTA));
        // The first block took the payloads; the vectors keep the log over target, and
        // the payloads that came during the store are a few hundred bytes.
        assert!(!dump_continues(&log(400, 60 << 10), target, QUOTA));
        assert!(!dump_continues(&log(20 << 10, 8 << 10), target, QUOTA));
    }
}
