//! The `lazarus` launcher's command line: bad options are refused with the reason and exit
//! status 2 before any node starts. (Being an integration test of this package, it also
//! makes `cargo test` build the `lazarus` binary with the features the whole suite is built
//! with, so the process-level tests of the other packages need not build it again.)

use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_lazarus");

/// Runs the launcher with `args`; returns its exit status and standard error.
fn launcher(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(LAUNCHER)
        .args(args)
        .output()
        .expect("the launcher runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_kill_plan_that_does_not_parse_is_refused_with_the_reason() {
    let (code, stderr) = launcher(&["run", "-n", "2", "--kill", "2", "--", "/bin/true"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("RANK@SECONDS"), "{stderr}");
}

/// `lazarus run -n 2 --ft on OPTIONS... -- /bin/true` is refused with exit 2 and a
/// message containing `reason`.
fn assert_options_refused(options: &[&str], reason: &str) {
    let mut args = vec!["run", "-n", "2", "--ft", "on"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "/bin/true"]);
    let (code, stderr) = launcher(&args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(reason), "{stderr}");
}

/// `lazarus run -n 2 --ft on OPTION VALUE -- /bin/true` is refused with exit 2 and a
/// message containing `reason`.
fn assert_option_refused(option: &str, value: &str, reason: &str) {
    assert_options_refused(&[option, value], reason);
}

#[test]
fn a_checkpoint_period_that_is_not_a_duration_is_refused_with_the_reason() {
    assert_option_refused("--checkpoint-every", "soon", "is not a duration");
}

#[test]
fn a_log_quota_that_is_not_a_size_is_refused_with_the_reason() {
    assert_option_refused("--log-quota", "lots", "is not a size");
}

#[test]
fn logger_nodes_without_a_log_quota_are_refused_with_the_reason() {
    // The quota says what goes to the loggers: without one they would take nothing.
    assert_option_refused(
        "--loggers",
        "1",
        "--loggers goes with --ft on and a --log-quota",
    );
}

#[test]
fn a_logger_without_the_cluster_secret_is_refused_with_the_reason() {
    let (code, stderr) = launcher(&["logger", "--index", "0", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("LAZARUS_SECRET is not set"), "{stderr}");
}

#[test]
fn logger_hosts_without_hosts_are_refused_with_the_reason() {
    assert_options_refused(
        &[
            "--log-quota",
            "16MiB",
            "--loggers",
            "1",
            "--logger-hosts",
            "h9=10.0.0.9",
        ],
        "--logger-hosts goes with --hosts",
    );
}

#[test]
fn more_copies_of_a_block_than_loggers_are_refused_with_the_reason() {
    assert_options_refused(
        &[
            "--log-quota",
            "16MiB",
            "--loggers",
            "1",
            "--logger-copies",
            "2",
        ],
        "--logger-copies 2 needs at least as many --loggers",
    );
}

/// Runs the launcher with `args`; returns its exit status, standard output and error.
fn launcher_output(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(LAUNCHER)
        .args(args)
        .output()
        .expect("the launcher runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unusable_checkpoint_directory_is_refused_before_any_node_starts() {
    let file = std::env::temp_dir().join(format!("lazarus-not-a-dir-{}", std::process::id()));
    std::fs::write(&file, "a regular file").unwrap();
    for dir in [file.to_str().unwrap(), "/proc/nope"] {
        let (code, stdout, stderr) = launcher_output(&[
            "run",
            "-n",
            "2",
            "--ft",
            "on",
            "--checkpoint-dir",
            dir,
            "--",
            "/bin/true",
        ]);
        assert_eq!(code, Some(2), "{dir}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "error: checkpoint directory {dir} is not usable: "
            )),
            "{stderr}"
        );
        assert!(
            !stdout.contains("pid"),
            "{dir}: a node was started: {stdout}"
        );
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn fault_tolerance_options_without_ft_on_are_refused_with_the_reason() {
    for option in [
        &["--checkpoint-every", "1s"][..],
        &["--log-quota", "16MiB"],
        &["--logger-copies", "1"],
        &["--logger-memory", "1GiB"],
        &["--checkpoint-dir", "/tmp"],
        &["--buddy", "on"],
        &["--spares", "1"],
    ] {
        let mut args = vec!["run", "-n", "2"];
        args.extend_from_slice(option);
        args.extend_from_slice(&["--", "/bin/true"]);
        let (code, stdout, stderr) = launcher_output(&args);
        assert_eq!(code, Some(2), "{option:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{} only means something with --ft on", option[0])),
            "{option:?}: {stderr}"
        );
        assert!(!stdout.contains("pid"), "{option:?}: a node was started");
    }
    // All of them named at once.
    let (code, _, stderr) = launcher_output(&[
        "run",
        "-n",
        "1",
        "--checkpoint-every",
        "1s",
        "--buddy",
        "off",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--checkpoint-every, --buddy only mean something with --ft on"),
        "{stderr}"
    );
}

#[test]
fn durations_take_minutes_and_fractions_of_seconds() {
    let (code, _, stderr) = launcher_output(&[
        "run",
        "-n",
        "1",
        "--ft",
        "on",
        "--checkpoint-every",
        "2min",
        "--failure-timeout",
        "1m",
        "--grace",
        "0.5s",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_closed_standard_output_stops_the_printing_but_not_the_run() {
    use std::io::{BufRead, BufReader};
    let errors = std::env::temp_dir().join(format!("lazarus-epipe-{}", std::process::id()));
    // `lazarus run ... | head -1`: the reader leaves after one line, the app goes on
    // printing and ends with a status of its own.
    let mut child = Command::new(LAUNCHER)
        .args(["run", "-n", "1", "--", "/bin/sh", "-c"])
        .arg("for i in $(seq 40); do echo line $i; sleep 0.01; done; exit 3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&errors).unwrap())
        .spawn()
        .expect("the launcher runs");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The read end is closed here.
    assert!(first.starts_with("node 0 pid "), "{first}");
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&errors).unwrap();
    let _ = std::fs::remove_file(&errors);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(3), "the app's status; stderr: {stderr}");
}

/// Output lines of a run with recovery on of `script` (`sh -c`) on `nodes` nodes: its
/// exit status, its standard output and error, and how long it took.
fn ft_run_of_script(nodes: &str, script: &str) -> (Option<i32>, String, String, f64) {
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = launcher_output(&[
        "run", "-n", nodes, "--ft", "on", "--", "/bin/sh", "-c", script,
    ]);
    (code, stdout, stderr, started.elapsed().as_secs_f64())
}

#[test]
fn a_node_that_fails_the_same_way_twice_before_its_first_checkpoint_is_not_restarted_again() {
    let (code, stdout, stderr, _) =
        ft_run_of_script("2", "echo 'error: no such input file' >&2; exit 3");
    assert_eq!(code, Some(3), "the app's status; {stdout}\n{stderr}");
    for rank in 0..2 {
        let starts = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("node {rank} pid ")))
            .count();
        assert_eq!(starts, 2, "started once and restarted once: {stdout}");
        let errors = stderr
            .matches(&format!("[{rank}] error: no such input file"))
            .count();
        assert_eq!(errors, 1, "the app's error is shown once: {stderr}");
        assert!(
            stderr.contains(&format!(
                "giving up: node {rank} exited with status 3 again before its first checkpoint"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_node_killed_again_and_again_is_restarted_each_time_with_a_growing_back_off() {
    // Killed by a signal: not an exit of its own, so restarted up to the limit, however
    // early it dies.
    let (code, stdout, stderr, took) = ft_run_of_script("1", "kill -KILL $$");
    assert_eq!(code, Some(128 + 9), "{stdout}\n{stderr}");
    let starts = stdout
        .lines()
        .filter(|l| l.starts_with("node 0 pid "))
        .count();
    assert_eq!(starts, 6, "started once and restarted 5 times: {stdout}");
    for (incarnation, wait) in [(2, 100), (3, 200), (4, 400), (5, 800)] {
        assert!(
            stdout.contains(&format!(
                "restarting as incarnation {incarnation} in {wait} ms"
            )),
            "{stdout}"
        );
    }
    assert!(
        took >= 1.5,
        "the restarts waited 1.5 s in all, not {took:.3} s"
    );
}

#[test]
fn a_metrics_address_that_is_not_host_and_port_is_refused_with_the_reason() {
    assert_option_refused("--metrics", "9100", "is not HOST:PORT");
    assert_option_refused("--metrics", "127.0.0.1:http", "is not a port");
    assert_option_refused("--metrics", ":9100", "has no host");
}

#[test]
fn metrics_ports_past_65535_are_refused_with_the_reason() {
    let (code, stderr) = launcher(&[
        "run",
        "-n",
        "3",
        "--metrics",
        "127.0.0.1:65534",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("past 65535"), "{stderr}");
}

#[test]
fn a_dashboard_port_in_use_and_an_unwritable_timeline_are_refused_before_any_node_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = launcher(&["run", "-n", "2", "--dashboard", &addr, "--", "/bin/true"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("--dashboard {addr}")), "{stderr}");
    let (code, stderr) = launcher(&[
        "run",
        "-n",
        "2",
        "--timeline",
        "/nonexistent-dir/run.jsonl",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--timeline /nonexistent-dir/run.jsonl"),
        "{stderr}"
    );
    let (code, stderr) = launcher(&[
        "run",
        "-n",
        "2",
        "--dashboard",
        "nowhere",
        "--",
        "/bin/true",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--dashboard"), "{stderr}");
}
