//! `lazarus run` forms a cluster of real processes on this host; a node killed with SIGKILL
//! is detected by the others and reported instead of leaving the run hanging; a node
//! silent for less than `--failure-timeout` is waited for.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::launched::Launched;
use support::{bin, parse_result};

#[test]
fn lazarus_run_starts_the_nodes_prints_their_pids_and_ends_with_the_result() {
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "3", "--"])
            .arg(bin("ring"))
            .args(["--hops", "3000", "--actors", "6"]),
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for rank in 0..3 {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("node {rank} pid "))),
            "{stdout}"
        );
    }
    assert!(
        stdout.lines().any(|l| l.starts_with("[0] RESULT ")),
        "rank-prefixed output"
    );
    let last = parse_result(stdout.lines().last().unwrap()).expect("RESULT last");
    assert_eq!(last["nodes"], "3");
    assert_eq!(last["verified"], "true");

    // The same ring on one node gives the same checksum.
    let alone =
        support::output(Command::new(bin("ring")).args(["--hops", "3000", "--actors", "6"]))
            .unwrap();
    let alone = parse_result(
        String::from_utf8_lossy(&alone.stdout)
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(alone["checksum"], last["checksum"]);
}

#[test]
fn the_app_exit_status_is_the_launchers_exit_status() {
    // A status no generic failure path produces, so a launcher that maps every failure
    // to 1 fails this.
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--"])
            .args(["sh", "-c", "exit 7"]),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(7));
    // An app that refuses its arguments fails the run with its own status too.
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--"])
            .arg(bin("ring"))
            .args(["--cores", "999"]),
    )
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_node_killed_with_sigkill_is_reported_by_the_others_within_a_second() {
    let mut launcher = Command::new(bin("lazarus"))
        .args(["run", "-n", "3", "--grace", "3", "--"])
        .arg(bin("ring"))
        .args(["--hops", "1000000000", "--actors", "6"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(bool, String, Instant)>();
    let stdout = launcher.stdout.take().unwrap();
    let stderr = launcher.stderr.take().unwrap();
    let t1 = tx.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = t1.send((false, l, Instant::now()));
        }
    });
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send((true, l, Instant::now()));
        }
    });

    // Read the victim's pid from the launcher, exactly as a user would.
    let mut victim = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while victim.is_none() && Instant::now() < deadline {
        if let Ok((false, line, _)) = rx.recv_timeout(Duration::from_secs(1)) {
            if let Some(pid) = line.strip_prefix("node 2 pid ") {
                victim = Some(pid.trim().parse::<i32>().unwrap());
            }
        }
    }
    let victim = victim.expect("launcher printed node 2's pid");
    // Let the cluster form and the token start circulating (a loaded machine starts
    // three processes in well under this).
    std::thread::sleep(Duration::from_millis(2500));
    let killed_at = Instant::now();
    // SAFETY: plain FFI call sending a signal to a process we started (by pid).
    let rc = unsafe { libc_kill(victim, 9) };
    assert_eq!(rc, 0, "kill -9 {victim}");

    let mut reported_by = std::collections::HashMap::new();
    let mut launcher_saw_it = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && (reported_by.len() < 2 || !launcher_saw_it) {
        let Ok((_, line, at)) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        // The detector's report (later lines, a broken barrier, say "node 2 failed" too).
        if let Some(after_report) = line.split("node 2 failed (no heartbeat for ").nth(1) {
            if let Some(rank) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
                let silence = after_report
                    .split(" ms")
                    .next()
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .unwrap_or_else(|| {
                        panic!("the report says how long node 2 was silent: {line}")
                    });
                reported_by
                    .entry(rank.to_string())
                    .or_insert((Duration::from_millis(silence), at.duration_since(killed_at)));
            }
        }
        if line.contains(&format!("node 2 (pid {victim}) was killed by SIGKILL")) {
            launcher_saw_it = true;
        }
    }
    assert!(launcher_saw_it, "launcher reports the kill");
    assert_eq!(
        reported_by.len(),
        2,
        "both survivors report node 2: {reported_by:?}"
    );
    for (rank, (silence, after)) in &reported_by {
        // Default: 1 s of silence with 100 ms heartbeats, checked every 100 ms. The node's
        // own measure of the silence decides, and its check is a timer of a node sharing
        // 2 vCPUs with two others: up to 1 s more is scheduling, not the detector (the
        // recovery timeout, 3 s, would be outside). The line's way here (through the
        // node's stderr, the launcher and a pipe) only has to be prompt.
        assert!(
            *silence >= Duration::from_secs(1) && *silence < Duration::from_secs(2),
            "node {rank} declared node 2 failed after {silence:?} of silence"
        );
        assert!(
            *after < Duration::from_secs(4),
            "node {rank}'s report came {after:?} after the kill"
        );
    }
    let status = launcher.wait().unwrap();
    assert!(!status.success(), "the run failed (recovery is off)");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// How long the frozen node of the failure-timeout test stays stopped: longer than the
/// default timeout (1 s), shorter than the raised one.
const FREEZE: Duration = Duration::from_millis(2500);

/// Runs a 3-node ring with `extra` launcher options, freezing node 2 (SIGSTOP) for
/// [`FREEZE`] once the ring is under way.
fn ring_with_a_frozen_node(extra: &[&str]) -> support::launched::Finished {
    use support::launched::{Launched, SIGCONT, SIGSTOP};
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "3", "--grace", "1"])
        .args(extra)
        .arg("--")
        .arg(bin("ring"))
        .args(["--hops", "200000", "--actors", "6"]);
    let mut run = Launched::spawn(cmd, 3);
    run.wait_started();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = run.signal(2, SIGSTOP);
    std::thread::sleep(FREEZE);
    // The launcher may have ended the run (and node 2) meanwhile: no check.
    // SAFETY: plain kill(2) on a process id the launcher printed.
    let _ = unsafe { libc_kill(pid, SIGCONT) };
    run.finish()
}

#[test]
fn a_node_frozen_for_longer_than_the_failure_timeout_ends_the_run_and_a_raised_timeout_waits_for_it(
) {
    // Default (1 s): the peers give up on the frozen node; recovery is off, so the run fails.
    let failed = ring_with_a_frozen_node(&[]);
    assert!(
        !failed.success && failed.has("node 2 failed"),
        "the default timeout declares the frozen node failed:\n{}",
        failed.lines.join("\n")
    );
    // Raised: a node that is slow, not dead, finishes the run with the verified answer.
    let waited = ring_with_a_frozen_node(&["--failure-timeout", "6s"]);
    let result = waited.verified();
    let elapsed: f64 = result["elapsed_s"].parse().unwrap();
    assert!(
        elapsed >= FREEZE.as_secs_f64(),
        "the freeze fell inside the ring's run (elapsed {elapsed} s)"
    );
    assert!(
        !waited.has("failed"),
        "nobody declared a failure:\n{}",
        waited.lines.join("\n")
    );
    // And below a few heartbeats, the option is refused before anything starts.
    let out = support::output(Command::new(bin("lazarus")).args([
        "run",
        "-n",
        "2",
        "--failure-timeout",
        "100ms",
        "--",
        "/bin/true",
    ]))
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("100 ms is below 300 ms"));
}

#[test]
fn bad_host_lists_are_refused_with_a_reason_before_anything_starts() {
    let refused = |args: &[&str], reason: &str| {
        let out = support::output(
            Command::new(bin("lazarus"))
                .args(["run", "-n", "2"])
                .args(args)
                .args(["--", "/bin/true"]),
        )
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("pid"),
            "{args:?}: a node was started"
        );
    };
    refused(&["--hosts", "a=10.0.0.1,a=10.0.0.2"], "listed twice");
    refused(&["--hosts", "a=10.0.0.300"], "not an IP address");
    refused(
        &["--hosts", "a=10.0.0.1", "--remote", " "],
        "--remote is empty",
    );
    refused(&["--spare-hosts", "s=10.0.0.9"], "go with --hosts");
    refused(
        &["--hosts", "a=10.0.0.1", "--spares", "1", "--ft", "on"],
        "use --spare-hosts",
    );
    refused(
        &[
            "--hosts",
            "a=10.0.0.1",
            "--ft",
            "on",
            "--spare-hosts",
            "a=10.0.0.1",
        ],
        "both a host and a spare",
    );
    // Numbers that leave no room for the run: refused here, not by every node.
    refused(
        &["--cores-per-node", "0"],
        "--cores-per-node must be at least 1",
    );
    refused(&["--base-port", "65535"], "past 65535");
    refused(
        &["--base-port", "65535", "--hosts", "a=10.0.0.1"],
        "past 65535",
    );
    let dir = std::env::temp_dir().join(format!("lazarus-hostfiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    refused(
        &["--hostfile", &file("one-slot", "a=10.0.0.1 slots=1\n")],
        "2 nodes but the hosts have 1 slots",
    );
    refused(
        &["--hostfile", &file("zero", "a=10.0.0.1 slots=0\n")],
        "line 1: `0`: slots must be a positive number",
    );
    refused(
        &["--hostfile", &file("empty", "# nothing\n")],
        "names no host",
    );
    refused(
        &["--hostfile", &dir.join("missing").to_string_lossy()],
        "--hostfile",
    );
    refused(
        &[
            "--hostfile",
            &file("ok", "a=10.0.0.1\n"),
            "--hosts",
            "b=10.0.0.2",
        ],
        "cannot be used with",
    );
    // Outside an allocation (the tests run outside one), `--slurm on` is refused.
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--slurm", "on", "--", "/bin/true"])
            .env_remove("SLURM_JOB_ID"),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not inside a Slurm allocation"), "{stderr}");
    // Without -n and outside an allocation there is no telling how many nodes.
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "--", "/bin/true"])
            .env_remove("SLURM_JOB_ID"),
    )
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("give the number of nodes with -n"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hostfile_places_as_many_nodes_on_each_host_as_its_slots_say() {
    // Two "hosts" that are two loopback addresses of this machine: the processes start
    // here (no --remote), each listening at its host's address.
    let dir = std::env::temp_dir().join(format!("lazarus-hostfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hostfile = dir.join("hosts");
    std::fs::write(
        &hostfile,
        "# a job's hosts, Open MPI style\na=127.0.0.1 slots=3\nb=127.0.0.2   # one slot\n",
    )
    .unwrap();
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "4", "--hostfile"])
            .arg(&hostfile)
            .arg("--")
            .arg(bin("ring"))
            .args(["--hops", "3000", "--actors", "8"]),
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let placed = |rank: u16, at: &str| {
        stdout.lines().any(|l| {
            l.starts_with(&format!("node {rank} pid ")) && l.contains(&format!(" on {at}:"))
        })
    };
    for rank in 0..3 {
        assert!(placed(rank, "a at 127.0.0.1"), "node {rank} on a: {stdout}");
    }
    assert!(placed(3, "b at 127.0.0.2"), "node 3 on b: {stdout}");
    let result = stdout
        .lines()
        .find_map(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line in: {stdout}"));
    assert_eq!(result["nodes"], "4");
    assert_eq!(result["verified"], "true");
}

#[test]
fn after_rank_0_restarts_its_result_times_the_whole_run_and_its_peer_says_what_replaced_it() {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "2",
        "--ft",
        "on",
        "--checkpoint-every",
        "300ms",
    ])
    .arg("--")
    .arg(bin("jacobi2d"))
    .args(["--n", "256", "--iters", "20000", "--check", "bounds"]);
    let mut run = Launched::spawn(cmd, 2);
    run.wait_started();
    // Well into the timed part, which began before node 0's first checkpoint.
    run.wait_for("node 0's third checkpoint", |l| {
        l.contains("node 0: checkpoint committed id=3")
    });
    let killed_at = Instant::now();
    run.kill(0);
    run.wait_for("the RESULT", |l| l.starts_with("[0] RESULT "));
    let since_kill = killed_at.elapsed().as_secs_f64();
    let f = run.finish();
    let result = f.verified();
    let elapsed: f64 = result["elapsed_s"].parse().unwrap();
    // The restarted process's own timed part began after the kill: only a time counted
    // from the first one's start is longer.
    assert!(
        elapsed > since_kill,
        "elapsed_s={elapsed} covers only the restarted process ({since_kill:.3} s since the \
         kill); output:\n{}",
        f.lines.join("\n")
    );
    let mlups: f64 = result["mlups"].parse().unwrap();
    let updates = 256.0 * 256.0 * 20000.0;
    assert!(
        (mlups - updates / elapsed / 1e6).abs() < 0.1 * mlups,
        "mlups={mlups} goes with elapsed_s={elapsed}"
    );
    // Its peer learnt of the death from the launcher (or, had the notice come late, from
    // the replacement), not from a silence.
    assert!(
        f.has("node 0 failed (its supervisor says incarnation 0 died)")
            || f.has("node 0 failed (its restarted process, incarnation 1, connected)"),
        "output:\n{}",
        f.lines.join("\n")
    );
    assert!(!f.has("no heartbeat for 0 ms"), "{}", f.lines.join("\n"));
    // The nodes' logs go through pipes: no colour codes.
    assert!(
        f.lines.iter().all(|l| !l.contains('\u{1b}')),
        "escape codes in the output:\n{}",
        f.lines.join("\n")
    );
}

#[test]
fn after_rank_0_rolls_back_in_place_its_result_still_times_the_whole_run() {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "2",
        "--ft",
        "on",
        "--checkpoint-every",
        "300ms",
    ])
    .arg("--")
    .arg(bin("jacobi2d"))
    .args(["--n", "256", "--iters", "20000", "--check", "bounds"])
    // A tile of node 0 panics a fifth of the way in: the process re-executes itself,
    // so the launcher cannot hand it anything.
    .env("LAZARUS_FAILPOINT", "panic:0:1:8000");
    let mut run = Launched::spawn(cmd, 2);
    run.wait_for("node 0's rollback in place", |l| {
        l.contains("node 0: rolls back in place")
    });
    let rolled_back_at = Instant::now();
    run.wait_for("the RESULT", |l| l.starts_with("[0] RESULT "));
    let since = rolled_back_at.elapsed().as_secs_f64();
    let f = run.finish();
    let elapsed: f64 = f.verified()["elapsed_s"].parse().unwrap();
    assert!(
        elapsed > since,
        "elapsed_s={elapsed} covers only the re-executed process ({since:.3} s since the \
         rollback); output:\n{}",
        f.lines.join("\n")
    );
}

#[test]
fn an_app_that_refuses_its_arguments_under_ft_on_is_started_twice_and_its_error_shown_once() {
    let out = support::output(
        Command::new(bin("lazarus"))
            .args(["run", "-n", "2", "--ft", "on", "--"])
            .arg(bin("jacobi2d"))
            .args(["--iters", "abc"]),
    )
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "clap's status: {stderr}");
    for rank in 0..2 {
        let starts = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("node {rank} pid ")))
            .count();
        assert_eq!(starts, 2, "started, and restarted once only: {stdout}");
        assert_eq!(
            stderr
                .matches(&format!("[{rank}] error: invalid value 'abc'"))
                .count(),
            1,
            "{stderr}"
        );
        assert!(stderr.contains(&format!(
            "giving up: node {rank} exited with status 2 again"
        )));
    }
}

#[test]
fn a_node_with_recovery_on_refuses_to_start_without_a_usable_checkpoint_directory() {
    // As under Slurm: no launcher checked the directory before.
    let ports: Vec<u16> = {
        let sockets: Vec<std::net::UdpSocket> = (0..2)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        sockets
            .iter()
            .map(|s| s.local_addr().unwrap().port())
            .collect()
    };
    let mut node = Command::new(bin("jacobi2d"))
        .args(["--n", "64", "--iters", "10"])
        .env("LAZARUS_RANK", "0")
        .env(
            "LAZARUS_PEERS",
            format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]),
        )
        .env("LAZARUS_SECRET", "00112233445566778899aabbccddeeff")
        .env("LAZARUS_FT", "on")
        .env("LAZARUS_CHECKPOINT_DIR", "/proc/nope")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its peer never comes: a node that started would wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = node.kill();
            let _ = node.wait();
            panic!("the node started with an unusable checkpoint directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut node.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("checkpoint directory /proc/nope is not usable: "),
        "{stderr}"
    );
}

/// How long the second replacement of the test below waits before it joins: longer than
/// the failure timeout with recovery on (3 s), so that peers still holding the dead
/// first replacement's connection would declare it failed by its silence.
const SLOW_START_MS: u64 = 4_000;

/// #40 item 4: a replacement killed right after it came up, its connection seen by every
/// peer, is known dead to all of them at once from the launcher's death notice (which
/// names the incarnation), not after the failure timeout, even while the next replacement
/// is slow to come; and once that one joins, the recovery completes promptly.
#[test]
fn a_replacement_killed_as_it_comes_up_is_known_dead_at_once_not_after_the_failure_timeout() {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "4",
        "--ft",
        "on",
        "--checkpoint-every",
        "500ms",
    ])
    .arg("--")
    .arg(bin("jacobi2d"))
    .args(["--n", "512", "--iters", "60000", "--check", "bounds"])
    .env(
        "LAZARUS_FAILPOINT",
        format!("slow-start:2:2:{SLOW_START_MS}"),
    );
    let mut run = Launched::spawn(cmd, 4);
    run.wait_started();
    run.wait_for_checkpoints(&[2], 1);
    run.kill(2);
    run.wait_for("node 2's first replacement", |l| {
        l.starts_with("node 2 pid ") && l.ends_with(" incarnation 1")
    });
    for peer in [0, 1, 3] {
        let up = format!("node {peer}: connection to a restarted peer is up peer=2 incarnation=1 ");
        run.wait_for_seen(&format!("node {peer} connected to it"), |l| l.contains(&up));
    }
    // Within ~50 ms of its start: every peer holds its connection.
    let first_replacement = run.kill(2);
    run.wait_for("node 2's second replacement joining", |l| {
        l.contains("failpoint: node 2 incarnation 2 joins now")
    });
    let joined = Instant::now();
    run.wait_for("node 2's replay", |l| {
        l.contains("node 2: every peer answered: replay complete")
    });
    let replay = joined.elapsed();
    let f = run.finish();
    f.verified();
    let output = f.lines.join("\n");
    for peer in [0, 1, 3] {
        assert!(
            f.lines.iter().any(|l| l.starts_with(&format!("[{peer}] "))
                && l.contains("node 2 failed (its supervisor says incarnation 1 died)")),
            "node {peer} was told that the replacement (pid {first_replacement}) died:\n{output}"
        );
    }
    assert!(
        !f.has("node 2 failed (no heartbeat for") && !f.has("declared a silent peer failed peer=2"),
        "a peer waited out the failure timeout for node 2:\n{output}"
    );
    assert!(
        replay < Duration::from_secs(2),
        "the replay took {replay:?} once the last replacement joined:\n{output}"
    );
    // The watchdog's exchanges with the nodes are not shown in a run that does not stall.
    assert!(
        !f.has("lazarus-report") && !f.has("no node delivered"),
        "{output}"
    );
}

/// #40 item 8: a run that cannot go on (node 1 never gets one logged message: the
/// `withhold` failpoint) is caught by the launcher's watchdog: after `--stall-timeout`
/// without a delivered message it prints what each node waits for, node 1's report
/// naming the withheld message, and after as long again it stops the nodes and exits
/// with 124 instead of hanging.
#[test]
fn a_stalled_run_is_reported_node_by_node_and_ended_by_the_watchdog() {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args(["run", "-n", "3", "--ft", "on", "--stall-timeout", "3s"])
        .arg("--")
        .arg(bin("jacobi2d"))
        .args(["--n", "256", "--iters", "1000000", "--check", "bounds"])
        .env("LAZARUS_FAILPOINT", "withhold:1:200");
    let mut run = Launched::spawn(cmd, 3);
    let withheld = run.wait_for("the withheld message", |l| {
        l.contains("failpoint: node 1 withholds logged message index=")
    });
    let stalled_at = Instant::now();
    let index: u64 = withheld
        .split("index=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no index in {withheld}"));
    let f = run.finish();
    let took = stalled_at.elapsed();
    let output = f.lines.join("\n");
    assert!(!f.success, "{output}");
    assert!(
        f.result.is_none(),
        "the run cannot have finished:\n{output}"
    );
    // Two periods of 3 s, reports asked every 750 ms, and slack for a loaded host.
    assert!(
        took < Duration::from_secs(30),
        "the watchdog ended the run {took:?} after the stall:\n{output}"
    );
    let header = f
        .lines
        .iter()
        .position(|l| {
            l.starts_with("lazarus: no node delivered a message for 3 s; what each node waits for:")
        })
        .unwrap_or_else(|| panic!("no stall report:\n{output}"));
    for rank in 0..3 {
        let line = f.lines[header..]
            .iter()
            .find(|l| l.starts_with(&format!("lazarus:   node {rank} (incarnation 0, ")))
            .unwrap_or_else(|| panic!("no report line for node {rank}:\n{output}"));
        assert!(line.contains("messages handled"), "{line}");
        if rank == 1 {
            assert!(
                line.contains(&format!("waits for index {index} ")),
                "node 1's report names the withheld message (index {index}): {line}"
            );
        }
    }
    assert!(
        f.has("lazarus: still no message delivered after 6 s: stopping the nodes; the run ends with status 124"),
        "{output}"
    );
    assert!(
        !f.has("lazarus-report"),
        "raw report lines are never shown:\n{output}"
    );
}
