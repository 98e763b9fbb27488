//! The validation cache (paper 000, §3.2–3.3): row id → (ts, values) of the newest update the
//! device made, so a batch read from the store before that update reached it still computes on
//! the value the computation order says it must see.
//!
//! Semantics (kept by every implementation here, defined by [`ReferenceValidationCache`]):
//! * **validate** (before the step): for each row of the batch, if the cache holds the row with
//!   a version newer than the version the batch read from the store (`cache > read`, strictly),
//!   the row's values are replaced by the cached ones.
//! * **insert** (after the step of batch `ts`): every row of the batch goes in with `ts`,
//!   replacing an older entry of the same row. Timestamps must strictly increase across inserts
//!   (the device stage is sequential: that sequence *is* the computation order).
//! * **evict(ste)** (before validating a batch whose STE is `ste`, prefix units as in
//!   [`ordo::outstanding::Outstanding::ste`]): drop every entry with `ts < ste`.
//! * **capacity**: at most `capacity` live entries; an insert that would exceed it fails with
//!   [`CacheError::Overflow`] and changes nothing.
//!
//! Versions are the store's TID versions: `0` = initial value (never written), `ts + 1` = the
//! write of batch `ts` ([`version_word`]); so "newer" is plain `>` on words.
//!
//! Implementations: [`ValidationCache`] is the one orchestration (bookkeeping, overflow check,
//! compaction, mutation hooks) over a [`TableBackend`]: [`CudaTable`] runs the kernels of
//! `src/kernels/validation_cache.cu`, [`HostTable`] is a sequential Rust port of the same
//! kernels (same hash, probing, tombstones), tested on every machine against
//! [`ReferenceValidationCache`].

mod cuda_table;
mod error;
mod host_table;
mod ledger;
mod reference;

pub use cuda_table::{CudaTable, CudaValidationCache, DeviceBatch};
pub use error::CacheError;
pub use host_table::{HostBatch, HostTable, SimValidationCache};
pub use reference::ReferenceValidationCache;

use ledger::{InsertPlan, Ledger};
// The core catalog's hooks: `mutation::active` is a constant `false` unless `ordo/mutants` is
// on (this crate's feature `mutants`), so nothing is compiled in for a normal build.
use ordo::engine::{DeviceError, QueueCache};
use ordo::mutation::{self, Mutant};
use ordo::row_store::Version;

/// Largest row id a cache accepts (keys are stored as `row + 1`; `0` and `u64::MAX` mark empty
/// and evicted slots).
pub const MAX_ROW: u64 = u64::MAX - 2;

/// Largest timestamp a cache accepts (its version `ts + 1` must fit a word).
pub const MAX_TS: u64 = u64::MAX - 1;

/// The version word of a store read: `0` for the initial value, `ts + 1` for the write of `ts`.
pub fn version_word(v: Version) -> u64 {
    match v {
        Version::Initial => 0,
        Version::Written(ts) => ts.saturating_add(1),
    }
}

/// How large a validation cache is.
///
/// The cache only holds entries of batches with `ts ≥ STE`, i.e. of batches that some in-flight
/// batch may not have seen; so its live size is at most *(batches the device can run past the
/// oldest outstanding batch) × (rows per batch)*. The engine bounds the first factor by its
/// admission control (e.g. the MFT ring capacity: `ts < MFT + capacity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Floats per row (embedding followed by per-row optimizer state).
    pub width: usize,
    /// Maximum number of live entries.
    pub capacity: usize,
}

impl CacheConfig {
    /// Size for `live_batches` batches of at most `rows_per_batch` rows of `width` floats.
    ///
    /// ```
    /// let c = ordo_gpu::cache::CacheConfig::for_in_flight(8, 1000, 256).unwrap();
    /// assert_eq!(c.capacity, 8000);
    /// assert!(c.slots() >= 2 * c.capacity);
    /// ```
    pub fn for_in_flight(
        live_batches: usize,
        rows_per_batch: usize,
        width: usize,
    ) -> Result<Self, CacheError> {
        let capacity = live_batches
            .checked_mul(rows_per_batch)
            .ok_or(CacheError::BadSize("live_batches × rows_per_batch overflows"))?;
        let c = CacheConfig { width, capacity };
        c.checked_slots()?;
        Ok(c)
    }

    /// Table slots: the next power of two ≥ `2 × capacity`, so the load factor (live entries plus
    /// tombstones, after compaction) stays ≤ ½ and probe sequences stay short.
    pub fn slots(&self) -> usize {
        self.checked_slots().unwrap_or(usize::MAX)
    }

    fn checked_slots(&self) -> Result<usize, CacheError> {
        if self.capacity == 0 || self.width == 0 {
            return Err(CacheError::BadSize("capacity and width must be positive"));
        }
        let slots = self
            .capacity
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
            .ok_or(CacheError::BadSize("slot count overflows"))?;
        slots.checked_mul(self.width).ok_or(CacheError::BadSize("slots × width overflows"))?;
        Ok(slots)
    }
}

/// Check a batch's row ids: strictly increasing and at most [`MAX_ROW`].
pub(crate) fn check_rows(rows: &[u64]) -> Result<(), CacheError> {
    for (i, &row) in rows.iter().enumerate() {
        if row > MAX_ROW {
            return Err(CacheError::RowIdTooLarge { row });
        }
        if i > 0 && rows[i - 1] >= row {
            return Err(CacheError::RowsNotSorted { index: i });
        }
    }
    Ok(())
}

/// Check a buffer length.
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), CacheError> {
    if expected == got { Ok(()) } else { Err(CacheError::LengthMismatch { what, expected, got }) }
}

/// The hash of a row id: splitmix64's finalizer (the kernels use the same function).
pub(crate) fn hash(row: u64) -> u64 {
    let mut z = row.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The open-addressing table of a validation cache: one implementation per place the table
/// lives (device memory, or host memory for the sequential port). The orchestration
/// ([`ValidationCache`]) has checked every argument before it calls a backend.
///
/// Table layout (both backends): `slots` (a power of two) of `key` (`0` empty, `u64::MAX`
/// evicted, else `row + 1`), `version` (`ts + 1`), and `width` floats of values; linear probing
/// from `hash(row) & (slots − 1)`. **Invariant:** a slot never returns to empty except by a
/// whole-table [`rehash`](TableBackend::rehash), so every live key is reachable from its home
/// slot without crossing an empty slot, and concurrent inserts of distinct keys (one kernel)
/// cannot create a duplicate.
pub trait TableBackend {
    /// A batch as this backend holds it: row ids, the versions read from the store, the row
    /// values, and per row the version that replaced it in validation (`0`: kept).
    type Batch;
    /// The backend's error type.
    type Error: From<CacheError>;

    /// Number of slots.
    fn slots(&self) -> usize;
    /// Floats per row.
    fn width(&self) -> usize;
    /// The batch's row ids, on the host (for the orchestration's bookkeeping).
    fn rows<'b>(&self, batch: &'b Self::Batch) -> &'b [u64];
    /// Check that the batch's buffers have consistent lengths for this table.
    fn check_batch(&self, batch: &Self::Batch) -> Result<(), CacheError>;
    /// The validate kernel: replace each row whose entry's version is `> read` (`>=` when
    /// `replace_equal`, the `validate-ge` mutant) and record the replacing version.
    fn validate(&mut self, batch: &mut Self::Batch, replace_equal: bool)
    -> Result<(), Self::Error>;
    /// The insert kernel: put every row of the batch with `version`.
    fn insert(&mut self, batch: &Self::Batch, version: u64) -> Result<(), Self::Error>;
    /// The evict kernel: mark evicted every live entry with `version ≤ bound`.
    fn evict(&mut self, bound: u64) -> Result<(), Self::Error>;
    /// Compaction: rebuild the table with the live entries only (drops tombstones).
    fn rehash(&mut self) -> Result<(), Self::Error>;
    /// Empty the table (every slot back to empty).
    fn clear(&mut self) -> Result<(), Self::Error>;
}

/// A validation cache over a table backend: checks arguments, tracks occupancy on the host so an
/// overflow is reported *before* any launch, compacts the table when tombstones pile up, and
/// holds the mutation-catalog hooks of the device stage.
#[derive(Debug)]
pub struct ValidationCache<B> {
    backend: B,
    ledger: Ledger,
}

/// The engine's view of the cache between batches: empty, evict below the STE, count.
impl<B: TableBackend> QueueCache for ValidationCache<B>
where
    B::Error: Into<DeviceError>,
{
    fn clear(&mut self) -> Result<(), DeviceError> {
        ValidationCache::clear(self).map_err(Into::into)
    }

    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        ValidationCache::evict(self, ste).map(drop).map_err(Into::into)
    }

    fn cached_rows(&self) -> usize {
        self.len()
    }
}

impl<B: TableBackend> ValidationCache<B> {
    /// Wrap a backend built for `config` (its slot count must be `config.slots()`).
    pub fn with_backend(backend: B, config: CacheConfig) -> Result<Self, CacheError> {
        let slots = config.checked_slots()?;
        check_len("backend slots", slots, backend.slots())?;
        check_len("backend width", config.width, backend.width())?;
        Ok(ValidationCache { backend, ledger: Ledger::new(config.capacity, slots) })
    }

    /// The table backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.ledger.live()
    }

    /// Whether the cache holds no live entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Maximum number of live entries.
    pub fn capacity(&self) -> usize {
        self.ledger.capacity()
    }

    /// Drop every entry and forget the last timestamp (between runs: every cached update is in
    /// the store by then).
    pub fn clear(&mut self) -> Result<(), B::Error> {
        self.backend.clear()?;
        self.ledger = Ledger::new(self.ledger.capacity(), self.backend.slots());
        Ok(())
    }

    /// Replace every row of `batch` whose cached version is newer than the one it read.
    pub fn validate(&mut self, batch: &mut B::Batch) -> Result<(), B::Error> {
        self.backend.check_batch(batch)?;
        check_rows(self.backend.rows(batch))?;
        if mutation::active(Mutant::ValidationSkipped) {
            return Ok(());
        }
        let replace_equal = mutation::active(Mutant::ValidateGe);
        self.backend.validate(batch, replace_equal)
    }

    /// Whether inserting `rows` with `ts` now would be accepted (sorted, ts order, capacity),
    /// without changing anything: lets a device stage refuse a batch before launching its step.
    pub fn check_insert(&self, rows: &[u64], ts: u64) -> Result<(), CacheError> {
        check_rows(rows)?;
        if ts > MAX_TS {
            return Err(CacheError::TsTooLarge { ts });
        }
        self.ledger.plan_insert(rows, ts).map(drop)
    }

    /// Insert the batch's (updated) rows with timestamp `ts`.
    pub fn insert(&mut self, batch: &B::Batch, ts: u64) -> Result<(), B::Error> {
        self.backend.check_batch(batch)?;
        let rows = self.backend.rows(batch);
        check_rows(rows)?;
        if ts > MAX_TS {
            return Err(CacheError::TsTooLarge { ts }.into());
        }
        let plan = self.ledger.plan_insert(rows, ts)?;
        if mutation::active(Mutant::CacheInsertSkipped) {
            return Ok(());
        }
        if plan == InsertPlan::RehashFirst {
            self.backend.rehash()?;
            self.ledger.rehashed();
        }
        self.backend.insert(batch, ts + 1)?;
        self.ledger.commit_insert(rows, ts);
        Ok(())
    }

    /// Evict every entry with `ts < ste` (`ste` in prefix units, as
    /// [`ordo::outstanding::Outstanding::ste`] returns it). Returns the number evicted.
    pub fn evict(&mut self, ste: u64) -> Result<usize, B::Error> {
        // Entries with ts < ste are those with version ts + 1 ≤ ste.
        let bound =
            if mutation::active(Mutant::EvictStePlusOne) { ste.saturating_add(1) } else { ste };
        let evicted = self.ledger.evict(bound);
        if evicted > 0 {
            self.backend.evict(bound)?;
        }
        Ok(evicted)
    }
}
