//! The shared segment of one pair of nodes on one host: a file in `/dev/shm` that both
//! processes map, holding a header and one ring per direction.
//!
//! The dialing node creates it (owner-only permissions, a name derived from the cluster's
//! secret and a fresh nonce) and names it in its Hello, which travels over the mutually
//! authenticated QUIC connection. The accepting node opens it, checks that the header
//! names the pair and the nonce of that Hello, and unlinks it: from then on only the two
//! mappings keep it, and it disappears with the second of the two processes.
//!
//! Layout (offsets in bytes; the mapping is page-aligned):
//!
//! | offset | what |
//! |---|---|
//! | 0 | header: magic, layout version, ring size, dialer rank and incarnation, acceptor rank, nonce |
//! | 512 | control words of the ring dialer → acceptor |
//! | 1024 | control words of the ring acceptor → dialer |
//! | 4096 | data of the ring dialer → acceptor (`ring_bytes`) |
//! | 4096 + `ring_bytes` | data of the ring acceptor → dialer (`ring_bytes`) |

use super::ring::{Ring, RingControl};
use std::fs::OpenOptions;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// First word of every segment.
const MAGIC: u64 = u64::from_le_bytes(*b"LZSHMSEG");
/// Layout version: a node of another layout refuses the segment (and the pair uses QUIC).
const LAYOUT: u32 = 1;
const CONTROL_OFFSETS: [usize; 2] = [512, 1024];
const DATA_OFFSET: usize = 4096;
/// Smallest ring accepted.
pub const MIN_RING_BYTES: usize = 64 << 10;
/// Largest ring accepted (a frame larger than the ring streams through it in pieces).
pub const MAX_RING_BYTES: usize = 1 << 30;

/// Where segments live: the host's shared-memory file system.
pub const SHM_DIR: &str = "/dev/shm";
/// Every segment's name is this prefix, its creator's process id, `-` and 32
/// hexadecimal digits.
pub const NAME_PREFIX: &str = "lazarus-";

/// A segment's name for creator process `pid` and tag `hex` (32 hexadecimal digits).
pub fn segment_name(pid: u32, hex: &str) -> String {
    format!("{NAME_PREFIX}{pid}-{hex}")
}

/// The creator's process id if `name` is one a node gives its segments (so an opener
/// or a sweeper never touches, let alone unlinks, another file).
fn creator(name: &str) -> Option<u32> {
    let (pid, tag) = name.strip_prefix(NAME_PREFIX)?.split_once('-')?;
    let digits = !pid.is_empty() && pid.len() <= 10 && pid.bytes().all(|b| b.is_ascii_digit());
    let tag_ok = tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit());
    (digits && tag_ok).then(|| pid.parse().ok()).flatten()
}

/// Whether `name` is a segment's name whose creating process still exists.
pub fn creator_alive(name: &str) -> bool {
    creator(name).is_some_and(alive)
}

fn is_segment_name(name: &str) -> bool {
    creator(name).is_some()
}

/// Removes the segments in `dir` that this user's dead processes created and no
/// acceptor unlinked (a dialer SIGKILLed between creating a segment and its peer
/// opening it). Returns how many. A segment whose creator lives is someone's offer in
/// flight and stays; so does one of another user.
pub fn sweep_stale(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: `geteuid` has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(creator) else {
            continue;
        };
        let mine = entry
            .metadata()
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == me);
        if mine && !alive(pid) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether process `pid` exists (a zombie counts: its parent has not reaped it yet).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Who a segment is for, as its creator wrote it and its opener expects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The node that created the segment (it dialed).
    pub dialer: u16,
    /// The dialer's incarnation.
    pub dialer_incarnation: u32,
    /// The node that opens it.
    pub acceptor: u16,
    /// Fresh for every segment; travels in the dialer's Hello.
    pub nonce: [u8; 16],
}

/// Which end of a segment this process holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Created the segment; writes ring 0, reads ring 1.
    Dialer,
    /// Opened it; writes ring 1, reads ring 0.
    Acceptor,
}

/// A segment could not be created or was refused.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The file could not be created, opened, sized or mapped.
    #[error("shared segment {path}: {source}")]
    Io {
        /// The segment's file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not what a peer of this cluster creates.
    #[error("shared segment {path} refused: {why}")]
    Refused {
        /// The segment's file.
        path: PathBuf,
        /// What did not match.
        why: String,
    },
}

/// A mapped segment. Dropping it unmaps it, and unlinks its file if this process still
/// holds the name (a dialer whose offer was never taken up).
pub struct Segment {
    map: memmap2::MmapRaw,
    ring_bytes: usize,
    /// The file, while this process is responsible for unlinking it.
    linked: std::sync::Mutex<Option<PathBuf>>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("ring_bytes", &self.ring_bytes)
            .finish_non_exhaustive()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SegmentError + '_ {
    move |source| SegmentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates the shared file `path` (it must not exist; mode 0600), allocates `len` bytes
/// and maps them. The file is removed again if that fails.
pub(crate) fn create_mapped(path: &Path, len: usize) -> Result<memmap2::MmapRaw, SegmentError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io(path))?;
    (|| {
        // Allocated now, not page by page on first touch: a full /dev/shm is an error
        // here (the peers keep the message path), not a SIGBUS in the middle of a write.
        // SAFETY: `file` is an open descriptor for the duration of the call.
        let err = unsafe {
            libc::posix_fallocate(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                len as libc::off_t,
            )
        };
        if err != 0 {
            return Err(std::io::Error::from_raw_os_error(err));
        }
        memmap2::MmapOptions::new().len(len).map_raw(&file)
    })()
    .map_err(|e| {
        let _ = std::fs::remove_file(path);
        io(path)(e)
    })
}

/// Opens the shared file `dir/name` a peer named: it must have a segment's name and be a
/// regular file of this user with owner-only permissions. The file and its length.
pub(crate) fn open_peer_file(
    dir: &Path,
    name: &str,
) -> Result<(std::fs::File, usize), SegmentError> {
    let path = dir.join(name);
    let refused = |why: String| SegmentError::Refused {
        path: path.clone(),
        why,
    };
    if !is_segment_name(name) {
        return Err(refused(format!("`{name}` is not a segment's name")));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io(&path))?;
    let meta = file.metadata().map_err(io(&path))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(refused(format!(
            "not a regular file of this user with owner-only permissions (uid {}, mode {:o})",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    Ok((file, meta.len() as usize))
}

/// The file size of a segment with rings of `ring_bytes`.
fn segment_len(ring_bytes: usize) -> usize {
    DATA_OFFSET + 2 * ring_bytes
}

impl Segment {
    /// Creates the segment file `dir/name` (it must not exist; mode 0600) with two rings
    /// of `ring_bytes` (a power of two within [`MIN_RING_BYTES`]..=[`MAX_RING_BYTES`]) and
    /// writes `pair` into its header.
    pub fn create(
        dir: &Path,
        name: &str,
        ring_bytes: usize,
        pair: Pair,
    ) -> Result<Segment, SegmentError> {
        let path = dir.join(name);
        if !ring_bytes.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes)
        {
            return Err(SegmentError::Refused {
                path,
                why: format!(
                    "ring size {ring_bytes} is not a power of two in {MIN_RING_BYTES}..={MAX_RING_BYTES}"
                ),
            });
        }
        let segment = create_mapped(&path, segment_len(ring_bytes))?;
        let segment = Segment {
            map: segment,
            ring_bytes,
            linked: std::sync::Mutex::new(Some(path)),
        };
        // The file is new and zero-filled: every control word starts at 0. The header is
        // complete before its name leaves this process (in the Hello), and the peer maps
        // the file only after that.
        let h = segment.map.as_mut_ptr();
        // SAFETY: the mapping is `segment_len(ring_bytes)` >= 4096 bytes long and
        // page-aligned, so every field below is in bounds and aligned for its type; no
        // other process has the file's name yet, so nothing else writes it.
        unsafe {
            h.add(8).cast::<u32>().write(LAYOUT);
            h.add(12).cast::<u32>().write(ring_bytes as u32);
            h.add(16).cast::<u16>().write(pair.dialer);
            h.add(18).cast::<u16>().write(pair.acceptor);
            h.add(20).cast::<u32>().write(pair.dialer_incarnation);
            h.add(32).copy_from_nonoverlapping(pair.nonce.as_ptr(), 16);
            h.cast::<u64>().write(MAGIC);
        }
        Ok(segment)
    }

    /// Opens the segment file `dir/name` created by a peer, checks that it belongs to this
    /// user alone and that its header names `pair`, and unlinks it.
    pub fn open(dir: &Path, name: &str, pair: Pair) -> Result<Segment, SegmentError> {
        let path = dir.join(name);
        let refused = |why: String| SegmentError::Refused {
            path: path.clone(),
            why,
        };
        let (file, len) = open_peer_file(dir, name)?;
        if len < DATA_OFFSET + 2 * MIN_RING_BYTES || len > segment_len(MAX_RING_BYTES) {
            return Err(refused(format!("size {len} is no segment's")));
        }
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(io(&path))?;
        let h = map.as_ptr();
        // SAFETY: `len` >= 4096 bytes are mapped, page-aligned: the header fields are in
        // bounds and aligned. The creator wrote them before sending the name and does not
        // change them after.
        let (magic, layout, ring_bytes, dialer, acceptor, dialer_incarnation, nonce) = unsafe {
            let mut nonce = [0u8; 16];
            h.add(32).copy_to_nonoverlapping(nonce.as_mut_ptr(), 16);
            (
                h.cast::<u64>().read(),
                h.add(8).cast::<u32>().read(),
                h.add(12).cast::<u32>().read() as usize,
                h.add(16).cast::<u16>().read(),
                h.add(18).cast::<u16>().read(),
                h.add(20).cast::<u32>().read(),
                nonce,
            )
        };
        if magic != MAGIC {
            return Err(refused("no segment magic".into()));
        }
        if layout != LAYOUT {
            return Err(refused(format!(
                "layout {layout}, this node reads layout {LAYOUT}"
            )));
        }
        if !ring_bytes.is_power_of_two() || segment_len(ring_bytes) != len {
            return Err(refused(format!(
                "ring size {ring_bytes} does not match the file size {len}"
            )));
        }
        let found = Pair {
            dialer,
            dialer_incarnation,
            acceptor,
            nonce,
        };
        if found != pair {
            // Not unlinked: it may be another pair's offer.
            return Err(refused(format!(
                "it is for nodes {dialer} (incarnation {dialer_incarnation}) -> {acceptor}, \
                 or another Hello's nonce; expected {} (incarnation {}) -> {}",
                pair.dialer, pair.dialer_incarnation, pair.acceptor
            )));
        }
        // Ours: only the two mappings keep it from now on.
        let _ = std::fs::remove_file(&path);
        Ok(Segment {
            map,
            ring_bytes,
            linked: std::sync::Mutex::new(None),
        })
    }

    /// Removes the segment's name (the mappings stay). Idempotent.
    pub fn unlink(&self) {
        if let Some(path) = self.linked.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Size of each ring in bytes.
    #[cfg(test)]
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// The ring this side writes and the ring it reads.
    pub fn rings(&self, side: Side) -> (Ring<'_>, Ring<'_>) {
        let (out, inn) = match side {
            Side::Dialer => (0, 1),
            Side::Acceptor => (1, 0),
        };
        (self.ring(out), self.ring(inn))
    }

    fn ring(&self, which: usize) -> Ring<'_> {
        let base = self.map.as_mut_ptr();
        // SAFETY: the control block (< 512 bytes) at 512 or 1024 and the data area at
        // 4096 + which * ring_bytes lie inside the mapping of `segment_len(ring_bytes)`
        // bytes, are 64-byte aligned (the mapping is page-aligned), and live as long as
        // `self`, which the returned ring borrows.
        unsafe {
            let control = &*base.add(CONTROL_OFFSETS[which]).cast::<RingControl>();
            let data = base.add(DATA_OFFSET + which * self.ring_bytes);
            Ring::new(control, data, self.ring_bytes)
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Process 1 lives: the sweeper leaves these alone.
    const SEG: &str = "lazarus-1-0123456789abcdef0123456789abcdef";
    const LOOSE: &str = "lazarus-1-ffffffffffffffffffffffffffffffff";

    fn pair() -> Pair {
        Pair {
            dialer: 3,
            dialer_incarnation: 2,
            acceptor: 1,
            nonce: [7; 16],
        }
    }

    fn dir() -> tempdir::Dir {
        tempdir::Dir::new()
    }

    mod tempdir {
        /// A fresh directory under the system's temporary directory, removed on drop.
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let p = std::env::temp_dir().join(format!(
                    "lazarus-seg-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn the_acceptor_opens_the_dialers_segment_and_unlinks_it() {
        let d = dir();
        let made = Segment::create(&d.0, SEG, MIN_RING_BYTES, pair()).unwrap();
        let mode = std::fs::metadata(d.0.join(SEG)).unwrap().mode();
        assert!(
            Segment::open(&d.0, "lazarus-0123", pair()).is_err(),
            "not a segment's name"
        );
        assert_eq!(mode & 0o777, 0o600, "owner-only permissions");
        let opened = Segment::open(&d.0, SEG, pair()).unwrap();
        assert!(!d.0.join(SEG).exists(), "unlinked once mapped");
        assert_eq!(opened.ring_bytes(), MIN_RING_BYTES);
        // Both map the same memory: what the dialer writes, the acceptor reads.
        let (mut out, _) = made.rings(Side::Dialer);
        let (_, mut inn) = opened.rings(Side::Acceptor);
        assert_eq!(out.push(b"hello").unwrap(), 5);
        let mut got = Vec::new();
        inn.pull(|s| got.extend_from_slice(s)).unwrap();
        assert_eq!(got, b"hello");
    }

    #[test]
    fn a_segment_for_another_pair_or_nonce_is_refused() {
        let d = dir();
        let _made = Segment::create(&d.0, SEG, MIN_RING_BYTES, pair()).unwrap();
        let other = Pair {
            nonce: [8; 16],
            ..pair()
        };
        let err = Segment::open(&d.0, SEG, other).unwrap_err();
        assert!(err.to_string().contains("nonce"), "{err}");
        assert!(d.0.join(SEG).exists(), "another pair's offer is left alone");
    }

    #[test]
    fn a_file_others_can_read_or_garbage_is_refused() {
        let d = dir();
        let path = d.0.join(LOOSE);
        std::fs::write(&path, vec![0u8; DATA_OFFSET + 2 * MIN_RING_BYTES]).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let err = Segment::open(&d.0, LOOSE, pair()).unwrap_err();
        assert!(err.to_string().contains("owner-only"), "{err}");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let err = Segment::open(&d.0, LOOSE, pair()).unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");
        assert!(Segment::open(&d.0, "../etc", pair()).is_err());
    }

    #[test]
    fn an_offer_never_taken_up_is_unlinked_when_dropped() {
        let d = dir();
        let made = Segment::create(&d.0, SEG, MIN_RING_BYTES, pair()).unwrap();
        assert!(d.0.join(SEG).exists());
        drop(made);
        assert!(!d.0.join(SEG).exists());
        assert!(
            Segment::create(&d.0, SEG, MIN_RING_BYTES + 1, pair()).is_err(),
            "ring sizes are powers of two"
        );
    }

    #[test]
    fn segments_of_dead_creators_are_swept_and_no_other_file() {
        let d = dir();
        // A process that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let dead = segment_name(child.id(), "0123456789abcdef0123456789abcdef");
        let ours = segment_name(std::process::id(), "0123456789abcdef0123456789abcdef");
        let other = "lazarus-checkpoints";
        for name in [dead.as_str(), ours.as_str(), other] {
            std::fs::write(d.0.join(name), b"x").unwrap();
        }
        assert_eq!(sweep_stale(&d.0), 1);
        assert!(!d.0.join(&dead).exists(), "its creator is gone");
        assert!(d.0.join(&ours).exists(), "an offer of a live node stays");
        assert!(d.0.join(other).exists(), "not a segment's name");
    }

    #[test]
    fn segment_names_carry_their_creator() {
        assert_eq!(creator(SEG), Some(1));
        assert_eq!(
            creator("lazarus-42-0123456789abcdef0123456789abcdef"),
            Some(42)
        );
        for bad in [
            "lazarus-0123456789abcdef0123456789abcdef",
            "lazarus--0123456789abcdef0123456789abcdef",
            "lazarus-x1-0123456789abcdef0123456789abcdef",
            "lazarus-1-0123",
            "lazarus-99999999999-0123456789abcdef0123456789abcdef",
            "other-1-0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(creator(bad), None, "{bad}");
        }
    }
}
