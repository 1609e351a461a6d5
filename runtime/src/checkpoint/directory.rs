//! A directory of checkpoint files, one subdirectory per set.
//!
//! Files are written with `O_DIRECT` where the file system allows it: a checkpoint is
//! written once and read only after a failure, so copying it into the page cache buys
//! nothing and costs the writer a kernel copy of every byte (measured: the largest single
//! cost of recovery on with 1 MiB messages, whose logs make images of 100-200 MB a
//! second). Where `O_DIRECT` is refused (tmpfs, some network file systems) the write is
//! buffered.

use super::{CheckpointError, CheckpointStore, StoredCheckpoint};
use super::{CHECKPOINT_WRITES, CORRUPT_CHECKPOINTS};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MAGIC: [u8; 4] = *b"LZCK";
const FORMAT: u8 = 1;
/// magic(4) format(1) pad(1) set(2) epoch(8) len(8) crc(4)
const HEADER: usize = 28;

/// Alignment of `O_DIRECT` buffers, offsets and lengths: a page, which covers devices
/// with 512 B and 4 KiB sectors.
const DIRECT_ALIGN: usize = 4096;
/// Bytes staged per `O_DIRECT` write.
const DIRECT_CHUNK: usize = 4 << 20;

/// Checkpoints as files under a root directory (local disk or a shared file system).
#[derive(Debug, Clone)]
pub struct DirectoryStore {
    root: PathBuf,
    /// The aligned buffer `O_DIRECT` writes are staged in, kept between saves.
    staging: Arc<Mutex<Vec<u8>>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl DirectoryStore {
    /// A store rooted at `root` (created on first save).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirectoryStore {
            root: root.into(),
            staging: Arc::default(),
        }
    }

    /// Writes `header` then `body` to a new file at `path` bypassing the page cache.
    /// `Ok(false)` when the file system does not support it (nothing useful written).
    #[cfg(target_os = "linux")]
    fn write_direct(&self, path: &Path, header: &[u8], body: &[u8]) -> std::io::Result<bool> {
        use std::os::unix::fs::OpenOptionsExt;
        let unsupported = |e: &std::io::Error| e.raw_os_error() == Some(libc::EINVAL);
        let mut f = match OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if unsupported(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        staging.resize(DIRECT_CHUNK + DIRECT_ALIGN, 0);
        let start = staging.as_ptr().align_offset(DIRECT_ALIGN);
        let chunk = &mut staging[start..start + DIRECT_CHUNK];
        let total = header.len() + body.len();
        let mut pos = 0;
        while pos < total {
            let n = copy_concatenated(chunk, pos, header, body);
            pos += n;
            // Only the last write may be short; it is padded to the alignment and the
            // file cut back to its length below.
            let padded = n.next_multiple_of(DIRECT_ALIGN);
            chunk[n..padded].fill(0);
            match f.write_all(&chunk[..padded]) {
                Ok(()) => {}
                Err(e) if unsupported(&e) && pos == n => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        f.set_len(total as u64)?;
        f.sync_all()?;
        Ok(true)
    }

    #[cfg(not(target_os = "linux"))]
    fn write_direct(&self, _: &Path, _: &[u8], _: &[u8]) -> std::io::Result<bool> {
        Ok(false)
    }

    /// Writes `header` then `body` to a new file at `path` through the page cache.
    fn write_buffered(path: &Path, header: &[u8], body: &[u8]) -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.write_all(header)?;
        f.write_all(body)?;
        f.sync_all()
    }

    fn set_dir(&self, set: u16) -> PathBuf {
        self.root.join(format!("set-{set}"))
    }

    fn file(&self, set: u16, epoch: u64) -> PathBuf {
        self.set_dir(set).join(format!("ckpt-{epoch:020}.lzck"))
    }

    /// Epochs with a (not yet verified) checkpoint file, newest first.
    fn epochs(&self, set: u16) -> Result<Vec<u64>, CheckpointError> {
        let dir = self.set_dir(set);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut epochs: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("ckpt-")?
                    .strip_suffix(".lzck")?
                    .parse()
                    .ok()
            })
            .collect();
        epochs.sort_unstable_by(|a, b| b.cmp(a));
        Ok(epochs)
    }

    /// Reads and verifies one file; `Err(reason)` if it must not be used.
    fn verify(&self, set: u16, epoch: u64) -> Result<Vec<u8>, &'static str> {
        let mut file = File::open(self.file(set, epoch)).map_err(|_| "unreadable")?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|_| "unreadable")?;
        if bytes.len() < HEADER {
            return Err("truncated");
        }
        let (h, body) = bytes.split_at(HEADER);
        if h[0..4] != MAGIC {
            return Err("bad_magic");
        }
        if h[4] != FORMAT {
            return Err("format");
        }
        let f_set = u16::from_le_bytes([h[6], h[7]]);
        let f_epoch = u64::from_le_bytes(h[8..16].try_into().map_err(|_| "truncated")?);
        let len = u64::from_le_bytes(h[16..24].try_into().map_err(|_| "truncated")?);
        let crc = u32::from_le_bytes(h[24..28].try_into().map_err(|_| "truncated")?);
        if f_set != set || f_epoch != epoch {
            return Err("misplaced");
        }
        if len != body.len() as u64 {
            return Err("truncated");
        }
        if crc32c::crc32c(body) != crc {
            return Err("checksum");
        }
        Ok(body.to_vec())
    }
}

impl CheckpointStore for DirectoryStore {
    fn save(&self, set: u16, epoch: u64, body: &[u8]) -> Result<(), CheckpointError> {
        let dir = self.set_dir(set);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let tmp = dir.join(format!("ckpt-{epoch:020}.tmp"));
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&[FORMAT, 0]);
        header.extend_from_slice(&set.to_le_bytes());
        header.extend_from_slice(&epoch.to_le_bytes());
        header.extend_from_slice(&(body.len() as u64).to_le_bytes());
        header.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        let direct = self.write_direct(&tmp, &header, body).map_err(io(&tmp))?;
        if !direct {
            Self::write_buffered(&tmp, &header, body).map_err(io(&tmp))?;
        }
        let how = if direct { "direct" } else { "buffered" };
        metrics::counter!(CHECKPOINT_WRITES, "io" => how).increment(1);
        let dst = self.file(set, epoch);
        fs::rename(&tmp, &dst).map_err(io(&dst))?;
        // The rename is durable only once the directory entry is.
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&dir))?;
        Ok(())
    }

    fn load_latest(&self, set: u16) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        for epoch in self.epochs(set)? {
            match self.verify(set, epoch) {
                Ok(body) => return Ok(Some(StoredCheckpoint { set, epoch, body })),
                Err(reason) => {
                    metrics::counter!(CORRUPT_CHECKPOINTS, "reason" => reason).increment(1);
                    tracing::warn!(
                        set,
                        epoch,
                        reason,
                        "skipping a checkpoint that does not verify"
                    );
                }
            }
        }
        Ok(None)
    }

    fn prune_before(&self, set: u16, epoch: u64) -> Result<(), CheckpointError> {
        let epochs = self.epochs(set)?;
        let newest = epochs.first().copied();
        for e in epochs
            .into_iter()
            .filter(|e| *e < epoch && Some(*e) != newest)
        {
            let f = self.file(set, e);
            fs::remove_file(&f).map_err(io(&f))?;
        }
        Ok(())
    }
}

/// Copies into `out` the bytes of `header ++ body` from `pos` on; returns how many.
fn copy_concatenated(out: &mut [u8], pos: usize, header: &[u8], body: &[u8]) -> usize {
    let mut n = 0;
    if pos < header.len() {
        let h = &header[pos..];
        let k = h.len().min(out.len());
        out[..k].copy_from_slice(&h[..k]);
        n = k;
    }
    let from = (pos + n).saturating_sub(header.len());
    let b = body.get(from..).unwrap_or_default();
    let k = b.len().min(out.len() - n);
    out[n..n + k].copy_from_slice(&b[..k]);
    n + k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (DirectoryStore, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "lazarus-ckpt-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        (DirectoryStore::new(&dir), dir)
    }

    #[test]
    fn the_newest_complete_checkpoint_is_loaded() {
        let (s, dir) = store();
        assert_eq!(s.load_latest(3).unwrap(), None);
        s.save(3, 1, b"first").unwrap();
        s.save(3, 2, b"second").unwrap();
        s.save(4, 9, b"other set").unwrap();
        let got = s.load_latest(3).unwrap().unwrap();
        assert_eq!((got.epoch, got.body.as_slice()), (2, &b"second"[..]));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_checkpoint_cut_short_by_a_crash_is_never_loaded() {
        let (s, dir) = store();
        s.save(0, 1, b"complete").unwrap();
        // A crash mid-save leaves a temporary file, or a renamed file missing its tail.
        fs::write(
            s.set_dir(0).join(format!("ckpt-{:020}.tmp", 2)),
            b"LZCK partial",
        )
        .unwrap();
        s.save(0, 3, &[7u8; 1000]).unwrap();
        let f = s.file(0, 3);
        let len = fs::metadata(&f).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        assert_eq!(s.load_latest(0).unwrap().unwrap().body, b"complete");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_damaged_checkpoint_is_skipped_for_the_previous_one() {
        let (s, dir) = store();
        s.save(1, 5, b"good old state").unwrap();
        s.save(1, 6, b"good new state").unwrap();
        let f = s.file(1, 6);
        let mut bytes = fs::read(&f).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01; // one flipped bit in the body
        fs::write(&f, bytes).unwrap();
        assert_eq!(s.load_latest(1).unwrap().unwrap().epoch, 5);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_large_image_round_trips_through_direct_io() {
        let (s, dir) = store();
        // Several staging chunks and a tail that is not a multiple of any sector.
        let body: Vec<u8> = (0..(2 * DIRECT_CHUNK + 12_345))
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        s.save(5, 1, &body).unwrap();
        let f = s.file(5, 1);
        assert_eq!(
            fs::metadata(&f).unwrap().len() as usize,
            HEADER + body.len(),
            "no alignment padding is left in the file"
        );
        assert!(s.load_latest(5).unwrap().unwrap().body == body);
        s.save(5, 2, b"tiny").unwrap();
        assert_eq!(s.load_latest(5).unwrap().unwrap().body, b"tiny");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn concatenation_is_copied_across_the_header_boundary() {
        let mut out = [0u8; 4];
        assert_eq!(copy_concatenated(&mut out, 0, b"ab", b"cdef"), 4);
        assert_eq!(&out, b"abcd");
        assert_eq!(copy_concatenated(&mut out, 1, b"ab", b"cdef"), 4);
        assert_eq!(&out, b"bcde");
        assert_eq!(copy_concatenated(&mut out, 4, b"ab", b"cdef"), 2);
        assert_eq!(&out[..2], b"ef");
        assert_eq!(copy_concatenated(&mut out, 6, b"ab", b"cdef"), 0);
    }

    #[test]
    fn pruning_keeps_the_newest() {
        let (s, dir) = store();
        for e in 1..=4 {
            s.save(2, e, &[e as u8]).unwrap();
        }
        s.prune_before(2, 4).unwrap();
        assert_eq!(s.epochs(2).unwrap(), vec![4]);
        s.prune_before(2, 100).unwrap();
        assert_eq!(
            s.epochs(2).unwrap(),
            vec![4],
            "the newest survives any prune"
        );
        let _ = fs::remove_dir_all(dir);
    }
}
