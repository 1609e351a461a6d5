//! A run that cannot go on is never silent: a node that holds messages back without
//! delivering, receiving or sending anything for the stall bound says what it waits for
//! (timeline event `stalled`), naming the channel, the index it lacks and the node it
//! comes from; and the launcher's watchdog ends the run with a non-zero exit.
//!
//! The stall is made on purpose: the `withhold:RANK:K` failpoint drops the `K`-th logged
//! message node `RANK` receives, so that channel waits for it for ever.

mod support;

use std::process::Command;
use std::time::Duration;
use support::bin;
use support::launched::Launched;

#[test]
fn a_withheld_logged_message_is_named_by_the_stall_report_and_the_run_ends_non_zero() {
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "3",
        "--ft",
        "on",
        "--checkpoint-every",
        "1s",
        "--stall-timeout",
        "6s",
        "--",
    ])
    .arg(bin("jacobi2d"))
    .args(["--n", "256", "--iters", "200000"])
    .env("LAZARUS_FAILPOINT", "withhold:1:40")
    .env("LAZARUS_STALL_AFTER", "2s");
    let mut run = Launched::spawn(cmd, 3);
    let withheld = run.wait_for("the withheld message", |l| {
        l.contains("failpoint: node 1 withholds logged message")
    });
    let field = |key: &str| {
        withheld
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {withheld:?}"))
            .to_string()
    };
    let index: u64 = field("index=").parse().expect("an index");
    let channel = field("channel=");
    let report = run.wait_for("node 1's stall report", |l| {
        l.contains("node 1: stalled") || l.contains("node 1 stalled")
    });
    assert!(
        report.contains(&format!("{channel} delivered={}", index - 1))
            && report.contains(&format!("waits for index {index} (a gap)")),
        "the report names channel {channel} and the index {index} it lacks: {report}"
    );
    let f = run.finish_within(Duration::from_secs(60));
    assert!(
        !f.success,
        "a run that cannot finish ends with a non-zero exit: {:?}",
        f.code
    );
}
