//! Checkpoints on a file system that fills up: a node says that its checkpoints fail and
//! why (log and timeline), that it is unprotected after several failed periods, leaves no
//! partly written files, and commits again once there is room. The checkpoint directory
//! is a small tmpfs mounted for the test, so these tests need root (`scripts/test.sh`
//! runs as root and sets `LAZARUS_TEST_REQUIRE_ALL=1`; elsewhere they skip).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::bin;
use support::launched::Launched;

/// A tmpfs of a given size mounted for one test, unmounted when dropped.
struct SmallFileSystem(PathBuf);

impl SmallFileSystem {
    /// `None` (the test skips) where this process may not mount one.
    fn mount(name: &str, size: &str) -> Option<SmallFileSystem> {
        let dir = std::env::temp_dir().join(format!("lazarus-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            // scripts/test.sh runs everything: there a missing privilege is a failure.
            assert!(
                std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
                "LAZARUS_TEST_REQUIRE_ALL=1 but a tmpfs cannot be mounted (not root?)"
            );
            eprintln!("skipping: mounting a tmpfs needs root");
            return None;
        }
        Some(SmallFileSystem(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SmallFileSystem {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The partly written checkpoint files (`*.tmp`) under `dir`, at any depth.
fn partial_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "tmp") {
                found.push(path);
            }
        }
    }
    found
}

/// `lazarus run` of two `jacobi2d` nodes with recovery on, a checkpoint every 0.5 s into
/// `dir`. Each node's image is several MB while the sweeps run (the halos its peer has
/// not checkpointed past are logged in it), and grows while checkpoints fail; the run
/// lasts several seconds (many periods).
fn jacobi(dir: &Path) -> Launched {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "2", "--ft", "on", "--checkpoint-every", "0.5s"])
        .arg("--checkpoint-dir")
        .arg(dir)
        .arg("--")
        .arg(bin("jacobi2d"))
        .args(["--n", "512", "--iters", "20000", "--check", "bounds"]);
    Launched::spawn(cmd, 2)
}

/// The rank of a timeline line `... node R: KIND ...`.
fn rank_of(line: &str) -> u16 {
    line.split("node ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rank in {line:?}"))
}

#[test]
fn checkpoints_that_do_not_fit_are_told_leave_no_partial_files_and_the_run_still_verifies() {
    let _one = support::one_at_a_time();
    let Some(fs) = SmallFileSystem::mount("ckpt-full", "2m") else {
        return;
    };
    let mut run = jacobi(fs.path());
    let failed = run.wait_for("a checkpoint failure in the timeline", |l| {
        l.starts_with("timeline") && l.contains(": checkpoint-failed reason=no_space ")
    });
    assert!(failed.contains("No space left on device"), "{failed}");
    // The failed attempt's file is gone at once (the node's next attempt is a period
    // away), not left to fill the file system.
    let rank = rank_of(&failed);
    let set_dir = fs.path().join(format!("set-{rank}"));
    assert_eq!(
        partial_files(&set_dir),
        Vec::<PathBuf>::new(),
        "after {failed}"
    );
    run.wait_for("a node saying it is unprotected", |l| {
        l.starts_with("timeline") && l.contains(": unprotected no_commit_s=")
    });
    let f = run.finish();
    f.verified();
    assert!(
        f.has("checkpoint failed: checkpoint storage at ")
            && f.has("No space left on device (os error 28) (1 in a row)"),
        "an error in the node's log names the cause"
    );
    assert!(f.has(" unprotected: no checkpoint committed for "));
    assert_eq!(partial_files(fs.path()), Vec::<PathBuf>::new());
}

#[test]
fn checkpoints_commit_again_once_the_file_system_has_room() {
    let _one = support::one_at_a_time();
    let Some(fs) = SmallFileSystem::mount("ckpt-room", "128m") else {
        return;
    };
    // Another user's file takes the room, all but 256 KiB: enough for the small files
    // the launcher and the nodes write when they start, not for an image.
    let filler = fs.path().join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).expect("filler");
        let block = vec![0xa5u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        let full = f.metadata().expect("filler size").len();
        f.set_len(full.saturating_sub(256 << 10))
            .expect("room left");
    }
    let mut run = jacobi(fs.path());
    let failed = run.wait_for("a checkpoint failure in the timeline", |l| {
        l.starts_with("timeline") && l.contains(": checkpoint-failed reason=no_space ")
    });
    std::fs::remove_file(&filler).expect("the filler goes");
    // The node whose failure was told says when its checkpoints commit again; its
    // commit is in the timeline just before.
    let rank = rank_of(&failed);
    let resumed = run.wait_for("the node saying its checkpoints resumed", |l| {
        l.starts_with("timeline") && l.contains(&format!("node {rank}: checkpoints-resumed id="))
    });
    assert!(resumed.contains("after_failures="), "{resumed}");
    let id = resumed
        .split("id=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("an id");
    run.wait_for_seen("the commit that resumed", |l| {
        l.starts_with("timeline")
            && l.contains(&format!("node {rank}: checkpoint committed id={id} "))
    });
    let f = run.finish();
    f.verified();
    for (rank, finals) in f.finals() {
        assert!(
            finals["checkpoints"] >= 1,
            "node {rank} committed checkpoints once there was room: {finals:?}"
        );
    }
    assert_eq!(partial_files(fs.path()), Vec::<PathBuf>::new());
}
