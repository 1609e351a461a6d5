//! Checkpoint storage: where a correlated set's snapshots are kept so that a restarted
//! node finds its last *complete and intact* one.
//!
//! A stored checkpoint is one file: a fixed header (magic, format version, set, epoch, body
//! length, CRC-32C of the body) followed by the body. Saving is atomic: write to a temporary
//! file, fsync it, rename it into place, fsync the directory. Loading walks the epochs from
//! newest to oldest and returns the first one whose header, length and checksum all
//! verify, so a checkpoint cut short by a crash, or damaged on disk, is never loaded: the
//! previous complete one is, if the store still holds one. A node prunes the older ones
//! once a newer one has committed, so after a commit a damaged newest checkpoint leaves
//! only the buddy's replica, or nothing ([`CheckpointStore::newest_epoch`] lets the
//! restore tell; see docs/recovery.md, "A committed checkpoint damaged or lost").
//!
//! A save that fails (a full file system, say) removes what it had written, so a failed
//! attempt takes no room from the next one; the files a killed incarnation left half
//! written are removed when its successor starts ([`CheckpointStore::remove_partial`]).
//! [`health`] decides what a node says while its checkpoints fail.

pub mod directory;
pub mod health;
pub mod journal;

pub use directory::DirectoryStore;

/// Checkpoints whose file failed verification on load (label `reason`).
pub const CORRUPT_CHECKPOINTS: &str = "lazarus_checkpoint_corrupt_total";

/// Checkpoint files written (label `io`: `direct` bypassing the page cache, or
/// `buffered` where the file system refuses `O_DIRECT`).
pub const CHECKPOINT_WRITES: &str = "lazarus_checkpoint_writes_total";

/// A checkpoint store failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file system refused an operation.
    #[error("checkpoint storage at {path}: {source}")]
    Io {
        /// The path involved.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CheckpointError {
    /// Why the store failed, as the `reason` label of
    /// `lazarus_checkpoint_failures_total`: `no_space` when the file system (or the
    /// user's quota) is full, which frees up without any change to the run; `io` for any
    /// other refusal.
    pub fn reason(&self) -> &'static str {
        let CheckpointError::Io { source, .. } = self;
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => "no_space",
            _ => "io",
        }
    }
}

/// One verified checkpoint as loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    /// The set (node rank) it belongs to.
    pub set: u16,
    /// Its epoch: checkpoints of one set are numbered upwards.
    pub epoch: u64,
    /// The snapshot bytes.
    pub body: Vec<u8>,
}

/// Where a set's checkpoints live.
pub trait CheckpointStore: Send + Sync {
    /// Stores `body` as checkpoint `epoch` of `set`, atomically.
    fn save(&self, set: u16, epoch: u64, body: &[u8]) -> Result<(), CheckpointError>;

    /// Stores checkpoint `epoch` of `set`, atomically, as `fill` writes its body: the
    /// body is written as it is produced, never held whole in memory. Returns its length.
    fn save_streamed(
        &self,
        set: u16,
        epoch: u64,
        fill: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<u64, CheckpointError>;

    /// The newest complete, intact checkpoint of `set`, if any.
    fn load_latest(&self, set: u16) -> Result<Option<StoredCheckpoint>, CheckpointError>;

    /// The epoch of `set`'s newest checkpoint file, whether or not it verifies: newer
    /// than what [`CheckpointStore::load_latest`] returns when the newest is damaged.
    fn newest_epoch(&self, set: u16) -> Result<Option<u64>, CheckpointError>;

    /// Deletes checkpoints of `set` older than `epoch` (the newest is never deleted).
    fn prune_before(&self, set: u16, epoch: u64) -> Result<(), CheckpointError>;

    /// Cuts `set`'s reply journal (see [`journal`]) to its first `at` bytes, appends
    /// `records` and makes it durable; returns the new length. Fails if the journal is
    /// shorter than `at`.
    fn append_journal(&self, set: u16, at: u64, records: &[u8]) -> Result<u64, CheckpointError>;

    /// The first `len` bytes of `set`'s reply journal; fails if it is shorter.
    fn read_journal(&self, set: u16, len: u64) -> Result<Vec<u8>, CheckpointError>;

    /// Deletes every checkpoint of `set`, complete or not, and its reply journal; returns
    /// how many complete-looking checkpoints there were. For a set that starts from the beginning: what a
    /// directory holds then was left by an earlier run, and a restart of this run must
    /// never load it.
    fn discard_all(&self, set: u16) -> Result<usize, CheckpointError>;

    /// Deletes the partly written checkpoint files of `set` (an earlier incarnation was
    /// killed while it wrote them) and returns how many there were. Only `set`'s own: the
    /// other sets' nodes may be writing theirs. Called by a node at its start, before it
    /// writes any checkpoint: on a file system shared by the nodes, such files take room
    /// every node's next checkpoint needs.
    fn remove_partial(&self, set: u16) -> Result<usize, CheckpointError>;
}
