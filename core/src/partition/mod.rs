//! Tables larger than memory: rows in `P` partition files on disk, a buffer of `c` of them in
//! memory, and orders of edge buckets that keep swaps near their lower bound (Marius'
//! partition buffer and BETA order; PyTorch-BigGraph's inside-out order as the baseline).
//! Behind feature `partition`. Nothing here knows about knowledge graphs: a trainer maps its
//! batches to buckets `(i, j)` (a batch of bucket `(i, j)` touches rows of partitions `i` and
//! `j` only) and moves the buffer along a [`Plan`](ordering::Plan).
//!
//! * [`ordering`]: buckets, buffer states, plans, swap costs and their lower bound (no I/O).
//! * [`PartitionedStorage`]: the [`RowStorage`](crate::storage::RowStorage) over the files
//!   ([`DiskFiles`]) or over memory ([`MemoryFiles`]: the *in-memory twin*, the same
//!   partitions, ordering and code without a disk), with a background I/O thread.
//!
//! # The protocol at a swap: drain at state boundaries
//!
//! The storage does not see batches. The trainer trains a buffer state's buckets, then drains
//! the engine session ([`Session::finish`](crate::engine::Session::finish): every submitted
//! batch is stamped and written), and only then moves the buffer
//! ([`PartitionedStorage::enter`]: evict, admit, prefetch the next state's incoming partition).
//! So a partition leaves the buffer only after every batch that touched it is written, and a
//! batch runs only in a state whose partitions were all admitted (`admit` waits for the load)
//! before its first batch was submitted. While the state trains, the I/O thread prefetches the
//! next state's incoming partition into a spare slot (the buffer's memory is `c + 1`
//! partitions) and writes evicted ones back.
//!
//! **Why the equivalence holds.** Between two drains the storage behaves as one in-memory
//! table of the resident rows (each partition is a [`RowStore`](crate::store::RowStore) with
//! its TID words), so the engine's claim holds state by state; a drain is a barrier that every
//! batch of the state precedes and every batch of the next state follows, in the recorded order
//! as in time; a swap moves a row's version and values to disk and back together. The `Oac`
//! run over the whole epoch is then the synchronous replay of the recorded order — checked in
//! `core/tests/prop_partition.rs` against the twin and against one plain table. Draining costs
//! the pipeline's depth once per state (a few batches per state of thousands); tracking the
//! engine's finished prefix per partition instead would save that but needs a storage hook in
//! the engine.
//!
//! # Crash safety without copying gigabytes
//!
//! A write-back never overwrites the file the last checkpoint names: it writes the partition's
//! next *generation* (`p3.g7`), synced. A checkpoint writes back the changed resident
//! partitions, waits for the I/O thread, then atomically replaces the small manifest (run id,
//! geometry, next version, the trainer's [`Cursor`], per partition its generation and the CRC-32
//! computed while it was written) and deletes the generations it no longer names. Nothing
//! unchanged is copied or checksummed. A crash anywhere leaves the last manifest and every file
//! it names whole; [`PartitionedStorage::open`] deletes the newer generations a crash left
//! behind, and resume is bit-exact. Disk use: one extra generation per partition written since
//! the last checkpoint.
mod error;
mod files;
mod geometry;
mod io_thread;
mod manifest;
pub mod ordering;
mod storage;

pub use error::PartitionError;
pub use files::{DiskFiles, FileName, MemoryFiles, PartitionFiles};
pub use geometry::Geometry;
pub use manifest::{Cursor, FileEntry, Manifest};
pub use storage::{IoStats, PartitionedStorage};
