//! The supervisor's pure parts: kill plans (`--kill RANK@SECONDS`), the restart policy,
//! the recovery timeline built from the `lazarus-event` lines nodes print, and the stall
//! watchdog over the `lazarus-report` lines they answer its requests with. The launcher
//! (`lazarus run --ft on`) owns the processes: it restarts a dead node with the same rank
//! and the next incarnation, and prints the timeline as it happens.

pub use lazarus::cluster::supervisor_channel::{
    parse_report, parse_sample, NodeReport, NodeSample, MAX_RESTARTS_PER_RANK, MAX_SAME_FAILURE,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A planned SIGKILL of a node, for resilience demos and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlannedKill {
    /// The node's rank.
    pub rank: u16,
    /// When, counted from the launch.
    pub at: Duration,
    /// Wait past `at`, if need be, until the node has committed a checkpoint, so that
    /// its replacement restores one (`lazarus demo`); `--kill` kills at `at` regardless.
    pub after_a_checkpoint: bool,
}

/// Parses `RANK@TIME[,RANK@TIME...]`, the time in seconds (`3.5`) or as a duration
/// (`1m`, see [`parse_duration`]).
pub fn parse_kills(spec: &str) -> Result<Vec<PlannedKill>, String> {
    spec.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|item| {
            let (rank, time) = item
                .trim()
                .split_once('@')
                .ok_or_else(|| format!("`{item}`: expected RANK@SECONDS, e.g. 2@3.5"))?;
            let rank: u16 = rank
                .parse()
                .map_err(|_| format!("`{item}`: `{rank}` is not a rank"))?;
            let at = parse_duration(time).map_err(|e| format!("`{item}`: {e}"))?;
            Ok(PlannedKill {
                rank,
                at,
                after_a_checkpoint: false,
            })
        })
        .collect()
}

/// Parses a duration: a number of seconds (`1.5`), seconds or milliseconds with their
/// unit (`0.5s`, `500ms`), or anything `humantime` reads (`1m`, `2min`, `1h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    // humantime takes whole numbers only: fractions of seconds go through the plain parser.
    let (num, scale) = if let Some(ms) = s.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(sec) = s.strip_suffix('s') {
        (sec, 1.0)
    } else {
        (s, 1.0)
    };
    if let Ok(v) = num.trim().parse::<f64>() {
        return Duration::try_from_secs_f64(v * scale)
            .map_err(|_| format!("`{s}`: a duration must be non-negative and finite"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration (examples: 500ms, 1.5s, 2min, 1h 30m): {e}"))
}

/// An actor failure as a node reports it before its process ends
/// (`actor-failed actor=... type=... message=... panic="..."`).
pub fn failure_signature(e: &NodeEvent) -> Option<String> {
    (e.kind == "actor-failed").then(|| e.details.clone())
}

/// Whether the newest of `failures` (one rank's, oldest first) happened
/// [`MAX_SAME_FAILURE`] times: the handler panics every time it is replayed.
pub fn is_deterministic(failures: &[String]) -> bool {
    failures
        .last()
        .is_some_and(|last| failures.iter().filter(|f| *f == last).count() >= MAX_SAME_FAILURE)
}

/// What to do when a node process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExit {
    /// It finished its work.
    Done,
    /// Start its next incarnation.
    Restart {
        /// The incarnation to start.
        incarnation: u32,
    },
    /// Give up: recovery is off, or the rank keeps dying.
    Fail,
}

/// The restart policy: with recovery on, a node that did not exit successfully restarts,
/// at most [`MAX_RESTARTS_PER_RANK`] times.
pub fn on_exit(success: bool, recovery: bool, incarnation: u32) -> OnExit {
    if success {
        OnExit::Done
    } else if recovery && incarnation < MAX_RESTARTS_PER_RANK {
        OnExit::Restart {
            incarnation: incarnation + 1,
        }
    } else {
        OnExit::Fail
    }
}

/// How long to wait before restarting a rank that died for the `restarts`-th time before
/// (0: its first death). The first restart is at once: recovery time is what a single
/// fault costs. After that the wait doubles from 100 ms, so that a rank that keeps dying
/// does not use up its restarts within milliseconds.
pub fn restart_delay(restarts: u32) -> Duration {
    match restarts {
        0 => Duration::ZERO,
        k => Duration::from_millis(100) * (1u32 << (k - 1).min(5)),
    }
}

/// Whether a rank's process that exited with `code` (`None`: killed by a signal) ended
/// the same way as its previous incarnation (`previous`, same meaning; `None` too for a
/// first incarnation) while the rank has never committed a checkpoint: both exited by
/// themselves with the same non-zero status before doing any work worth restoring. That
/// is a start-up failure (a bad argument, a missing file), not a fault a restart cures,
/// so the rank is not restarted again. A node killed by a signal is always restarted,
/// and actor failures ([`lazarus::cluster::supervisor_channel::ACTOR_FAILED_EXIT`]) have their own
/// rule ([`is_deterministic`]).
pub fn repeats_startup_failure(
    previous: Option<i32>,
    code: Option<i32>,
    checkpointed: bool,
) -> bool {
    match (previous, code) {
        (Some(before), Some(now)) => {
            !checkpointed
                && before == now
                && now != 0
                && now != lazarus::cluster::supervisor_channel::ACTOR_FAILED_EXIT
        }
        _ => false,
    }
}

/// What the supervisor knows of one rank's current process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The rank.
    pub rank: u16,
    /// The incarnation running (or last run) for it.
    pub incarnation: u32,
    /// `None` while it runs; `Some(true)` once it exited successfully.
    pub exited_ok: Option<bool>,
}

/// Whether the nodes may leave: every rank's current incarnation has announced that its
/// `main` finished (`finished`: `(rank, incarnation)` pairs) or has already exited
/// successfully. Until then no node leaves, so any node that dies can still be restarted
/// and replayed from its peers' logs; from then on no node is needed by another.
pub fn may_leave(nodes: &[NodeState], finished: &std::collections::HashSet<(u16, u32)>) -> bool {
    !nodes.is_empty()
        && nodes.iter().all(|n| match n.exited_ok {
            Some(ok) => ok,
            None => finished.contains(&(n.rank, n.incarnation)),
        })
}

/// One parsed `lazarus-event ms=<unix ms> rank=<r> <what...>` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    /// Wall-clock time, milliseconds since the Unix epoch.
    pub unix_ms: u128,
    /// The node.
    pub rank: u16,
    /// The event's kind (first word) and its details.
    pub kind: String,
    /// The rest of the line.
    pub details: String,
}

/// The `incarnation=` of an event of `kind`; `None` for other events.
fn incarnation_of(e: &NodeEvent, kind: &str) -> Option<u32> {
    if e.kind != kind {
        return None;
    }
    e.details
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("incarnation="))
        .and_then(|v| v.parse().ok())
}

/// The incarnation of a node whose event says its `main` has finished (`finished`, the
/// first phase of its shutdown); `None` for other events.
pub fn finished_incarnation(e: &NodeEvent) -> Option<u32> {
    incarnation_of(e, "finished")
}

/// Whether the event says its node committed a checkpoint.
pub fn committed_a_checkpoint(e: &NodeEvent) -> bool {
    e.kind == "checkpoint"
}

/// The incarnation a node becomes by rolling back in place after an actor failed
/// (`rolling-back incarnation=K`: same process, re-executed); `None` for other
/// events.
pub fn in_place_incarnation(e: &NodeEvent) -> Option<u32> {
    incarnation_of(e, "rolling-back")
}

/// The `(peer, incarnation)` a node's event declares failed by its silence (`suspected`);
/// `None` for other events.
pub fn suspicion(e: &NodeEvent) -> Option<(u16, u32)> {
    if e.kind != "suspected" {
        return None;
    }
    let field = |key: &str| {
        e.details
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    Some((
        field("peer")?.parse().ok()?,
        field("incarnation")?.parse().ok()?,
    ))
}

/// Exit status of `lazarus run` when a restarted node cannot be recovered exactly (see
/// [`recovery_impossible`]): the launcher stops every node at once and exits with it.
pub const RECOVERY_IMPOSSIBLE_EXIT: u8 = 3;

/// The value of `key=` in an event's details.
fn field<'a>(e: &'a NodeEvent, key: &str) -> Option<&'a str> {
    e.details
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// The id of the checkpoint a `checkpoint` event says its node committed; `None` for
/// other events.
pub fn checkpoint_id(e: &NodeEvent) -> Option<u64> {
    (e.kind == "checkpoint")
        .then(|| field(e, "id")?.parse().ok())
        .flatten()
}

/// A node's `recovery-impossible` event: a restarted peer's ROLLBACK reported less
/// delivered on a channel than the node's log had been released up to, so the messages
/// in between, which the peer's lost checkpoint covered, can never be resent and the
/// peer cannot reach its lost state again. Returns the peer and the reason as the
/// launcher says it; `newest` is the id of the newest checkpoint the peer had committed,
/// if the timeline saw one. `None` for other events.
pub fn recovery_impossible(
    e: &NodeEvent,
    newest: impl Fn(u16) -> Option<u64>,
) -> Option<(u16, String)> {
    if e.kind != "recovery-impossible" {
        return None;
    }
    let peer: u16 = field(e, "peer")?.parse().ok()?;
    let text = |key| field(e, key).unwrap_or("?");
    let lost = match newest(peer) {
        Some(id) => format!("node {peer}'s newest checkpoint (id={id}) was damaged or lost"),
        None => format!("node {peer}'s newest checkpoint was damaged or lost"),
    };
    Some((
        peer,
        format!(
            "node {} cannot resend to restarted node {peer} (incarnation {}) the messages \
             it needs: channel {} was released up to {} but node {peer} restored {} of it \
             ({} messages on {} channel(s) are gone): {lost}, and no intact copy of it \
             was found (with --buddy on the next node keeps one in memory)",
            e.rank,
            text("incarnation"),
            text("channel"),
            text("released"),
            text("restored"),
            text("missing"),
            text("channels"),
        ),
    ))
}

/// One of a node's final totals (`final ... KEY=N ...`), e.g. `regenerations_checked`
/// and `contract_violations` (regenerated messages compared with the copies delivered
/// before a failure, and those that differed).
pub fn final_total(e: &NodeEvent, key: &str) -> Option<u64> {
    if e.kind != "final" {
        return None;
    }
    e.details
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// The default of `lazarus run --stall-timeout`.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The exit status of a run the watchdog ended (as `timeout(1)`'s for a command that
/// ran out of time).
pub const STALLED_EXIT: u8 = 124;

/// Parses `--stall-timeout`: a duration of at least a second, or `off` (also `0`) for no
/// watchdog.
pub fn parse_stall_timeout(s: &str) -> Result<Option<Duration>, String> {
    if matches!(s.trim(), "off" | "0") {
        return Ok(None);
    }
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!(
            "`{s}`: a stall timeout is at least 1s (or `off`): legitimate pauses of a run \
             (a long handler, a checkpoint, a restart) last longer than that"
        ));
    }
    Ok(Some(d))
}

/// What the watchdog concludes at a [`Watchdog::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Progress within the timeout, or nothing to judge.
    Fine,
    /// No progress for the timeout: say what each node waits for.
    Stalled {
        /// Since the last progress.
        idle: Duration,
    },
    /// No progress for twice the timeout: end the run.
    GiveUp {
        /// Since the last progress.
        idle: Duration,
    },
}

/// The launcher's stall watchdog (`lazarus run --stall-timeout`), sans-IO: it is fed the
/// nodes' reports and what the launcher itself sees, and says when nothing has moved for
/// the timeout (report what each node waits for) and for twice the timeout (end the run).
///
/// Progress is a node handling messages (its count of handler calls changed since its
/// previous report), a node computing (its CPU time grew by at least [`BUSY_SHARE`] of the
/// wall time between its two reports: one long handler), the first report of a process,
/// and whatever the launcher calls [`Watchdog::activity`] for: a node starting, dying or
/// being restarted, every running node having finished its `main`. Until some node has
/// answered a report at all (an app that never forms a cluster, a single node), it judges
/// nothing.
#[derive(Debug)]
pub struct Watchdog {
    timeout: Duration,
    /// The last progress.
    progress_at: Instant,
    /// Each rank's last report: incarnation, handler calls, CPU ms, when it arrived.
    last: HashMap<u16, (u32, u64, u64, Instant)>,
    /// When the stall was reported, while it lasts.
    reported_at: Option<Instant>,
    /// Whether the end of the run was called for.
    gave_up: bool,
}

/// The share of the wall time between two reports a node's CPU time must grow by to
/// count as computing (a long handler) rather than waiting.
pub const BUSY_SHARE: f64 = 0.25;

impl Watchdog {
    /// A watchdog with `timeout`, counting from `now`.
    pub fn new(timeout: Duration, now: Instant) -> Watchdog {
        Watchdog {
            timeout,
            progress_at: now,
            last: HashMap::new(),
            reported_at: None,
            gave_up: false,
        }
    }

    /// How often the launcher asks the nodes for reports: a quarter of the timeout,
    /// between 100 ms and 5 s.
    pub fn ask_every(&self) -> Duration {
        (self.timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
    }

    /// Progress seen by the launcher at `now`. Returns how long the run had been stalled
    /// if a reported stall ends here.
    pub fn activity(&mut self, now: Instant) -> Option<Duration> {
        let stalled = self
            .reported_at
            .take()
            .map(|_| now.saturating_duration_since(self.progress_at));
        self.progress_at = self.progress_at.max(now);
        self.gave_up = false;
        stalled
    }

    /// A node's report, arrived at `at`. Returns how long the run had been stalled if a
    /// reported stall ends with it.
    pub fn observe(&mut self, report: &NodeReport, at: Instant) -> Option<Duration> {
        let now = (report.incarnation, report.handled, report.cpu_ms, at);
        let progressed = match self.last.insert(report.rank, now) {
            None => true,
            Some((incarnation, handled, cpu_ms, then)) => {
                let wall = at.saturating_duration_since(then).as_secs_f64() * 1000.0;
                incarnation != report.incarnation
                    || handled != report.handled
                    || (report.cpu_ms.saturating_sub(cpu_ms) as f64) >= BUSY_SHARE * wall
                        && wall > 0.0
            }
        };
        if progressed {
            self.activity(at)
        } else {
            None
        }
    }

    /// What to do at `now`: [`Verdict::Stalled`] once when the timeout has passed without
    /// progress, [`Verdict::GiveUp`] once when twice the timeout has.
    pub fn poll(&mut self, now: Instant) -> Verdict {
        if self.last.is_empty() || self.gave_up {
            return Verdict::Fine;
        }
        let idle = now.saturating_duration_since(self.progress_at);
        if idle >= self.timeout * 2 && self.reported_at.is_some() {
            self.gave_up = true;
            return Verdict::GiveUp { idle };
        }
        if idle >= self.timeout && self.reported_at.is_none() {
            self.reported_at = Some(now);
            return Verdict::Stalled { idle };
        }
        Verdict::Fine
    }
}

/// Parses a node's event line; `None` for any other line.
pub fn parse_event(line: &str) -> Option<NodeEvent> {
    let rest = line.trim().strip_prefix("lazarus-event ")?;
    let mut words = rest.splitn(4, ' ');
    let unix_ms = words.next()?.strip_prefix("ms=")?.parse().ok()?;
    let rank = words.next()?.strip_prefix("rank=")?.parse().ok()?;
    let kind = words.next()?.to_string();
    let details = words.next().unwrap_or("").to_string();
    Some(NodeEvent {
        unix_ms,
        rank,
        kind,
        details,
    })
}

/// The PID a node started through a remote command reported for itself (its `process`
/// event), if `e` is that event.
pub fn process_pid(e: &NodeEvent) -> Option<u32> {
    if e.kind != "process" {
        return None;
    }
    e.details
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))?
        .parse()
        .ok()
}

/// A human line for the timeline.
pub fn describe_event(e: &NodeEvent) -> String {
    let what = match e.kind.as_str() {
        "checkpoint" => "checkpoint committed",
        "loaded" => "restarted node loaded its checkpoint",
        "rollback-sent" => "rollback sent to every peer",
        "resumed" => "actors restored, node resumed",
        "replayed" => "every peer answered: replay complete",
        "peer-rollback" => "answered a peer's rollback (logged messages resent)",
        "reconnected" => "connection to a restarted peer is up",
        "connected" => "connected to every peer (how many over shared memory):",
        "finished" => "main finished; serves its peers until every node has",
        "suspected" => "declared a silent peer failed",
        "paused" => {
            "paused: did not run for a while (overloaded or stopped), so suspected no peer for it"
        }
        "actor-failed" => "an actor failed",
        "peer-gone" => "leaves without waiting for a peer that died after the release",
        "logger-lost" => {
            "logger-lost: its logger node is gone; asked the peers whose messages only it \
             kept to checkpoint"
        }
        "logger-restarted" => {
            "logger-restarted: its logger node came back empty; asked the peers whose \
             messages only it kept to checkpoint"
        }
        "logger-blocks-lost" => {
            "logger-blocks-lost: a logger lost blocks its checkpoint points into; asked \
             their receivers to checkpoint"
        }
        "logger-refilled" => {
            "logger-refilled: copied back to a restarted logger node the blocks it lost, \
             from their other copies"
        }
        "logger-refill-abandoned" => {
            "logger-refill-abandoned: the refill stopped (no logger had room, or a copy \
             failed); asked the receivers of the blocks left with one copy to checkpoint"
        }
        "logger-refill-missing" => {
            "logger-refill-missing: blocks a restarted logger lost are missing at their \
             other logger too; asked their receivers to checkpoint"
        }
        "logger-back" => "logger-back: a lost logger node answers again; blocks go to it",
        "rolling-back" => "rolls back in place: its process re-executes itself",
        "process" => "runs as process",
        "driver-threads" => {
            "WARNING: main sends from more than one thread; after a failure their order, \
             and so which of them a re-executed main skips, is not reproducible"
        }
        "journal-restored-from-buddy" => {
            "its reply journal was lost: put back from the buddy's copy"
        }
        "contract-violation" => {
            "DETERMINISM CONTRACT BROKEN: a regenerated message differs from the copy \
             delivered before the failure"
        }
        "recovery-impossible" => {
            "RECOVERY IMPOSSIBLE: cannot resend to a restarted peer messages it needs (its \
             log was released past what the peer restored: the peer's newest checkpoint \
             was lost)"
        }
        other => other,
    };
    format!("node {}: {what} {}", e.rank, e.details)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(rank: u16, incarnation: u32) -> NodeState {
        NodeState {
            rank,
            incarnation,
            exited_ok: None,
        }
    }

    #[test]
    fn nodes_may_leave_only_once_every_current_incarnation_has_finished() {
        let finished: std::collections::HashSet<(u16, u32)> =
            [(0, 0), (1, 0), (2, 0)].into_iter().collect();
        assert!(may_leave(
            &[running(0, 0), running(1, 0), running(2, 0)],
            &finished
        ));
        assert!(
            !may_leave(&[running(0, 0), running(1, 1), running(2, 0)], &finished),
            "node 1 was restarted after it finished: its replacement has not finished yet"
        );
        assert!(
            !may_leave(&[running(0, 0), running(1, 0), running(3, 0)], &finished),
            "node 3 is still working"
        );
        let left_on_its_own = NodeState {
            exited_ok: Some(true),
            ..running(3, 0)
        };
        assert!(may_leave(&[running(0, 0), left_on_its_own], &finished));
        let failed = NodeState {
            exited_ok: Some(false),
            ..running(3, 0)
        };
        assert!(
            !may_leave(&[running(0, 0), failed], &finished),
            "a node that failed and is not running has not finished"
        );
    }

    #[test]
    fn kill_plans_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_kills("2@3.5,1@6").unwrap(),
            vec![
                PlannedKill {
                    rank: 2,
                    at: Duration::from_millis(3500),
                    after_a_checkpoint: false,
                },
                PlannedKill {
                    rank: 1,
                    at: Duration::from_secs(6),
                    after_a_checkpoint: false,
                }
            ]
        );
        assert!(parse_kills("2").unwrap_err().contains("RANK@SECONDS"));
        assert!(parse_kills("x@1").unwrap_err().contains("not a rank"));
        assert!(parse_kills("1@-2").is_err());
    }

    #[test]
    fn durations_accept_units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0.5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        let err = parse_duration("fast").unwrap_err();
        assert!(err.contains("is not a duration"), "{err}");
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("nan").is_err());
        assert_eq!(
            parse_kills("1@2min").unwrap()[0].at,
            Duration::from_secs(120)
        );
    }

    #[test]
    fn restarts_back_off_after_the_first() {
        let delays: Vec<u64> = (0..8)
            .map(|k| restart_delay(k).as_millis() as u64)
            .collect();
        assert_eq!(delays, [0, 100, 200, 400, 800, 1600, 3200, 3200]);
    }

    #[test]
    fn only_the_same_exit_twice_before_any_checkpoint_stops_the_restarts() {
        // The app exited with status 2 twice, before its first checkpoint.
        assert!(repeats_startup_failure(Some(2), Some(2), false));
        // Once is not enough: the previous incarnation was killed, or this is the first.
        assert!(!repeats_startup_failure(None, Some(2), false));
        // Killed by a signal (from outside) is always restarted.
        assert!(!repeats_startup_failure(Some(2), None, false));
        assert!(!repeats_startup_failure(None, None, false));
        // Another status, or a rank that did work worth restoring.
        assert!(!repeats_startup_failure(Some(1), Some(2), false));
        assert!(!repeats_startup_failure(Some(2), Some(2), true));
        // Actor failures have their own rule (the same failure three times).
        let actor = lazarus::cluster::supervisor_channel::ACTOR_FAILED_EXIT;
        assert!(!repeats_startup_failure(Some(actor), Some(actor), false));
    }

    #[test]
    fn a_dead_node_restarts_a_bounded_number_of_times_only_with_recovery() {
        assert_eq!(on_exit(true, true, 0), OnExit::Done);
        assert_eq!(on_exit(false, true, 0), OnExit::Restart { incarnation: 1 });
        assert_eq!(on_exit(false, false, 0), OnExit::Fail);
        assert_eq!(on_exit(false, true, MAX_RESTARTS_PER_RANK), OnExit::Fail);
    }

    #[test]
    fn the_same_failure_three_times_is_a_deterministic_bug() {
        let a = "actor=1:2 type=Tile message=Halo panic=\"boom\"".to_string();
        let b = "actor=1:3 type=Tile message=Halo panic=\"other\"".to_string();
        assert!(!is_deterministic(&[a.clone(), a.clone()]));
        assert!(!is_deterministic(&[a.clone(), a.clone(), b.clone()]));
        assert!(is_deterministic(&[a.clone(), b, a.clone(), a]));
    }

    fn report(rank: u16, incarnation: u32, handled: u64, cpu_ms: u64) -> NodeReport {
        NodeReport {
            rank,
            incarnation,
            handled,
            cpu_ms,
            state: "interval=3 awaiting=[] queued=1".into(),
        }
    }

    #[test]
    fn report_lines_parse_back() {
        let r = NodeReport {
            state: "line one\nline two".into(),
            ..report(3, 2, 1234, 56)
        };
        let line = r.line();
        assert!(!line.contains('\n'), "one line: {line}");
        assert_eq!(
            parse_report(&line),
            Some(NodeReport {
                state: "line one line two".into(),
                ..r
            })
        );
        let empty = report(1, 0, 0, 0);
        assert_eq!(
            parse_report(
                &NodeReport {
                    state: String::new(),
                    ..empty.clone()
                }
                .line()
            ),
            Some(NodeReport {
                state: String::new(),
                ..empty
            })
        );
        assert_eq!(parse_report("lazarus-report rank=x incarnation=0"), None);
        assert_eq!(parse_report("lazarus-event ms=1 rank=0 checkpoint"), None);
    }

    #[test]
    fn stall_timeouts_parse() {
        assert_eq!(parse_stall_timeout("off"), Ok(None));
        assert_eq!(parse_stall_timeout("0"), Ok(None));
        assert_eq!(
            parse_stall_timeout("30s"),
            Ok(Some(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_stall_timeout("2min"),
            Ok(Some(Duration::from_secs(120)))
        );
        assert!(parse_stall_timeout("500ms")
            .unwrap_err()
            .contains("at least 1s"));
        assert!(parse_stall_timeout("soon").is_err());
    }

    #[test]
    fn the_watchdog_reports_a_stall_once_then_gives_up_and_progress_resets_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Watchdog::new(s(10), t0);
        assert_eq!(w.ask_every(), Duration::from_millis(2500));
        // Nothing is judged before a node has answered.
        assert_eq!(w.poll(t0 + s(100)), Verdict::Fine);
        let mut w = Watchdog::new(s(10), t0);
        assert_eq!(w.observe(&report(0, 0, 5, 0), t0), None);
        assert_eq!(w.observe(&report(1, 0, 7, 0), t0), None);
        // Counts that move are progress.
        w.observe(&report(0, 0, 9, 0), t0 + s(4));
        assert_eq!(w.poll(t0 + s(13)), Verdict::Fine);
        // Counts that stay put (and an idle CPU) are not.
        w.observe(&report(0, 0, 9, 10), t0 + s(8));
        w.observe(&report(1, 0, 7, 10), t0 + s(8));
        assert_eq!(w.poll(t0 + s(14)), Verdict::Stalled { idle: s(10) });
        assert_eq!(w.poll(t0 + s(15)), Verdict::Fine, "reported once");
        assert_eq!(w.poll(t0 + s(24)), Verdict::GiveUp { idle: s(20) });
        assert_eq!(w.poll(t0 + s(25)), Verdict::Fine, "given up once");

        // A reported stall that ends says for how long it lasted.
        let mut w = Watchdog::new(s(10), t0);
        w.observe(&report(0, 0, 1, 0), t0);
        assert_eq!(w.poll(t0 + s(11)), Verdict::Stalled { idle: s(11) });
        assert_eq!(w.observe(&report(0, 0, 2, 0), t0 + s(12)), Some(s(12)));
        assert_eq!(w.poll(t0 + s(20)), Verdict::Fine);
        // A restart, or a process busy in one long handler, is progress too.
        assert_eq!(w.observe(&report(0, 1, 0, 0), t0 + s(15)), None);
        assert_eq!(w.poll(t0 + s(24)), Verdict::Fine);
        w.observe(&report(0, 1, 0, 2_000), t0 + s(23));
        assert_eq!(w.poll(t0 + s(32)), Verdict::Fine, "2 s of CPU in 8 s: busy");
        w.observe(&report(0, 1, 0, 2_500), t0 + s(31));
        assert_eq!(
            w.poll(t0 + s(33)),
            Verdict::Stalled { idle: s(10) },
            "0.5 s of CPU in 8 s: waiting"
        );
        // So is whatever the launcher sees (a node started or died).
        assert_eq!(w.activity(t0 + s(34)), Some(s(11)));
        assert_eq!(w.poll(t0 + s(43)), Verdict::Fine);
    }

    #[test]
    fn event_lines_parse() {
        let e =
            parse_event("lazarus-event ms=1700000000123 rank=2 checkpoint id=3 bytes=10").unwrap();
        assert_eq!(finished_incarnation(&e), None);
        let f = parse_event("lazarus-event ms=1 rank=1 finished incarnation=2").unwrap();
        assert_eq!(finished_incarnation(&f), Some(2));
        assert_eq!(
            (e.rank, e.kind.as_str(), e.details.as_str()),
            (2, "checkpoint", "id=3 bytes=10")
        );
        assert!(parse_event("RESULT app=x").is_none());
        let s =
            parse_event("lazarus-event ms=1 rank=0 suspected peer=2 incarnation=1 silent_ms=3012")
                .unwrap();
        assert_eq!(suspicion(&s), Some((2, 1)));
        assert_eq!(suspicion(&f), None);
        let last = parse_event(
            "lazarus-event ms=1 rank=3 final incarnation=1 suppressed=9 regenerations_checked=9 \
             contract_violations=4 delivered=10",
        )
        .unwrap();
        assert_eq!(final_total(&last, "contract_violations"), Some(4));
        assert_eq!(final_total(&last, "regenerations_checked"), Some(9));
        assert_eq!(final_total(&f, "contract_violations"), None);
        assert_eq!(checkpoint_id(&e), Some(3));
        assert_eq!(checkpoint_id(&f), None);
    }

    #[test]
    fn a_peer_that_cannot_resend_names_the_channel_and_the_lost_checkpoint() {
        let e = parse_event(
            "lazarus-event ms=1 rank=1 recovery-impossible peer=2 incarnation=1 \
             channel=1:0->2:1 released=57 restored=40 channels=2 missing=30",
        )
        .unwrap();
        let (peer, why) = recovery_impossible(&e, |r| (r == 2).then_some(3)).unwrap();
        assert_eq!(peer, 2);
        for part in [
            "node 1 cannot resend to restarted node 2 (incarnation 1)",
            "channel 1:0->2:1 was released up to 57 but node 2 restored 40",
            "(30 messages on 2 channel(s) are gone)",
            "node 2's newest checkpoint (id=3) was damaged or lost",
        ] {
            assert!(why.contains(part), "{part:?} in {why:?}");
        }
        let (_, unknown) = recovery_impossible(&e, |_| None).unwrap();
        assert!(unknown.contains("node 2's newest checkpoint was damaged"));
        let p = parse_event("lazarus-event ms=1 rank=2 process pid=4242 host=n07").unwrap();
        assert_eq!(process_pid(&p), Some(4242));
        assert_eq!(
            describe_event(&p),
            "node 2: runs as process pid=4242 host=n07"
        );
        let other = parse_event("lazarus-event ms=1 rank=1 checkpoint id=3").unwrap();
        assert_eq!(process_pid(&other), None);
        assert_eq!(recovery_impossible(&other, |_| None), None);
        let garbled = parse_event("lazarus-event ms=1 rank=1 recovery-impossible peer=x").unwrap();
        assert_eq!(recovery_impossible(&garbled, |_| None), None);
    }
}
