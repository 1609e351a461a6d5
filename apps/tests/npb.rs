//! The NPB kernels pass the official NPB verification for class S alone and as clusters of
//! 2 and 4 nodes under `lazarus run`, and their verification quantities are bit-identical
//! whatever the number of nodes and workers. (With recovery on and a node killed mid-run:
//! `tests/tests/npb_recovery.rs`.)

mod support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use support::{alone, check_success, launcher, result_of};

const EP: &str = env!("CARGO_BIN_EXE_npb-ep");
const CG: &str = env!("CARGO_BIN_EXE_npb-cg");
const IS: &str = env!("CARGO_BIN_EXE_npb-is");
const MG: &str = env!("CARGO_BIN_EXE_npb-mg");

/// Held by every test while it runs apps: one app (or cluster of node processes) at a time.
/// Cargo runs tests in parallel, and several 4-node clusters at once on a small machine
/// starve node processes for long enough to trip the 1 s failure detector.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A failed test poisons the lock; the others still run.
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `app` as a cluster of `nodes` processes under `lazarus run`.
fn cluster(nodes: usize, app: &str, args: &[&str]) -> HashMap<String, String> {
    let out = Command::new(launcher(EP))
        .args(["run", "-n", &nodes.to_string(), "--", app])
        .args(args)
        .output()
        .expect("launcher starts");
    let stdout = check_success(&format!("lazarus run -n {nodes} {app} {args:?}"), &out);
    assert!(
        stdout.lines().any(|l| l.starts_with("[0] RESULT ")),
        "rank 0 prints the result: {stdout}"
    );
    result_of(&stdout)
}

/// Runs `app` with `args` alone and on 2 and 4 nodes; checks that every run verifies and
/// reports the same `keys` bit for bit. Returns the single-node result.
fn same_everywhere(app: &str, args: &[&str], keys: &[&str]) -> HashMap<String, String> {
    let one = alone(app, args);
    assert_eq!(one["verified"], "true", "{one:?}");
    assert_eq!(one["nodes"], "1");
    for nodes in [2, 4] {
        let many = cluster(nodes, app, args);
        assert_eq!(many["nodes"], nodes.to_string());
        assert_eq!(many["verified"], "true", "{nodes} nodes: {many:?}");
        for key in keys {
            assert_eq!(many[*key], one[*key], "{key} on {nodes} nodes");
        }
    }
    one
}

/// A command line the app must refuse with a message containing `expected`, without
/// printing a RESULT line.
fn refused(app: &str, args: &[&str], expected: &str) {
    let out = Command::new(app).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{app} {args:?} was accepted");
    assert!(stderr.contains(expected), "{app} {args:?}: {stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("RESULT"),
        "{app} {args:?}"
    );
}

/// Whether `key` of a RESULT is within relative error `tolerance` of `reference`.
fn within(r: &HashMap<String, String>, key: &str, reference: f64, tolerance: f64) -> bool {
    ((float(r, key) - reference) / reference).abs() <= tolerance
}

fn float(r: &HashMap<String, String>, key: &str) -> f64 {
    r[key]
        .parse()
        .unwrap_or_else(|_| panic!("{key}={} is not a number", r[key]))
}

#[test]
fn ep_class_s_verifies_on_1_2_and_4_nodes_with_identical_sums() {
    let _serial = serial();
    let r = same_everywhere(EP, &["--class", "S"], &["sx", "sy", "counts"]);
    assert_eq!(r["app"], "npb-ep");
    assert_eq!(r["class"], "S");
    assert_eq!(r["m"], "24");
    // The official verification is relative error <= 1e-8 on both sums.
    assert!(within(&r, "sx", -3.24783465203474e3, 1e-8));
    assert!(within(&r, "sy", -6.958407078382297e3, 1e-8));
    // The counts are integers, the same as any correct EP class S run prints.
    assert_eq!(r["gaussian_pairs"], "13176389");
    let counts: u64 = r["counts"]
        .split(',')
        .map(|c| c.parse::<u64>().unwrap())
        .sum();
    assert_eq!(counts, 13176389);
    assert!(float(&r, "mops") > 0.0);
}

#[test]
fn ep_sums_do_not_depend_on_how_batches_are_split_over_actors() {
    let _serial = serial();
    let one = alone(EP, &["--class", "S", "--batches-per-actor", "1"]);
    let seven = alone(
        EP,
        &["--class", "S", "--batches-per-actor", "7", "--cores", "1"],
    );
    assert_eq!(one["actors"], "256");
    // 256 batches in chunks of 7: the last actor gets the remaining 4.
    assert_eq!(seven["actors"], "37");
    for r in [&one, &seven] {
        assert_eq!(r["verified"], "true");
    }
    assert_eq!(one["sx"], seven["sx"]);
    assert_eq!(one["sy"], seven["sy"]);
    assert_eq!(one["counts"], seven["counts"]);
}

#[test]
fn cg_class_s_verifies_on_1_2_and_4_nodes_with_identical_zeta() {
    let _serial = serial();
    let r = same_everywhere(CG, &["--class", "S"], &["zeta", "rnorm"]);
    assert_eq!(r["app"], "npb-cg");
    assert_eq!(r["na"], "1400");
    // The official verification: relative error of zeta <= 1e-10.
    assert!(within(&r, "zeta", 8.5971775078648, 1e-10));
    // A converged inverse power iteration leaves a tiny residual.
    assert!(float(&r, "rnorm") < 1e-12);
}

#[test]
fn cg_zeta_does_not_depend_on_the_number_of_workers() {
    let _serial = serial();
    let two = alone(CG, &["--class", "S", "--workers", "2"]);
    let five = alone(CG, &["--class", "S", "--workers", "5", "--cores", "1"]);
    assert_eq!(five["workers"], "5");
    for r in [&two, &five] {
        assert_eq!(r["verified"], "true");
    }
    assert_eq!(two["zeta"], five["zeta"]);
    assert_eq!(two["rnorm"], five["rnorm"]);
}

#[test]
fn is_class_s_passes_every_partial_and_the_full_verification_on_1_2_and_4_nodes() {
    let _serial = serial();
    let r = same_everywhere(IS, &["--class", "S"], &["ranks", "passed"]);
    assert_eq!(r["app"], "npb-is");
    assert_eq!(r["keys"], "65536");
    assert_eq!(r["iterations"], "10");
    // NPB's count: 5 test keys ranked right in each of 10 iterations, and the full sort.
    assert_eq!(r["partial_passed"], "50");
    assert_eq!(r["partial_checks"], "50");
    assert_eq!(r["full_verify"], "true");
    assert_eq!(r["passed"], "51/51");
}

#[test]
fn is_ranks_do_not_depend_on_the_number_of_workers() {
    let _serial = serial();
    let two = alone(IS, &["--class", "S", "--workers", "2"]);
    let seven = alone(IS, &["--class", "S", "--workers", "7", "--cores", "1"]);
    assert_eq!(seven["workers"], "7");
    for r in [&two, &seven] {
        assert_eq!(r["verified"], "true");
        assert_eq!(r["passed"], "51/51");
    }
    assert_eq!(two["ranks"], seven["ranks"]);
}

#[test]
fn mg_class_s_verifies_on_1_2_and_4_nodes_with_identical_norms() {
    let _serial = serial();
    let r = same_everywhere(MG, &["--class", "S"], &["rnm2", "rnmu"]);
    assert_eq!(r["app"], "npb-mg");
    assert_eq!(r["n"], "32");
    assert_eq!(r["iterations"], "4");
    // The official verification: relative error of the L2 norm <= 1e-8.
    assert!(within(&r, "rnm2", 0.5307707005734e-04, 1e-8));
}

#[test]
fn mg_norms_do_not_depend_on_the_slabs() {
    let _serial = serial();
    // One worker, uneven slabs, and as many workers as planes (on the coarser levels most
    // of them own nothing).
    let runs: Vec<_> = ["1", "3", "32"]
        .iter()
        .map(|w| alone(MG, &["--class", "S", "--workers", w, "--cores", "1"]))
        .collect();
    for r in &runs {
        assert_eq!(r["verified"], "true", "{r:?}");
        assert_eq!(r["rnm2"], runs[0]["rnm2"], "{r:?}");
        assert_eq!(r["rnmu"], runs[0]["rnmu"], "{r:?}");
    }
}

#[test]
fn every_app_explains_which_node_counts_it_accepts() {
    let _serial = serial();
    for app in [EP, CG, IS, MG] {
        let out = Command::new(app).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{app} --help");
        assert!(help.contains("any number of nodes N >= 1"), "{app}: {help}");
        assert!(help.contains("--class"), "{app}: {help}");
    }
}

#[test]
fn bad_command_lines_are_clear_errors() {
    let _serial = serial();
    refused(EP, &["--class", "X"], "--class");
    refused(
        EP,
        &["--batches-per-actor", "0"],
        "--batches-per-actor must be between 1 and 256",
    );
    refused(
        CG,
        &["--workers", "65"],
        "--workers must be between 1 and 64",
    );
    refused(CG, &["--class", "B"], "--class");
    refused(
        IS,
        &["--workers", "513"],
        "--workers must be between 1 and 512",
    );
    refused(
        MG,
        &["--workers", "33"],
        "--workers must be between 1 and 32",
    );
    refused(MG, &["--class", "C"], "--class");
}
