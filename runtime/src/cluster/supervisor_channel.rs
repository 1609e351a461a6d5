//! What a restarting supervisor (the `lazarus` launcher with recovery on,
//! `LAZARUS_SUPERVISOR=stdin`) tells a node, one line at a time on its standard input:
//!
//! | line | meaning |
//! |---|---|
//! | `leave` | every node's `main` has finished: the second phase of `Cluster::shutdown` |
//! | `moved RANK HOST:PORT` | `RANK`'s next incarnation listens there (a spare slot): dial it there |
//! | `gone RANK` | `RANK` died after `leave` and is not restarted: leave without waiting for it |
//! | `died RANK INCARNATION` | that process of `RANK` died (before `leave`): drop its connection now and refuse it if it comes up later, whether or not this node saw it ([`Transport::peer_died`]) |
//! | `report` | print one `lazarus-report` line: this node's progress and what it waits for (the launcher's stall watchdog asks) |
//! | `sample` | print one `lazarus-sample` line: messages handled, CPU time and, with recovery on, the size of the sender-based log (the launcher asks a few times a second for the dashboard and `--timeline`) |
//!
//! A line that is none of these is refused with a warning and counted
//! (`lazarus_supervisor_bad_lines_total`); the node goes on. If standard input ends, the
//! supervisor is gone: nobody will restart a peer any more, so the node may leave.
//!
//! With recovery off the launcher talks to its nodes on the same channel, but only
//! `report` means anything there (such a node leaves when its `main` returns).
//!
//! The other direction, what a node tells its supervisor: `lazarus-event` lines on its
//! standard error (the recovery timeline, `event`), its `lazarus-report` answer
//! ([`NodeReport`]), its `lazarus-sample` answer ([`NodeSample`]), and its exit status ([`ACTOR_FAILED_EXIT`] when an actor failed);
//! and the limits both sides apply to restarts ([`MAX_RESTARTS_PER_RANK`],
//! [`MAX_SAME_FAILURE`]).

use crate::node::NodeHandle;
use crate::transport::Transport;
use metrics::counter;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};

/// Restarts allowed per rank before the supervisor gives up on the run.
pub const MAX_RESTARTS_PER_RANK: u32 = 5;

/// Times the same actor may fail the same way (same actor, message type and panic)
/// before the supervisor calls it a deterministic bug and stops the run.
pub const MAX_SAME_FAILURE: usize = 3;

/// A node's answer to the launcher's `report` request (`cluster::supervisor_channel`):
/// how far it got and what it waits for, one `lazarus-report` line on its standard error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    /// The node.
    pub rank: u16,
    /// Its process's incarnation (0 without recovery).
    pub incarnation: u32,
    /// Messages whose handler ran in this process so far.
    pub handled: u64,
    /// CPU time the process has used so far (user and system), in milliseconds.
    pub cpu_ms: u64,
    /// What it waits for: with recovery on, the stall report (what its inbox holds back
    /// and why, held frames, mailboxes); without, its mailboxes.
    pub state: String,
}

impl NodeReport {
    /// The line the node prints.
    pub fn line(&self) -> String {
        format!(
            "lazarus-report rank={} incarnation={} handled={} cpu_ms={} state: {}",
            self.rank,
            self.incarnation,
            self.handled,
            self.cpu_ms,
            self.state.replace(['\n', '\r'], " ")
        )
    }
}

/// Parses a node's report line; `None` for any other line.
pub fn parse_report(line: &str) -> Option<NodeReport> {
    let rest = line.trim().strip_prefix("lazarus-report ")?;
    let (fields, state) = match rest.split_once(" state:") {
        Some((fields, state)) => (fields, state.trim()),
        None => (rest, ""),
    };
    let field = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    Some(NodeReport {
        rank: field("rank")?.parse().ok()?,
        incarnation: field("incarnation")?.parse().ok()?,
        handled: field("handled")?.parse().ok()?,
        cpu_ms: field("cpu_ms")?.parse().ok()?,
        state: state.to_string(),
    })
}

/// A node's answer to the launcher's `sample` request: a few numbers, cheap to take,
/// asked a few times a second to draw message rates and log sizes over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSample {
    /// The node.
    pub rank: u16,
    /// Its process's incarnation (0 without recovery).
    pub incarnation: u32,
    /// Messages whose handler ran in this process so far.
    pub handled: u64,
    /// CPU time the process has used so far (user and system), in milliseconds.
    pub cpu_ms: u64,
    /// The sender-based log's payload bytes and entries; `None` without recovery, or
    /// when the recovery layer was busy (a sample never waits for it).
    pub log: Option<(u64, u64)>,
}

impl NodeSample {
    /// The line the node prints.
    pub fn line(&self) -> String {
        let mut line = format!(
            "lazarus-sample rank={} incarnation={} handled={} cpu_ms={}",
            self.rank, self.incarnation, self.handled, self.cpu_ms
        );
        if let Some((bytes, entries)) = self.log {
            line.push_str(&format!(" log_bytes={bytes} log_entries={entries}"));
        }
        line
    }
}

/// Parses a node's sample line; `None` for any other line.
pub fn parse_sample(line: &str) -> Option<NodeSample> {
    let rest = line.trim().strip_prefix("lazarus-sample ")?;
    let field = |key: &str| {
        rest.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    let log = match (field("log_bytes"), field("log_entries")) {
        (Some(b), Some(e)) => Some((b.parse().ok()?, e.parse().ok()?)),
        _ => None,
    };
    Some(NodeSample {
        rank: field("rank")?.parse().ok()?,
        incarnation: field("incarnation")?.parse().ok()?,
        handled: field("handled")?.parse().ok()?,
        cpu_ms: field("cpu_ms")?.parse().ok()?,
        log,
    })
}

/// Exit status of a node process that ended because one of its actors failed.
pub const ACTOR_FAILED_EXIT: i32 = 70;

/// Prints one timeline event of this node to stderr, as `lazarus-event` lines the
/// launcher turns into the run's timeline.
pub(crate) fn event(rank: u16, what: &str) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    eprintln!("lazarus-event ms={ms} rank={rank} {what}");
}

/// Lines from the supervisor that were not understood, and read errors.
pub const SUPERVISOR_BAD_LINES: &str = "lazarus_supervisor_bad_lines_total";

/// One line from the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// Every node has finished: leave.
    Leave,
    /// `rank`'s next incarnation listens at `addr`.
    Moved {
        /// The rank that moved.
        rank: u16,
        /// Where it listens now.
        addr: SocketAddr,
    },
    /// `rank` died after every node had finished and will not be restarted: do not wait
    /// for it to acknowledge a goodbye.
    Gone {
        /// The rank that is gone.
        rank: u16,
    },
    /// `rank`'s process of incarnation `incarnation` died (and every earlier one).
    Died {
        /// The rank whose process died.
        rank: u16,
        /// Which of its processes.
        incarnation: u32,
    },
    /// Print this node's progress report.
    Report,
    /// Print this node's sample.
    Sample,
}

/// What the channel does to the node's transport: `moved` and `gone` lines land here.
pub(crate) trait Peers {
    /// `rank` listens at `addr` now; false if `rank` is not a peer.
    fn moved(&self, rank: u16, addr: SocketAddr) -> bool;
    /// `rank` is gone for good; false if `rank` is not a peer.
    fn gone(&self, rank: u16) -> bool;
    /// `rank`'s incarnation `incarnation` died; false if `rank` is not a peer.
    fn died(&self, rank: u16, incarnation: u32) -> bool;
}

impl Peers for Transport {
    fn moved(&self, rank: u16, addr: SocketAddr) -> bool {
        self.peer_moved(rank, addr)
    }
    fn gone(&self, rank: u16) -> bool {
        self.peer_gone(rank)
    }
    fn died(&self, rank: u16, incarnation: u32) -> bool {
        self.peer_died(rank, incarnation)
    }
}

/// Parses one line from the supervisor.
pub fn parse(line: &str) -> Result<Word, String> {
    let line = line.trim();
    let words: Vec<&str> = line.split_whitespace().collect();
    let rank_of = |rank: &str| {
        rank.parse()
            .map_err(|_| format!("`{line}`: `{rank}` is not a rank"))
    };
    match words.as_slice() {
        ["leave"] => Ok(Word::Leave),
        ["report"] => Ok(Word::Report),
        ["sample"] => Ok(Word::Sample),
        ["gone", rank] => Ok(Word::Gone {
            rank: rank_of(rank)?,
        }),
        ["died", rank, incarnation] => Ok(Word::Died {
            rank: rank_of(rank)?,
            incarnation: incarnation
                .parse()
                .map_err(|_| format!("`{line}`: `{incarnation}` is not an incarnation"))?,
        }),
        ["moved", rank, addr] => Ok(Word::Moved {
            rank: rank_of(rank)?,
            addr: addr
                .parse()
                .map_err(|_| format!("`{line}`: `{addr}` is not an address (HOST:PORT)"))?,
        }),
        _ => Err(format!(
            "`{line}`: expected `leave`, `moved RANK HOST:PORT`, `gone RANK`, \
             `died RANK INCARNATION`, `report` or `sample`"
        )),
    }
}

/// How long a report waits for the recovery layer's lock before it says the lock is held.
const REPORT_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// This node's answer to `report`: its progress (handler calls, CPU time) and what it
/// waits for (with recovery on, the recovery layer's stall report;
/// without, its mailboxes).
fn report(node: &NodeHandle, rank: u16) -> NodeReport {
    let (incarnation, state) = match node.recovery() {
        Some(layer) => (
            layer.incarnation_number(),
            layer.stall_report(node, REPORT_PATIENCE),
        ),
        None => (0, node.mailbox_summary(16)),
    };
    NodeReport {
        rank,
        incarnation,
        handled: node.handled_messages(),
        cpu_ms: process_cpu_ms(),
        state,
    }
}

/// This node's answer to `sample`: never waits for the recovery layer's lock.
fn sample(node: &NodeHandle, rank: u16) -> NodeSample {
    let (incarnation, log) = match node.recovery() {
        Some(layer) => (layer.incarnation_number(), layer.log_size()),
        None => (0, None),
    };
    NodeSample {
        rank,
        incarnation,
        handled: node.handled_messages(),
        cpu_ms: process_cpu_ms(),
        log,
    }
}

/// CPU time this process has used (user and system), in milliseconds; 0 if unknown.
fn process_cpu_ms() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0;
        }
        usage
    };
    let ms = |t: libc::timeval| {
        (t.tv_sec.max(0) as u64).saturating_mul(1000) + (t.tv_usec.max(0) as u64) / 1000
    };
    ms(usage.ru_utime).saturating_add(ms(usage.ru_stime))
}

/// A line of the supervisor that asks for an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    /// `report`.
    Report,
    /// `sample`.
    Sample,
}

/// The node's end of the channel: a thread reads standard input and acts on each line.
pub(crate) struct SupervisorChannel {
    leave: Mutex<bool>,
    said: Condvar,
}

impl SupervisorChannel {
    /// Starts reading standard input; `moved`, `gone` and `died` lines go to
    /// `transport`, `report` is answered from `node`.
    pub(crate) fn start(transport: Arc<Transport>, node: NodeHandle) -> std::io::Result<Arc<Self>> {
        let channel = Arc::new(SupervisorChannel {
            leave: Mutex::new(false),
            said: Condvar::new(),
        });
        let reader = Arc::clone(&channel);
        let rank = transport.rank();
        std::thread::Builder::new()
            .name("lazarus-supervisor".into())
            .spawn(move || {
                reader.read(std::io::stdin().lock(), &*transport, &mut |ask| {
                    let line = match ask {
                        Ask::Report => report(&node, rank).line(),
                        Ask::Sample => sample(&node, rank).line(),
                    };
                    eprintln!("{line}");
                })
            })?;
        Ok(channel)
    }

    /// Acts on every line of `input` until its end (after `leave` too: a peer may die
    /// while this node leaves); `moved`, `gone` and `died` lines go to `peers`, `report`
    /// and `sample` to `answer`.
    fn read(&self, mut input: impl BufRead, peers: &dyn Peers, answer: &mut dyn FnMut(Ask)) {
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match input.read_until(b'\n', &mut raw) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    // The channel itself broke: the supervisor can no longer say anything.
                    counter!(SUPERVISOR_BAD_LINES).increment(1);
                    tracing::warn!(error = %e, "cannot read the supervisor's channel; leaving when done");
                    break;
                }
            }
            let word = std::str::from_utf8(&raw)
                .map_err(|_| "a line that is not UTF-8".to_string())
                .and_then(parse);
            match word {
                Ok(Word::Leave) => self.say_leave(),
                Ok(Word::Report) => answer(Ask::Report),
                Ok(Word::Sample) => answer(Ask::Sample),
                Ok(Word::Died { rank, incarnation }) => {
                    if !peers.died(rank, incarnation) {
                        counter!(SUPERVISOR_BAD_LINES).increment(1);
                        tracing::warn!(rank, "the supervisor said a rank that is not a peer died");
                    }
                }
                Ok(Word::Gone { rank }) => {
                    if peers.gone(rank) {
                        tracing::info!(rank, "node {rank} is gone: not waiting for it to leave");
                    } else {
                        counter!(SUPERVISOR_BAD_LINES).increment(1);
                        tracing::warn!(
                            rank,
                            "the supervisor said a rank that is not a peer is gone"
                        );
                    }
                }
                Ok(Word::Moved { rank, addr }) => {
                    if peers.moved(rank, addr) {
                        tracing::info!(rank, %addr, "node {rank} restarts at {addr}");
                    } else {
                        counter!(SUPERVISOR_BAD_LINES).increment(1);
                        tracing::warn!(rank, "the supervisor moved a rank that is not a peer");
                    }
                }
                Err(e) => {
                    counter!(SUPERVISOR_BAD_LINES).increment(1);
                    tracing::warn!("ignored a line from the supervisor: {e}");
                }
            }
        }
        // End of input: the supervisor is gone (it would have taken us with it, had it
        // died), so no peer will be restarted: nothing to wait for.
        self.say_leave();
    }

    fn say_leave(&self) {
        *self.leave.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.said.notify_all();
    }

    /// Blocks until the supervisor says `leave` (or is gone).
    pub(crate) fn wait_for_leave(&self) {
        let mut leave = self.leave.lock().unwrap_or_else(|e| e.into_inner());
        while !*leave {
            leave = self.said.wait(leave).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Peers of a 4-node cluster that record what the channel did to them.
    #[derive(Default)]
    struct Recorded {
        moved: Mutex<Vec<(u16, SocketAddr)>>,
        gone: Mutex<Vec<u16>>,
        died: Mutex<Vec<(u16, u32)>>,
    }

    impl Peers for Recorded {
        fn moved(&self, rank: u16, addr: SocketAddr) -> bool {
            self.moved.lock().unwrap().push((rank, addr));
            rank < 4
        }
        fn gone(&self, rank: u16) -> bool {
            self.gone.lock().unwrap().push(rank);
            rank < 4
        }
        fn died(&self, rank: u16, incarnation: u32) -> bool {
            self.died.lock().unwrap().push((rank, incarnation));
            rank < 4
        }
    }

    #[test]
    fn the_supervisors_words_parse_and_bad_lines_say_why() {
        assert_eq!(parse("leave"), Ok(Word::Leave));
        assert_eq!(
            parse("moved 2 127.0.0.1:4005"),
            Ok(Word::Moved {
                rank: 2,
                addr: "127.0.0.1:4005".parse().unwrap()
            })
        );
        assert!(parse("moved x 127.0.0.1:1")
            .unwrap_err()
            .contains("not a rank"));
        assert!(parse("moved 2 nowhere")
            .unwrap_err()
            .contains("not an address"));
        assert_eq!(parse("gone 3"), Ok(Word::Gone { rank: 3 }));
        assert!(parse("gone three").unwrap_err().contains("not a rank"));
        assert_eq!(
            parse("died 2 1"),
            Ok(Word::Died {
                rank: 2,
                incarnation: 1
            })
        );
        assert!(parse("died 2").unwrap_err().contains("expected"));
        assert!(parse("died 2 -1")
            .unwrap_err()
            .contains("not an incarnation"));
        assert_eq!(parse(" report \n"), Ok(Word::Report));
        assert_eq!(parse("sample"), Ok(Word::Sample));
        assert!(parse("stay").unwrap_err().contains("expected"));
    }

    #[test]
    fn a_sample_line_reads_back_with_or_without_a_log() {
        let with = NodeSample {
            rank: 3,
            incarnation: 2,
            handled: 41_000,
            cpu_ms: 5_120,
            log: Some((1 << 20, 312)),
        };
        assert_eq!(parse_sample(&with.line()), Some(with));
        let without = NodeSample { log: None, ..with };
        assert_eq!(parse_sample(&without.line()), Some(without));
        assert_eq!(parse_sample("lazarus-sample rank=x incarnation=0"), None);
        assert_eq!(parse_sample(&with.line().replace("sample", "report")), None);
    }

    #[test]
    fn bad_lines_are_counted_and_skipped_and_the_node_still_hears_leave() {
        use metrics_util::debugging::{DebugValue, DebuggingRecorder};
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let channel = SupervisorChannel {
            leave: Mutex::new(false),
            said: Condvar::new(),
        };
        let peers = Recorded::default();
        let input: &[u8] = b"hello\n\xff\xfe\nmoved 9 127.0.0.1:7009\nmoved 1 127.0.0.1:7001\n\
            died 1 0\nreport\ndied 8 3\nsample\nreport\nleave\ngone 2\ngone 7\n";
        let mut asked = Vec::new();
        metrics::with_local_recorder(&recorder, || {
            channel.read(std::io::Cursor::new(input), &peers, &mut |ask| {
                asked.push(ask)
            })
        });
        assert_eq!(
            asked,
            vec![Ask::Report, Ask::Sample, Ask::Report],
            "each `report` and `sample` answered, in order"
        );
        assert_eq!(
            *peers.died.lock().unwrap(),
            vec![(1, 0), (8, 3)],
            "deaths handed to the transport"
        );
        channel.wait_for_leave();
        assert_eq!(
            *peers.moved.lock().unwrap(),
            vec![
                (9, "127.0.0.1:7009".parse().unwrap()),
                (1, "127.0.0.1:7001".parse().unwrap())
            ],
            "bad lines are skipped, moves applied in order"
        );
        assert_eq!(
            *peers.gone.lock().unwrap(),
            vec![2, 7],
            "the channel is still read after `leave`: a peer may die while the node leaves"
        );
        let bad: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, ..)| k.key().name() == SUPERVISOR_BAD_LINES)
            .map(|(.., v)| match v {
                DebugValue::Counter(c) => c,
                _ => 0,
            })
            .sum();
        assert_eq!(
            bad, 5,
            "`hello`, three ranks that are not peers, and bytes that are not text"
        );
    }

    #[test]
    fn the_end_of_the_supervisors_channel_lets_the_node_leave() {
        let channel = SupervisorChannel {
            leave: Mutex::new(false),
            said: Condvar::new(),
        };
        channel.read(
            std::io::Cursor::new("moved 1 127.0.0.1:7001\n"),
            &Recorded::default(),
            &mut |_| {},
        );
        channel.wait_for_leave();
    }
}
