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
}
