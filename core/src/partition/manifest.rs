//! The small state file that makes a set of partition files a checkpoint.

use serde::{Deserialize, Serialize};

/// The manifest format this build writes and reads.
pub const FORMAT: u32 = 1;

/// Where a run stands: the next buffer state to train, in an epoch. The trainer chooses what
/// the numbers mean; the storage keeps them with the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cursor {
    /// The epoch.
    pub epoch: u64,
    /// The next state of the epoch's plan.
    pub state: u64,
}

/// One partition's current file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its generation.
    pub generation: u64,
    /// CRC-32 of its bytes, computed while they were written.
    pub crc32: u32,
}

/// The checkpoint: the run, its geometry, the file generation of each partition with its
/// checksum, the storage's next version and the trainer's cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The format version (1).
    pub format: u32,
    /// The run the files belong to.
    pub run_id: String,
    /// Rows of the table.
    pub rows: usize,
    /// Floats per row.
    pub width: usize,
    /// Partitions.
    pub partitions: usize,
    /// One past the newest version any row holds.
    pub next_version: u64,
    /// Where the run stands.
    pub cursor: Cursor,
    /// Per partition, its file.
    pub files: Vec<FileEntry>,
}
