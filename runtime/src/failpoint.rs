//! Fault injection for recovery tests and demos, set with `LAZARUS_FAILPOINT`:
//!
//! | value | effect |
//! |---|---|
//! | `checkpoint:RANK:N` | node `RANK` SIGKILLs itself in the middle of its checkpoint `N` (after reading the set, before the store has it) |
//! | `panic:RANK:SEQ:K` | actor `RANK:SEQ` panics in its `K`-th handler call, in the first incarnation only (a transient fault) |
//! | `panic-always:RANK:SEQ:K` | the same in every incarnation (a deterministic bug) |
//! | `stall:RANK:K:MILLIS` | node `RANK` takes a checkpoint after its `K`-th handler call, makes `K` more handler calls (its later checkpoints wait in their middle, uncommitted), then sleeps `MILLIS` ms before the next one, in the first incarnation only |
//! | `stall-on:RANK:MESSAGE:MILLIS` | node `RANK` sleeps `MILLIS` ms before handling its first message of type `MESSAGE` (e.g. `Finished`), in the first incarnation only: a phase of the app a test can SIGKILL the node in |
//! | `before-finished:RANK` | node `RANK` SIGKILLs itself once its `main` has finished and its mailboxes are drained, right before it announces it has finished (the others are about to finish, and must wait for its replacement), in the first incarnation only |
//! | `after-final:RANK` | node `RANK` SIGKILLs itself right after it reported its final recovery totals (the supervisor has let it leave: every node had finished), in the first incarnation only |
//! | `logger-full:INDEX:K` | logger node `INDEX`, in its `K`-th start (0 the first; the launcher restarts a logger that dies), declines every block as if it were full |
//! | `slow-start:RANK:INCARNATION:MILLIS` | node `RANK`'s process of incarnation `INCARNATION` waits `MILLIS` ms before it joins the cluster (a replacement slow to come up: a cold host, a binary on a slow file system), printing `failpoint: node RANK incarnation I joins in MILLIS ms` and `failpoint: node RANK incarnation I joins now` |
//! | `shm-write:RANK:K` | node `RANK` SIGKILLs itself halfway through writing its `K`-th frame of at least 64 KiB into a shared-memory ring (the first half committed, the peer's reader holding a frame that never completes), in the first incarnation only, printing `failpoint: node RANK SIGKILL halfway through a BYTES-byte frame to node PEER` |
//! | `window-get:RANK:K` | node `RANK` (recovery on) holds the `K`-th get another node sends it over a window until its next checkpoint has committed (the request came before the checkpoint's cut, its data leaves after it), then applies it and SIGKILLs itself before the answer leaves, in the first incarnation only, printing `failpoint: node RANK holds get INDEX of ORIGIN from node F across its next checkpoint` and `failpoint: node RANK answered the held get after checkpoint ID: SIGKILL before the answer leaves` |
//! | `window-direct:RANK:K` | node `RANK` SIGKILLs itself inside another node's window gate during its `K`-th direct put or get through shared memory (its counter raised, the gate passed, half of a put written, no record left), in the first incarnation only, printing `failpoint: node RANK SIGKILL inside node T's window gate (KIND INDEX of ORIGIN)` |
//! | `withhold:RANK:K` | node `RANK` (recovery on) drops the `K`-th logged message it receives, in the first incarnation only, and prints `failpoint: node RANK withholds logged message index=I channel=C from node F`: the channel waits for it for ever, a stall whose report must name it |
//!
//! Several failpoints separated by commas arm, in each process, the first that concerns
//! it (its rank and incarnation).
//!
//! Some faults cannot be hit from outside at a precise moment (a SIGKILL "during a
//! checkpoint" from a test races the checkpoint); a failpoint hits it every time. With no
//! failpoint set, the handler path pays one relaxed load.
//!
//! `stall` makes a moment that a kill from outside *can* hit: a run that lasts a fraction
//! of a second has no reliable "mid-run" for a test to SIGKILL a node in. While it stalls,
//! the node is alive and has not finished (the handler call that stalls has not run), its
//! newest committed checkpoint is the one taken after `K` calls, and the `K` calls since
//! are work a restart must redo. It prints `failpoint: node RANK stalls MILLIS ms, K handler
//! calls after checkpoint ID` when the stall begins and `failpoint: node RANK stall over`
//! if it ends; a test waits for the first line and for that checkpoint's commit, then
//! kills the node. The restarted node runs free.

use crate::actor_id::ActorId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A parsed failpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failpoint {
    /// Node `rank` dies during its checkpoint `n`.
    Checkpoint {
        /// The node.
        rank: u16,
        /// The checkpoint's number.
        n: u64,
    },
    /// Panic in the `k`-th handler call of `actor`.
    Panic {
        /// The actor.
        actor: ActorId,
        /// Which handler call (from 1).
        k: u64,
        /// Also in restarted incarnations.
        always: bool,
    },
    /// Node `rank` stalls in a handler call, `k` calls after the checkpoint it took after
    /// its `k`-th call.
    Stall {
        /// The node.
        rank: u16,
        /// Handler calls of the node (all its actors) before that checkpoint, and after it.
        k: u64,
        /// How long the stall lasts, in milliseconds.
        millis: u64,
    },
    /// Node `rank` dies when its `main` has finished, right before announcing it.
    BeforeFinished {
        /// The node.
        rank: u16,
    },
    /// Node `rank` dies right after reporting its final recovery totals.
    AfterFinal {
        /// The node.
        rank: u16,
    },
    /// Logger node `index` declines every block in its start number `incarnation`.
    LoggerFull {
        /// The logger.
        index: u16,
        /// Which start of it (0 the first).
        incarnation: u32,
    },
    /// Node `rank`'s process of incarnation `incarnation` waits before joining.
    SlowStart {
        /// The node.
        rank: u16,
        /// Which of its processes.
        incarnation: u32,
        /// How long it waits, in milliseconds.
        millis: u64,
    },
    /// Node `rank` drops the `k`-th logged message it receives.
    Withhold {
        /// The node.
        rank: u16,
        /// Which logged message (from 1).
        k: u64,
    },
    /// Node `rank` dies halfway through writing its `k`-th large frame into a shared ring.
    ShmWrite {
        /// The node.
        rank: u16,
        /// Which frame of at least [`LARGE_FRAME`] bytes (from 1).
        k: u64,
    },
    /// Node `rank` holds the `k`-th window get it receives across its next checkpoint,
    /// then dies before the answer leaves.
    WindowGet {
        /// The target node.
        rank: u16,
        /// Which get from another node (from 1).
        k: u64,
    },
    /// Node `rank` dies inside a target's window gate during its `k`-th direct operation.
    WindowDirect {
        /// The origin node.
        rank: u16,
        /// Which direct operation (from 1).
        k: u64,
    },
    /// Node `rank` stalls before handling its first message of type `message`.
    StallOn {
        /// The node.
        rank: u16,
        /// The message type's name, as the actor's `#[messages]` block names it.
        message: String,
        /// How long the stall lasts, in milliseconds.
        millis: u64,
    },
}

/// Parses a `LAZARUS_FAILPOINT` value: one failpoint, or several separated by commas
/// (each process arms the first that concerns it: `window-direct:1:50,slow-start:1:1:2000`
/// kills node 1 and makes its next incarnation slow to come back).
pub fn parse_all(spec: &str) -> Result<Vec<Failpoint>, String> {
    spec.split(',').map(parse).collect()
}

/// Parses one failpoint.
pub fn parse(spec: &str) -> Result<Failpoint, String> {
    let parts: Vec<&str> = spec.trim().split(':').collect();
    let num = |s: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("failpoint `{spec}`: `{s}` is not a number"))
    };
    let rank = |s: &str| -> Result<u16, String> {
        u16::try_from(num(s)?).map_err(|_| format!("failpoint `{spec}`: rank too large"))
    };
    match parts.as_slice() {
        ["checkpoint", r, n] => Ok(Failpoint::Checkpoint {
            rank: rank(r)?,
            n: num(n)?,
        }),
        ["after-final", r] => Ok(Failpoint::AfterFinal { rank: rank(r)? }),
        ["logger-full", i, k] => Ok(Failpoint::LoggerFull {
            index: rank(i)?,
            incarnation: u32::try_from(num(k)?)
                .map_err(|_| format!("failpoint `{spec}`: incarnation too large"))?,
        }),
        ["before-finished", r] => Ok(Failpoint::BeforeFinished { rank: rank(r)? }),
        ["slow-start", r, k, millis] => Ok(Failpoint::SlowStart {
            rank: rank(r)?,
            incarnation: u32::try_from(num(k)?)
                .map_err(|_| format!("failpoint `{spec}`: incarnation too large"))?,
            millis: num(millis)?,
        }),
        ["shm-write", r, k] => Ok(Failpoint::ShmWrite {
            rank: rank(r)?,
            k: num(k)?,
        }),
        ["window-get", r, k] => Ok(Failpoint::WindowGet {
            rank: rank(r)?,
            k: num(k)?,
        }),
        ["window-direct", r, k] => Ok(Failpoint::WindowDirect {
            rank: rank(r)?,
            k: num(k)?,
        }),
        ["withhold", r, k] => Ok(Failpoint::Withhold {
            rank: rank(r)?,
            k: num(k)?,
        }),
        ["stall", r, k, millis] => Ok(Failpoint::Stall {
            rank: rank(r)?,
            k: num(k)?,
            millis: num(millis)?,
        }),
        ["stall-on", r, message, millis] if !message.is_empty() => Ok(Failpoint::StallOn {
            rank: rank(r)?,
            message: message.to_string(),
            millis: num(millis)?,
        }),
        [kind @ ("panic" | "panic-always"), r, seq, k] => {
            let rank = rank(r)?;
            let actor = ActorId::new(rank, num(seq)?)
                .ok_or_else(|| format!("failpoint `{spec}`: no such actor id"))?;
            Ok(Failpoint::Panic {
                actor,
                k: num(k)?,
                always: *kind == "panic-always",
            })
        }
        _ => Err(format!(
            "failpoint `{spec}`: expected checkpoint:RANK:N, panic:RANK:SEQ:K, \
             panic-always:RANK:SEQ:K, stall:RANK:K:MILLIS, stall-on:RANK:MESSAGE:MILLIS, \
             before-finished:RANK, after-final:RANK, slow-start:RANK:INCARNATION:MILLIS, \
             withhold:RANK:K, shm-write:RANK:K, window-get:RANK:K, window-direct:RANK:K or \
             logger-full:INDEX:K"
        )),
    }
}

static ARMED: AtomicBool = AtomicBool::new(false);
static POINT: OnceLock<Failpoint> = OnceLock::new();
static CALLS: AtomicU64 = AtomicU64::new(0);
/// For `withhold`: logged messages received so far.
static LOGGED: AtomicU64 = AtomicU64::new(0);
/// For `stall`: the checkpoint taken after the `k`-th handler call (0 while there is none),
/// the handler calls counted when it was taken, and how far the stall got.
static STALL_AFTER: AtomicU64 = AtomicU64::new(0);
static CALLS_AT_CHECKPOINT: AtomicU64 = AtomicU64::new(0);
static STALLED: AtomicBool = AtomicBool::new(false);
static STALL_OVER: AtomicBool = AtomicBool::new(false);

/// Arms `point` in node `rank`'s process (`incarnation` decides whether a transient
/// fault fires).
pub(crate) fn arm(point: Failpoint, rank: u16, incarnation: u32) {
    let fires = match &point {
        Failpoint::Panic { actor, always, .. } => {
            actor.rank() == rank && (*always || incarnation == 0)
        }
        Failpoint::Checkpoint { rank: r, .. }
        | Failpoint::AfterFinal { rank: r }
        | Failpoint::BeforeFinished { rank: r }
        | Failpoint::Stall { rank: r, .. }
        | Failpoint::Withhold { rank: r, .. }
        | Failpoint::ShmWrite { rank: r, .. }
        | Failpoint::WindowGet { rank: r, .. }
        | Failpoint::WindowDirect { rank: r, .. }
        | Failpoint::StallOn { rank: r, .. } => *r == rank && incarnation == 0,
        Failpoint::SlowStart {
            rank: r,
            incarnation: k,
            ..
        } => *r == rank && *k == incarnation,
        // A logger's, not a node's.
        Failpoint::LoggerFull { .. } => false,
    };
    if fires && POINT.set(point).is_ok() {
        ARMED.store(true, Ordering::Release);
    }
}

/// Whether this process is logger node `index` in the start that `logger-full` names
/// (`LAZARUS_LOGGER_INCARNATION`, set by the launcher, says which start it is).
pub fn logger_full(index: u16) -> bool {
    let Ok(spec) = std::env::var("LAZARUS_FAILPOINT") else {
        return false;
    };
    let start = std::env::var("LAZARUS_LOGGER_INCARNATION")
        .ok()
        .and_then(|k| k.parse::<u32>().ok())
        .unwrap_or(0);
    parse_all(&spec).is_ok_and(|points| {
        points.iter().any(|p| {
            matches!(p, Failpoint::LoggerFull { index: i, incarnation }
                if *i == index && *incarnation == start)
        })
    })
}

/// Called before each handler call of `actor` for a message of type `message`: panics or
/// stalls if the failpoint says so.
#[inline]
pub(crate) fn before_handler(actor: ActorId, message: &str) {
    if ARMED.load(Ordering::Relaxed) {
        handler_slow(actor, message);
    }
}

#[cold]
fn handler_slow(actor: ActorId, message: &str) {
    match POINT.get() {
        Some(Failpoint::StallOn {
            rank,
            message: m,
            millis,
        }) if m == message && !STALLED.swap(true, Ordering::AcqRel) => {
            eprintln!("failpoint: node {rank} stalls {millis} ms before its first {message}");
            std::thread::sleep(std::time::Duration::from_millis(*millis));
            eprintln!("failpoint: node {rank} stall over");
        }
        Some(Failpoint::Panic { actor: a, k, .. })
            if *a == actor && CALLS.fetch_add(1, Ordering::Relaxed) + 1 == *k =>
        {
            panic!("failpoint: injected panic in handler call {k} of actor {actor}");
        }
        Some(Failpoint::Stall { rank, k, millis }) => {
            let before = CALLS.fetch_add(1, Ordering::Relaxed);
            let after = STALL_AFTER.load(Ordering::Acquire);
            if after != 0
                && before >= CALLS_AT_CHECKPOINT.load(Ordering::Relaxed) + k
                && !STALLED.swap(true, Ordering::AcqRel)
            {
                eprintln!(
                    "failpoint: node {rank} stalls {millis} ms, {k} handler calls after \
                     checkpoint {after}"
                );
                std::thread::sleep(std::time::Duration::from_millis(*millis));
                STALL_OVER.store(true, Ordering::Release);
                eprintln!("failpoint: node {rank} stall over");
            }
        }
        _ => {}
    }
}

/// Called right before the node joins its cluster (starts its transport): waits if the
/// failpoint says so.
pub(crate) fn before_joining() {
    if let Some(Failpoint::SlowStart {
        rank,
        incarnation,
        millis,
    }) = POINT.get()
    {
        eprintln!("failpoint: node {rank} incarnation {incarnation} joins in {millis} ms");
        std::thread::sleep(std::time::Duration::from_millis(*millis));
        eprintln!("failpoint: node {rank} incarnation {incarnation} joins now");
    }
}

/// Called for each logged message that arrives from node `from` (`meta` its metadata),
/// before the recovery layer sees it: true if the failpoint withholds it (the caller
/// drops it).
#[inline]
pub(crate) fn withhold_logged(from: u16, meta: &crate::recovery::MessageMeta) -> bool {
    ARMED.load(Ordering::Relaxed) && withhold_slow(from, meta)
}

#[cold]
fn withhold_slow(from: u16, meta: &crate::recovery::MessageMeta) -> bool {
    let Some(Failpoint::Withhold { rank, k }) = POINT.get() else {
        return false;
    };
    if LOGGED.fetch_add(1, Ordering::Relaxed) + 1 != *k {
        return false;
    }
    eprintln!(
        "failpoint: node {rank} withholds logged message index={} channel={:?} from node {from}",
        meta.send_index, meta.channel
    );
    true
}

/// Frames from this size on count for `shm-write`.
static WINDOW_GETS: AtomicU64 = AtomicU64::new(0);

/// A window get of `origin`'s (index `index`) came from node `from`: true if it is the
/// one to hold across the node's next checkpoint (`window-get`).
#[inline]
pub(crate) fn hold_window_get(from: u16, origin: ActorId, index: u64) -> bool {
    ARMED.load(Ordering::Relaxed) && hold_window_get_slow(from, origin, index)
}

#[cold]
fn hold_window_get_slow(from: u16, origin: ActorId, index: u64) -> bool {
    let Some(Failpoint::WindowGet { rank, k }) = POINT.get() else {
        return false;
    };
    if WINDOW_GETS.fetch_add(1, Ordering::Relaxed) + 1 != *k {
        return false;
    }
    eprintln!(
        "failpoint: node {rank} holds get {index} of {origin} from node {from} across its \
         next checkpoint"
    );
    true
}

/// The held get was applied after checkpoint `id` committed; its answer has not left.
pub(crate) fn window_get_answered(id: u64) {
    if let Some(Failpoint::WindowGet { rank, .. }) = POINT.get() {
        die(&format!(
            "node {rank} answered the held get after checkpoint {id}: SIGKILL before the \
             answer leaves"
        ));
    }
}

/// For `window-direct`: direct operations so far.
static WINDOW_DIRECTS: AtomicU64 = AtomicU64::new(0);

/// Called inside target `target`'s gate, a put half written: the process dies here if
/// this is the direct operation `window-direct` names.
#[inline]
pub(crate) fn inside_window_gate(target: u16, what: impl FnOnce() -> String) {
    if ARMED.load(Ordering::Relaxed) {
        inside_window_gate_slow(target, what());
    }
}

#[cold]
fn inside_window_gate_slow(target: u16, what: String) {
    let Some(Failpoint::WindowDirect { rank, k }) = POINT.get() else {
        return;
    };
    if WINDOW_DIRECTS.fetch_add(1, Ordering::Relaxed) + 1 == *k {
        die(&format!(
            "node {rank} SIGKILL inside node {target}'s window gate ({what})"
        ));
    }
}

pub const LARGE_FRAME: usize = 64 << 10;

/// For `shm-write`: large frames written so far.
static LARGE_WRITES: AtomicU64 = AtomicU64::new(0);

/// Called before a frame of `len` bytes goes into a shared-memory ring: true if the
/// failpoint says this process dies halfway through it (the caller writes half, commits
/// it and calls [`die_halfway`]).
#[inline]
pub(crate) fn torn_shm_write(len: usize) -> bool {
    ARMED.load(Ordering::Relaxed)
        && len >= LARGE_FRAME
        && matches!(POINT.get(), Some(Failpoint::ShmWrite { k, .. })
            if LARGE_WRITES.fetch_add(1, Ordering::Relaxed) + 1 == *k)
}

/// Dies halfway through a `len`-byte frame to node `peer` (see [`torn_shm_write`]).
pub(crate) fn die_halfway(len: usize, peer: u16) {
    let rank = match POINT.get() {
        Some(Failpoint::ShmWrite { rank, .. }) => *rank,
        _ => return,
    };
    die(&format!(
        "node {rank} SIGKILL halfway through a {len}-byte frame to node {peer}"
    ));
}

/// Called when the node's `main` has finished, right before the node announces it: the
/// process dies if the failpoint says so.
pub(crate) fn before_finished() {
    if let Some(Failpoint::BeforeFinished { rank }) = POINT.get() {
        die(&format!(
            "node {rank} SIGKILL after its main finished, before announcing it"
        ));
    }
}

/// Called right after the node reported its final recovery totals: the process dies if
/// the failpoint says so.
pub(crate) fn after_final() {
    if let Some(Failpoint::AfterFinal { rank }) = POINT.get() {
        die(&format!("node {rank} SIGKILL after its final totals"));
    }
}

fn die(why: &str) {
    eprintln!("failpoint: {why}");
    // SAFETY: raising a signal on our own process; SIGKILL does not return.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Called in the middle of checkpoint `id` (its set has been read, the store does not
/// have it yet): the process dies, a stall is scheduled or the checkpoint waits for a
/// stall, if the failpoint says so.
pub(crate) fn during_checkpoint(id: u64) {
    match POINT.get() {
        Some(Failpoint::Checkpoint { n, .. }) if *n == id => {
            die(&format!("SIGKILL during checkpoint {id}"));
        }
        Some(Failpoint::Stall { k, .. }) => {
            // A node takes its checkpoints one at a time: no other caller races these.
            let calls = CALLS.load(Ordering::Relaxed);
            if STALL_AFTER.load(Ordering::Acquire) == 0 {
                if calls >= *k {
                    CALLS_AT_CHECKPOINT.store(calls, Ordering::Relaxed);
                    STALL_AFTER.store(id, Ordering::Release);
                }
                return;
            }
            // Later checkpoints wait until the stall is over, so that the one taken after
            // k calls stays the newest committed one (if the node runs out of work before
            // it stalls, they wait until the process ends: nothing joins this thread).
            while !STALL_OVER.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failpoints_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse("checkpoint:1:2"),
            Ok(Failpoint::Checkpoint { rank: 1, n: 2 })
        );
        assert_eq!(
            parse("after-final:3"),
            Ok(Failpoint::AfterFinal { rank: 3 })
        );
        assert_eq!(
            parse("before-finished:2"),
            Ok(Failpoint::BeforeFinished { rank: 2 })
        );
        assert_eq!(
            parse("panic-always:1:3:100"),
            Ok(Failpoint::Panic {
                actor: ActorId::new(1, 3).unwrap(),
                k: 100,
                always: true
            })
        );
        assert_eq!(
            parse("stall:2:40:5000"),
            Ok(Failpoint::Stall {
                rank: 2,
                k: 40,
                millis: 5000
            })
        );
        assert_eq!(
            parse("stall-on:0:Finished:60000"),
            Ok(Failpoint::StallOn {
                rank: 0,
                message: "Finished".into(),
                millis: 60000
            })
        );
        assert_eq!(
            parse("logger-full:0:1"),
            Ok(Failpoint::LoggerFull {
                index: 0,
                incarnation: 1
            })
        );
        assert_eq!(
            parse("slow-start:2:1:4000"),
            Ok(Failpoint::SlowStart {
                rank: 2,
                incarnation: 1,
                millis: 4000
            })
        );
        assert_eq!(
            parse_all("window-direct:1:50,slow-start:1:1:2000"),
            Ok(vec![
                Failpoint::WindowDirect { rank: 1, k: 50 },
                Failpoint::SlowStart {
                    rank: 1,
                    incarnation: 1,
                    millis: 2000
                }
            ])
        );
        assert!(parse_all("window-direct:1:50,bogus").is_err());
        assert_eq!(
            parse("withhold:1:200"),
            Ok(Failpoint::Withhold { rank: 1, k: 200 })
        );
        assert!(parse("stall-on:0::10").is_err(), "a message type is needed");
        assert!(parse("panic:1").unwrap_err().contains("expected"));
        assert!(parse("stall:1:2")
            .unwrap_err()
            .contains("stall:RANK:K:MILLIS"));
        assert!(parse("checkpoint:1:x")
            .unwrap_err()
            .contains("not a number"));
    }
}
