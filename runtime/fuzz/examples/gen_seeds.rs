//! Writes the seed corpus of the `frame_decoder` fuzz target.
//!
//! `cargo run --manifest-path runtime/fuzz/Cargo.toml --example gen_seeds [DIR]`
//! (default DIR: `runtime/fuzz/corpus/frame_decoder`). Each seed is one selector byte
//! (chunking, see the target) followed by a frame stream.

use lazarus::transport::frame::{self, Envelope, FrameBody, RemoteError, VERSION};
use lazarus::ActorId;
use std::path::PathBuf;

fn stream(bodies: &[FrameBody]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        frame::encode(b, &mut out).unwrap();
    }
    out
}

fn seed(sel: u8, bytes: &[u8]) -> Vec<u8> {
    let mut s = vec![sel];
    s.extend_from_slice(bytes);
    s
}

fn main() {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/frame_decoder"))
        });
    std::fs::create_dir_all(&dir).unwrap();
    let id = ActorId::new(3, 9).unwrap();

    let mut malformed = vec![b'L', b'Z', VERSION, 0, 3, 0, 0, 0, 0xff, 0xff, 0xff];
    malformed.extend(stream(&[FrameBody::Goodbye]));

    // Body length 4100 > the target's 4096 limit: skipped, then a Heartbeat follows.
    let mut oversized = vec![b'L', b'Z', VERSION, 0];
    oversized.extend(4100u32.to_le_bytes());
    oversized.extend(std::iter::repeat_n(0xAA, 4100));
    oversized.extend(stream(&[FrameBody::Heartbeat]));

    let mut bad_version = stream(&[FrameBody::Heartbeat]);
    bad_version[2] = VERSION + 1;

    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "seed-control",
            seed(
                0,
                &stream(&[
                    FrameBody::Hello { rank: 1, size: 4, incarnation: 0, shm: None, rdma: None },
                    FrameBody::Heartbeat,
                    FrameBody::Goodbye,
                ]),
            ),
        ),
        (
            "seed-envelope",
            seed(
                0x27,
                &stream(&[
                    FrameBody::Envelope(Envelope {
                        to: id,
                        from: id,
                        type_tag: 42,
                        request: Some(7),
                        payload: vec![1, 2, 3, 4, 5].into(),
                    }),
                    FrameBody::Envelope(Envelope {
                        to: id,
                        from: id,
                        type_tag: u64::MAX,
                        request: None,
                        payload: vec![].into(),
                    }),
                ]),
            ),
        ),
        (
            "seed-reply",
            seed(
                0x61,
                &stream(&[
                    FrameBody::Reply {
                        request: 7,
                        outcome: Ok(vec![9, 8, 7]),
                    },
                    FrameBody::Reply {
                        request: 8,
                        outcome: Err(RemoteError::Undecodable(id, "bad tag".into())),
                    },
                    FrameBody::Reply {
                        request: 300,
                        outcome: Err(RemoteError::UnknownActor(id)),
                    },
                ]),
            ),
        ),
        (
            "seed-barrier",
            seed(
                0xE3,
                &stream(&[
                    FrameBody::BarrierArrive {
                        epoch: 1 << 40,
                        rank: 2,
                    },
                    FrameBody::BarrierRelease { epoch: 1 << 40 },
                ]),
            ),
        ),
        ("seed-malformed-then-goodbye", seed(0x01, &malformed)),
        ("seed-oversized-then-heartbeat", seed(0x45, &oversized)),
        ("seed-bad-magic", seed(0, b"GET / HTTP/1.1\r\n\r\n")),
        ("seed-bad-version", seed(0x10, &bad_version)),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    println!("wrote seeds to {}", dir.display());
}
