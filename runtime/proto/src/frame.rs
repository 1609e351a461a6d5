//! The frame codec of the node-to-node byte stream (sans-IO).
//!
//! A frame is a fixed 8-byte header followed by a body:
//!
//! ```text
//! magic "LZ" (2) | version (1) | reserved 0 (1) | body length, u32 LE (4) | body
//! ```
//!
//! The body is a postcard-encoded [`FrameBody`]. The decoder is a pure state machine over
//! bytes pushed into it: it never panics on input, rejects a wrong magic or version (the
//! stream cannot be trusted after that), and skips a frame whose body is oversized or does
//! not decode, so one bad frame costs only itself.

use crate::actor_id::ActorId;
use crate::recovery::Frame;
use bytes::{Buf, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// Set in the request number of an ask that a node's `main` makes with recovery on;
/// the other bits are the ask's position among `main`'s sends, the same in every
/// incarnation. Per-process request numbers count up from 0 and never reach it.
pub const MAIN_REQUEST: u64 = 1 << 63;

/// The request number of the ask that is `main`'s `position`-th send.
pub fn request_number(position: u64) -> u64 {
    MAIN_REQUEST | position
}

/// Whether `request` is the number of an ask by `main` with recovery on.
pub fn is_main_request(request: u64) -> bool {
    request & MAIN_REQUEST != 0
}

/// First two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"LZ";
/// Wire protocol version; peers with another version are refused.
pub const VERSION: u8 = 10;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 8;
/// Default largest accepted body (64 MiB).
pub const DEFAULT_MAX_BODY: usize = 64 << 20;
/// Room a frame keeps for what travels beside an application payload (ids, indices, a
/// dependency vector of up to 65,535 sets): a payload fits a frame of `max_body` bytes
/// if it is at most `max_body - FRAME_METADATA_ROOM`.
pub const FRAME_METADATA_ROOM: usize = 1 << 20;

/// The largest application payload (an encoded message or reply) a frame of at most
/// `max_body` bytes carries.
pub fn max_payload(max_body: usize) -> usize {
    max_body.saturating_sub(FRAME_METADATA_ROOM)
}

/// What a frame carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FrameBody {
    /// First frame on every stream: who is talking.
    Hello {
        /// The sender's rank.
        rank: u16,
        /// Cluster size as the sender knows it.
        size: u16,
        /// The sender's incarnation: 0 at launch, one more at each restart of its rank.
        incarnation: u32,
        /// The dialer's offer of a shared-memory data path, or the acceptor's answer
        /// (`None`: the sender does not use one).
        shm: Option<SharedMemoryHello>,
        /// The dialer's offer of an RDMA queue pair, or the acceptor's answer (`None`:
        /// the sender has no RDMA data path).
        rdma: Option<RdmaHello>,
    },
    /// An application message for actor `to`.
    Envelope(Envelope),
    /// The answer to a remote `ask`.
    Reply {
        /// The asker's request number.
        request: u64,
        /// The encoded reply, or why there is none.
        #[serde(with = "outcome_bytes")]
        outcome: Result<Vec<u8>, RemoteError>,
    },
    /// Liveness signal, sent periodically.
    Heartbeat,
    /// Rank `rank` has reached cluster barrier `epoch` (sent to rank 0).
    BarrierArrive {
        /// Barrier number.
        epoch: u64,
        /// Arriving rank.
        rank: u16,
    },
    /// Every rank reached barrier `epoch` (sent by rank 0).
    BarrierRelease {
        /// Barrier number.
        epoch: u64,
    },
    /// The sender is shutting down normally: its silence is not a failure.
    Goodbye,
    /// A frame between the recovery layers of two nodes (recovery on only): the
    /// transport hands it to the layer without looking in.
    Recovery(RecoveryFrame),
    /// A frame between two members of one-sided window `window`: the receiver's window
    /// machine handles it (see [`crate::window`]).
    Window {
        /// The window.
        window: crate::window::WindowId,
        /// The frame.
        frame: crate::window::WindowFrame,
    },
    /// The sender's part of window `window` is in shared-memory segment `segment` (a
    /// file name in the host's `/dev/shm`): a receiver on the same host maps it and
    /// puts and gets there itself, after checking that its header says the same.
    WindowSegment {
        /// The window.
        window: crate::window::WindowId,
        /// The segment's file name.
        segment: String,
        /// The sender's incarnation.
        incarnation: u32,
        /// Fresh per segment; its header holds it too.
        nonce: [u8; 16],
    },
}

/// The shared-memory part of a Hello: two nodes on one host move their frames through a
/// shared segment instead of their QUIC streams once both Hellos agree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SharedMemoryHello {
    /// The dialer created segment `segment` (a file name in `/dev/shm`) for this pair,
    /// with `nonce` in its header, and rings its peers' sleepers from doorbell `doorbell`.
    Offer {
        /// The segment's file name.
        segment: String,
        /// The dialer's doorbell (an abstract socket name).
        doorbell: String,
        /// Written in the segment's header: the acceptor checks it.
        nonce: [u8; 16],
    },
    /// The acceptor mapped the segment: frames go through it from now on both ways.
    Accept {
        /// The acceptor's doorbell.
        doorbell: String,
    },
    /// The acceptor did not take the offer: the pair keeps its QUIC streams.
    Decline {
        /// Why, for the dialer's log.
        reason: String,
    },
}

/// One side of an RDMA reliable-connected queue pair and the receive ring it exposes:
/// what the other side needs to connect its queue pair and write frames into the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaEndpoint {
    /// The port's local identifier (InfiniBand; 0 on RoCE, where `gid` routes).
    pub lid: u16,
    /// The port's global identifier (RoCE and routed InfiniBand).
    pub gid: [u8; 16],
    /// The queue pair's number (24 bits).
    pub qpn: u32,
    /// The first packet sequence number the queue pair sends (24 bits).
    pub psn: u32,
    /// The path MTU the sender can use, as verbs encode it (1 = 256 B ... 5 = 4096 B).
    pub mtu: u8,
    /// Address of the receive ring in the sender's registered memory.
    pub ring_addr: u64,
    /// The remote key of the receive ring's registration.
    pub ring_rkey: u32,
    /// Bytes in the receive ring.
    pub ring_bytes: u32,
    /// Address of the word where the other side writes how far it read the sender's
    /// frames (its credit).
    pub credit_addr: u64,
    /// The remote key of the credit word's registration.
    pub credit_rkey: u32,
}

/// The RDMA part of a Hello: two nodes with RDMA devices on different hosts move their
/// frames through a queue pair instead of their QUIC streams once both Hellos agree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RdmaHello {
    /// The dialer's queue pair and ring.
    Offer(RdmaEndpoint),
    /// The acceptor connected a queue pair to the offer's: frames go through them.
    Accept(RdmaEndpoint),
    /// The acceptor did not take the offer: the pair keeps its QUIC streams.
    Decline {
        /// Why, for the dialer's log.
        reason: String,
    },
}

/// What the recovery layers of two nodes send each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RecoveryFrame {
    /// Between the nodes' recovery machines: an application message with the metadata
    /// the sender logged it with, a protocol control message (ROLLBACK, RESPONSE,
    /// CHECKPOINT_ADVANCE, ...), or event logging of determinants.
    Node(Frame<Envelope>),
    /// The buddy replica of a node's checkpoints.
    Replica(ReplicaFrame),
}

/// The frames of the buddy replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReplicaFrame {
    /// A piece of a checkpoint of the sender's set for the addressee to keep in memory;
    /// the last piece is answered by [`ReplicaFrame::Stored`].
    Chunk(ReplicaChunk),
    /// The buddy holds checkpoint `id` of the sender's set.
    Stored {
        /// The checkpoint's number.
        id: u64,
    },
    /// A restarted node asks its buddy for the newest replica of its set.
    Fetch,
    /// A piece of the answer to [`ReplicaFrame::Fetch`]: the newest replica held.
    Data(ReplicaChunk),
    /// The answer to [`ReplicaFrame::Fetch`] when no replica is held.
    Missing,
}

/// A piece of a sealed checkpoint image (images are larger than a frame may be).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaChunk {
    /// The checkpoint's number.
    pub id: u64,
    /// Where the piece starts in the image.
    pub offset: u64,
    /// The image's whole length.
    pub total: u64,
    /// The bytes.
    #[serde(with = "serde_bytes_compat")]
    pub bytes: Vec<u8>,
}

/// An application message addressed to an actor on the receiving node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The addressee.
    pub to: ActorId,
    /// The sending actor (or the sending node's driver pseudo-actor for `main`): with
    /// `to`, the message's channel, which selective receive filters on.
    pub from: ActorId,
    /// Fingerprint of the addressee's message type, checked on delivery.
    pub type_tag: u64,
    /// Set for `ask`: where the reply goes on the sending node.
    pub request: Option<u64>,
    /// The postcard-encoded message (shared, so the sender-based log keeps it without a
    /// copy).
    #[serde(with = "shared_bytes")]
    pub payload: Bytes,
}

impl crate::recovery::LogPayload for Envelope {
    fn byte_len(&self) -> usize {
        self.payload.len()
    }

    /// The message type and the encoded message. An actor's `ask` is not compared: its
    /// reply route (in the message) holds a request number that a regenerated ask gets
    /// anew from its process. `main`'s asks and their replies are: their number is the
    /// same in every incarnation.
    fn digest(&self) -> u32 {
        if self.request.is_some_and(|r| !is_main_request(r)) {
            return crate::recovery::replay_check::UNCOMPARABLE;
        }
        crate::recovery::replay_check::digest(self.type_tag, &self.payload)
    }
}

/// Serializes [`Bytes`] as one byte string.
mod shared_bytes {
    use bytes::Bytes;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(self, v: &'de [u8]) -> Result<Bytes, E> {
                Ok(super::decode_source::share(v))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes::copy_from_slice(v))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes::from(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// The frame body being decoded on this thread, so large payloads can be shared out of it
/// instead of copied (postcard hands out borrowed slices; serde cannot carry the `Bytes`
/// they came from, hence the thread-local).
mod decode_source {
    use bytes::Bytes;
    use std::cell::RefCell;

    /// Payloads at least this large are shared with the frame buffer; smaller ones are
    /// copied so a tiny message queued for long does not pin a large receive buffer.
    const SHARE_AT_LEAST: usize = 4096;

    thread_local! {
        static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
    }

    /// Runs `f` with `body` as the buffer borrowed slices may be shared from.
    pub fn with<R>(body: &Bytes, f: impl FnOnce() -> R) -> R {
        SOURCE.with(|s| *s.borrow_mut() = Some(body.clone()));
        let r = f();
        SOURCE.with(|s| *s.borrow_mut() = None);
        r
    }

    /// `v` as `Bytes`: a slice of the current source when it lies inside it and is large,
    /// a copy otherwise.
    pub fn share(v: &[u8]) -> Bytes {
        if v.len() >= SHARE_AT_LEAST {
            let shared = SOURCE.with(|s| {
                s.borrow().as_ref().and_then(|src| {
                    let inside = src.as_ptr_range();
                    let range = v.as_ptr_range();
                    (inside.start <= range.start && range.end <= inside.end)
                        .then(|| src.slice_ref(v))
                })
            });
            if let Some(b) = shared {
                return b;
            }
        }
        Bytes::copy_from_slice(v)
    }
}

/// Why a remote ask got no reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RemoteError {
    /// No live actor with that id on the receiving node.
    #[error("no actor {0} on that node")]
    UnknownActor(ActorId),
    /// The actor exists but has another message type.
    #[error("actor {0} does not accept this message type")]
    WrongType(ActorId),
    /// The message did not decode on the receiving node.
    #[error("message for actor {0} could not be decoded: {1}")]
    Undecodable(ActorId, String),
    /// The actor had stopped or failed.
    #[error("actor {0} has stopped or failed")]
    ActorGone(ActorId),
    /// The handler dropped its reply slot.
    #[error("actor {0} dropped the request without replying")]
    NoReply(ActorId),
    /// The asker stopped waiting: kept as the outcome of an ask by the app's `main` with
    /// recovery on, so a re-executed `main` sees the same timeout. Never sent.
    #[error("the ask to actor {0} timed out")]
    TimedOut(ActorId),
    /// The reply encodes to more bytes than a frame between nodes carries; it was not
    /// sent (the replier's node says so and counts it).
    #[error(
        "the reply encodes to {bytes} bytes, over the {max} bytes a message between nodes may have"
    )]
    TooLarge {
        /// The reply's encoded size.
        bytes: u64,
        /// The largest payload a frame carries.
        max: u64,
    },
}

use crate::wire::byte_string as serde_bytes_compat;

/// The outcome of an ask, `Result<Vec<u8>, RemoteError>`, with the reply's bytes written
/// as one byte string. serde's default writes a `Vec<u8>` byte by byte, a call each: a
/// 100 MB reply (a gathered grid) took a third of a second to encode. postcard encodes
/// a byte string and a sequence of `u8` alike (length, then the bytes), so either side
/// reads the other's.
#[doc(hidden)]
pub mod outcome_bytes {
    use super::RemoteError;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The outcome as it is written.
    #[derive(Serialize)]
    enum Out<'a> {
        Ok(#[serde(with = "super::serde_bytes_compat")] &'a [u8]),
        Err(&'a RemoteError),
    }

    /// The outcome as it is read.
    #[derive(Deserialize)]
    enum In {
        Ok(#[serde(with = "super::serde_bytes_compat")] Vec<u8>),
        Err(RemoteError),
    }

    /// Writes `v` with its bytes as one byte string.
    pub fn serialize<S: Serializer>(
        v: &Result<Vec<u8>, RemoteError>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Ok(bytes) => Out::Ok(bytes),
            Err(e) => Out::Err(e),
        }
        .serialize(s)
    }

    /// Reads an outcome written by [`serialize`] (or by serde's default).
    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Result<Vec<u8>, RemoteError>, D::Error> {
        Ok(match In::deserialize(d)? {
            In::Ok(bytes) => Ok(bytes),
            In::Err(e) => Err(e),
        })
    }

    /// An outcome to encode on its own (a reply to `main` kept or logged).
    pub struct Encoding<'a>(pub &'a Result<Vec<u8>, RemoteError>);

    impl Serialize for Encoding<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize(self.0, s)
        }
    }

    /// An outcome decoded on its own.
    #[derive(Deserialize)]
    pub struct Decoded(#[serde(with = "self")] pub Result<Vec<u8>, RemoteError>);
}

/// A frame that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The stream does not start frames with the magic bytes: not a Lazarus peer, or
    /// the stream is out of sync. Fatal for the stream.
    #[error("bad magic bytes {0:02x?}: not a Lazarus frame stream")]
    BadMagic([u8; 2]),
    /// The peer speaks another protocol version. Fatal for the stream.
    #[error("protocol version {got} not supported (this node speaks {VERSION})")]
    Version {
        /// The peer's version.
        got: u8,
    },
    /// The body is larger than the limit; it is skipped.
    #[error("frame body of {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// Announced body length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The body did not decode; it is skipped.
    #[error("malformed frame body: {0}")]
    Malformed(String),
}

impl FrameError {
    /// Whether the stream must be abandoned (later bytes cannot be framed).
    pub fn is_fatal(&self) -> bool {
        matches!(self, FrameError::BadMagic(_) | FrameError::Version { .. })
    }

    /// Short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::BadMagic(_) => "bad_magic",
            FrameError::Version { .. } => "version",
            FrameError::Oversized { .. } => "oversized",
            FrameError::Malformed(_) => "malformed",
        }
    }
}

/// Appends one encoded frame to `out`.
pub fn encode(body: &FrameBody, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    let start = out.len();
    out.extend_from_slice(&[MAGIC[0], MAGIC[1], VERSION, 0, 0, 0, 0, 0]);
    let encoded = postcard::to_extend(body, std::mem::take(out))?;
    *out = encoded;
    // A body past 4 GiB would wrap its length and misframe the whole stream.
    let Ok(len) = u32::try_from(out.len() - start - HEADER_LEN) else {
        out.truncate(start);
        return Err(postcard::Error::SerializeBufferFull);
    };
    out[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Payloads from this size on are not copied into the frame buffer by [`encode_split`].
pub const SPLIT_MIN: usize = 2048;

/// One encoded frame as two buffers to write back to back: `head` (header and body up to
/// the payload) and `tail` (the application payload, shared with the message and the
/// sender-based log, not copied; empty for small or payload-less frames).
#[derive(Clone, Debug, Default)]
pub struct SplitFrame {
    /// Header and the body's encoding before the payload bytes.
    pub head: Bytes,
    /// The payload bytes.
    pub tail: Bytes,
}

impl SplitFrame {
    /// A frame already encoded in one buffer.
    pub fn whole(bytes: Bytes) -> Self {
        SplitFrame {
            head: bytes,
            tail: Bytes::new(),
        }
    }

    /// Total length on the wire.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// Whether this is the empty end-of-stream marker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Encodes one frame without copying a large application payload: the payload is the
/// last field of [`Envelope`], which is the last field of the frames that carry one, so
/// the body's encoding is "everything else, then the payload's length and bytes".
pub fn encode_split(body: &FrameBody) -> Result<SplitFrame, postcard::Error> {
    let (hollow, payload) = match body {
        FrameBody::Envelope(env) if env.payload.len() >= SPLIT_MIN => (
            FrameBody::Envelope(Envelope {
                payload: Bytes::new(),
                ..env.clone()
            }),
            env.payload.clone(),
        ),
        FrameBody::Recovery(RecoveryFrame::Node(Frame::Message { meta, payload: env }))
            if env.payload.len() >= SPLIT_MIN =>
        {
            (
                FrameBody::Recovery(RecoveryFrame::Node(Frame::Message {
                    meta: meta.clone(),
                    payload: Envelope {
                        payload: Bytes::new(),
                        ..env.clone()
                    },
                })),
                env.payload.clone(),
            )
        }
        _ => {
            let mut out = Vec::new();
            encode(body, &mut out)?;
            return Ok(SplitFrame::whole(out.into()));
        }
    };
    // Room for the header, ids, indices and a dependency vector of a few sets: grown
    // from empty, the buffer would be reallocated several times per message.
    let mut head = Vec::with_capacity(128);
    encode(&hollow, &mut head)?;
    // The empty payload encoded as its length, a single 0 byte: replace it.
    head.pop();
    let mut n = payload.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            head.push(byte);
            break;
        }
        head.push(byte | 0x80);
    }
    let body_len = u32::try_from(head.len() - HEADER_LEN + payload.len())
        .map_err(|_| postcard::Error::SerializeBufferFull)?;
    head[4..8].copy_from_slice(&body_len.to_le_bytes());
    Ok(SplitFrame {
        head: head.into(),
        tail: payload,
    })
}

/// Incremental frame decoder: push bytes as they arrive, pull frames.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_body: usize,
    /// Bytes of an oversized body still to discard.
    skipping: usize,
    /// Set after a fatal error: everything after is ignored.
    poisoned: bool,
}

impl FrameDecoder {
    /// A decoder accepting bodies up to `max_body` bytes.
    pub fn new(max_body: usize) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            max_body,
            skipping: 0,
            poisoned: false,
        }
    }

    /// Feeds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if !self.poisoned {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or an error for one
    /// bad frame. After a fatal error ([`FrameError::is_fatal`]) it returns `Ok(None)`
    /// forever.
    pub fn next_frame(&mut self) -> Result<Option<FrameBody>, FrameError> {
        if self.poisoned {
            return Ok(None);
        }
        if self.skipping > 0 {
            let n = self.skipping.min(self.buf.len());
            self.buf.advance(n);
            self.skipping -= n;
            if self.skipping > 0 {
                return Ok(None);
            }
        }
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let magic = [self.buf[0], self.buf[1]];
        if magic != MAGIC {
            self.poison();
            return Err(FrameError::BadMagic(magic));
        }
        if self.buf[2] != VERSION {
            let got = self.buf[2];
            self.poison();
            return Err(FrameError::Version { got });
        }
        let len = u32::from_le_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]) as usize;
        if len > self.max_body {
            self.buf.advance(HEADER_LEN);
            self.skipping = len;
            let n = self.skipping.min(self.buf.len());
            self.buf.advance(n);
            self.skipping -= n;
            return Err(FrameError::Oversized {
                len,
                max: self.max_body,
            });
        }
        if self.buf.len() < HEADER_LEN + len {
            // Reserve once so a large body does not grow the buffer repeatedly.
            self.buf.reserve(HEADER_LEN + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(HEADER_LEN);
        let body = self.buf.split_to(len).freeze();
        match decode_source::with(&body, || postcard::from_bytes::<FrameBody>(&body)) {
            Ok(frame) => Ok(Some(frame)),
            Err(e) => Err(FrameError::Malformed(e.to_string())),
        }
    }

    fn poison(&mut self) {
        self.poisoned = true;
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_asks_outcome_is_encoded_as_serde_encodes_it_by_default_and_reads_back() {
        let id = ActorId::new(2, 5).unwrap();
        for outcome in [
            Ok(vec![0u8, 1, 255, 7]),
            Ok(Vec::new()),
            Err(RemoteError::NoReply(id)),
            Err(RemoteError::Undecodable(id, "bad".into())),
        ] {
            let ours = crate::wire::encode(&outcome_bytes::Encoding(&outcome)).unwrap();
            // Peers and journals written by serde's default encoding stay readable.
            assert_eq!(ours, crate::wire::encode(&outcome).unwrap());
            let back = crate::wire::decode::<outcome_bytes::Decoded>(&ours).unwrap();
            assert_eq!(back.0, outcome);
            let reply = FrameBody::Reply {
                request: 9,
                outcome: outcome.clone(),
            };
            let bytes = crate::wire::encode(&reply).unwrap();
            assert_eq!(crate::wire::decode::<FrameBody>(&bytes).unwrap(), reply);
        }
    }

    fn envelope(payload: Vec<u8>) -> FrameBody {
        FrameBody::Envelope(Envelope {
            to: ActorId::new(3, 9).unwrap(),
            from: ActorId::new(1, 2).unwrap(),
            type_tag: 42,
            request: Some(7),
            payload: payload.into(),
        })
    }

    fn encoded(bodies: &[FrameBody]) -> Vec<u8> {
        let mut out = Vec::new();
        for b in bodies {
            encode(b, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn frames_round_trip_whatever_the_chunking() {
        let bodies = vec![
            FrameBody::Hello {
                rank: 1,
                size: 4,
                incarnation: 0,
                shm: Some(SharedMemoryHello::Offer {
                    segment: "lazarus-0123".into(),
                    doorbell: "lazarus-db".into(),
                    nonce: [3; 16],
                }),
                rdma: None,
            },
            FrameBody::Hello {
                rank: 2,
                size: 4,
                incarnation: 7,
                shm: None,
                rdma: Some(RdmaHello::Accept(RdmaEndpoint {
                    lid: 0,
                    gid: [0xfe; 16],
                    qpn: 0x00ab_cdef,
                    psn: 0x12_3456,
                    mtu: 5,
                    ring_addr: 0x7f00_dead_b000,
                    ring_rkey: 0x1234,
                    ring_bytes: 1 << 20,
                    credit_addr: 0x7f00_dead_a000,
                    credit_rkey: 0x5678,
                })),
            },
            envelope(vec![1, 2, 3]),
            FrameBody::Heartbeat,
            envelope(vec![9; 100_000]),
            FrameBody::Goodbye,
        ];
        let bytes = encoded(&bodies);
        for chunk in [1, 7, 8, 9, 1000, bytes.len()] {
            let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
            let mut got = Vec::new();
            for piece in bytes.chunks(chunk) {
                d.push(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, bodies, "chunk size {chunk}");
        }
    }

    #[test]
    fn a_split_frame_is_byte_for_byte_the_whole_frame() {
        let big = envelope(vec![7; 70_000]);
        let logged = FrameBody::Recovery(RecoveryFrame::Node(Frame::Message {
            meta: crate::recovery::MessageMeta {
                channel: crate::recovery::ChannelId::new(
                    ActorId::new(1, 2).unwrap(),
                    ActorId::new(3, 9).unwrap(),
                ),
                send_index: 300,
                sender_incarnation: crate::recovery::Incarnation(1),
                depend: Default::default(),
            },
            payload: match envelope(vec![9; 5000]) {
                FrameBody::Envelope(e) => e,
                _ => unreachable!(),
            },
        }));
        for body in [big, logged, envelope(vec![1, 2, 3]), FrameBody::Heartbeat] {
            let split = encode_split(&body).unwrap();
            let mut joined = split.head.to_vec();
            joined.extend_from_slice(&split.tail);
            assert_eq!(joined, encoded(std::slice::from_ref(&body)));
            let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
            d.push(&joined);
            assert_eq!(d.next_frame().unwrap(), Some(body));
        }
    }

    #[test]
    fn a_large_payload_is_shared_with_the_receive_buffer_and_a_small_one_is_not() {
        let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
        d.push(&encoded(&[
            envelope(vec![5; 1 << 20]),
            envelope(vec![6; 16]),
        ]));
        let received = d.buf.as_ptr_range();
        let Some(FrameBody::Envelope(big)) = d.next_frame().unwrap() else {
            panic!("expected the large envelope");
        };
        let Some(FrameBody::Envelope(small)) = d.next_frame().unwrap() else {
            panic!("expected the small envelope");
        };
        assert_eq!(&big.payload[..], &vec![5; 1 << 20][..]);
        assert_eq!(&small.payload[..], &[6; 16]);
        let inside = |p: &Bytes| received.contains(&p.as_ptr());
        assert!(inside(&big.payload), "the 1 MiB payload was copied");
        assert!(
            !inside(&small.payload),
            "the 16 B payload pins the receive buffer"
        );
    }

    #[test]
    fn an_oversized_frame_is_skipped_and_the_next_one_still_arrives() {
        let bytes = encoded(&[envelope(vec![0; 5000]), FrameBody::Heartbeat]);
        let mut d = FrameDecoder::new(1000);
        d.push(&bytes[..100]);
        assert!(matches!(
            d.next_frame(),
            Err(FrameError::Oversized { max: 1000, .. })
        ));
        d.push(&bytes[100..]);
        assert_eq!(d.next_frame().unwrap(), Some(FrameBody::Heartbeat));
    }

    #[test]
    fn a_malformed_body_is_skipped_and_the_next_one_still_arrives() {
        let mut bytes = vec![b'L', b'Z', VERSION, 0, 3, 0, 0, 0, 0xff, 0xff, 0xff];
        bytes.extend(encoded(&[FrameBody::Goodbye]));
        let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
        d.push(&bytes);
        assert!(matches!(d.next_frame(), Err(FrameError::Malformed(_))));
        assert_eq!(d.next_frame().unwrap(), Some(FrameBody::Goodbye));
    }

    #[test]
    fn wrong_magic_or_version_poisons_the_stream() {
        let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
        d.push(b"GET / HTTP/1.1\r\n");
        let err = d.next_frame().unwrap_err();
        assert!(err.is_fatal());
        d.push(&encoded(&[FrameBody::Heartbeat]));
        assert_eq!(d.next_frame().unwrap(), None);

        let mut v2 = encoded(&[FrameBody::Heartbeat]);
        v2[2] = VERSION + 1;
        let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
        d.push(&v2);
        assert_eq!(
            d.next_frame().unwrap_err(),
            FrameError::Version { got: VERSION + 1 }
        );
    }

    proptest! {
        /// Arbitrary bytes never panic the decoder, and it never yields more frames than
        /// the bytes could hold.
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                       split in 0usize..4096) {
            let mut d = FrameDecoder::new(1 << 16);
            let split = split.min(data.len());
            let mut frames = 0;
            for piece in [&data[..split], &data[split..]] {
                d.push(piece);
                for _ in 0..data.len() + 1 {
                    match d.next_frame() {
                        Ok(Some(_)) => frames += 1,
                        Ok(None) => break,
                        Err(e) if e.is_fatal() => break,
                        Err(_) => {}
                    }
                }
            }
            prop_assert!(frames <= data.len() / HEADER_LEN);
        }

        /// A valid frame with arbitrary bytes in front of it framed as a (skipped)
        /// malformed frame is still decoded.
        #[test]
        fn valid_frames_survive_garbage_frames_before_them(garbage in proptest::collection::vec(any::<u8>(), 0..512),
                                                           payload in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut bytes = vec![b'L', b'Z', VERSION, 0];
            bytes.extend((garbage.len() as u32).to_le_bytes());
            bytes.extend(&garbage);
            let good = envelope(payload);
            bytes.extend(encoded(std::slice::from_ref(&good)));
            let mut d = FrameDecoder::new(DEFAULT_MAX_BODY);
            d.push(&bytes);
            let mut got = None;
            for _ in 0..3 {
                match d.next_frame() {
                    Ok(Some(f)) => { got = Some(f); break; }
                    Ok(None) => break,
                    Err(e) => prop_assert!(!e.is_fatal()),
                }
            }
            // The garbage itself may happen to decode as a frame; the good one follows.
            if got.as_ref() != Some(&good) {
                got = d.next_frame().unwrap_or(None);
            }
            prop_assert_eq!(got, Some(good));
        }
    }
}
