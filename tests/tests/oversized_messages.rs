//! A message or a reply too large for a frame between nodes (64 MiB less 1 MiB of room
//! for metadata) is refused where it is made, with an error that says so, and nothing
//! else is lost: the channel to that node keeps working, also with recovery on, where a
//! message skipped on arrival would have left a gap its channel waited on for ever.

mod support;

use lazarus::transport::frame::{max_payload, DEFAULT_MAX_BODY};
use lazarus::{messages, Actor, AskError, Payload, SendError};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use support::in_process::{checkpoint_dir, two_nodes_declared_failed_after};

#[derive(Actor, Serialize, Deserialize, Default)]
struct Sink {
    received: Vec<usize>,
}

#[messages]
impl Sink {
    #[message]
    fn take(&mut self, data: Payload) {
        self.received.push(data.0.len());
    }

    /// A reply of `len` bytes.
    #[message]
    fn make(&mut self, len: usize) -> Payload {
        Payload(vec![7; len])
    }

    #[message]
    fn received(&mut self) -> Vec<usize> {
        self.received.clone()
    }
}

fn refused_and_the_channel_still_works(name: &str, recovery: bool) {
    // A single-core node makes network progress on its core between handlers (see
    // `NetMode::Core0`), and a handler here builds 63 MiB: on a loaded two-core machine
    // its heartbeats can pause past the default second, and a peer declared failed fails
    // the asks waiting on it (seen in CI as `ActorStopped`).
    let (node0, node1) =
        two_nodes_declared_failed_after(name, recovery, Some(Duration::from_secs(30)));
    let sink = node1.spawn(Sink::default()).unwrap();
    let sink = node0.handle().actor_ref::<Sink>(sink.id()).unwrap();
    let too_large = max_payload(DEFAULT_MAX_BODY) + 1;

    sink.tell(Take {
        data: Payload(vec![1; 1000]),
    })
    .unwrap();
    match sink.tell(Take {
        data: Payload(vec![1; too_large]),
    }) {
        Err(SendError::Unreachable {
            reason, message, ..
        }) => {
            assert!(reason.contains("bytes a message between nodes"), "{reason}");
            assert_eq!(
                message.data.0.len(),
                too_large,
                "the message is handed back"
            );
        }
        other => panic!("a message over the limit must be refused: {other:?}"),
    }
    // An ask whose message is too large fails at once, saying why.
    match node0.block_on(sink.ask(Take {
        data: Payload(vec![1; too_large]),
    })) {
        Err(AskError::Rejected { reason, .. } | AskError::Unreachable { reason, .. }) => {
            assert!(reason.contains("bytes a message between nodes"), "{reason}")
        }
        other => panic!("an ask over the limit must fail: {other:?}"),
    }
    sink.tell(Take {
        data: Payload(vec![1; 2000]),
    })
    .unwrap();

    // A reply over the limit comes back as the error saying so, not as a wait.
    match node0.block_on(sink.ask(Make { len: too_large })) {
        Err(AskError::Rejected { reason, .. }) => {
            assert!(reason.contains("bytes a message between nodes"), "{reason}")
        }
        other => panic!(
            "a reply over the limit must fail the ask: {:?}",
            other.map(|p| p.0.len())
        ),
    }
    assert_eq!(
        node0.block_on(sink.ask(Make { len: 10 })).unwrap().0.len(),
        10
    );
    assert_eq!(
        node0.block_on(sink.ask(Received)).unwrap(),
        [1000, 2000],
        "the messages before and after the refused one arrived, in order"
    );
    node1.shutdown();
    node0.shutdown();
    let _ = std::fs::remove_dir_all(checkpoint_dir(name, recovery));
}

#[test]
fn a_message_or_reply_too_large_for_a_frame_is_refused_and_the_channel_keeps_working() {
    refused_and_the_channel_still_works("oversized-off", false);
}

#[test]
fn with_recovery_on_a_refused_oversized_message_leaves_no_gap_in_its_channel() {
    refused_and_the_channel_still_works("oversized-on", true);
}
