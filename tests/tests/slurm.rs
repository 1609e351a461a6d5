//! The same app binary (ring, pingpong, the NPB kernels) forms its cluster from Slurm's
//! environment under a real `srun`, with no extra flags. Needs the single-host Slurm that
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
    eprintln!("skipping: run scripts/slurm-setup.sh and set LAZARUS_TEST_SLURM=1 (scripts/test.sh does both)");
    false
}

fn srun(args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .arg(Duration::from_secs(120).as_secs().to_string())
        .args(["srun", "-n", "4", "--overcommit"])
        .args(args)
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
