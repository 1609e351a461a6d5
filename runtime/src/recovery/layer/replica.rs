//! The buddy replica: each node keeps its newest checkpoint also in the memory of the next
//! node (rank + 1 mod N), so a node whose host lost its disk restarts from the buddy's
//! copy. A replica carries a CRC-32C of its body and is never used if it does not verify.
//! Images travel in pieces of [`CHUNK`] bytes (a checkpoint is larger than a frame may be).

use super::{event, RecoveryLayer};
use crate::checkpoint::CheckpointStore;
use crate::transport::frame::{FrameBody, RecoveryFrame, ReplicaChunk, ReplicaFrame};
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long to wait for the buddy's acknowledgement before sending a replica again.
const RESEND_EVERY: Duration = Duration::from_secs(2);

/// Bytes of a replica per frame.
pub const CHUNK: usize = 8 << 20;

/// A replica: checkpoint id and sealed image.
type Image = (u64, Vec<u8>);

/// The part of the node's reply journal a replica carries.
pub(crate) struct JournalPart<'a> {
    /// Where the journal stood at the previous checkpoint.
    pub(crate) from: u64,
    /// What this checkpoint appended after `from`.
    pub(crate) appended: &'a [u8],
    /// The journal's length with this checkpoint.
    pub(crate) len: u64,
}

/// A replica's body: `journal_from: u64`, `journal_bytes: u64`, that part of the
/// journal, then the checkpoint image.
fn pack(journal_from: u64, journal: &[u8], image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + journal.len() + image.len());
    out.extend_from_slice(&journal_from.to_le_bytes());
    out.extend_from_slice(&(journal.len() as u64).to_le_bytes());
    out.extend_from_slice(journal);
    out.extend_from_slice(image);
    out
}

/// The parts of a replica's body: where its journal part starts, the part, the image.
fn unpack(body: &[u8]) -> Option<(u64, &[u8], &[u8])> {
    let (from, rest) = body.split_at_checked(8)?;
    let (len, rest) = rest.split_at_checked(8)?;
    let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
    let (journal, image) = rest.split_at_checked(len)?;
    Some((u64::from_le_bytes(from.try_into().ok()?), journal, image))
}

/// An image being received piece by piece.
#[derive(Default)]
struct Assembly {
    id: u64,
    bytes: Vec<u8>,
}

impl Assembly {
    /// Adds `chunk`; returns the whole image once its last piece arrived in order.
    /// Memory grows with the pieces received, never with the total a piece announces;
    /// a piece that runs past that total ends the transfer (counted and logged).
    fn add(&mut self, chunk: ReplicaChunk) -> Option<Image> {
        if chunk.offset == 0 {
            self.id = chunk.id;
            self.bytes = Vec::new();
        }
        if chunk.id != self.id || chunk.offset != self.bytes.len() as u64 {
            // A piece of another (or a restarted) transfer: wait for its next start.
            return None;
        }
        let len = self.bytes.len() as u64 + chunk.bytes.len() as u64;
        if len > chunk.total {
            metrics::counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "replica_overrun")
                .increment(1);
            tracing::warn!(
                id = chunk.id,
                total = chunk.total,
                len,
                "a replica's pieces run past its announced size; dropped"
            );
            self.bytes = Vec::new();
            return None;
        }
        self.bytes.extend_from_slice(&chunk.bytes);
        (len == chunk.total).then(|| (self.id, std::mem::take(&mut self.bytes)))
    }
}

/// Replicas this node keeps for others, and the answers it waits for.
#[derive(Default)]
pub(crate) struct Replicas {
    /// Newest complete replica per rank (its image, unsealed).
    held: Mutex<HashMap<u16, Image>>,
    /// The copy of each rank's reply journal.
    journals: Mutex<HashMap<u16, Vec<u8>>>,
    /// Bytes of this node's reply journal the buddy acknowledged holding.
    buddy_journal: std::sync::atomic::AtomicU64,
    /// Replicas being received, per sending rank.
    incoming: Mutex<HashMap<u16, Assembly>>,
    /// Checkpoint ids the buddy acknowledged.
    acked: Mutex<HashSet<u64>>,
    acked_cv: Condvar,
    /// The answer to our fetch being received, and the final answer (`Some(None)`: the
    /// buddy has nothing).
    fetching: Mutex<Assembly>,
    fetched: Mutex<Option<Option<Image>>>,
    fetched_cv: Condvar,
}

/// Prefixes `body` with its CRC-32C.
fn seal(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The body of a sealed image, if its checksum verifies.
fn unseal(image: &[u8]) -> Option<&[u8]> {
    let (crc, body) = image.split_at_checked(4)?;
    (crc32c::crc32c(body).to_le_bytes() == crc).then_some(body)
}

/// The transport's frame for a frame of the buddy replica.
fn body(frame: ReplicaFrame) -> FrameBody {
    FrameBody::Recovery(RecoveryFrame::Replica(frame))
}

/// The frames that carry `image` (checkpoint `id`), built by `wrap`.
fn chunks(id: u64, image: &[u8], wrap: fn(ReplicaChunk) -> ReplicaFrame) -> Vec<FrameBody> {
    let total = image.len() as u64;
    let mut out: Vec<FrameBody> = image
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, piece)| {
            body(wrap(ReplicaChunk {
                id,
                offset: (i * CHUNK) as u64,
                total,
                bytes: piece.to_vec(),
            }))
        })
        .collect();
    if out.is_empty() {
        out.push(body(wrap(ReplicaChunk {
            id,
            offset: 0,
            total: 0,
            bytes: Vec::new(),
        })));
    }
    out
}

impl RecoveryLayer {
    /// The rank that keeps this node's replicas.
    pub(crate) fn buddy(&self) -> u16 {
        (self.rank + 1) % self.size
    }

    /// Sends checkpoint `id` to the buddy and waits for its acknowledgement, sending it
    /// again every [`RESEND_EVERY`] (pieces queued on a connection that broke are lost
    /// with it; a replica is idempotent).
    pub(crate) fn replicate(
        &self,
        id: u64,
        body: &[u8],
        journal: JournalPart<'_>,
        timeout: Duration,
    ) -> bool {
        use std::sync::atomic::Ordering;
        let Some(t) = self.transport() else {
            return false;
        };
        // First only what the buddy lacks; every resend the whole journal: the buddy
        // may have restarted and lost its copy (it does not acknowledge a part that does
        // not continue what it holds).
        let known = self.replicas.buddy_journal.load(Ordering::Acquire);
        let mut part = (known == journal.from).then(|| (known, journal.appended.to_vec()));
        let deadline = Instant::now() + timeout;
        loop {
            let (from, bytes) = match part.take() {
                Some(p) => p,
                None => match self.store.read_journal(self.rank, journal.len) {
                    Ok(whole) => (0, whole),
                    Err(e) => {
                        tracing::warn!("reply journal unreadable for the replica: {e}");
                        return false;
                    }
                },
            };
            let frames = chunks(id, &seal(&pack(from, &bytes, body)), ReplicaFrame::Chunk);
            for f in &frames {
                // A buddy that is down cannot answer; keep trying until the deadline.
                if t.send_body(self.buddy(), f).is_err() {
                    break;
                }
            }
            let resend_at = (Instant::now() + RESEND_EVERY).min(deadline);
            let mut acked = self
                .replicas
                .acked
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            while !acked.contains(&id) {
                let left = resend_at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                acked = self
                    .replicas
                    .acked_cv
                    .wait_timeout(acked, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            if acked.contains(&id) {
                acked.retain(|a| *a > id);
                self.replicas
                    .buddy_journal
                    .store(journal.len, Ordering::Release);
                return true;
            }
            if Instant::now() >= deadline || self.stop.load(std::sync::atomic::Ordering::Acquire) {
                return false;
            }
        }
    }

    /// A piece of node `from`'s replica arrived; returns the checkpoint id to acknowledge
    /// once the whole image is here (kept if it is the newest).
    /// A frame of the buddy replica from node `from` arrived.
    pub(crate) fn on_replica(&self, from: u16, frame: ReplicaFrame) {
        match frame {
            ReplicaFrame::Chunk(chunk) => {
                if let Some(id) = self.replica_chunk(from, chunk) {
                    if let Some(t) = self.transport() {
                        t.try_send_body(from, &body(ReplicaFrame::Stored { id }));
                    }
                }
            }
            ReplicaFrame::Stored { id } => self.replica_stored(from, id),
            ReplicaFrame::Fetch => self.serve_replica(from),
            ReplicaFrame::Data(chunk) => self.fetched_chunk(from, Some(chunk)),
            ReplicaFrame::Missing => self.fetched_chunk(from, None),
        }
    }

    pub(crate) fn replica_chunk(&self, from: u16, chunk: ReplicaChunk) -> Option<u64> {
        if (u32::from(from) + 1) % u32::from(self.size) != u32::from(self.rank) {
            // Only the previous rank keeps its replica here: anything else would hold an
            // image for a node that never fetches it from this one.
            metrics::counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "replica_not_buddy")
                .increment(1);
            tracing::warn!(
                from,
                "a replica from a node this one is not the buddy of; dropped"
            );
            return None;
        }
        let (id, image) = self
            .replicas
            .incoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(from)
            .or_default()
            .add(chunk)?;
        let Some((journal_from, part, body)) = unseal(&image).and_then(unpack) else {
            // Damaged on the way: not acknowledged, so it is sent again.
            metrics::counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "replica_checksum")
                .increment(1);
            tracing::warn!(from, id, "a replica that does not verify arrived; not kept");
            return None;
        };
        // The newest arrival replaces what is held, even with a lower id: it comes from a
        // new incarnation restored from an older checkpoint (within one incarnation a
        // replica is sent only after the previous one was acknowledged). Acknowledging
        // one that is not kept would let the sender believe the buddy holds its journal.
        let mut held = self.replicas.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut journals = self
            .replicas
            .journals
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let journal = journals.entry(from).or_default();
        let Ok(start) = usize::try_from(journal_from) else {
            return None;
        };
        if start > journal.len() {
            event(
                self.rank,
                &format!(
                    "replica-journal-gap from={from} id={id} have={} from_byte={journal_from}",
                    journal.len()
                ),
            );
            return None;
        }
        journal.truncate(start);
        journal.extend_from_slice(part);
        held.insert(from, (id, body.to_vec()));
        Some(id)
    }

    /// The buddy acknowledged replica `id`.
    pub(crate) fn replica_stored(&self, from: u16, id: u64) {
        if from != self.buddy() {
            return;
        }
        self.replicas
            .acked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id);
        self.replicas.acked_cv.notify_all();
    }

    /// A restarted node asks for its replica: send it (from the layer's sender thread:
    /// it may be large), or say there is none.
    pub(crate) fn serve_replica(&self, to: u16) {
        let frames = {
            // Both locks, in `replica_chunk`'s order: the image and its journal as one.
            let held = self.replicas.held.lock().unwrap_or_else(|e| e.into_inner());
            let journals = self
                .replicas
                .journals
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match held.get(&to) {
                Some((id, image)) => {
                    let journal = journals.get(&to).map_or(&[][..], |j| &j[..]);
                    chunks(*id, &seal(&pack(0, journal, image)), ReplicaFrame::Data)
                }
                None => vec![body(ReplicaFrame::Missing)],
            }
        };
        self.emit(frames.into_iter().map(|f| (to, f)));
    }

    /// A piece of the answer to our fetch arrived (`None`: the buddy has nothing).
    pub(crate) fn fetched_chunk(&self, from: u16, chunk: Option<ReplicaChunk>) {
        if from != self.buddy() {
            return;
        }
        let answer = match chunk {
            None => Some(None),
            Some(c) => self
                .replicas
                .fetching
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(c)
                .map(Some),
        };
        if let Some(answer) = answer {
            *self
                .replicas
                .fetched
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(answer);
            self.replicas.fetched_cv.notify_all();
        }
    }

    /// Asks the buddy for this node's newest replica: `(id, image, reply journal)` if
    /// it has one that verifies.
    pub(crate) fn fetch_replica(&self, timeout: Duration) -> Option<(u64, Vec<u8>, Vec<u8>)> {
        let t = self.transport()?;
        t.send_body(self.buddy(), &body(ReplicaFrame::Fetch)).ok()?;
        let deadline = Instant::now() + timeout;
        let mut fetched = self
            .replicas
            .fetched
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while fetched.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                event(self.rank, "replica-fetch timeout");
                return None;
            }
            fetched = self
                .replicas
                .fetched_cv
                .wait_timeout(fetched, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let (id, image) = fetched.take().flatten()?;
        match unseal(&image).and_then(unpack) {
            Some((_, journal, body)) => Some((id, body.to_vec(), journal.to_vec())),
            None => {
                metrics::counter!(crate::checkpoint::CORRUPT_CHECKPOINTS, "reason" => "replica_checksum")
                    .increment(1);
                tracing::warn!(id, "the buddy's replica does not verify; not using it");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_image_verifies_and_a_damaged_one_does_not() {
        let sealed = seal(b"state of the set");
        assert_eq!(unseal(&sealed), Some(&b"state of the set"[..]));
        let mut damaged = sealed.clone();
        damaged[7] ^= 1;
        assert_eq!(unseal(&damaged), None);
        assert_eq!(unseal(&sealed[..3]), None);
    }

    #[test]
    fn a_replica_carries_its_journal_part_and_its_image_apart() {
        let body = pack(4096, b"records", b"image bytes");
        assert_eq!(
            unpack(&body),
            Some((4096, &b"records"[..], &b"image bytes"[..]))
        );
        assert_eq!(unpack(&pack(0, b"", b"x")), Some((0, &b""[..], &b"x"[..])));
        let mut lying = body.clone();
        lying[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(unpack(&lying), None, "a part longer than the body");
        assert_eq!(unpack(&body[..10]), None);
    }

    #[test]
    fn an_image_larger_than_a_frame_travels_in_pieces_and_is_reassembled() {
        let image: Vec<u8> = (0..(2 * CHUNK + 123)).map(|i| (i % 251) as u8).collect();
        let frames = chunks(7, &image, ReplicaFrame::Chunk);
        assert_eq!(frames.len(), 3);
        let mut a = Assembly::default();
        let mut done = None;
        for f in frames {
            let FrameBody::Recovery(RecoveryFrame::Replica(ReplicaFrame::Chunk(c))) = f else {
                unreachable!()
            };
            done = a.add(c);
        }
        assert_eq!(done, Some((7, image)));
    }

    #[test]
    fn a_transfer_restarted_midway_is_reassembled_from_its_new_start() {
        let image = vec![5u8; CHUNK + 10];
        let frames = chunks(3, &image, ReplicaFrame::Chunk);
        let mut a = Assembly::default();
        let FrameBody::Recovery(RecoveryFrame::Replica(ReplicaFrame::Chunk(first))) =
            frames[0].clone()
        else {
            unreachable!()
        };
        assert_eq!(a.add(first), None);
        let mut done = None;
        for f in frames {
            let FrameBody::Recovery(RecoveryFrame::Replica(ReplicaFrame::Chunk(c))) = f else {
                unreachable!()
            };
            done = a.add(c);
        }
        assert_eq!(done, Some((3, image)));
    }

    #[test]
    fn a_piece_announcing_a_huge_image_reserves_nothing_and_pieces_past_the_total_are_dropped() {
        let mut a = Assembly::default();
        let piece = |offset: u64, total: u64, bytes: Vec<u8>| ReplicaChunk {
            id: 9,
            offset,
            total,
            bytes,
        };
        assert_eq!(a.add(piece(0, u64::MAX, vec![1; 16])), None);
        assert!(
            a.bytes.capacity() < 1 << 20,
            "memory follows the bytes received"
        );
        // A first piece longer than the total it announces can never complete.
        assert_eq!(a.add(piece(0, 4, vec![1; 16])), None);
        assert!(a.bytes.is_empty(), "the overrun transfer is dropped");
        assert_eq!(a.add(piece(16, 4, vec![1; 16])), None, "and not continued");
        assert!(a.bytes.is_empty());
        // A transfer that starts again afterwards is reassembled.
        assert_eq!(a.add(piece(0, 3, vec![7; 3])), Some((9, vec![7; 3])));
    }
}
