//! The buddy replica: each node keeps its newest checkpoint also in the memory of the next
//! node (rank + 1 mod N), so a node whose host lost its disk restarts from the buddy's
//! copy. A replica carries a CRC-32C of its body and is never used if it does not verify.

use super::{event, RecoveryLayer};
use crate::transport::frame::FrameBody;
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long to wait for the buddy's acknowledgement before sending a replica again.
const RESEND_EVERY: Duration = Duration::from_millis(500);

/// A replica as sent: checkpoint id and sealed image.
type Image = (u64, Vec<u8>);

/// Replicas this node keeps for others, and the answers it waits for.
#[derive(Default)]
pub(crate) struct Replicas {
    /// Newest replica per rank: (checkpoint id, crc + body).
    held: Mutex<HashMap<u16, Image>>,
    /// Checkpoint ids the buddy acknowledged.
    acked: Mutex<HashSet<u64>>,
    acked_cv: Condvar,
    /// The answer to our fetch: `Some(None)` means the buddy has nothing.
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

impl RecoveryLayer {
    /// The rank that keeps this node's replicas.
    pub(crate) fn buddy(&self) -> u16 {
        (self.rank + 1) % self.size
    }

    /// Sends checkpoint `id` to the buddy and waits for its acknowledgement, sending it
    /// again every [`RESEND_EVERY`] (a frame queued on a connection that broke is lost
    /// with it; a replica is idempotent).
    pub(crate) fn replicate(&self, id: u64, body: &[u8], timeout: Duration) -> bool {
        let Some(t) = self.transport() else {
            return false;
        };
        let frame = FrameBody::Replica {
            id,
            image: seal(body),
        };
        let deadline = Instant::now() + timeout;
        loop {
            // A buddy that is down cannot answer; keep trying until the deadline.
            let _ = t.send_body(self.buddy(), &frame);
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
                return true;
            }
            if Instant::now() >= deadline || self.stop.load(std::sync::atomic::Ordering::Acquire) {
                return false;
            }
        }
    }

    /// Keeps the replica `image` of node `from`'s checkpoint `id` (newest only).
    pub(crate) fn keep_replica(&self, from: u16, id: u64, image: Vec<u8>) {
        let mut held = self.replicas.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.get(&from).is_none_or(|(have, _)| *have < id) {
            held.insert(from, (id, image));
        }
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

    /// The newest replica held for `rank`.
    pub(crate) fn replica_of(&self, rank: u16) -> Option<(u64, Vec<u8>)> {
        self.replicas
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&rank)
            .cloned()
    }

    /// The buddy answered our fetch.
    pub(crate) fn replica_fetched(&self, from: u16, image: Option<(u64, Vec<u8>)>) {
        if from != self.buddy() {
            return;
        }
        *self
            .replicas
            .fetched
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(image);
        self.replicas.fetched_cv.notify_all();
    }

    /// Asks the buddy for this node's newest replica: `(id, body)` if it has one that
    /// verifies.
    pub(crate) fn fetch_replica(&self, timeout: Duration) -> Option<(u64, Vec<u8>)> {
        let t = self.transport()?;
        t.send_body(self.buddy(), &FrameBody::ReplicaFetch).ok()?;
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
        match unseal(&image) {
            Some(body) => Some((id, body.to_vec())),
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
}
