//! The same app binary (ring, pingpong, the NPB kernels, jacobi2d) forms its cluster from
//! Slurm's environment under a real `srun`, with no extra flags; with recovery on, a node
//! whose actor panics rolls back by itself (Slurm restarts nothing). `lazarus run` inside an
//! allocation (`salloc`, the docs' `sbatch` script) starts its nodes as `srun` steps and
//! restarts a killed one as a new step. Needs the single-host Slurm that
//! `scripts/slurm-setup.sh` starts; `scripts/test.sh` runs it and sets
//! `LAZARUS_TEST_SLURM=1`.

mod support;

use std::process::Command;
use std::time::Duration;
use support::{bin, parse_result};

fn slurm_available() -> bool {
    if std::env::var("LAZARUS_TEST_SLURM").as_deref() == Ok("1") {
        return true;
    }
    // scripts/test.sh runs everything: there a missing set-up is a failure, not a skip.
    assert!(
        std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
        "LAZARUS_TEST_REQUIRE_ALL=1 but LAZARUS_TEST_SLURM is not 1"
    );
    eprintln!("skipping: run scripts/slurm-setup.sh and set LAZARUS_TEST_SLURM=1 (scripts/test.sh does both)");
    false
}

fn srun(args: &[&str]) -> std::process::Output {
    srun_with(args, &[])
}

/// [`srun`] with more variables in the tasks' environment (srun passes its own on).
fn srun_with(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new("timeout")
        .arg(Duration::from_secs(120).as_secs().to_string())
        .args(["srun", "-n", "4", "--overcommit"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("srun runs")
}

#[test]
fn ring_under_srun_forms_a_four_node_cluster_and_verifies() {
    if !slurm_available() {
        return;
    }
    let ring = bin("ring");
    let out = srun(&[ring.to_str().unwrap(), "--hops", "2000", "--actors", "8"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "srun failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = stdout
        .lines()
        .find_map(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line in: {stdout}"));
    assert_eq!(result["nodes"], "4", "{stdout}");
    assert_eq!(result["verified"], "true");

    let alone = Command::new(&ring)
        .args(["--hops", "2000", "--actors", "8"])
        .output()
        .unwrap();
    let alone = String::from_utf8_lossy(&alone.stdout)
        .lines()
        .find_map(parse_result)
        .unwrap();
    assert_eq!(alone["checksum"], result["checksum"]);
}

#[test]
fn pingpong_under_srun_measures_between_nodes_zero_and_one() {
    if !slurm_available() {
        return;
    }
    let pingpong = bin("pingpong");
    let out = srun(&[
        pingpong.to_str().unwrap(),
        "--max-size",
        "65536",
        "--iters",
        "200",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = stdout.lines().find_map(parse_result).expect("RESULT");
    assert_eq!(result["mode"], "inter-node");
    assert_eq!(result["verified"], "true");
}

#[test]
fn npb_kernels_under_srun_verify_with_the_values_of_a_run_alone() {
    if !slurm_available() {
        return;
    }
    // Each kernel's verification quantities (bit-identical for any node count).
    let kernels: [(&str, &[&str]); 4] = [
        ("npb-ep", &["sx", "sy", "counts"]),
        ("npb-cg", &["zeta", "rnorm"]),
        ("npb-is", &["ranks", "passed", "full_verify"]),
        ("npb-mg", &["rnm2", "rnmu"]),
    ];
    for (app, values) in kernels {
        let path = bin(app);
        let out = srun(&[path.to_str().unwrap(), "--class", "S"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{app} under srun failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result = stdout
            .lines()
            .find_map(parse_result)
            .unwrap_or_else(|| panic!("{app}: no RESULT line in: {stdout}"));
        assert_eq!(result["nodes"], "4", "{app}: {stdout}");
        assert_eq!(result["verified"], "true", "{app}: {stdout}");
        let alone = support::output(Command::new(&path).args(["--class", "S"])).unwrap();
        let alone = String::from_utf8_lossy(&alone.stdout)
            .lines()
            .find_map(parse_result)
            .unwrap_or_else(|| panic!("{app} alone: no RESULT line"));
        for v in values {
            assert_eq!(result[*v], alone[*v], "{app}: {v}");
        }
    }
}

/// The checksum jacobi2d prints when run alone, in one process, with `args`.
fn checksum_alone(jacobi: &std::path::Path, args: &[&str]) -> String {
    let alone = support::output(Command::new(jacobi).args(args)).unwrap();
    String::from_utf8_lossy(&alone.stdout)
        .lines()
        .find_map(parse_result)
        .expect("RESULT alone")["checksum"]
        .clone()
}

/// The name of this machine's Slurm node (`scripts/slurm-setup.sh` names it after the
/// host).
fn slurm_node() -> String {
    let out = Command::new("sinfo")
        .args(["-h", "-o", "%n"])
        .output()
        .expect("sinfo runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("sinfo lists a node")
        .trim()
        .to_string()
}

#[test]
fn under_srun_a_handler_panic_rolls_its_node_back_in_place_and_the_answer_is_exact() {
    if !slurm_available() {
        return;
    }
    // Slurm restarts nothing: the node whose actor panics rolls back by itself, in its
    // own process, from its last checkpoint, while the other three run on.
    let jacobi = bin("jacobi2d");
    let args = ["--n", "256", "--iters", "12000", "--check", "bounds"];
    let dir = std::env::temp_dir().join(format!("lazarus-slurm-ckpt-{}", std::process::id()));
    let mut run_args = vec![jacobi.to_str().unwrap()];
    run_args.extend(args);
    let out = srun_with(
        &run_args,
        &[
            ("LAZARUS_FT", "on"),
            ("LAZARUS_CHECKPOINT_EVERY_MS", "300"),
            ("LAZARUS_CHECKPOINT_DIR", dir.to_str().unwrap()),
            // Actor 1:0's 20000th handler call, about a third into the run: after its
            // node's first checkpoints.
            ("LAZARUS_FAILPOINT", "panic:1:0:20000"),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "srun failed: {stdout}\n{stderr}");
    let said = |needle: &str| stdout.contains(needle) || stderr.contains(needle);
    assert!(
        said("rank=1 actor-failed actor=1:0 type=Tile message=Halo"),
        "the panic was not reported: {stderr}"
    );
    assert!(said("rank=1 rolling-back incarnation=1"), "{stderr}");
    assert!(
        said("rank=1 loaded source=directory:"),
        "node 1 did not restore a checkpoint: {stderr}"
    );
    for rank in 0..4 {
        let incarnation = if rank == 1 { 1 } else { 0 };
        assert!(
            said(&format!("rank={rank} final incarnation={incarnation} ")),
            "node {rank} should end as incarnation {incarnation}: {stderr}"
        );
    }
    let result = stdout
        .lines()
        .find_map(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line in: {stdout}"));
    assert_eq!(result["verified"], "true");

    assert_eq!(
        result["checksum"],
        checksum_alone(&jacobi, &args),
        "the grid after a rollback equals a failure-free run's"
    );
}

#[test]
fn lazarus_run_over_srun_restarts_a_dead_node_as_a_new_job_and_the_answer_is_exact() {
    if !slurm_available() {
        return;
    }
    // `lazarus run` as the supervisor of a Slurm cluster: every node is a job of its own
    // on the Slurm node (`--remote 'srun ...'`). Node 2 SIGKILLs itself inside its third
    // checkpoint, a crash, so nothing rolls back in place: the launcher sees its srun end
    // and submits the replacement through srun again.
    let jacobi = bin("jacobi2d");
    let args = ["--n", "256", "--iters", "12000", "--check", "bounds"];
    // The node is reached at the address slurm.conf gives it.
    let host = format!("{}=127.0.0.1", slurm_node());
    let out = Command::new("timeout")
        .arg("180")
        .arg(bin("lazarus"))
        .args(["run", "-n", "4", "--hosts", &host])
        .args(["--remote", "srun -N1 -n1 --overcommit -w {host}"])
        .args([
            "--cores-per-node",
            "1",
            "--ft",
            "on",
            "--checkpoint-every",
            "300ms",
        ])
        .arg("--")
        .arg(&jacobi)
        .args(args)
        .env("LAZARUS_FAILPOINT", "checkpoint:2:3")
        // Four single-core nodes share this machine's two cores.
        .env("LAZARUS_IDLE_SPIN_US", "0")
        .output()
        .expect("lazarus runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the run failed: {stdout}\n{stderr}");
    assert!(
        stdout.contains("node 2: died") && stdout.contains("restarting as incarnation 1"),
        "node 2 was not restarted: {stdout}"
    );
    assert!(
        stdout.contains("node 2: restarted node loaded its checkpoint source=directory:2"),
        "the replacement did not load the last complete checkpoint: {stdout}"
    );
    let result = stdout
        .lines()
        .find_map(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line in: {stdout}"));
    assert_eq!(result["checksum"], checksum_alone(&jacobi, &args));
}

/// Jacobi's arguments for the allocation tests: a few seconds on four nodes here.
const JACOBI_IN_ALLOCATION: [&str; 6] = ["--n", "256", "--iters", "12000", "--check", "bounds"];

#[test]
fn lazarus_run_in_an_allocation_starts_srun_steps_and_restarts_a_node_killed_from_outside() {
    if !slurm_available() {
        return;
    }
    // `salloc -n 4` and `lazarus run` with no -n and no host list: the launcher reads the
    // allocation (one node per task), starts each node as an srun step, and when node 1's
    // process is SIGKILLed (by its PID, from this test) starts its replacement as a new
    // step of the same allocation.
    let jacobi = bin("jacobi2d");
    let dir = std::env::temp_dir().join(format!("lazarus-salloc-ckpt-{}", std::process::id()));
    let mut cmd = Command::new("timeout");
    cmd.arg("240")
        .args(["salloc", "-n", "4", "--overcommit", "--quiet"])
        .arg(bin("lazarus"))
        .args(["run", "--cores-per-node", "1", "--ft", "on"])
        .args(["--checkpoint-every", "300ms", "--checkpoint-dir"])
        .arg(&dir)
        .arg("--")
        .arg(&jacobi)
        .args(JACOBI_IN_ALLOCATION)
        // Four single-core nodes share this machine's two cores.
        .env("LAZARUS_IDLE_SPIN_US", "0");
    let mut run = support::launched::Launched::spawn(cmd, 4);
    run.wait_for("the launcher to read the allocation", |l| {
        l.contains("lazarus: Slurm job ") && l.contains(": 4 nodes on ")
    });
    run.wait_for_checkpoints(&[1], 2);
    run.wait_for_seen("node 1 to say its process", |l| {
        l.contains("node 1: runs as process pid=")
    });
    let killed = run.kill_own_process(1);
    let f = run.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        f.has("node 1: died") && f.has("restarting as incarnation 1"),
        "node 1 was not restarted after pid {killed} was killed"
    );
    assert!(
        f.has("node 1: restarted node loaded its checkpoint"),
        "the replacement did not load a checkpoint"
    );
    assert_eq!(f.restarted(), [1], "only node 1 was restarted");
    // The replacement is a step of the allocation too: it says its own, new process.
    let processes = f
        .lines
        .iter()
        .filter(|l| l.contains("node 1: runs as process pid="))
        .count();
    assert_eq!(processes, 2, "node 1's first process and its replacement");
    let result = f.verified();
    assert_eq!(result["nodes"], "4");
    assert_eq!(
        result["checksum"],
        checksum_alone(&jacobi, &JACOBI_IN_ALLOCATION),
        "the grid after the restart equals a failure-free run's"
    );
}

#[test]
fn the_docs_sbatch_script_runs_its_job_and_a_node_that_dies_is_restarted_in_the_allocation() {
    if !slurm_available() {
        return;
    }
    // docs/lazarus-job.sbatch as a user submits it (only the paths, the output file and
    // this machine's --overcommit given on the command line); node 2 SIGKILLs itself in
    // its first checkpoint (the job is short), so the launcher inside the batch job
    // restarts it.
    let dir = std::env::temp_dir().join(format!("lazarus-sbatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("job.out");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs/lazarus-job.sbatch");
    let out = Command::new("timeout")
        .arg("300")
        .args(["sbatch", "--wait", "--overcommit", "--output"])
        .arg(&output)
        .arg(&script)
        .env("LAZARUS", bin("lazarus"))
        .env("APP", bin("jacobi2d"))
        .env("CHECKPOINTS", dir.join("checkpoints"))
        .env("LAZARUS_FAILPOINT", "checkpoint:2:1")
        .env("LAZARUS_IDLE_SPIN_US", "0")
        .output()
        .expect("sbatch runs");
    let job = std::fs::read_to_string(&output).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the job failed: {}\n{}\njob output:\n{job}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(job.contains(": 4 nodes on "), "{job}");
    assert!(
        job.contains("node 2: died") && job.contains("restarting as incarnation 1"),
        "node 2 was not restarted: {job}"
    );
    let result = job
        .lines()
        .find_map(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line in: {job}"));
    assert_eq!(result["nodes"], "4");
    assert_eq!(result["verified"], "true");
    assert_eq!(
        result["checksum"],
        checksum_alone(&bin("jacobi2d"), &["--n", "1024", "--iters", "2000"]),
        "the grid after the restart equals a failure-free run's"
    );
}
