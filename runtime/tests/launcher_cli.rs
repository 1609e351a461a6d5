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
