//! `jacobi2d` verifies against its sequential reference, and its checksum is bit-identical
//! whatever the number of nodes and the tile grid.

mod support;

use std::collections::HashMap;
use std::process::Command;
use support::{check_success, launcher, result_of};

const APP: &str = env!("CARGO_BIN_EXE_jacobi2d");

/// Runs the app alone.
fn alone(args: &[&str]) -> HashMap<String, String> {
    support::alone(APP, args)
}

/// Runs the app as a cluster of `nodes` processes under `lazarus run`.
fn cluster(nodes: usize, args: &[&str]) -> HashMap<String, String> {
    let out = Command::new(launcher(APP))
        .args(["run", "-n", &nodes.to_string(), "--", APP])
        .args(args)
        .output()
        .expect("launcher starts");
    let stdout = check_success(&format!("lazarus run -n {nodes} jacobi2d {args:?}"), &out);
    for rank in 0..nodes {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("node {rank} pid "))),
            "{stdout}"
        );
    }
    assert!(
        stdout.lines().any(|l| l.starts_with("[0] RESULT ")),
        "rank 0 prints the result: {stdout}"
    );
    result_of(&stdout)
}

const SMALL: &[&str] = &["--n", "128", "--iters", "50"];

#[test]
fn a_single_node_run_matches_the_sequential_reference() {
    let r = alone(SMALL);
    assert_eq!(r["app"], "jacobi2d");
    assert_eq!(r["nodes"], "1");
    assert_eq!(r["n"], "128");
    assert_eq!(r["iters"], "50");
    assert_eq!(r["check"], "full");
    assert_eq!(r["verified"], "true");
    assert!(r["checksum"].starts_with("0x"));
    assert!(r["mlups"].parse::<f64>().unwrap() > 0.0);
    // The windowed check (used for grids too big for the full one) agrees.
    let windows = alone(&["--n", "128", "--iters", "50", "--check", "windows"]);
    assert_eq!(windows["check"], "windows");
    assert_eq!(windows["verified"], "true");
    assert_eq!(windows["checksum"], r["checksum"]);
}

#[test]
fn two_and_four_nodes_give_the_single_node_result_bit_for_bit() {
    let one = alone(SMALL);
    for nodes in [2, 4] {
        let many = cluster(nodes, SMALL);
        assert_eq!(many["nodes"], nodes.to_string());
        assert_eq!(many["verified"], "true", "{many:?}");
        assert_eq!(many["checksum"], one["checksum"], "{nodes} nodes");
        assert_eq!(many["sum"], one["sum"], "{nodes} nodes");
    }
}

#[test]
fn the_tile_grid_does_not_change_the_result_even_when_tiles_are_uneven() {
    let square = alone(&["--n", "96", "--iters", "40", "--tiles", "2x2"]);
    let wide = alone(&["--n", "96", "--iters", "40", "--tiles", "4x2"]);
    let single = alone(&["--n", "96", "--iters", "40", "--tiles", "1x1"]);
    // 7 x 5 tiles do not divide 96: rows and columns of different sizes, spread over 3
    // nodes with a band boundary in the middle of a tile row.
    let uneven = cluster(3, &["--n", "96", "--iters", "40", "--tiles", "7x5"]);
    assert_eq!(wide["tiles"], "4x2");
    assert_eq!(uneven["tiles"], "7x5");
    for r in [&square, &wide, &single, &uneven] {
        assert_eq!(r["verified"], "true", "{r:?}");
        assert_eq!(r["checksum"], square["checksum"], "{r:?}");
        assert_eq!(r["sum"], square["sum"], "{r:?}");
    }
}

#[test]
fn halos_exchanged_by_puts_give_the_message_versions_result_bit_for_bit() {
    let messages = alone(SMALL);
    fn put<'a>(args: &[&'a str]) -> Vec<&'a str> {
        [SMALL, &["--halo", "put"], args].concat()
    }
    let single = alone(&put(&[]));
    // 128 rows over 3 nodes: strips of 42 and 43 rows.
    let uneven = cluster(3, &put(&[]));
    let four = cluster(4, &put(&["--tiles", "1x4"]));
    assert_eq!(four["tiles"], "1x4");
    for r in [&single, &uneven, &four] {
        assert_eq!(r["halo"], "put", "{r:?}");
        assert_eq!(r["verified"], "true", "{r:?}");
        assert_eq!(r["checksum"], messages["checksum"], "{r:?}");
        assert_eq!(r["sum"], messages["sum"], "{r:?}");
    }
    // Between hosts the puts take the message path: the same grid.
    let out = Command::new(launcher(APP))
        .args(["run", "-n", "2", "--", APP])
        .args(put(&[]))
        .env("LAZARUS_TRANSPORT", "quic")
        .output()
        .expect("launcher starts");
    let quic = result_of(&check_success("jacobi2d --halo put over QUIC", &out));
    assert_eq!(quic["checksum"], messages["checksum"], "{quic:?}");
}

#[test]
fn bad_command_line_input_is_a_clear_error() {
    for (args, expected) in [
        (&["--n", "0"][..], "--n must be between 1"),
        (
            &["--n", "4", "--tiles", "8x1"],
            "leaves tiles without points",
        ),
        (&["--tiles", "4"], "is not a tile grid"),
        (&["--tiles", "0x2"], "at least one tile"),
        (&["--iters", "many"], "--iters"),
        (
            &["--halo", "put", "--tiles", "2x2"],
            "one strip of rows per node (--tiles 1x1), not --tiles 2x2",
        ),
        (&["--halo", "puts"], "--halo"),
    ] {
        let out = Command::new(APP).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("RESULT"),
            "{args:?}"
        );
    }
}
