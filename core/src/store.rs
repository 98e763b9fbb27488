//! The timestamped row store: `rows × width` f32 parameters in CPU memory, one TID word per row
//! (paper 000's per-parameter timestamps, laid out like Silo's TID words).
//!
//! A TID word holds a lock bit (bit 63) and the row's version `v = ts + 1` of the last write
//! (`v = 0`: the initial value, never written). Row values are `AtomicU32` holding `f32` bits, so
//! concurrent readers and writers never race in Rust's memory model (no UB), and loom can check
//! the protocol (a seqlock over plain memory would be a data race loom cannot see).

use crate::mutation::{Mutant, active};
use crate::sync::{AtomicU32, AtomicU64, Ordering, atomic_u32_slice, fence, spin_wait};
use thiserror::Error;

const LOCK: u64 = 1 << 63;

/// A bad argument to a store operation. The store is unchanged when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum StoreError {
    /// The row id is not below the number of rows.
    #[error("row {row} is out of range: the store has {rows} rows")]
    RowOutOfRange {
        /// The offending row id.
        row: u64,
        /// Number of rows in the store.
        rows: usize,
    },
    /// A buffer's length is not the store's row width.
    #[error("row buffer holds {got} floats but rows are {expected} wide")]
    DimMismatch {
        /// The store's row width.
        expected: usize,
        /// The buffer's length.
        got: usize,
    },
    /// A timestamp too large for a TID word (`ts ≥ 2⁶³ − 1`).
    #[error("timestamp {ts} does not fit a TID word")]
    TimestampTooLarge {
        /// The offending timestamp.
        ts: u64,
    },
}

/// What a read saw: the row's values belong to exactly this version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The initial value; no write has landed.
    Initial,
    /// The write of batch `ts`.
    Written(u64),
}

impl Version {
    fn from_word(word: u64) -> Self {
        match word & !LOCK {
            0 => Version::Initial,
            v => Version::Written(v - 1),
        }
    }

    /// `Some(ts)` of the last write, `None` for the initial value.
    pub fn ts(self) -> Option<u64> {
        match self {
            Version::Initial => None,
            Version::Written(ts) => Some(ts),
        }
    }
}

/// Rows of f32 with a timestamp each.
///
/// **Invariants:**
/// * *No torn read:* [`read`](RowStore::read) returns values that were all written by the one
///   write whose version it returns (or are all initial values).
/// * *Newer is never overwritten:* [`write_if_newer`](RowStore::write_if_newer) with `ts` lands
///   only if the row's version is older than `ts`; so a row's version only increases, and after
///   any set of writes a row holds the values of the largest `ts` written to it.
/// * *Deadlock-free by construction:* a thread holds at most one row lock, only inside
///   `write_if_newer`, and runs no foreign code while holding it.
///
/// Readers are optimistic and never block writers: read the TID word, copy the values, re-read
/// the word, retry if it changed or was locked.
///
/// Checked by `core/tests/loom_store.rs` (torn reads, older-overwrites-newer, under every
/// interleaving loom explores) and `core/tests/prop_store.rs` (a sequential model, and random
/// concurrent writers on real threads).
///
/// ```
/// use ordo::store::{RowStore, Version};
/// let store = RowStore::zeros(2, 3);
/// assert_eq!(store.write_if_newer(1, 7, &[1.0, 2.0, 3.0]), Ok(true));
/// assert_eq!(store.write_if_newer(1, 5, &[9.0; 3]), Ok(false)); // older: skipped
/// let mut row = [0.0; 3];
/// assert_eq!(store.read(1, &mut row), Ok(Version::Written(7)));
/// assert_eq!(row, [1.0, 2.0, 3.0]);
/// ```
pub struct RowStore {
    width: usize,
    tids: Box<[AtomicU64]>,
    values: Box<[AtomicU32]>,
}

impl RowStore {
    /// `rows × width` zeros, all at the initial version.
    pub fn zeros(rows: usize, width: usize) -> Self {
        Self::from_fn(rows, width, |_, _| 0.0)
    }

    /// Row `r`, column `c` starts as `init(r, c)`.
    pub fn from_fn(rows: usize, width: usize, mut init: impl FnMut(usize, usize) -> f32) -> Self {
        let values = atomic_u32_slice(
            (0..rows * width).map(|i| init(i / width.max(1), i % width.max(1)).to_bits()),
        );
        RowStore { width, tids: crate::sync::atomic_u64_slice(rows, 0), values }
    }

    /// A store holding `values` (row-major, `rows × width`).
    pub fn from_values(rows: usize, width: usize, values: &[f32]) -> Result<Self, StoreError> {
        if values.len() != rows * width {
            return Err(StoreError::DimMismatch { expected: rows * width, got: values.len() });
        }
        Ok(Self::from_fn(rows, width, |r, c| values[r * width + c]))
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.tids.len()
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.width
    }

    fn check(&self, row: u64, len: usize) -> Result<usize, StoreError> {
        if row >= self.tids.len() as u64 {
            return Err(StoreError::RowOutOfRange { row, rows: self.tids.len() });
        }
        if len != self.width {
            return Err(StoreError::DimMismatch { expected: self.width, got: len });
        }
        Ok(row as usize)
    }

    /// Copy row `row` into `out` and return the version the copy belongs to. Never torn; never
    /// blocks a writer (it retries while one holds the row).
    pub fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        let r = self.check(row, out.len())?;
        let tid = &self.tids[r];
        let cells = &self.values[r * self.width..(r + 1) * self.width];
        loop {
            // Acquire: pairs with the writer's Release unlock, so the values of this version
            // (written before the unlock) are what the copy below sees at least.
            let before = tid.load(Ordering::Acquire);
            if before & LOCK != 0 {
                spin_wait();
                continue;
            }
            for (o, cell) in out.iter_mut().zip(cells) {
                // Relaxed: validated by the TID re-read below (seqlock pattern).
                *o = f32::from_bits(cell.load(Ordering::Relaxed));
            }
            if active(Mutant::StoreReadSkipsRecheck) {
                return Ok(Version::from_word(before));
            }
            // Acquire fence: if any load above saw a value of a later write, the writer's Release
            // fence (after its lock) synchronizes with this fence, so the re-read sees the lock or
            // a newer version and we retry.
            fence(Ordering::Acquire);
            // Relaxed: ordered after the copy by the fence above.
            let after = tid.load(Ordering::Relaxed);
            if before == after {
                return Ok(Version::from_word(before));
            }
            spin_wait();
        }
    }

    /// The row's current version (a snapshot; it may change right after).
    pub fn version(&self, row: u64) -> Result<Version, StoreError> {
        let r = self.check(row, self.width)?;
        // Acquire: a caller that then reads values (via `read`) sees at least this version.
        Ok(Version::from_word(self.tids[r].load(Ordering::Acquire)))
    }

    /// Write `values` as version `ts` if the row holds an older version; otherwise leave the row
    /// alone. Returns whether the write landed. Takes the row lock only to write.
    pub fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        let r = self.check(row, values.len())?;
        if ts >= LOCK - 1 {
            return Err(StoreError::TimestampTooLarge { ts });
        }
        let new_word = ts + 1;
        let tid = &self.tids[r];
        let cells = &self.values[r * self.width..(r + 1) * self.width];
        // Relaxed: only a guess for the CAS.
        let mut word = tid.load(Ordering::Relaxed);
        loop {
            if word & LOCK != 0 {
                spin_wait();
                word = tid.load(Ordering::Relaxed);
                continue;
            }
            if word >= new_word && !active(Mutant::WriteIgnoresTs) {
                // The row already holds this version or a newer one: an older write never lands.
                return Ok(false);
            }
            // Acquire: we follow the previous writer's values (coherence of the row).
            match tid.compare_exchange_weak(word, word | LOCK, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => {
                    word = now;
                    spin_wait();
                }
            }
        }
        // Release fence: any reader that sees one of the values below also sees the lock
        // (its Acquire fence synchronizes with this one), so it retries instead of tearing.
        if !active(Mutant::StoreWriteNoFence) {
            fence(Ordering::Release);
        }
        for (cell, v) in cells.iter().zip(values) {
            // Relaxed: published by the Release unlock below.
            cell.store(v.to_bits(), Ordering::Relaxed);
        }
        // Release: publishes the values with the new version and drops the lock.
        tid.store(new_word, Ordering::Release);
        Ok(true)
    }

    /// The whole table, row-major (a snapshot per row; for checks and checkpoints at rest).
    pub fn snapshot(&self) -> Vec<f32> {
        let mut all = vec![0.0; self.rows() * self.width];
        for (r, chunk) in all.chunks_mut(self.width.max(1)).enumerate().take(self.rows()) {
            self.read(r as u64, chunk).expect("row in range with matching width");
        }
        all
    }

    /// The versions of all rows (a snapshot; for checks).
    pub fn versions(&self) -> Vec<Version> {
        self.tids.iter().map(|t| Version::from_word(t.load(Ordering::Acquire))).collect()
    }

    /// The unsynchronized view of the same table that asynchronous (Hogwild) trainers use.
    pub fn hogwild(&self) -> Hogwild<'_> {
        Hogwild { store: self }
    }
}

impl std::fmt::Debug for RowStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowStore").field("rows", &self.rows()).field("width", &self.width).finish()
    }
}

/// Hogwild access to a [`RowStore`]: no locks, no timestamps, relaxed atomics per float.
///
/// This is the lost-update baseline (Marius, DGL-KE): a read can mix values of different writes
/// and concurrent writes overwrite each other. It is still free of undefined behaviour (every
/// access is atomic). It neither reads nor changes TID words.
#[derive(Clone, Copy)]
pub struct Hogwild<'a> {
    store: &'a RowStore,
}

impl Hogwild<'_> {
    fn cells(&self, row: u64, len: usize) -> Result<&[AtomicU32], StoreError> {
        let r = self.store.check(row, len)?;
        let w = self.store.width;
        Ok(&self.store.values[r * w..(r + 1) * w])
    }

    /// Copy row `row` into `out`, float by float (may be torn).
    pub fn read(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        let cells = self.cells(row, out.len())?;
        for (o, cell) in out.iter_mut().zip(cells) {
            // Relaxed: Hogwild promises nothing beyond per-float atomicity.
            *o = f32::from_bits(cell.load(Ordering::Relaxed));
        }
        Ok(())
    }

    /// Overwrite row `row` float by float.
    pub fn write(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        for (cell, v) in self.cells(row, values.len())?.iter().zip(values) {
            // Relaxed: Hogwild promises nothing beyond per-float atomicity.
            cell.store(v.to_bits(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Add `delta` to row `row` float by float, with a load and a store per float (like an
    /// unsynchronized `+=` or Marius' `indexAdd`): concurrent adds can lose each other.
    pub fn add(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        for (cell, d) in self.cells(row, delta.len())?.iter().zip(delta) {
            // Relaxed load + store, deliberately not an RMW: this is the lost-update baseline.
            let v = f32::from_bits(cell.load(Ordering::Relaxed)) + d;
            cell.store(v.to_bits(), Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn older_writes_never_overwrite_newer_ones() {
        let s = RowStore::zeros(2, 3);
        assert_eq!(s.write_if_newer(1, 5, &[1.0, 2.0, 3.0]), Ok(true));
        assert_eq!(s.write_if_newer(1, 4, &[9.0, 9.0, 9.0]), Ok(false));
        assert_eq!(s.write_if_newer(1, 5, &[8.0, 8.0, 8.0]), Ok(false));
        let mut out = [0.0; 3];
        assert_eq!(s.read(1, &mut out), Ok(Version::Written(5)));
        assert_eq!(out, [1.0, 2.0, 3.0]);
        assert_eq!(s.read(0, &mut out), Ok(Version::Initial));
        assert_eq!(s.write_if_newer(1, 0, &[7.0; 3]), Ok(false));
    }

    #[test]
    fn bad_arguments_are_errors_and_change_nothing() {
        let s = RowStore::zeros(2, 3);
        let mut out = [0.0; 2];
        assert_eq!(s.read(0, &mut out), Err(StoreError::DimMismatch { expected: 3, got: 2 }));
        assert_eq!(
            s.write_if_newer(2, 0, &[1.0; 3]),
            Err(StoreError::RowOutOfRange { row: 2, rows: 2 })
        );
        assert_eq!(
            s.write_if_newer(0, u64::MAX, &[1.0; 3]),
            Err(StoreError::TimestampTooLarge { ts: u64::MAX })
        );
        assert_eq!(
            s.hogwild().add(5, &[1.0; 3]),
            Err(StoreError::RowOutOfRange { row: 5, rows: 2 })
        );
        assert_eq!(s.snapshot(), vec![0.0; 6]);
        assert_eq!(s.versions(), vec![Version::Initial; 2]);
        assert_eq!(
            RowStore::from_values(2, 3, &[0.0; 5]).err(),
            Some(StoreError::DimMismatch { expected: 6, got: 5 })
        );
    }

    #[test]
    fn hogwild_view_shares_the_table_and_ignores_versions() {
        let s = RowStore::from_values(1, 2, &[1.0, 2.0]).unwrap();
        s.hogwild().add(0, &[0.5, 0.5]).unwrap();
        let mut out = [0.0; 2];
        s.hogwild().read(0, &mut out).unwrap();
        assert_eq!(out, [1.5, 2.5]);
        assert_eq!(s.version(0), Ok(Version::Initial));
    }
}
