//! A node whose newest checkpoint is damaged or gone, then SIGKILLed: jacobi2d on 4
//! nodes, node 2's checkpoint file flipped (64 bytes in the middle), cut to half its
//! length or deleted while the node is stopped, then the node killed by PID.
//!
//! With the buddy replica (`--buddy on`) the replacement restores the buddy's copy and
//! the run ends with the failure-free answer. Without it the replacement can only start
//! from an older state (the beginning, or an older file) while its peers have released
//! the messages it would need: its peers say so (`recovery-impossible`) and the
//! launcher stops the run at once with an error that says why and exit status 3. Before,
//! the run hung for ever.
//!
//! The runs go one at a time: 4-node clusters on a 2-core machine are already
//! oversubscribed.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::bin;
use support::launched::{assert_one_restart_per_kill, Finished, Launched, SIGSTOP};

const GRID: &str = "256";
/// About 7 s of work with recovery on on this machine under load; node 2's third
/// checkpoint comes after about 3.5 s.
const ITERS: &str = "40000";
/// The node whose checkpoint is damaged; its buddy is node 3.
const VICTIM: u16 = 2;
/// The longest a run without a usable copy may take to end after the kill: detection
/// takes the replacement's start and one ROLLBACK (well under a second when idle).
const FATAL_WITHIN: Duration = Duration::from_secs(20);
/// The longest a recovered run may take after the kill (a run that hangs fails in
/// this time instead of the suite's long timeout).
const RECOVERED_WITHIN: Duration = Duration::from_secs(150);

/// What is done to the checkpoint file(s).
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// 64 bytes in the middle inverted.
    Flip,
    /// Cut to half its length.
    Truncate,
    /// Removed.
    Delete,
}

impl Damage {
    fn apply(self, file: &Path) {
        match self {
            Damage::Flip => {
                let mut bytes = std::fs::read(file).expect("read the checkpoint");
                let mid = bytes.len() / 2;
                for b in &mut bytes[mid..mid + 64] {
                    *b ^= 0xff;
                }
                std::fs::write(file, bytes).expect("write the checkpoint back");
            }
            Damage::Truncate => {
                let len = std::fs::metadata(file).expect("checkpoint").len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(file)
                    .and_then(|f| f.set_len(len / 2))
                    .expect("truncate the checkpoint");
            }
            Damage::Delete => std::fs::remove_file(file).expect("delete the checkpoint"),
        }
    }
}

/// A checkpoint directory for one run, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "lazarus-damaged-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        Dir(dir)
    }

    /// Node `rank`'s checkpoint `epoch`, as `runtime/src/checkpoint/directory.rs` names it.
    fn file(&self, rank: u16, epoch: u64) -> PathBuf {
        self.0
            .join(format!("set-{rank}"))
            .join(format!("ckpt-{epoch:020}.lzck"))
    }

    /// Node `rank`'s complete checkpoint files (`ckpt-<epoch, 20 digits>.lzck`, see
    /// `runtime/src/checkpoint/directory.rs`), oldest first.
    fn checkpoints(&self, rank: u16) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.0.join(format!("set-{rank}")))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("ckpt-") && n.ends_with(".lzck"))
            })
            .collect();
        files.sort();
        files
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn launch(recovery: Option<(&Dir, &str)>) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "4"]);
    if let Some((dir, buddy)) = recovery {
        cmd.args(["--ft", "on", "--checkpoint-every", "1s", "--buddy", buddy])
            .arg("--checkpoint-dir")
            .arg(&dir.0);
    }
    cmd.arg("--")
        .arg(bin("jacobi2d"))
        .args(["--n", GRID, "--iters", ITERS, "--check", "bounds"]);
    Launched::spawn(cmd, 4)
}

/// The checksum of the same run without failures and without recovery.
fn reference() -> String {
    static CACHE: Mutex<Option<String>> = Mutex::new(None);
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(|| launch(None).finish().checksum())
        .clone()
}

/// Runs jacobi2d with `--buddy buddy`; once node 2 has committed its third checkpoint,
/// stops it (so that it commits no other meanwhile), applies `damage` to its newest
/// checkpoint file (to every one it has, unless `keep_older`: then the one before it,
/// copied aside when it was newest, is put back intact, as a store that kept the
/// previous checkpoint would hold it), and SIGKILLs it. Returns the run's end, which
/// must come within `within` of the kill, and how long after the kill it came.
fn damaged_then_killed(
    buddy: &str,
    damage: Damage,
    keep_older: bool,
    within: Duration,
) -> (Finished, Duration) {
    let dir = Dir::new(buddy);
    let mut run = launch(Some((&dir, buddy)));
    run.wait_started();
    let older = keep_older.then(|| {
        run.wait_for_checkpoints(&[VICTIM], 2);
        let file = dir.file(VICTIM, 2);
        let copy = std::fs::read(&file).expect("copy checkpoint 2 aside");
        (file, copy)
    });
    run.wait_for_checkpoints(&[VICTIM], 3);
    run.signal(VICTIM, SIGSTOP);
    let mut files = dir.checkpoints(VICTIM);
    assert!(!files.is_empty(), "node {VICTIM} has a checkpoint file");
    if let Some((file, bytes)) = older {
        let newest = files.pop().expect("newest");
        assert_ne!(newest, file, "a newer checkpoint than the one kept");
        std::fs::write(&file, bytes).expect("put the older checkpoint back");
        files = vec![newest];
    }
    for file in &files {
        damage.apply(file);
    }
    let pid = run.kill(VICTIM);
    eprintln!("{damage:?} {files:?}, killed node {VICTIM} (pid {pid})");
    let killed = Instant::now();
    let f = run.finish_within(within);
    (f, killed.elapsed())
}

/// With the buddy's copy the run ends as if nothing had been damaged.
fn recovers_from_the_buddy(damage: Damage, keep_older: bool) {
    let _one = support::one_at_a_time();
    let expected = reference();
    let (f, _) = damaged_then_killed("on", damage, keep_older, RECOVERED_WITHIN);
    assert_eq!(f.checksum(), expected, "{damage:?}");
    assert_one_restart_per_kill(&f, &[VICTIM]);
    assert!(
        f.has(&format!(
            "node {VICTIM}: restarted node loaded its checkpoint source=buddy:"
        )),
        "restored from the buddy's copy; output:\n{}",
        f.lines.join("\n")
    );
    assert!(!f.has("recovery impossible"));
}

/// Without a copy the run ends at once, with an error that says why.
fn fails_fast_without_a_copy(damage: Damage, keep_older: bool) {
    let _one = support::one_at_a_time();
    let (f, took) = damaged_then_killed("off", damage, keep_older, FATAL_WITHIN);
    let output = f.lines.join("\n");
    assert!(
        !f.success,
        "the run cannot have succeeded; output:\n{output}"
    );
    assert_eq!(
        f.code,
        Some(3),
        "the launcher's status for it; output:\n{output}"
    );
    assert!(
        took < FATAL_WITHIN,
        "ended {took:?} after the kill; output:\n{output}"
    );
    let said = f
        .lines
        .iter()
        .find(|l| l.starts_with("lazarus: recovery impossible: "))
        .unwrap_or_else(|| panic!("the launcher says why; output:\n{output}"));
    for part in [
        format!("cannot resend to restarted node {VICTIM} (incarnation 1)"),
        "was released up to".to_string(),
        format!("node {VICTIM}'s newest checkpoint (id="),
        "was damaged or lost".to_string(),
    ] {
        assert!(said.contains(&part), "{part:?} in {said:?}");
    }
    let restored_older = said.contains(&format!("node {VICTIM} restored 0 of it"));
    assert_eq!(
        restored_older, !keep_older,
        "from the beginning unless an older file was kept: {said}"
    );
    assert!(f.result.is_none(), "no answer");
}

#[test]
fn a_flipped_newest_checkpoint_is_replaced_by_the_buddys_copy() {
    recovers_from_the_buddy(Damage::Flip, false);
}

#[test]
fn a_truncated_newest_checkpoint_is_replaced_by_the_buddys_copy() {
    recovers_from_the_buddy(Damage::Truncate, false);
}

#[test]
fn a_deleted_newest_checkpoint_is_replaced_by_the_buddys_copy() {
    recovers_from_the_buddy(Damage::Delete, false);
}

/// An intact older file does not do (the peers released their logs for the newer one):
/// the buddy is asked when the newest file is unusable, even if an older one verifies.
#[test]
fn a_flipped_newest_checkpoint_beside_an_intact_older_one_is_replaced_by_the_buddys_copy() {
    recovers_from_the_buddy(Damage::Flip, true);
}

#[test]
fn a_flipped_newest_checkpoint_without_a_copy_ends_the_run_at_once_saying_why() {
    fails_fast_without_a_copy(Damage::Flip, false);
}

#[test]
fn a_truncated_newest_checkpoint_without_a_copy_ends_the_run_at_once_saying_why() {
    fails_fast_without_a_copy(Damage::Truncate, false);
}

#[test]
fn a_deleted_newest_checkpoint_without_a_copy_ends_the_run_at_once_saying_why() {
    fails_fast_without_a_copy(Damage::Delete, false);
}

/// Restored from an intact older checkpoint, the node lacks what the peers released
/// between the two: the same end.
#[test]
fn a_flipped_newest_checkpoint_beside_an_intact_older_one_without_a_copy_ends_the_run_at_once() {
    fails_fast_without_a_copy(Damage::Flip, true);
}
