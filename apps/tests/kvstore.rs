//! `kvstore` without failures: alone and on 4 nodes, with recovery off and on, every
//! request is answered once, every client's replies agree with what each shard says it
//! sent, and the final store is the one the puts' replies imply.

mod support;

use std::collections::HashMap;
use std::process::Command;
use support::{check_success, launcher, result_of};

const APP: &str = env!("CARGO_BIN_EXE_kvstore");

/// Runs the app alone.
fn alone(args: &[&str]) -> HashMap<String, String> {
    support::alone(APP, args)
}

/// Runs the app on 4 nodes under `lazarus run` with `launcher_args`; returns its RESULT
/// and the launcher's whole standard output.
fn four_nodes(launcher_args: &[&str], args: &[&str]) -> (HashMap<String, String>, String) {
    let out = Command::new(launcher(APP))
        .args(["run", "-n", "4"])
        .args(launcher_args)
        .arg("--")
        .arg(APP)
        .args(args)
        .output()
        .expect("launcher starts");
    let stdout = check_success(
        &format!("lazarus run {launcher_args:?} kvstore {args:?}"),
        &out,
    );
    (result_of(&stdout), stdout)
}

/// The run answered `requests` requests and every check held.
fn assert_verified(r: &HashMap<String, String>, requests: u64) {
    assert_eq!(r["app"], "kvstore");
    assert_eq!(r["answered"], requests.to_string(), "{r:?}");
    assert_eq!(r["consistent"], "true", "{r:?}");
    assert_eq!(r["history"], "true", "{r:?}");
    assert_eq!(r["verified"], "true", "{r:?}");
    assert!(r["puts"].parse::<u64>().unwrap() > 0, "the mix has puts");
    assert!(r["replies"].starts_with("0x") && r["store"].starts_with("0x"));
}

#[test]
fn alone_many_clients_contending_on_few_keys_verify() {
    let r = alone(&[
        "--ops",
        "500",
        "--keys",
        "4",
        "--shards-per-node",
        "3",
        "--clients-per-node",
        "4",
    ]);
    assert_eq!(r["nodes"], "1");
    assert_eq!(r["shards"], "3");
    assert_eq!(r["clients"], "4");
    assert_verified(&r, 4 * 500);
    // Without --measure the line carries no timing.
    assert!(!r.contains_key("ops_per_s"));
}

#[test]
fn every_put_or_every_get_verifies_too() {
    let puts = alone(&["--ops", "300", "--write-percent", "100"]);
    assert_verified(&puts, 300);
    assert_eq!(puts["puts"], "300");
    let gets = alone(&["--ops", "300", "--write-percent", "0"]);
    assert_eq!(gets["verified"], "true", "{gets:?}");
    assert_eq!(gets["puts"], "0");
}

#[test]
fn measure_adds_the_throughput() {
    let r = alone(&["--ops", "300", "--measure"]);
    assert_verified(&r, 300);
    assert!(r["ops_per_s"].parse::<f64>().unwrap() > 0.0);
    assert!(r["elapsed_s"].parse::<f64>().unwrap() > 0.0);
}

#[test]
fn four_nodes_verify_with_recovery_off_and_on() {
    let args = ["--ops", "300", "--keys", "16", "--shards-per-node", "2"];
    let (off, _) = four_nodes(&[], &args);
    assert_eq!(off["nodes"], "4");
    assert_eq!(off["shards"], "8");
    assert_eq!(off["clients"], "4");
    assert_verified(&off, 4 * 300);
    let (on, stdout) = four_nodes(&["--ft", "on", "--checkpoint-every", "300ms"], &args);
    assert_verified(&on, 4 * 300);
    // With recovery on, the shards' deliveries and draws were recorded as determinants.
    let determinants: u64 = stdout
        .lines()
        .filter(|l| l.contains(": final "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("determinants="))
        })
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    assert!(
        determinants >= 4 * 300,
        "one per request at least: {stdout}"
    );
}

#[test]
fn bad_command_lines_are_clear_errors() {
    for (args, expected) in [
        (&["--keys", "0"][..], "--keys"),
        (&["--write-percent", "101"][..], "--write-percent"),
        (&["--shards-per-node", "0"][..], "--shards-per-node"),
    ] {
        let out = Command::new(APP).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} is refused");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
