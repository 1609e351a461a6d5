//! `lazarus run --metrics HOST:PORT`: every node serves its metrics for Prometheus at
//! PORT + rank while it runs, and a scraper sees the message, checkpoint and recovery
//! counters move, also across a SIGKILL (the replacement serves at the same address).

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};
use support::bin;
use support::launched::Launched;

const NODES: u16 = 3;

/// `NODES` consecutive free TCP ports on 127.0.0.1, the first returned.
fn free_port_run() -> u16 {
    let mut base = 20_000 + (std::process::id() % 20_000) as u16;
    for _ in 0..1000 {
        let free = (0..NODES).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            return base;
        }
        base = base.wrapping_add(NODES * 7).max(20_000);
    }
    panic!("no {NODES} consecutive free TCP ports on 127.0.0.1 in 1000 tries");
}

/// The samples of one scrape of `port`: series (name and labels, as printed) to value.
fn scrape(port: u16) -> Result<HashMap<String, f64>, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP body")?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200 ") {
        return Err(format!("not a 200 answer: {head}"));
    }
    Ok(body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect())
}

/// The sum of every series of metric `name` in `samples` (all label sets).
fn total(samples: &HashMap<String, f64>, name: &str) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .map(|(_, v)| v)
        .sum()
}

/// Scrapes `port` until `ok` holds for the samples (a node that is starting does not
/// answer yet), or panics after 60 s with the last samples.
fn scrape_until(
    port: u16,
    what: &str,
    ok: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Err(String::from("not scraped"));
    while Instant::now() < deadline {
        last = scrape(port);
        if let Ok(s) = &last {
            if ok(s) {
                return s.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("port {port}: {what} never seen; last scrape: {last:?}");
}

#[test]
fn a_scraper_sees_each_nodes_message_checkpoint_and_recovery_counters_move() {
    let port = free_port_run();
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        &NODES.to_string(),
        "--ft",
        "on",
        "--checkpoint-every",
        "300ms",
    ])
    .args(["--metrics", &format!("127.0.0.1:{port}")])
    .arg("--")
    .arg(bin("jacobi2d"))
    .args(["--n", "256", "--iters", "40000", "--check", "bounds"]);
    let mut run = Launched::spawn(cmd, NODES);
    run.wait_started();
    for rank in 0..NODES {
        let want = format!(
            "node {rank} metrics at http://127.0.0.1:{}/metrics",
            port + rank
        );
        run.wait_for_seen(&want, |l| l.contains(&want));
    }

    // Every node counts its messages and checkpoints, labelled with its rank.
    let first: Vec<HashMap<String, f64>> = (0..NODES)
        .map(|rank| {
            scrape_until(port + rank, "a message and a checkpoint", |s| {
                total(s, "lazarus_messages_delivered_total") > 0.0
                    && total(s, "lazarus_checkpoints_total") > 0.0
            })
        })
        .collect();
    for (rank, s) in first.iter().enumerate() {
        assert!(
            s.keys().any(|k| k.starts_with("lazarus_checkpoints_total{")
                && k.contains(&format!("rank=\"{rank}\""))),
            "node {rank}'s series carry its rank: {:?}",
            s.keys().collect::<Vec<_>>()
        );
        assert!(
            !s.keys().any(|k| k.contains("actor_id=")),
            "no per-actor series without LAZARUS_METRICS_PER_ACTOR=1"
        );
    }
    // ... and they move.
    let before = &first[2];
    scrape_until(port + 2, "the counters moving", |s| {
        total(s, "lazarus_messages_delivered_total")
            > total(before, "lazarus_messages_delivered_total")
            && total(s, "lazarus_checkpoints_total") > total(before, "lazarus_checkpoints_total")
    });

    // A SIGKILL: the survivors resend logged messages (recovery counters), and the
    // replacement serves at the node's address again, with its rollback counted.
    run.kill(1);
    run.wait_for("node 1's replacement restored", |l| {
        l.contains("node 1: actors restored")
    });
    scrape_until(port + 1, "the replacement's rollback", |s| {
        total(s, "lazarus_recovery_rollbacks_total") >= 1.0
            && total(s, "lazarus_messages_delivered_total") > 0.0
    });
    let resent: f64 = [0, 2]
        .iter()
        .map(|&r| {
            total(
                &scrape(port + r).expect("a survivor answers"),
                "lazarus_recovery_replayed_total",
            )
        })
        .sum();
    assert!(
        resent > 0.0,
        "the survivors count the logged messages they resent"
    );

    let f = run.finish();
    assert_eq!(f.verified()["verified"], "true", "the answer is right");
}
