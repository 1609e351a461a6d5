//! Fuzz target for `lazarus::transport::frame::FrameDecoder`.
//!
//! Input layout: `data[0]` chooses how the rest is split into `push` chunks (see
//! [`Chunks`]); `data[1..]` is the byte stream.
//!
//! Checked on every input:
//! 1. Raw stream: the decoder never panics, every result that is not `Ok(None)` consumes at
//!    least one header (so the pull loop terminates: results <= bytes / 8), and after a fatal
//!    error it returns `Ok(None)` forever, whatever is pushed afterwards.
//! 2. Round trip: every decoded `FrameBody` re-encodes with `frame::encode` to one frame
//!    that decodes back to an equal value (and re-encoding that is byte-identical); the
//!    concatenation of all re-encoded frames decodes to the same sequence.
//! 3. Resync: the stream bytes framed as one body (valid header) and followed by a valid
//!    sentinel frame yield one result for the garbage frame (a frame, `Malformed` or
//!    `Oversized`, never fatal) and then the sentinel: a non-fatal error costs only itself.
#![no_main]

use lazarus::transport::frame::{self, FrameBody, FrameDecoder, FrameError, HEADER_LEN, VERSION};
use libfuzzer_sys::fuzz_target;

/// Small body limit so that the oversized/skip path is reachable with small inputs.
const MAX_BODY: usize = 4096;

/// Splits a byte slice into chunks whose sizes are derived from one selector byte.
///
/// `sel == 0`: one chunk. Otherwise the top 3 bits pick the largest chunk size
/// (1, 2, 4, ..., 128) and the sizes 1..=max are drawn from a xorshift seeded by `sel`.
struct Chunks<'a> {
    rest: &'a [u8],
    max: usize,
    state: u32,
}

impl<'a> Chunks<'a> {
    fn new(sel: u8, bytes: &'a [u8]) -> Self {
        let max = if sel == 0 {
            usize::MAX
        } else {
            1 << (sel >> 5)
        };
        Chunks {
            rest: bytes,
            max,
            state: 0x9E37_79B9 ^ u32::from(sel),
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let n = if self.max == usize::MAX {
            self.rest.len()
        } else {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 17;
            self.state ^= self.state << 5;
            1 + (self.state as usize % self.max)
        };
        let (head, tail) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = tail;
        Some(head)
    }
}

/// One observable outcome of `next_frame` other than `Ok(None)`.
#[derive(Debug)]
enum Event {
    Frame(FrameBody),
    Error(FrameError),
}

/// Pushes `stream` in chunks chosen by `sel` and pulls until each chunk is exhausted,
/// checking termination and poisoning. Returns every non-`Ok(None)` result in order.
fn drive(sel: u8, stream: &[u8], max_body: usize) -> Vec<Event> {
    let mut d = FrameDecoder::new(max_body);
    let mut events = Vec::new();
    let mut pushed = 0usize;
    let mut poisoned = false;
    for chunk in Chunks::new(sel, stream) {
        d.push(chunk);
        pushed += chunk.len();
        loop {
            let r = d.next_frame();
            if poisoned {
                assert!(
                    matches!(r, Ok(None)),
                    "decoder returned {r:?} after a fatal error"
                );
                break;
            }
            match r {
                Ok(None) => break,
                Ok(Some(f)) => events.push(Event::Frame(f)),
                Err(e) => {
                    poisoned = e.is_fatal();
                    events.push(Event::Error(e));
                }
            }
            // Every frame or error consumes at least a header; anything else means the
            // pull loop would spin forever.
            assert!(
                events.len() <= pushed / HEADER_LEN,
                "{} results from only {pushed} bytes: decoder is not making progress",
                events.len()
            );
        }
    }
    // Nothing more without more input; a poisoned decoder stays silent even when fed.
    assert!(
        matches!(d.next_frame(), Ok(None)),
        "result without new input"
    );
    if poisoned {
        let mut ok = Vec::new();
        frame::encode(&FrameBody::Heartbeat, &mut ok).unwrap();
        d.push(&ok);
        assert!(
            matches!(d.next_frame(), Ok(None)),
            "poisoned decoder decoded a frame"
        );
    }
    events
}

/// Decodes exactly one frame from `bytes` (pushed in one piece).
fn decode_one(bytes: &[u8]) -> FrameBody {
    let mut d = FrameDecoder::new(MAX_BODY);
    d.push(bytes);
    let f = match d.next_frame() {
        Ok(Some(f)) => f,
        other => panic!("re-encoded frame did not decode: {other:?}, bytes {bytes:02x?}"),
    };
    assert!(
        matches!(d.next_frame(), Ok(None)),
        "re-encoded frame left bytes behind"
    );
    f
}

fn check_round_trip(sel: u8, frames: &[FrameBody]) {
    let mut all = Vec::new();
    for f in frames {
        let mut enc = Vec::new();
        frame::encode(f, &mut enc).expect("encode of a decoded frame failed");
        assert_eq!(&enc[..2], b"LZ");
        assert_eq!(enc[2], VERSION);
        let len = u32::from_le_bytes(enc[4..8].try_into().unwrap()) as usize;
        assert_eq!(
            len,
            enc.len() - HEADER_LEN,
            "header length does not match body"
        );
        assert!(
            len <= MAX_BODY,
            "canonical re-encoding grew past the body limit"
        );
        let back = decode_one(&enc);
        assert_eq!(&back, f, "round trip changed the frame");
        let mut enc2 = Vec::new();
        frame::encode(&back, &mut enc2).unwrap();
        assert_eq!(enc, enc2, "encoding is not deterministic");
        // encode appends: existing bytes in `out` must be kept.
        let before = all.len();
        frame::encode(f, &mut all).unwrap();
        assert_eq!(
            &all[before..],
            &enc[..],
            "encode into a non-empty buffer differs"
        );
    }
    let again: Vec<FrameBody> = drive(sel, &all, MAX_BODY)
        .into_iter()
        .map(|e| match e {
            Event::Frame(f) => f,
            Event::Error(e) => panic!("re-encoded stream produced error {e:?}"),
        })
        .collect();
    assert_eq!(again, frames, "re-encoded stream decoded differently");
}

fn sentinel() -> FrameBody {
    FrameBody::BarrierRelease { epoch: 0x5EED_F00D }
}

/// Body length of the encoded [`sentinel`].
fn sentinel_body_len() -> usize {
    let mut enc = Vec::new();
    frame::encode(&sentinel(), &mut enc).unwrap();
    enc.len() - HEADER_LEN
}

fn check_resync(sel: u8, garbage: &[u8], max_body: usize) {
    let sentinel = sentinel();
    assert!(
        max_body >= sentinel_body_len(),
        "harness bug: sentinel would be oversized"
    );
    let mut stream = vec![b'L', b'Z', VERSION, 0];
    stream.extend((garbage.len() as u32).to_le_bytes());
    stream.extend_from_slice(garbage);
    frame::encode(&sentinel, &mut stream).unwrap();
    let events = drive(sel, &stream, max_body);
    assert_eq!(
        events.len(),
        2,
        "expected garbage result + sentinel, got {events:?}"
    );
    match &events[0] {
        Event::Frame(_) => {}
        Event::Error(e) => {
            assert!(
                !e.is_fatal(),
                "well-framed garbage gave a fatal error {e:?}"
            );
            if garbage.len() > max_body {
                assert!(matches!(e, FrameError::Oversized { .. }), "{e:?}");
            } else {
                assert!(matches!(e, FrameError::Malformed(_)), "{e:?}");
            }
        }
    }
    match &events[1] {
        Event::Frame(f) => assert_eq!(f, &sentinel, "wrong frame after garbage"),
        Event::Error(e) => panic!("sentinel after a skipped frame not decoded: {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, stream)) = data.split_first() else {
        return;
    };

    // 1 + 2: raw stream, then round trip of everything it yielded.
    let frames: Vec<FrameBody> = drive(sel, stream, MAX_BODY)
        .into_iter()
        .filter_map(|e| match e {
            Event::Frame(f) => Some(f),
            Event::Error(_) => None,
        })
        .collect();
    check_round_trip(sel, &frames);

    // 3: resync after a bad frame: once as a (possibly malformed) in-limit body, once
    // with a limit one byte too small so the body is oversized and must be skipped (the
    // limit must still admit the sentinel).
    check_resync(sel, stream, MAX_BODY.max(stream.len()));
    if stream.len() > sentinel_body_len() {
        check_resync(sel, stream, stream.len() - 1);
    }
});
