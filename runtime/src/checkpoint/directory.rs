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

    /// Writes a checkpoint file at `path` whose body `fill` produces; returns the body's
    /// length. `direct`: bypass the page cache (`O_DIRECT`).
    fn write_image(
        &self,
        path: &Path,
        direct: bool,
        set: u16,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(target_os = "linux")]
        if direct {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_DIRECT);
        }
        #[cfg(not(target_os = "linux"))]
        if direct {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let file = options.open(path)?;
        let mut staging = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        staging.resize(DIRECT_CHUNK + DIRECT_ALIGN, 0);
        let start = staging.as_ptr().align_offset(DIRECT_ALIGN);
        let mut image = ImageWriter::new(file, &mut staging[start..start + DIRECT_CHUNK]);
        if let Err(e) = fill(&mut image) {
            return Err(image.failed.take().unwrap_or(e));
        }
        image.finish(set, epoch)
    }

    fn set_dir(&self, set: u16) -> PathBuf {
        self.root.join(format!("set-{set}"))
    }

    fn journal(&self, set: u16) -> PathBuf {
        self.set_dir(set).join("replies.journal")
    }

    fn file(&self, set: u16, epoch: u64) -> PathBuf {
        self.set_dir(set).join(format!("ckpt-{epoch:020}.lzck"))
    }

    /// Where checkpoint `epoch` of `set` is written before it is renamed into place.
    fn partial(&self, set: u16, epoch: u64) -> PathBuf {
        self.set_dir(set).join(format!("ckpt-{epoch:020}.tmp"))
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
        self.save_streamed(set, epoch, &mut |w| w.write_all(body))
            .map(|_| ())
    }

    fn save_streamed(
        &self,
        set: u16,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64, CheckpointError> {
        let dir = self.set_dir(set);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let tmp = self.partial(set, epoch);
        let written = match self.write_image(&tmp, true, set, epoch, fill) {
            Ok(len) => Ok((len, "direct")),
            // The file system refuses O_DIRECT (tmpfs, some network file systems).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self
                .write_image(&tmp, false, set, epoch, fill)
                .map(|len| (len, "buffered")),
            Err(e) => Err(e),
        };
        let dst = self.file(set, epoch);
        let renamed = written
            .map_err(io(&tmp))
            .and_then(|w| fs::rename(&tmp, &dst).map(|()| w).map_err(io(&dst)));
        let (len, how) = match renamed {
            Ok(w) => w,
            Err(e) => {
                // What was written (all of a full file system's room, possibly) would
                // stay until the node's next start, and the next attempt would not fit.
                remove_partial_file(&tmp);
                return Err(e);
            }
        };
        metrics::counter!(CHECKPOINT_WRITES, "io" => how).increment(1);
        // The rename is durable only once the directory entry is.
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&dir))?;
        Ok(len)
    }

    fn append_journal(&self, set: u16, at: u64, records: &[u8]) -> Result<u64, CheckpointError> {
        let dir = self.set_dir(set);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = self.journal(set);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        let have = file.metadata().map_err(io(&path))?.len();
        if have < at {
            return Err(io(&path)(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("reply journal holds {have} bytes, {at} expected"),
            )));
        }
        // What lies beyond `at` was appended for a checkpoint that did not commit.
        file.set_len(at).map_err(io(&path))?;
        let appended = std::os::unix::fs::FileExt::write_all_at(&file, records, at)
            .and_then(|()| file.sync_data());
        if let Err(e) = appended {
            // A part written before the file system filled up is cut again now, not at
            // the next append: meanwhile it would take room the images need.
            let _ = file.set_len(at);
            return Err(io(&path)(e));
        }
        if at == 0 {
            // A new file: its directory entry must be durable too.
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io(&dir))?;
        }
        Ok(at + records.len() as u64)
    }

    fn read_journal(&self, set: u16, len: u64) -> Result<Vec<u8>, CheckpointError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let path = self.journal(set);
        let file = File::open(&path).map_err(io(&path))?;
        let mut out = Vec::new();
        file.take(len).read_to_end(&mut out).map_err(io(&path))?;
        if (out.len() as u64) < len {
            metrics::counter!(CORRUPT_CHECKPOINTS, "reason" => "journal_short").increment(1);
            return Err(io(&path)(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("reply journal holds {} bytes, {len} expected", out.len()),
            )));
        }
        Ok(out)
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

    fn newest_epoch(&self, set: u16) -> Result<Option<u64>, CheckpointError> {
        Ok(self.epochs(set)?.first().copied())
    }

    fn discard_all(&self, set: u16) -> Result<usize, CheckpointError> {
        let found = self.epochs(set)?.len();
        let dir = self.set_dir(set);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(found),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(io(&dir)(e)),
        }
    }

    fn remove_partial(&self, set: u16) -> Result<usize, CheckpointError> {
        let dir = self.set_dir(set);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut removed = 0;
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let partial = name.to_str().is_some_and(|n| {
                n.strip_prefix("ckpt-")
                    .and_then(|n| n.strip_suffix(".tmp"))
                    .is_some_and(|epoch| epoch.parse::<u64>().is_ok())
            });
            if partial {
                let path = entry.path();
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&path)(e)),
                }
            }
        }
        Ok(removed)
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

/// Removes the temporary file of a save that failed. A removal that fails too is only
/// logged: the save's own error is what the caller reports, and the node's next start
/// removes the file ([`CheckpointStore::remove_partial`]).
fn remove_partial_file(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(
            "cannot remove the partly written checkpoint file {}: {e}",
            path.display()
        ),
    }
}

/// A checkpoint file being written: the stream (header, then body) is staged in an
/// aligned buffer and written a chunk at a time, so a body is never held whole in
/// memory; the header, which holds the body's length and checksum, is written over the
/// file's first block at the end.
struct ImageWriter<'a> {
    file: File,
    chunk: &'a mut [u8],
    /// Bytes staged in `chunk`.
    filled: usize,
    /// Stream bytes already in the file.
    flushed: u64,
    /// The stream's first block as written (header placeholder, start of the body).
    first_block: Vec<u8>,
    /// CRC-32C of the body so far.
    crc: u32,
    /// The file's error, kept: an encoder writing through us may report its own.
    failed: Option<std::io::Error>,
}

impl<'a> ImageWriter<'a> {
    fn new(file: File, chunk: &'a mut [u8]) -> Self {
        chunk[..HEADER].fill(0);
        ImageWriter {
            file,
            chunk,
            filled: HEADER,
            flushed: 0,
            first_block: Vec::new(),
            crc: 0,
            failed: None,
        }
    }

    /// Writes the staged bytes; only the last write of a file may be short of a whole
    /// chunk (it is padded to the alignment, and the file cut back to its length).
    fn write_chunk(&mut self) -> std::io::Result<()> {
        let n = self.filled;
        let body_from = if self.flushed == 0 { HEADER } else { 0 };
        self.crc = crc32c::crc32c_append(self.crc, &self.chunk[body_from..n]);
        if self.flushed == 0 {
            self.first_block = self.chunk[..n.min(DIRECT_ALIGN)].to_vec();
        }
        let padded = n.next_multiple_of(DIRECT_ALIGN);
        self.chunk[n..padded].fill(0);
        self.file.write_all(&self.chunk[..padded])?;
        self.flushed += n as u64;
        self.filled = 0;
        Ok(())
    }

    /// Writes the rest and the header, cuts the padding, syncs; returns the body length.
    fn finish(mut self, set: u16, epoch: u64) -> std::io::Result<u64> {
        if self.filled > 0 || self.flushed == 0 {
            self.write_chunk()?;
        }
        let total = self.flushed;
        let len = total - HEADER as u64;
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&[FORMAT, 0]);
        header.extend_from_slice(&set.to_le_bytes());
        header.extend_from_slice(&epoch.to_le_bytes());
        header.extend_from_slice(&len.to_le_bytes());
        header.extend_from_slice(&self.crc.to_le_bytes());
        // The first block again, from the aligned buffer, with the real header.
        let block = &mut self.chunk[..DIRECT_ALIGN];
        block.fill(0);
        block[..self.first_block.len()].copy_from_slice(&self.first_block);
        block[..HEADER].copy_from_slice(&header);
        std::os::unix::fs::FileExt::write_all_at(&self.file, block, 0)?;
        self.file.set_len(total)?;
        self.file.sync_all()?;
        Ok(len)
    }
}

impl Write for ImageWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = buf.len().min(self.chunk.len() - self.filled);
        self.chunk[self.filled..self.filled + k].copy_from_slice(&buf[..k]);
        self.filled += k;
        if self.filled == self.chunk.len() {
            if let Err(e) = self.write_chunk() {
                let kept = std::io::Error::new(e.kind(), e.to_string());
                self.failed = Some(e);
                return Err(kept);
            }
        }
        Ok(k)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
        assert_eq!(
            s.newest_epoch(1).unwrap(),
            Some(6),
            "the restore can tell that a newer one was skipped"
        );
        assert_eq!(s.newest_epoch(2).unwrap(), None, "no directory");
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
    fn a_body_written_piecemeal_is_stored_whole() {
        let (s, dir) = store();
        // Many small writes across chunk boundaries, as an encoder makes them, and some
        // large ones (logged payloads) across chunks.
        let pieces: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| match i % 1000 {
                999 => (0..(1 << 20) + 3).map(|j| (j % 251) as u8).collect(),
                _ => vec![i as u8; (i as usize * 37) % 3000],
            })
            .collect();
        let whole: Vec<u8> = pieces.concat();
        let len = s
            .save_streamed(6, 1, &mut |w| {
                pieces.iter().try_for_each(|p| w.write_all(p))
            })
            .unwrap();
        assert_eq!(len as usize, whole.len());
        assert!(s.load_latest(6).unwrap().unwrap().body == whole);
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn a_fresh_start_discards_an_earlier_runs_checkpoints_of_its_set_only() {
        let (s, dir) = store();
        s.save(0, 7, b"earlier run").unwrap();
        s.save(1, 3, b"other set").unwrap();
        assert_eq!(s.discard_all(0).unwrap(), 1);
        assert!(s.load_latest(0).unwrap().is_none());
        assert_eq!(s.load_latest(1).unwrap().unwrap().epoch, 3);
        assert_eq!(s.discard_all(0).unwrap(), 0, "nothing left, and no error");
        s.save(0, 1, b"this run").unwrap();
        assert_eq!(s.load_latest(0).unwrap().unwrap().body, b"this run");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn the_reply_journal_grows_by_appends_and_loses_a_tail_no_checkpoint_committed() {
        let (s, dir) = store();
        assert_eq!(s.read_journal(2, 0).unwrap(), Vec::<u8>::new());
        assert!(s.read_journal(2, 1).is_err(), "no journal yet");
        let at = s.append_journal(2, 0, b"one").unwrap();
        let uncommitted = s.append_journal(2, at, b"-two").unwrap();
        assert_eq!(s.read_journal(2, uncommitted).unwrap(), b"one-two");
        // The next checkpoint appends after the last committed length.
        let end = s.append_journal(2, at, b"+three").unwrap();
        assert_eq!(end, 9);
        assert_eq!(s.read_journal(2, end).unwrap(), b"one+three");
        assert_eq!(
            s.read_journal(2, 3).unwrap(),
            b"one",
            "a prefix reads alone"
        );
        assert!(s.read_journal(2, end + 1).is_err(), "shorter than asked");
        assert!(
            s.append_journal(2, end + 5, b"x").is_err(),
            "a gap is refused"
        );
        s.discard_all(2).unwrap();
        assert!(s.read_journal(2, 1).is_err(), "a fresh start drops it");
        let _ = fs::remove_dir_all(dir);
    }

    /// The temporary files in `set`'s directory.
    fn partials(s: &DirectoryStore, set: u16) -> Vec<String> {
        fs::read_dir(s.set_dir(set))
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".tmp"))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_save_that_fails_leaves_no_partial_file_and_the_previous_checkpoint_intact() {
        let (s, dir) = store();
        s.save(0, 1, b"committed").unwrap();
        // The encoder fails after more than a chunk is in the file, and before any.
        for written in [DIRECT_CHUNK + 100, 0] {
            let err = s
                .save_streamed(0, 2, &mut |w| {
                    w.write_all(&vec![1u8; written])?;
                    Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
                })
                .unwrap_err();
            assert_eq!(err.reason(), "no_space", "{err}");
            assert!(err.to_string().contains(".tmp"), "names the file: {err}");
            assert_eq!(partials(&s, 0), Vec::<String>::new());
        }
        let other = s
            .save_streamed(0, 3, &mut |_| Err(std::io::Error::other("encoder")))
            .unwrap_err();
        assert_eq!(other.reason(), "io");
        assert_eq!(partials(&s, 0), Vec::<String>::new());
        assert_eq!(s.load_latest(0).unwrap().unwrap().body, b"committed");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn partial_files_of_the_set_only_are_removed() {
        let (s, dir) = store();
        assert_eq!(s.remove_partial(0).unwrap(), 0, "no directory yet");
        s.save(0, 4, b"complete").unwrap();
        s.save(1, 4, b"other set").unwrap();
        for (set, epoch) in [(0, 5), (0, 6), (1, 5)] {
            fs::write(s.partial(set, epoch), b"LZCK partial").unwrap();
        }
        fs::write(s.set_dir(0).join("notes.tmp"), b"not ours").unwrap();
        assert_eq!(s.remove_partial(0).unwrap(), 2);
        assert_eq!(partials(&s, 0), vec!["notes.tmp".to_string()]);
        assert_eq!(
            partials(&s, 1).len(),
            1,
            "another node's file is left alone"
        );
        assert_eq!(s.load_latest(0).unwrap().unwrap().body, b"complete");
        s.save(0, 7, b"next").unwrap();
        assert_eq!(s.load_latest(0).unwrap().unwrap().epoch, 7);
        let _ = fs::remove_dir_all(dir);
    }

    /// A tmpfs of `size` mounted at a fresh directory, unmounted when dropped.
    struct SmallFileSystem(PathBuf);

    impl SmallFileSystem {
        /// `None` (the test skips) unless this process may mount: root only.
        fn mount(size: &str) -> Option<Self> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                assert!(
                    std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
                    "LAZARUS_TEST_REQUIRE_ALL=1 but not running as root"
                );
                eprintln!("skipping: mounting a tmpfs needs root");
                return None;
            }
            let (_, dir) = store();
            fs::create_dir_all(&dir).unwrap();
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "mount a tmpfs at {}", dir.display());
            Some(SmallFileSystem(dir))
        }
    }

    impl Drop for SmallFileSystem {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
            let _ = fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn on_a_full_file_system_a_save_fails_as_no_space_frees_its_room_and_the_next_fits() {
        let Some(fs_) = SmallFileSystem::mount("1m") else {
            return;
        };
        let s = DirectoryStore::new(&fs_.0);
        s.save(0, 1, &[1u8; 100_000]).unwrap();
        s.append_journal(0, 0, b"replies").unwrap();
        let big = vec![2u8; 3 << 20];
        for epoch in 2..5 {
            let err = s.save(0, epoch, &big).unwrap_err();
            assert_eq!(err.reason(), "no_space", "{err}");
            assert!(err.to_string().contains("No space left on device"), "{err}");
            assert_eq!(partials(&s, 0), Vec::<String>::new(), "epoch {epoch}");
        }
        // A journal append that does not fit is cut back too.
        let err = s.append_journal(0, 7, &big).unwrap_err();
        assert_eq!(err.reason(), "no_space", "{err}");
        assert_eq!(fs::metadata(s.journal(0)).unwrap().len(), 7);
        // The room the failed attempts took is free again: an image that fits commits.
        s.save(0, 5, &[5u8; 600_000]).unwrap();
        assert_eq!(s.load_latest(0).unwrap().unwrap().epoch, 5);
        assert_eq!(s.read_journal(0, 7).unwrap(), b"replies");
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
