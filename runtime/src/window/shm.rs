//! The shared-memory direct path of windows: a node's part of a window lives in a file
//! in `/dev/shm` that the other nodes of its host map, so that an origin puts into and
//! gets from the target's part itself, without the target's CPU.
//!
//! The target creates the segment when its `main` creates the window (owner-only
//! permissions, a fresh name and nonce) and announces it to its peers over their
//! authenticated link (`FrameBody::WindowSegment`); a peer of the same host maps it after
//! checking that its header names that window, target, incarnation, nonce and size. The
//! creator unlinks the file when it exits; one left by a SIGKILLed node is removed by the
//! next node that starts on the host (`transport::shm::segment::sweep_stale`). A peer
//! that cannot map it (another host) uses the message path.
//!
//! The words in the segment are the machine's ([`lazarus_proto::window::gate`]): the
//! target's gate word, one *inside* counter per origin node, which carries the origin's
//! incarnation so that a dead incarnation's raised counter can be cleared, and one
//! records ring per origin node, where an origin leaves what it did for the target's
//! bookkeeping ([`Member::handle_direct`]). The target reads the records whenever its
//! machine runs (a frame, its own call, its fence, its checkpoint): never per operation.
//!
//! Layout (offsets in bytes, the mapping page-aligned; `m` members):
//!
//! | offset | what |
//! |---|---|
//! | 0 | header: magic, layout, window, rank, members, incarnation, part and ring sizes, nonce, shape digest |
//! | 64 | the gate word |
//! | 128 | `m` inside counters, a cache line each |
//! | 128 + 64 m | `m` ring positions (written, read), a cache line each |
//! | `rings_at` (page-aligned) | `m` records rings of `ring_bytes(m)` |
//! | `part_at` (page-aligned) | the part |
//!
//! [`Member::handle_direct`]: lazarus_proto::window::Member::handle_direct

use crate::transport::shm::segment::{create_mapped, open_peer_file, SegmentError};
use lazarus_proto::window::{GateWord, OpKind, OpMeta, WindowId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::*};

const MAGIC: u64 = u64::from_le_bytes(*b"LZWINSEG");
const LAYOUT: u32 = 1;
const GATE_AT: usize = 64;
const INSIDE_AT: usize = 128;
const LINE: usize = 64;
const PAGE: usize = 4096;
/// Each origin's records ring: 4 MiB shared by the origins, from 256 KiB to 1 MiB each
/// (a segment is allocated whole when it is made). A get whose kept values do not fit
/// takes the message path.
pub(crate) fn ring_bytes(members: u16) -> usize {
    ((4usize << 20) / usize::from(members.max(1))).clamp(256 << 10, 1 << 20)
}
/// A record's length prefix.
const LEN_BYTES: usize = 4;

/// What an origin leaves in the target's segment after a direct operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) meta: OpMeta,
    pub(crate) kind: OpKind,
    /// A get's values (with recovery on: the target keeps them for the origin's restart).
    #[serde(with = "option_bytes")]
    pub(crate) answer: Option<Vec<u8>>,
}

mod option_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Bytes(#[serde(with = "lazarus_proto::wire::byte_string")] Vec<u8>);

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().map(|b| Bytes(b.clone())).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<Bytes>::deserialize(d)?.map(|b| b.0))
    }
}

/// Who a segment is for, as its creator wrote it and announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) window: WindowId,
    pub(crate) rank: u16,
    pub(crate) members: u16,
    pub(crate) incarnation: u32,
    pub(crate) part_bytes: usize,
    /// A digest of the window's shape (element type, every member's length): an origin
    /// that sees the window otherwise maps nothing and takes the message path, where the
    /// target refuses its operations with the reason.
    pub(crate) shape: u64,
    pub(crate) nonce: [u8; 16],
}

/// The digest of a window's shape that a segment's header holds (FNV-1a of its encoding).
pub(crate) fn shape_digest(shape: &lazarus_proto::window::Shape) -> u64 {
    let bytes = postcard::to_allocvec(shape).unwrap_or_default();
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A records ring's damaged positions or an undecodable record: the origin's memory
/// cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {origin}'s records in the window segment are damaged: {why}")]
pub(crate) struct Damaged {
    pub(crate) origin: u16,
    pub(crate) why: String,
}

fn rings_at(members: u16) -> usize {
    (INSIDE_AT + 2 * LINE * usize::from(members)).next_multiple_of(PAGE)
}

fn part_at(members: u16) -> usize {
    rings_at(members) + ring_bytes(members) * usize::from(members)
}

fn segment_len(members: u16, part_bytes: usize) -> usize {
    part_at(members) + part_bytes.next_multiple_of(PAGE).max(PAGE)
}

/// A mapped window segment: the target's own (it unlinks the file when dropped) or a
/// peer's.
pub(crate) struct Segment {
    map: memmap2::MmapRaw,
    id: Identity,
    /// The file, while this process is responsible for unlinking it.
    linked: std::sync::Mutex<Option<PathBuf>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("id", &self.id).finish()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// The files of this process's segments: removed when the process exits (a node that
/// leaves without shutting its cluster down, a test binary that leaks one), since peers
/// that restart must be able to map them again as long as the node lives. A SIGKILLed
/// node's are removed by the next node that starts on the host.
static OWN_FILES: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

extern "C" fn remove_own_files() {
    let files = std::mem::take(&mut *OWN_FILES.lock().unwrap_or_else(|e| e.into_inner()));
    for path in files {
        let _ = std::fs::remove_file(path);
    }
}

fn remember(path: &Path) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `remove_own_files` is a plain function that stays valid for the life of
        // the process; `atexit` only records it.
        unsafe {
            libc::atexit(remove_own_files);
        }
    });
    OWN_FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
}

// SAFETY: the mapping is reached only through atomics and through byte copies whose
// ranges the window's rules give to one writer at a time (see the methods).
unsafe impl Send for Segment {}
// SAFETY: as above; every method that writes takes `&self` only for words read and
// written atomically or for ranges the caller owns under the window's lock and rules.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates segment file `dir/name` (it must not exist; mode 0600) for `id`, its part
    /// holding `part`, its gate open at `epoch`.
    pub(crate) fn create(
        dir: &Path,
        name: &str,
        id: Identity,
        part: &[u8],
        epoch: u64,
    ) -> Result<Segment, SegmentError> {
        let path = dir.join(name);
        let gate = GateWord::open_at(epoch).ok_or_else(|| SegmentError::Refused {
            path: path.clone(),
            why: format!("epoch {epoch} does not fit the gate word"),
        })?;
        let map = create_mapped(&path, segment_len(id.members, id.part_bytes))?;
        remember(&path);
        let seg = Segment {
            map,
            id,
            linked: std::sync::Mutex::new(Some(path)),
        };
        let h = seg.map.as_mut_ptr();
        // SAFETY: the mapping is `segment_len` bytes, page-aligned, holding the header and the
        // part's place; the file is new and its name has not left this process, so nothing
        // else reads or writes it yet.
        unsafe {
            h.add(8).cast::<u32>().write(LAYOUT);
            h.add(12).cast::<u32>().write(id.window.0);
            h.add(16).cast::<u16>().write(id.rank);
            h.add(18).cast::<u16>().write(id.members);
            h.add(20).cast::<u32>().write(id.incarnation);
            h.add(24).cast::<u64>().write(id.part_bytes as u64);
            h.add(32).cast::<u64>().write(ring_bytes(id.members) as u64);
            h.add(40).copy_from_nonoverlapping(id.nonce.as_ptr(), 16);
            h.add(56).cast::<u64>().write(id.shape);
            h.add(part_at(id.members))
                .copy_from_nonoverlapping(part.as_ptr(), part.len().min(id.part_bytes));
            h.cast::<u64>().write(MAGIC);
        }
        seg.gate().store(gate.0, SeqCst);
        Ok(seg)
    }

    /// Opens the segment `dir/name` a peer announced as `id`: it must be a regular file
    /// of this user with owner-only permissions whose header says `id`.
    pub(crate) fn open(dir: &Path, name: &str, id: Identity) -> Result<Segment, SegmentError> {
        let path = dir.join(name);
        let refused = |why: String| SegmentError::Refused {
            path: path.clone(),
            why,
        };
        let (file, found_len) = open_peer_file(dir, name)?;
        let len = segment_len(id.members, id.part_bytes);
        if found_len != len {
            return Err(refused(format!(
                "size {found_len}, a segment of this window is {len}"
            )));
        }
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|source| SegmentError::Io {
                path: path.clone(),
                source,
            })?;
        let h = map.as_ptr();
        // SAFETY: `len` bytes are mapped, page-aligned: the header's fields are in bounds
        // and aligned. The creator wrote them before announcing the name and never
        // changes them.
        let found = unsafe {
            let mut nonce = [0u8; 16];
            h.add(40).copy_to_nonoverlapping(nonce.as_mut_ptr(), 16);
            (
                h.cast::<u64>().read(),
                h.add(8).cast::<u32>().read(),
                h.add(32).cast::<u64>().read(),
                Identity {
                    window: WindowId(h.add(12).cast::<u32>().read()),
                    rank: h.add(16).cast::<u16>().read(),
                    members: h.add(18).cast::<u16>().read(),
                    incarnation: h.add(20).cast::<u32>().read(),
                    part_bytes: h.add(24).cast::<u64>().read() as usize,
                    shape: h.add(56).cast::<u64>().read(),
                    nonce,
                },
            )
        };
        if found.0 != MAGIC || found.1 != LAYOUT || found.2 != ring_bytes(id.members) as u64 {
            return Err(refused(format!(
                "magic, layout {} or ring size {} not this node's",
                found.1, found.2
            )));
        }
        if found.3 != id {
            return Err(refused(format!(
                "its header says {:?}, its announcement {id:?}",
                found.3
            )));
        }
        Ok(Segment {
            map,
            id,
            linked: std::sync::Mutex::new(None),
        })
    }

    /// Removes the file if this process created it (the mappings stay valid).
    pub(crate) fn unlink(&self) {
        let path = self.linked.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(path) = path {
            let _ = std::fs::remove_file(&path);
            OWN_FILES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|p| *p != path);
        }
    }

    /// Who it is for.
    pub(crate) fn identity(&self) -> Identity {
        self.id
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: every offset passed is inside the control area of the mapping (below
        // `rings_at`), 8-byte aligned; the mapping lives as long as `self`, and these
        // words are only ever accessed atomically, by every process.
        unsafe { &*self.map.as_ptr().add(at).cast::<AtomicU64>() }
    }

    /// The target's gate word.
    pub(crate) fn gate(&self) -> &AtomicU64 {
        self.word(GATE_AT)
    }

    /// Origin node `origin`'s inside counter: `(incarnation + 1) << 32 | count`, or 0.
    fn inside(&self, origin: u16) -> &AtomicU64 {
        debug_assert!(origin < self.id.members);
        self.word(INSIDE_AT + LINE * usize::from(origin))
    }

    fn positions(&self, origin: u16) -> (&AtomicU64, &AtomicU64) {
        let at = INSIDE_AT + LINE * usize::from(self.id.members) + 2 * LINE * usize::from(origin);
        (self.word(at), self.word(at + LINE))
    }

    fn ring_len(&self) -> usize {
        ring_bytes(self.id.members)
    }

    fn ring(&self, origin: u16) -> *mut u8 {
        // SAFETY: origin < members, so the ring lies inside the mapping.
        unsafe {
            self.map
                .as_mut_ptr()
                .add(rings_at(self.id.members) + self.ring_len() * usize::from(origin))
        }
    }

    /// The part's memory.
    pub(crate) fn part_ptr(&self) -> *mut u8 {
        // SAFETY: `part_at` + part bytes is inside the mapping.
        unsafe { self.map.as_mut_ptr().add(part_at(self.id.members)) }
    }

    /// The part as a slice, for the target's machine under the window's lock.
    ///
    /// # Safety
    /// Only the target calls it, under its window's lock, and only for the duration of
    /// one machine call. Origins may write other elements meanwhile (the window's
    /// contract keeps an epoch's operations on distinct elements).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn part_mut(&self) -> &mut [u8] {
        std::slice::from_raw_parts_mut(self.part_ptr(), self.id.part_bytes)
    }

    // ------------------------------------------------------------ the origin's side

    /// Origin `origin` (incarnation `incarnation`) raises its inside counter, then reads
    /// the gate word (both sequentially consistent: see [`lazarus_proto::window::gate`]).
    pub(crate) fn enter(&self, origin: u16, incarnation: u32) -> GateWord {
        let tag = u64::from(incarnation) + 1;
        let c = self.inside(origin);
        let _ = c.fetch_update(SeqCst, SeqCst, |v| {
            Some(if v >> 32 == tag {
                v + 1
            } else {
                (tag << 32) | 1
            })
        });
        GateWord(self.gate().load(SeqCst))
    }

    /// Origin `origin` lowers its counter (entered as `incarnation`).
    pub(crate) fn leave(&self, origin: u16, incarnation: u32) {
        let tag = u64::from(incarnation) + 1;
        let _ = self.inside(origin).fetch_update(SeqCst, SeqCst, |v| {
            (v >> 32 == tag && v & 0xffff_ffff > 0).then(|| {
                let n = (v & 0xffff_ffff) - 1;
                if n == 0 {
                    0
                } else {
                    (tag << 32) | n
                }
            })
        });
    }

    /// Whether origin `origin`'s ring has room for a record of `len` bytes.
    pub(crate) fn has_room(&self, origin: u16, len: usize) -> bool {
        let (write, read) = self.positions(origin);
        let used = write.load(Relaxed).wrapping_sub(read.load(Acquire));
        let cap = self.ring_len() as u64;
        used <= cap && (cap - used) >= (LEN_BYTES + len) as u64
    }

    /// Origin `origin` leaves `record` (encoded) in its ring; false if it has no room.
    pub(crate) fn push_record(&self, origin: u16, encoded: &[u8]) -> bool {
        if !self.has_room(origin, encoded.len()) {
            return false;
        }
        let (write, _) = self.positions(origin);
        let at = write.load(Relaxed);
        let Ok(len) = u32::try_from(encoded.len()) else {
            return false;
        };
        self.copy_in(origin, at, &len.to_le_bytes());
        self.copy_in(origin, at + LEN_BYTES as u64, encoded);
        // Commit: the record's bytes happen-before any reader that sees the position.
        write.store(at + (LEN_BYTES + encoded.len()) as u64, SeqCst);
        true
    }

    fn copy_in(&self, origin: u16, at: u64, bytes: &[u8]) {
        let ring = self.ring(origin);
        let cap = self.ring_len();
        let off = (at % cap as u64) as usize;
        let first = bytes.len().min(cap - off);
        // SAFETY: both ranges lie in this origin's ring (`off + first <= cap`,
        // `bytes.len() - first < cap`); they are free (`has_room`): the target
        // has read past them and reads nothing beyond the committed position.
        unsafe {
            ring.add(off)
                .copy_from_nonoverlapping(bytes.as_ptr(), first);
            ring.copy_from_nonoverlapping(bytes.as_ptr().add(first), bytes.len() - first);
        }
    }

    fn copy_out(&self, origin: u16, at: u64, out: &mut [u8]) {
        let ring = self.ring(origin);
        let cap = self.ring_len();
        let off = (at % cap as u64) as usize;
        let first = out.len().min(cap - off);
        // SAFETY: as `copy_in`: the range lies in the ring, below the committed position
        // the target acquired, and the origin does not write it before the target moves
        // its read position past it.
        unsafe {
            out.as_mut_ptr()
                .copy_from_nonoverlapping(ring.add(off), first);
            out.as_mut_ptr()
                .add(first)
                .copy_from_nonoverlapping(ring, out.len() - first);
        }
    }

    // ------------------------------------------------------------ the target's side

    /// Every record origins left since the last call, by origin, in order.
    pub(crate) fn take_records(
        &self,
        skip: u16,
        mut each: impl FnMut(u16, Record),
    ) -> Result<(), Damaged> {
        for origin in (0..self.id.members).filter(|o| *o != skip) {
            let (write, read) = self.positions(origin);
            let end = write.load(Acquire);
            let mut at = read.load(Relaxed);
            let damaged = |why: String| Damaged { origin, why };
            let cap = self.ring_len();
            if end.wrapping_sub(at) > cap as u64 {
                return Err(damaged(format!(
                    "positions {at}..{end} exceed the ring of {cap}"
                )));
            }
            while at != end {
                let mut len = [0u8; LEN_BYTES];
                if end.wrapping_sub(at) < LEN_BYTES as u64 {
                    return Err(damaged("a record cut short".into()));
                }
                self.copy_out(origin, at, &mut len);
                let len = u32::from_le_bytes(len) as u64;
                if end.wrapping_sub(at) < LEN_BYTES as u64 + len {
                    return Err(damaged(format!("a record of {len} bytes cut short")));
                }
                let mut bytes = vec![0u8; len as usize];
                self.copy_out(origin, at + LEN_BYTES as u64, &mut bytes);
                let record: Record = postcard::from_bytes(&bytes)
                    .map_err(|e| damaged(format!("an undecodable record: {e}")))?;
                at += LEN_BYTES as u64 + len;
                read.store(at, SeqCst);
                each(origin, record);
            }
        }
        Ok(())
    }

    /// Sets the gate word.
    pub(crate) fn set_gate(&self, gate: GateWord) {
        self.gate().store(gate.0, SeqCst);
    }

    /// Whether no origin is inside (read after closing the gate).
    pub(crate) fn drained(&self) -> bool {
        (0..self.id.members).all(|o| self.inside(o).load(SeqCst) & 0xffff_ffff == 0)
    }

    /// Which origins are inside, for a report.
    pub(crate) fn inside_now(&self) -> Vec<(u16, u64)> {
        (0..self.id.members)
            .map(|o| (o, self.inside(o).load(SeqCst)))
            .filter(|(_, v)| v & 0xffff_ffff != 0)
            .collect()
    }

    /// Origin `origin`'s incarnations up to `dead` died: a counter one of them left
    /// raised is cleared (a newer incarnation's stays).
    pub(crate) fn origin_died(&self, origin: u16, dead: u32) {
        if origin >= self.id.members {
            return;
        }
        let dead_tag = u64::from(dead) + 1;
        let _ = self.inside(origin).fetch_update(SeqCst, SeqCst, |v| {
            (v >> 32 <= dead_tag && v != 0).then_some(0)
        });
    }
}

/// A fresh segment name and nonce for this process.
pub(crate) fn fresh_name() -> (String, [u8; 16]) {
    use ::ring::rand::SecureRandom;
    let mut n = [0u8; 32];
    if ::ring::rand::SystemRandom::new().fill(&mut n).is_err() {
        // No system randomness: time and a counter still make the name unique here.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        n[..8].copy_from_slice(&t.to_le_bytes());
        n[8..16].copy_from_slice(&NEXT.fetch_add(1, Relaxed).to_le_bytes());
        n[16..24].copy_from_slice(&t.rotate_left(17).to_le_bytes());
    }
    let hex: String = n[..16].iter().map(|b| format!("{b:02x}")).collect();
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&n[16..]);
    (
        crate::transport::shm::segment::segment_name(std::process::id(), &hex),
        nonce,
    )
}

/// The directory segments live in.
pub(crate) fn dir() -> PathBuf {
    PathBuf::from(crate::transport::shm::segment::SHM_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazarus_proto::ActorId;

    fn id(part_bytes: usize) -> Identity {
        Identity {
            window: WindowId(3),
            rank: 1,
            members: 3,
            incarnation: 2,
            part_bytes,
            shape: 99,
            nonce: [7; 16],
        }
    }

    fn pair(part: &[u8]) -> (Segment, Segment) {
        let (name, nonce) = fresh_name();
        let id = Identity {
            nonce,
            ..id(part.len())
        };
        let own = Segment::create(&dir(), &name, id, part, 4).unwrap();
        let peer = Segment::open(&dir(), &name, id).unwrap();
        (own, peer)
    }

    #[test]
    fn an_origin_writes_the_targets_part_and_leaves_records_it_reads_in_order() {
        let (own, peer) = pair(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(GateWord(peer.gate().load(SeqCst)).admits(4), Ok(()));
        // SAFETY: the test's two mappings are the only users; the ranges do not overlap.
        unsafe { peer.part_ptr().add(2).write(42) };
        let meta = |index| OpMeta {
            origin: ActorId::new(0, 1).unwrap(),
            index,
            epoch: 4,
        };
        for i in 1..=3 {
            let r = Record {
                meta: meta(i),
                kind: OpKind::Get,
                answer: Some(vec![i as u8; 3]),
            };
            assert!(peer.push_record(0, &postcard::to_allocvec(&r).unwrap()));
        }
        let mut got = Vec::new();
        own.take_records(1, |o, r| got.push((o, r.meta.index, r.answer)))
            .unwrap();
        assert_eq!(
            got,
            vec![
                (0, 1, Some(vec![1; 3])),
                (0, 2, Some(vec![2; 3])),
                (0, 3, Some(vec![3; 3]))
            ]
        );
        // SAFETY: as above.
        assert_eq!(unsafe { own.part_mut() }[..4], [1, 2, 42, 4]);
    }

    #[test]
    fn a_closed_gate_waits_for_origins_inside_and_a_dead_incarnations_counter_is_cleared() {
        let (own, peer) = pair(&[0; 16]);
        assert!(own.drained());
        peer.enter(0, 5);
        own.set_gate(GateWord::open_at(4).unwrap().close());
        assert!(!own.drained(), "an origin inside holds the checkpoint");
        assert_eq!(
            GateWord(peer.gate().load(SeqCst)).admits(4),
            Err(lazarus_proto::window::Closed::Checkpointing)
        );
        own.origin_died(0, 4);
        assert!(!own.drained(), "an older incarnation's death leaves it");
        own.origin_died(0, 5);
        assert!(own.drained(), "its own incarnation's death clears it");
        peer.enter(2, 0);
        peer.leave(2, 0);
        assert!(own.drained());
    }

    #[test]
    fn damaged_positions_and_records_are_refused_not_read() {
        let (own, peer) = pair(&[0; 8]);
        assert!(peer.push_record(0, &[0xff, 0xff, 0xff]));
        let err = own.take_records(1, |_, _| {}).unwrap_err();
        assert_eq!(err.origin, 0);
        let (write, _) = peer.positions(2);
        write.store(u64::MAX / 2, SeqCst);
        assert!(own.take_records(1, |_, _| {}).is_err_and(|e| e.origin <= 2));
    }

    #[test]
    fn a_segment_whose_header_says_another_window_is_refused() {
        let (name, nonce) = fresh_name();
        let mine = Identity { nonce, ..id(8) };
        let _own = Segment::create(&dir(), &name, mine, &[0; 8], 0).unwrap();
        let other = Identity {
            window: WindowId(4),
            ..mine
        };
        assert!(Segment::open(&dir(), &name, other).is_err());
        assert!(Segment::open(&dir(), "../etc/passwd", mine).is_err());
    }

    #[test]
    fn the_ring_wraps_around() {
        let (own, peer) = pair(&[0; 8]);
        let big = Record {
            meta: OpMeta {
                origin: ActorId::new(0, 1).unwrap(),
                index: 1,
                epoch: 0,
            },
            kind: OpKind::Get,
            answer: Some(vec![9; ring_bytes(3) / 3]),
        };
        let bytes = postcard::to_allocvec(&big).unwrap();
        let mut n = 0;
        for _ in 0..5 {
            assert!(peer.push_record(0, &bytes));
            assert!(peer.push_record(0, &bytes));
            own.take_records(1, |_, r| {
                assert_eq!(r, big);
                n += 1
            })
            .unwrap();
        }
        assert_eq!(n, 10);
        assert!(peer.push_record(0, &bytes) && peer.push_record(0, &bytes));
        assert!(!peer.push_record(0, &bytes), "a full ring refuses");
    }
}
