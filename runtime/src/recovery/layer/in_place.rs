//! Rollback in place after a handler panic: the node (its correlated set) rolls back to
//! its last checkpoint by itself, without waiting for a supervisor to notice a dead
//! process and start another.
//!
//! The process re-executes its own program (`execve`: same PID, same standard streams,
//! same slot) as the next incarnation. The new image takes the path of any restarted
//! node: it loads the newest checkpoint, sends its ROLLBACKs and its peers replay. The
//! address space is new on purpose: a handler that panicked may have left locks poisoned
//! or shared state half-written, and nothing of it can leak into the restored set. Peers
//! never roll back. This works the same under `lazarus run` and under Slurm, where no
//! supervisor restarts anything.
//!
//! A failure that repeats is a deterministic bug, not a transient fault: the images pass
//! the signatures of their failures on (`LAZARUS_FAILURES`), and the third identical one
//! ends the process with a clear error instead of looping.

use crate::cluster::supervisor_channel::{MAX_RESTARTS_PER_RANK, MAX_SAME_FAILURE};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;

/// The variable carrying the failures of this rank's earlier in-place rollbacks:
/// comma-separated hashes of their signatures, oldest first.
pub const FAILURES_VAR: &str = "LAZARUS_FAILURES";

/// What a node does after one of its actors failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Re-execute as `incarnation`, passing `failures` on.
    RollBack {
        /// The next image's incarnation.
        incarnation: u32,
        /// The value of [`FAILURES_VAR`] for the next image.
        failures: String,
    },
    /// The same actor failed the same way `times` times: a deterministic bug. Stop.
    GiveUp {
        /// How many times it failed so.
        times: usize,
    },
    /// End the process and leave the decision to a supervisor, if any: the node's `main`
    /// has finished (its peers may have left, so a new image could not replay), or the
    /// rank has used up its incarnations.
    Exit,
}

/// A stable hash of a failure's signature (FNV-1a): the same in every image of the
/// program, unlike the standard library's hasher, which makes no such promise.
fn fingerprint(signature: &str) -> u64 {
    signature.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Decides what follows a failure with `signature` (actor, message type, panic text) in
/// incarnation `incarnation`, given the earlier failures `history` (the inherited
/// [`FAILURES_VAR`]; text that is not a list of hashes counts as no history) and whether
/// the node's `main` has `finished`.
pub fn decide(
    history: Option<&str>,
    signature: &str,
    incarnation: u32,
    finished: bool,
) -> Decision {
    let mut earlier: Vec<u64> = history
        .unwrap_or("")
        .split(',')
        .filter_map(|h| u64::from_str_radix(h.trim(), 16).ok())
        .collect();
    let this = fingerprint(signature);
    earlier.push(this);
    let times = earlier.iter().filter(|h| **h == this).count();
    if times >= MAX_SAME_FAILURE {
        return Decision::GiveUp { times };
    }
    if finished || incarnation >= MAX_RESTARTS_PER_RANK {
        return Decision::Exit;
    }
    Decision::RollBack {
        incarnation: incarnation + 1,
        failures: earlier
            .iter()
            .map(|h| format!("{h:016x}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Replaces this process's image with a fresh one of the same program, as
/// `incarnation`. `peers`, when the node was started with an explicit peer list, is the
/// current one (peers that moved to spare slots since the start included). Returns only
/// if the exec failed.
pub(crate) fn reexec(
    incarnation: u32,
    failures: &str,
    peers: Option<&[SocketAddr]>,
) -> std::io::Error {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .env("LAZARUS_INCARNATION", incarnation.to_string())
        .env(FAILURES_VAR, failures);
    if let Some(peers) = peers {
        let list: Vec<String> = peers.iter().map(SocketAddr::to_string).collect();
        cmd.env("LAZARUS_PEERS", list.join(","));
    }
    // SAFETY: pthread_sigmask on the calling thread with a valid, emptied set. Signal
    // masks survive exec; the handler's thread may block some, and the new image must
    // not start with signals blocked.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    cmd.exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALO: &str = "actor=1:0 type=Tile message=Halo panic=\"boom\"";

    fn history_after(failures: &[&str]) -> Option<String> {
        let mut history: Option<String> = None;
        for f in failures {
            match decide(history.as_deref(), f, 0, false) {
                Decision::RollBack { failures, .. } => history = Some(failures),
                other => panic!("{f}: expected a rollback, got {other:?}"),
            }
        }
        history
    }

    #[test]
    fn a_first_failure_rolls_back_as_the_next_incarnation() {
        match decide(None, HALO, 0, false) {
            Decision::RollBack {
                incarnation,
                failures,
            } => {
                assert_eq!(incarnation, 1);
                assert_eq!(failures, format!("{:016x}", fingerprint(HALO)));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide(None, HALO, 3, false),
            Decision::RollBack { incarnation: 4, .. }
        ));
    }

    #[test]
    fn the_same_failure_a_third_time_is_a_deterministic_bug() {
        let twice = history_after(&[HALO, HALO]);
        assert_eq!(
            decide(twice.as_deref(), HALO, 2, false),
            Decision::GiveUp { times: 3 }
        );
    }

    #[test]
    fn different_failures_do_not_add_up_to_a_deterministic_bug() {
        let other = "actor=1:0 type=Tile message=Gather panic=\"boom\"";
        let history = history_after(&[HALO, other, other.replace("boom", "bang").as_str()]);
        assert!(matches!(
            decide(history.as_deref(), HALO, 3, false),
            Decision::RollBack { incarnation: 4, .. }
        ));
    }

    #[test]
    fn after_main_finished_or_out_of_incarnations_the_process_just_ends() {
        assert_eq!(decide(None, HALO, 0, true), Decision::Exit);
        assert_eq!(
            decide(None, HALO, MAX_RESTARTS_PER_RANK, false),
            Decision::Exit
        );
    }

    #[test]
    fn an_inherited_history_that_is_not_hashes_counts_as_none() {
        assert!(matches!(
            decide(Some("not,hex,\u{1F600}"), HALO, 0, false),
            Decision::RollBack { incarnation: 1, .. }
        ));
    }
}
