//! Fault injection for recovery tests and demos, set with `LAZARUS_FAILPOINT`:
//!
//! | value | effect |
//! |---|---|
//! | `checkpoint:RANK:N` | node `RANK` SIGKILLs itself in the middle of its checkpoint `N` (after reading the set, before the store has it) |
//! | `panic:RANK:SEQ:K` | actor `RANK:SEQ` panics in its `K`-th handler call, in the first incarnation only (a transient fault) |
//! | `panic-always:RANK:SEQ:K` | the same in every incarnation (a deterministic bug) |
//!
//! Some faults cannot be hit from outside at a precise moment (a SIGKILL "during a
//! checkpoint" from a test races the checkpoint); a failpoint hits it every time. With no
//! failpoint set, the handler path pays one relaxed load.

use crate::actor_id::ActorId;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A parsed failpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

/// Parses a `LAZARUS_FAILPOINT` value.
pub fn parse(spec: &str) -> Result<Failpoint, String> {
    let parts: Vec<&str> = spec.trim().split(':').collect();
    let num = |s: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("failpoint `{spec}`: `{s}` is not a number"))
    };
    match parts.as_slice() {
        ["checkpoint", rank, n] => Ok(Failpoint::Checkpoint {
            rank: u16::try_from(num(rank)?)
                .map_err(|_| format!("failpoint `{spec}`: rank too large"))?,
            n: num(n)?,
        }),
        [kind @ ("panic" | "panic-always"), rank, seq, k] => {
            let rank = u16::try_from(num(rank)?).map_err(|_| format!("failpoint `{spec}`: rank too large"))?;
            let actor = ActorId::new(rank, num(seq)?)
                .ok_or_else(|| format!("failpoint `{spec}`: no such actor id"))?;
            Ok(Failpoint::Panic {
                actor,
                k: num(k)?,
                always: *kind == "panic-always",
            })
        }
        _ => Err(format!(
            "failpoint `{spec}`: expected checkpoint:RANK:N, panic:RANK:SEQ:K or panic-always:RANK:SEQ:K"
        )),
    }
}

static ARMED: AtomicBool = AtomicBool::new(false);
static POINT: OnceLock<Failpoint> = OnceLock::new();
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Arms `point` in node `rank`'s process (`incarnation` decides whether a transient
/// fault fires).
pub(crate) fn arm(point: Failpoint, rank: u16, incarnation: u32) {
    let fires = match point {
        Failpoint::Panic { actor, always, .. } => {
            actor.rank() == rank && (always || incarnation == 0)
        }
        Failpoint::Checkpoint { rank: r, .. } => r == rank && incarnation == 0,
    };
    if fires && POINT.set(point).is_ok() {
        ARMED.store(true, Ordering::Release);
    }
}

/// Called before each handler call of `actor`: panics if the failpoint says so.
#[inline]
pub(crate) fn before_handler(actor: ActorId) {
    if ARMED.load(Ordering::Relaxed) {
        handler_slow(actor);
    }
}

#[cold]
fn handler_slow(actor: ActorId) {
    if let Some(Failpoint::Panic { actor: a, k, .. }) = POINT.get() {
        if *a == actor && CALLS.fetch_add(1, Ordering::Relaxed) + 1 == *k {
            panic!("failpoint: injected panic in handler call {k} of actor {actor}");
        }
    }
}

/// Called in the middle of checkpoint `id`: the process dies if the failpoint says so.
pub(crate) fn during_checkpoint(id: u64) {
    if let Some(Failpoint::Checkpoint { n, .. }) = POINT.get() {
        if *n == id {
            eprintln!("failpoint: SIGKILL during checkpoint {id}");
            // SAFETY: raising a signal on our own process; SIGKILL does not return.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
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
            parse("panic-always:1:3:100"),
            Ok(Failpoint::Panic {
                actor: ActorId::new(1, 3).unwrap(),
                k: 100,
                always: true
            })
        );
        assert!(parse("panic:1").unwrap_err().contains("expected"));
        assert!(parse("checkpoint:1:x")
            .unwrap_err()
            .contains("not a number"));
    }
}
