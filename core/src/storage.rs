//! The storage trait: what the engine needs from wherever the rows live.
//!
//! [`RowStore`](crate::row_store::RowStore) (CPU memory, one TID word per row) is one implementation;
//! a sharded store, a device-resident store or a distributed parameter manager (AdaPM, crate
//! `ordo-pm`) is another, and plugs into the engine without touching it.
//!
//! **Contract** (every implementation keeps it; the engine's equivalence claim rests on it):
//! * *No torn read:* [`read`](RowStorage::read) returns values that were all written by the one
//!   write whose version it returns (or are all initial values).
//! * *Newer is never overwritten:* [`write_if_newer`](RowStorage::write_if_newer) with `ts`
//!   lands only if the row holds an older version, so a row's version only increases and after
//!   any set of writes it holds the values of the largest `ts` written to it.
//! * A bad argument (row out of range, wrong width, timestamp too large) is an error and leaves
//!   the storage unchanged.
//!
//! ```
//! use ordo::storage::RowStorage;
//! use ordo::row_store::{RowStore, Version};
//!
//! fn bump<S: RowStorage + ?Sized>(s: &S, row: u64, ts: u64) -> Result<bool, ordo::row_store::StoreError> {
//!     let mut v = vec![0.0; s.width()];
//!     s.read(row, &mut v)?;
//!     v.iter_mut().for_each(|x| *x += 1.0);
//!     s.write_if_newer(row, ts, &v)
//! }
//! let store = RowStore::zeros(4, 2);
//! assert_eq!(bump(&store, 3, 0), Ok(true));
//! assert_eq!(bump(&store, 3, 0), Ok(false)); // same version: not newer
//! assert_eq!(store.version(3), Ok(Version::Written(0)));
//! ```

use crate::row_store::{StoreError, Version};

/// Rows of `f32` with a version each, shared by concurrent readers and writers.
///
/// See the [module docs](self) for the contract every implementation keeps.
pub trait RowStorage: Send + Sync {
    /// Number of rows.
    fn rows(&self) -> usize;

    /// Floats per row.
    fn width(&self) -> usize;

    /// Copy row `row` into `out` (`out.len() == width()`) and return the version the copy
    /// belongs to. Never torn.
    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError>;

    /// The row's current version (a snapshot; it may change right after).
    fn version(&self, row: u64) -> Result<Version, StoreError>;

    /// Write `values` as version `ts` if the row holds an older version; otherwise leave it.
    /// Returns whether the write landed.
    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError>;

    /// A hint that row `row` is read or written soon (e.g. fetch it into the caches); it changes
    /// nothing, and an implementation may ignore it (the default does). A row out of range is
    /// ignored.
    fn prefetch(&self, _row: u64) {}

    /// Whether [`write_if_newer`](RowStorage::write_if_newer) fails only on a bad argument (a
    /// row out of range, a wrong width, a timestamp too large), never on the storage's state
    /// (I/O, capacity, a peer). The default, `false`, is always safe.
    ///
    /// The engine checks every batch's rows and width before it runs, and writes all rows of a
    /// batch at one timestamp, so for such a storage no write after a batch's first one can
    /// fail: its writers then keep no copies of the rows they overwrite to roll a batch back
    /// with (the engine's writer says when it still does). A storage that answers `true` and
    /// fails midway all the same costs a stopped run its prefix claim (the error then names no
    /// prefix), never a wrong one.
    fn write_fails_only_on_bad_arguments(&self) -> bool {
        false
    }

    /// The whole table, row-major (a snapshot per row; for checks and checkpoints at rest).
    ///
    /// Required, like [`next_version`](RowStorage::next_version): each storage answers from
    /// what it knows (a disk-backed store streams its file; a store in memory copies it).
    /// [`read_all`] is the answer of a storage with nothing better: one
    /// [`read`](RowStorage::read) per row.
    fn snapshot(&self) -> Result<Vec<f32>, StoreError>;

    /// One past the newest version any row holds (`0` if no row was ever written): the store
    /// version the engine stamps the first batch of a session with, so versions keep
    /// increasing across sessions. The engine asks it once per session, at its start, while
    /// nothing writes.
    ///
    /// **Contract:** the answer is greater than the version of every row (a larger answer is
    /// allowed: versions then skip a range). Required, so that a large or disk-backed store
    /// answers from what it keeps (e.g. a newest version stored in its header) instead of
    /// scanning every row at each session start; [`scan_next_version`] is the scan, for a
    /// storage that has nothing better.
    fn next_version(&self) -> Result<u64, StoreError>;

    /// Read for the unordered (`Async`, Hogwild) mode: no version is needed, and an
    /// implementation may return a torn copy. Default: [`read`](RowStorage::read).
    fn read_unordered(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        self.read(row, out).map(|_| ())
    }

    /// Overwrite for the unordered mode (the last writer wins). Default: a
    /// [`write_if_newer`](RowStorage::write_if_newer) one version past the row's current one,
    /// retried until it lands (so it also bumps the row's version).
    fn overwrite_unordered(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        loop {
            let next = self.version(row)?.ts().map_or(0, |t| t + 1);
            if self.write_if_newer(row, next, values)? {
                return Ok(());
            }
        }
    }

    /// Add `delta` for the unordered mode (`Async(AddDelta)`); an implementation may lose
    /// concurrent adds (Hogwild). Default: read, add, and [`write_if_newer`](RowStorage::write_if_newer)
    /// one version past the one read, retried until it lands (so no add is lost).
    fn add_unordered(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        if delta.len() != self.width() {
            return Err(StoreError::DimMismatch { expected: self.width(), got: delta.len() });
        }
        let mut buf = vec![0.0; self.width()];
        loop {
            let next = self.read(row, &mut buf)?.ts().map_or(0, |t| t + 1);
            buf.iter_mut().zip(delta).for_each(|(v, d)| *v += d);
            if self.write_if_newer(row, next, &buf)? {
                return Ok(());
            }
        }
    }
}

/// [`RowStorage::next_version`] by asking every row's [`version`](RowStorage::version): for a
/// storage that keeps no newest version of its own.
pub fn scan_next_version<S: RowStorage + ?Sized>(storage: &S) -> Result<u64, StoreError> {
    let mut next = 0;
    for r in 0..storage.rows() {
        if let Some(ts) = storage.version(r as u64)?.ts() {
            next = next.max(ts + 1);
        }
    }
    Ok(next)
}

/// [`RowStorage::snapshot`] by one [`read`](RowStorage::read) per row: for a storage with no
/// faster way to copy itself.
pub fn read_all<S: RowStorage + ?Sized>(storage: &S) -> Result<Vec<f32>, StoreError> {
    let width = storage.width();
    let mut all = vec![0.0; storage.rows() * width];
    if width > 0 {
        for (r, chunk) in all.chunks_mut(width).enumerate() {
            storage.read(r as u64, chunk)?;
        }
    }
    Ok(all)
}

/// Rows a loop that copies a list of rows asks the store to [`prefetch`](RowStorage::prefetch)
/// at once, one group ahead of the group it copies (the engine's readers and writers do). On
/// x86_64 `RowStore`'s prefetch is the `prefetcht0` instruction (`safe_arch`); elsewhere it is a
/// load, which holds up the instructions after it when it misses, so the rows of one group are
/// asked back to back and wait out one memory latency together instead of one each.
pub const PREFETCH_GROUP: usize = 4;

/// Call before copying `ids[i]`, for every `i` in order: asks `store` to prefetch the group of
/// `ids` after the one that row `i` starts (every [`PREFETCH_GROUP`] rows; at row 0 the first
/// two groups). A hint: it changes nothing.
///
/// ```
/// use ordo::storage::{RowStorage, prefetch_ahead};
/// use ordo::row_store::RowStore;
///
/// let store = RowStore::from_fn(16, 4, |r, c| (r * 4 + c) as f32);
/// let ids = [3, 9, 1, 14, 7, 0];
/// let mut rows = vec![0.0; ids.len() * 4];
/// for (i, (&r, out)) in ids.iter().zip(rows.chunks_mut(4)).enumerate() {
///     prefetch_ahead(&store, &ids, i);
///     store.read(r, out).unwrap();
/// }
/// assert_eq!(&rows[4..8], &[36.0, 37.0, 38.0, 39.0]); // row 9
/// ```
pub fn prefetch_ahead<S: RowStorage + ?Sized>(store: &S, ids: &[u64], i: usize) {
    if i.is_multiple_of(PREFETCH_GROUP) {
        let from = if i == 0 { 0 } else { i + PREFETCH_GROUP };
        let to = (i + 2 * PREFETCH_GROUP).min(ids.len());
        ids.get(from..to).unwrap_or(&[]).iter().for_each(|&r| store.prefetch(r));
    }
}

impl RowStorage for crate::row_store::RowStore {
    fn rows(&self) -> usize {
        crate::row_store::RowStore::rows(self)
    }

    fn width(&self) -> usize {
        crate::row_store::RowStore::width(self)
    }

    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        crate::row_store::RowStore::read(self, row, out)
    }

    fn version(&self, row: u64) -> Result<Version, StoreError> {
        crate::row_store::RowStore::version(self, row)
    }

    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        crate::row_store::RowStore::write_if_newer(self, row, ts, values)
    }

    fn prefetch(&self, row: u64) {
        crate::row_store::RowStore::prefetch(self, row)
    }

    /// `true`: [`RowStore::write_if_newer`](crate::row_store::RowStore::write_if_newer) errs only
    /// in its argument checks, before it touches the row.
    fn write_fails_only_on_bad_arguments(&self) -> bool {
        true
    }

    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        Ok(crate::row_store::RowStore::snapshot(self))
    }

    fn next_version(&self) -> Result<u64, StoreError> {
        Ok(crate::row_store::RowStore::next_version(self))
    }

    fn read_unordered(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        self.hogwild().read(row, out)
    }

    fn overwrite_unordered(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        self.hogwild().write(row, values)
    }

    fn add_unordered(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        self.hogwild().add(row, delta)
    }
}

#[cfg(all(test, not(any(ordo_loom, ordo_shuttle))))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A storage of no rows that records the rows it is asked to prefetch.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<u64>>);

    impl RowStorage for Recorder {
        fn rows(&self) -> usize {
            0
        }
        fn width(&self) -> usize {
            0
        }
        fn read(&self, row: u64, _: &mut [f32]) -> Result<Version, StoreError> {
            Err(StoreError::RowOutOfRange { row, rows: 0 })
        }
        fn version(&self, row: u64) -> Result<Version, StoreError> {
            Err(StoreError::RowOutOfRange { row, rows: 0 })
        }
        fn write_if_newer(&self, row: u64, _: u64, _: &[f32]) -> Result<bool, StoreError> {
            Err(StoreError::RowOutOfRange { row, rows: 0 })
        }
        fn prefetch(&self, row: u64) {
            self.0.lock().unwrap().push(row);
        }
        fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
            read_all(self)
        }
        fn next_version(&self) -> Result<u64, StoreError> {
            scan_next_version(self)
        }
    }

    #[test]
    fn prefetch_ahead_asks_for_every_row_once_a_group_before_its_copy() {
        let ids: Vec<u64> = (100..111).collect();
        let store = Recorder::default();
        let mut asked_by = Vec::new();
        for i in 0..ids.len() {
            prefetch_ahead(&store, &ids, i);
            asked_by.push(store.0.lock().unwrap().len());
        }
        // Every row once, in order.
        assert_eq!(*store.0.lock().unwrap(), ids);
        // Row 0 asks for the first two groups; row 4k for group k + 1, so when row i is copied
        // the rows up to the end of the group after its own have been asked for.
        let g = PREFETCH_GROUP;
        for (i, &n) in asked_by.iter().enumerate() {
            assert_eq!(n, ((i / g + 2) * g).min(ids.len()), "after row {i}");
        }
    }
}
