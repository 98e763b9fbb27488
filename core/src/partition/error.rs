//! Why opening, creating or swapping a partitioned storage failed.

use super::ordering::PlanError;
use crate::row_store::StoreError;
use std::io;

/// A partitioned storage's error. The geometry and files are checked when a storage is created
/// or opened, before any row is trained; I/O failures later (a full disk) are reported at the
/// next swap or checkpoint and leave the last checkpoint whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    /// The buffer does not fit the partitions.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// More partitions than rows: a partition would be empty.
    #[error("{partitions} partitions for {rows} rows: every partition needs a row")]
    TooManyPartitions {
        /// Partitions asked for.
        partitions: usize,
        /// Rows of the table.
        rows: usize,
    },
    /// The storage folder holds a run with another id.
    #[error("{manifest} belongs to run `{found}`, not `{expected}`")]
    ForeignRun {
        /// The manifest's path.
        manifest: String,
        /// The run id asked for.
        expected: String,
        /// The run id it holds.
        found: String,
    },
    /// Creating a storage where one already is.
    #[error("{manifest} already holds run `{run_id}`: resume it or choose another folder")]
    AlreadyCreated {
        /// The manifest's path.
        manifest: String,
        /// Its run id.
        run_id: String,
    },
    /// Opening a folder that holds no storage.
    #[error("no partitioned storage at {manifest}")]
    NoManifest {
        /// The manifest's path.
        manifest: String,
    },
    /// The manifest cannot be parsed, or names another format.
    #[error("{manifest} is not a partition manifest: {reason}")]
    BadManifest {
        /// The manifest's path.
        manifest: String,
        /// What is wrong.
        reason: String,
    },
    /// A partition file the manifest names is missing.
    #[error("partition file {path} is missing")]
    MissingPartition {
        /// Its path.
        path: String,
    },
    /// A partition file has the wrong length.
    #[error("partition file {path} holds {got} bytes, not {expected}")]
    TruncatedPartition {
        /// Its path.
        path: String,
        /// Bytes its rows take.
        expected: u64,
        /// Bytes it holds.
        got: u64,
    },
    /// A partition file's bytes are not the ones written.
    #[error("partition file {path} fails its checksum")]
    Checksum {
        /// Its path.
        path: String,
    },
    /// Reading or writing a file failed.
    #[error("I/O on {path} failed")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A row was asked for whose partition is not in the buffer.
    #[error("row {row} is in partition {partition}, which is not in the buffer")]
    NotResident {
        /// The row.
        row: u64,
        /// Its partition.
        partition: usize,
    },
    /// Admitting a partition into a full buffer.
    #[error(
        "the buffer of {buffer} already holds or loads {} partitions (c + 1): evict one before admitting {partition}",
        buffer + 1
    )]
    BufferFull {
        /// The partition.
        partition: usize,
        /// The buffer's size.
        buffer: usize,
    },
    /// A partition out of range.
    #[error("partition {partition} is out of range: there are {partitions}")]
    NoSuchPartition {
        /// The partition.
        partition: usize,
        /// Partitions.
        partitions: usize,
    },
    /// Columns asked of rows that are not that wide.
    #[error("columns {start}..{end} of rows {width} floats wide")]
    NoSuchColumns {
        /// The first column asked for.
        start: usize,
        /// One past the last.
        end: usize,
        /// Floats per row.
        width: usize,
    },
    /// Building a partition's rows failed (too large to allocate).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The I/O threads are gone (one panicked).
    #[error("the partition I/O threads stopped")]
    IoThreadGone,
    /// A load or write-back panicked on its I/O thread (a bug, or a file store that panics):
    /// reported to whoever waits for it; the thread serves the next job.
    #[error("the partition {job} of {path} panicked: {message}")]
    IoPanicked {
        /// `load` or `write-back`.
        job: &'static str,
        /// The partition's current file when the job failed.
        path: String,
        /// The panic's message.
        message: String,
    },
    /// A write-back failed earlier, and was reported then: that partition's changes since it
    /// was loaded are lost, so the storage refuses to go on (every later admit and checkpoint).
    /// The files of the last checkpoint are whole: resume from it.
    #[error(
        "a partition write-back failed earlier ({first}): its changes are lost, resume from the last checkpoint"
    )]
    WriteBackLost {
        /// The first failure's message.
        first: String,
    },
    /// A partition file does not fit in the free space of its file system. The files the last
    /// checkpoint names are untouched, and the run resumes from it once there is room.
    #[error(
        "{path}: needs {needed} bytes, but its file system is full: free some space or write elsewhere"
    )]
    NoSpace {
        /// The file being written.
        path: String,
        /// Bytes the file needs.
        needed: u64,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl PartitionError {
    /// A failed write or sync of `needed` bytes to `path`: [`PartitionError::NoSpace`] if its
    /// file system is full, else [`PartitionError::Io`].
    pub fn on_write(path: String, needed: u64, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::StorageFull {
            PartitionError::NoSpace { path, needed, source }
        } else {
            PartitionError::Io { path, source }
        }
    }
}
