//! The miniapps run end to end and print a verified, machine-readable RESULT line last.

use lazarus_apps::parse_result_line;
use std::collections::HashMap;
use std::process::Command;

fn run(bin: &str, args: &[&str]) -> HashMap<String, String> {
    let out = Command::new(bin).args(args).output().expect("app starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{bin} {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    parse_result_line(last)
        .unwrap_or_else(|| panic!("last line is not a RESULT line: {last}"))
        .into_iter()
        .collect()
}

#[test]
fn ring_verifies_and_its_checksum_does_not_depend_on_placement() {
    let all_cores = run(
        env!("CARGO_BIN_EXE_ring"),
        &["--actors", "6", "--hops", "20000"],
    );
    let one_core = run(
        env!("CARGO_BIN_EXE_ring"),
        &["--actors", "6", "--hops", "20000", "--cores", "1"],
    );
    assert_eq!(all_cores["app"], "ring");
    assert_eq!(all_cores["verified"], "true");
    assert_eq!(one_core["verified"], "true");
    assert_eq!(all_cores["checksum"], one_core["checksum"]);
    assert_eq!(all_cores["hops"], "20000");
}

#[test]
fn pingpong_sweeps_sizes_and_gets_every_payload_back_intact() {
    let r = run(
        env!("CARGO_BIN_EXE_pingpong"),
        &["--min-size", "8", "--max-size", "65536", "--iters", "200"],
    );
    assert_eq!(r["app"], "pingpong");
    assert_eq!(r["sizes"], "14");
    assert_eq!(r["verified"], "true");
}

#[test]
fn bad_command_line_input_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_pingpong"))
        .args(["--min-size", "64", "--max-size", "8"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--min-size"));
    let out = Command::new(env!("CARGO_BIN_EXE_ring"))
        .args(["--cores", "4096"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cores requested"));
}
