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
//!   partitions, ordering and code without a disk), with background I/O threads that serve
//!   loads ahead of write-backs.
//!
//! # The protocol at a swap: evict on the finished batches, no drain
//!
//! The storage does not see batches. The trainer walks the plan with a [`Walk`]: it enters a
//! state ([`Walk::try_enter`]: admit its partitions, waiting for their loads) as soon as they
//! fit beside the partitions that batches still in flight touch (`c + 1` partitions resident or
//! loading), submits the state's batches, and tells the walk each batch the engine finished
//! (the session's [`completions`](crate::engine::Session::completions)). A partition leaves the
//! buffer once no state with an unfinished batch, and not the current state, holds it; the next
//! state's incoming partition is then prefetched into the room it left. So a partition leaves
//! only after every batch that can read, validate or write its rows is written, a batch runs
//! only in a state whose partitions were all admitted before its first batch was submitted, and
//! the pipeline stays full across swaps. The epoch's end drains the session (checkpoint,
//! evaluation). [`PartitionedStorage::enter`] is the draining rule's move (evict, admit,
//! prefetch), for callers that drain at every swap.
//!
//! **Why the equivalence holds.** For every row a batch in flight touches, the storage behaves
//! as one in-memory table: the row's partition is resident, in one copy (each partition is a
//! [`RowStore`](crate::row_store::RowStore) with its TID words), from before the batch's read until
//! after its write; a swap moves a row's version and values to disk and back together, and a
//! reload follows the write-back. So the engine's claim holds over the whole epoch: the `Oac`
//! run is the synchronous replay of its recorded order, checked in
//! `core/tests/prop_partition.rs` (pipelined and draining) against one plain table, and the
//! rule (with a premature eviction as a mutant) by `ordo-verify`'s swap model.
//!
//! # Crash safety without copying gigabytes
//!
//! A write-back never overwrites the file the last checkpoint names: it writes the partition's
//! next *generation* (`p3.g7`), not synced: fsync happens only at checkpoints, which is all
//! crash safety needs. A checkpoint writes back the changed resident partitions, waits for the
//! I/O threads, syncs the generations written since the last checkpoint, then atomically
//! replaces the small manifest (run id,
//! geometry, next version, the trainer's [`Cursor`], per partition its generation and the CRC-32
//! computed while it was written) and deletes the generations it no longer names. Nothing
//! unchanged is copied or checksummed. A crash anywhere leaves the last manifest and every file
//! it names whole; [`PartitionedStorage::open`] deletes the newer generations a crash left
//! behind (unsynced, possibly torn), and resume is bit-exact (checked with
//! [`MemoryFiles::crashable`], which loses every write not synced). Every sync and rename goes
//! through [`PartitionFiles`]. Disk use: one extra generation per partition written since
//! the last checkpoint.
//!
//! # Faults
//!
//! A write-back or checkpoint that finds its file system full is
//! [`PartitionError::NoSpace`], naming the file and the bytes it needed; the torn generation
//! is deleted and the last checkpoint's files stay whole. A load or write-back that panics on
//! its I/O thread is [`PartitionError::IoPanicked`], delivered to whoever waits for it (the
//! thread serves the next job). After a failed write-back its partition's changes are lost:
//! every later admit and checkpoint is [`PartitionError::WriteBackLost`], never a partition
//! loaded stale from its older file; the run resumes from the last checkpoint.
mod error;
mod files;
mod geometry;
mod io_thread;
mod manifest;
pub mod ordering;
mod storage;
mod walk;

pub use error::PartitionError;
pub use files::{DiskFiles, FileName, MemoryFiles, PartitionFiles};
pub use geometry::Geometry;
pub use manifest::{Cursor, FileEntry, Manifest};
pub use storage::{IoStats, PartitionedStorage};
pub use walk::Walk;
