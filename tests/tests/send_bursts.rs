//! Two actors on different nodes that each send the other a burst far larger than the
//! backpressure allows (the peer's send queue, QUIC's window and the receiver's 4096
//! messages before it stops reading) in one handler turn, at the same time, both
//! finish: a node whose handler waits for room to send keeps reading from its peers, so
//! neither waits for the other for ever (docs/semantics.md, "Across nodes").

mod support;

use lazarus::{messages, Actor, ActorRef, Payload};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use support::in_process::{checkpoint_dir, two_nodes_declared_failed_after};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Burster {
    received: u64,
}

#[messages]
impl Burster {
    /// Sends `count` messages of `size` bytes to `to`, all in this one turn.
    #[message]
    fn burst(&mut self, to: ActorRef<Burster>, count: u64, size: usize) {
        for _ in 0..count {
            to.tell(Take {
                data: Payload(vec![1; size]),
            })
            .expect("the peer is up");
        }
    }

    #[message]
    fn take(&mut self, data: Payload) {
        assert!(!data.0.is_empty());
        self.received += 1;
    }

    #[message]
    fn received(&mut self) -> u64 {
        self.received
    }
}

/// 20,000 messages of 4 KiB each way: 80 MB, beyond every buffer between the two (the
/// stream window alone is 32 MiB).
const COUNT: u64 = 20_000;
const SIZE: usize = 4096;

fn crossing_bursts_both_arrive(name: &'static str, recovery: bool) {
    // Run where a deadlock cannot take the test with it: the test thread only waits
    // for the verdict (`main`'s own tells and asks would wait for ever too).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(both_bursts_arrive(name, recovery));
    });
    match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(received) => assert_eq!(received, (COUNT, COUNT)),
        Err(_) => panic!("the crossing bursts never finished: the two nodes wait for each other"),
    }
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, recovery));
}

/// What each actor has received once both have all (or as much as they got by then).
fn both_bursts_arrive(name: &str, recovery: bool) -> (u64, u64) {
    // Handlers block for seconds here by design; the peers must not take that for death.
    let (node0, node1) =
        two_nodes_declared_failed_after(name, recovery, Some(Duration::from_secs(60)));
    let a = node0.spawn(Burster::default()).unwrap();
    let b = node1.spawn(Burster::default()).unwrap();
    let b_from_0 = node0.handle().actor_ref::<Burster>(b.id()).unwrap();
    let a_from_1 = node1.handle().actor_ref::<Burster>(a.id()).unwrap();
    b_from_0
        .tell(Burst {
            to: a_from_1,
            count: COUNT,
            size: SIZE,
        })
        .unwrap();
    a.tell(Burst {
        to: b_from_0.clone(),
        count: COUNT,
        size: SIZE,
    })
    .unwrap();
    let received = |r: &ActorRef<Burster>| {
        node0
            .block_on(r.ask(Received).timeout(Duration::from_secs(5)))
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut got = (0, 0);
    while got != (COUNT, COUNT) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        got = (received(&a), received(&b_from_0));
    }
    node1.shutdown();
    node0.shutdown();
    got
}

#[test]
fn crossing_bursts_between_two_nodes_both_arrive() {
    crossing_bursts_both_arrive("bursts-off", false);
}

#[test]
fn with_recovery_on_crossing_bursts_between_two_nodes_both_arrive() {
    crossing_bursts_both_arrive("bursts-on", true);
}
