//! The timestamped row store: `rows × width` f32 parameters in CPU memory, one TID word per row
//! (paper 000's per-parameter timestamps, laid out like Silo's TID words).
//!
//! A TID word holds a lock bit (bit 63) and the row's version `v = ts + 1` of the last write
//! (`v = 0`: the initial value, never written). Row values are `AtomicU64` words holding the bits
//! of two `f32`s each, so concurrent readers and writers never race in Rust's memory model (no
//! UB), and loom can check the protocol (a seqlock over plain memory would be a data race loom
//! cannot see).
//!
//! **Layout:** a row is one run of words, its TID word first and its values right after it
//! (value `2k` in the low half of value word `k`, value `2k + 1` in the high half; an odd
//! width leaves the last high half 0). So the access that fetches the TID word also fetches
//! the row's first values from the same cache line, and a row copy is half as many loads and
//! stores as one word per float (the KGE step's gather, `BENCHMARKS.md` "KGE step roofline").
//!
//! A store of [`Precision::Bf16`] packs four bf16 values per word instead (value `4k + j` in
//! bits `16j..16j + 16` of value word `k`): the same protocol over half the words.

use crate::bf16_lanes;
use crate::mutation::{Mutant, active};
use crate::precision::Precision;
use crate::sync::{AtomicU64, Ordering, fence, spin_wait, touch};
use std::sync::Arc;
use thiserror::Error;

const LOCK: u64 = 1 << 63;

/// Why a storage operation failed: a bad argument (the storage is then unchanged), or the
/// storage's own failure (a disk, a network), kept whole so [`std::error::Error::source`]
/// chains reach its cause. [`RowStore`] returns only the bad-argument kinds; a user's
/// [`RowStorage`](crate::storage::RowStorage) reports its own I/O failure as
/// [`Io`](StoreError::Io) (`?` on an [`std::io::Error`] converts) or any other error as
/// [`Other`](StoreError::Other), and the engine hands it back to the caller unchanged.
///
/// Two errors are equal when they are the same kind with equal fields; the [`Io`](StoreError::Io)
/// and [`Other`](StoreError::Other) kinds are equal only to clones of themselves (the same
/// shared error).
///
/// ```
/// use ordo::row_store::StoreError;
/// let disk = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "short read");
/// let err = StoreError::from(disk);
/// assert!(matches!(&err, StoreError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof));
/// assert_eq!(err.clone(), err);
/// assert!(std::error::Error::source(&err).is_some());
/// ```
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
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
    /// A table too large to allocate: its size overflows `usize`, or the allocator could not
    /// reserve it.
    #[error("a store of {rows} rows of {width} floats does not fit in memory")]
    TooLarge {
        /// Rows asked for.
        rows: usize,
        /// Floats per row asked for.
        width: usize,
    },
    /// A timestamp too large for a TID word (`ts ≥ 2⁶³ − 1`).
    #[error("timestamp {ts} does not fit a TID word")]
    TimestampTooLarge {
        /// The offending timestamp.
        ts: u64,
    },
    /// The storage's own I/O failed (shared, so the error stays cloneable).
    #[error("storage I/O failed")]
    Io(#[source] Arc<std::io::Error>),
    /// The storage failed for a reason of its own.
    #[error("storage failed")]
    Other(#[source] Arc<dyn std::error::Error + Send + Sync + 'static>),
}

impl StoreError {
    /// The storage's own failure, of any error type, as [`StoreError::Other`].
    pub fn other(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Other(Arc::new(error))
    }
}

impl From<std::io::Error> for StoreError {
    fn from(error: std::io::Error) -> Self {
        StoreError::Io(Arc::new(error))
    }
}

impl PartialEq for StoreError {
    fn eq(&self, other: &Self) -> bool {
        use StoreError::*;
        match (self, other) {
            (RowOutOfRange { row: a, rows: b }, RowOutOfRange { row: c, rows: d }) => {
                (a, b) == (c, d)
            }
            (DimMismatch { expected: a, got: b }, DimMismatch { expected: c, got: d }) => {
                (a, b) == (c, d)
            }
            (TimestampTooLarge { ts: a }, TimestampTooLarge { ts: b }) => a == b,
            (Io(a), Io(b)) => Arc::ptr_eq(a, b),
            // Compare the data pointers only: two `dyn` pointers to one value may carry
            // different vtables.
            (Other(a), Other(b)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            _ => false,
        }
    }
}

impl Eq for StoreError {}

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
/// use ordo::row_store::{RowStore, Version};
/// let store = RowStore::zeros(2, 3);
/// assert_eq!(store.write_if_newer(1, 7, &[1.0, 2.0, 3.0]), Ok(true));
/// assert_eq!(store.write_if_newer(1, 5, &[9.0; 3]), Ok(false)); // older: skipped
/// let mut row = [0.0; 3];
/// assert_eq!(store.read(1, &mut row), Ok(Version::Written(7)));
/// assert_eq!(row, [1.0, 2.0, 3.0]);
/// ```
pub struct RowStore {
    width: usize,
    rows: usize,
    /// How the values are packed: two `f32`s or four bf16s per word.
    precision: Precision,
    /// `rows × stride(width, precision)` words: per row its TID word, then its values packed
    /// (see the module docs).
    words: Box<[AtomicU64]>,
}

/// Words per row: the TID word and `⌈width / per_word⌉` value words.
fn stride(width: usize, precision: Precision) -> usize {
    1 + width.div_ceil(precision.per_word())
}

/// Up to four values as one word of bf16s, each rounded to the nearest (ties to even); missing
/// values are 0. One word at a time (a store's initial values, Hogwild's `add`); a row copy
/// converts through [`bf16_lanes`].
#[inline]
fn pack_bf16(values: &[f32]) -> u64 {
    values
        .iter()
        .enumerate()
        .fold(0, |word, (j, &v)| word | (u64::from(half::bf16::from_f32(v).to_bits()) << (16 * j)))
}

/// The four values of a word of bf16s, widened exactly (the inverse of [`pack_bf16`] on values
/// that are bf16s).
#[inline]
fn unpack_bf16(word: u64) -> [f32; 4] {
    std::array::from_fn(|j| half::bf16::from_bits((word >> (16 * j)) as u16).to_f32())
}

/// A row's value words into `out`, in either packing (`Relaxed` loads: see [`load_row`]).
#[inline]
fn load_values(precision: Precision, cells: &[AtomicU64], out: &mut [f32]) {
    match precision {
        Precision::F32 => load_row(cells, out),
        Precision::Bf16 => bf16_lanes::load(cells, out),
    }
}

/// `values` into a row's value words, in either packing (`Relaxed` stores: see [`store_row`]).
#[inline]
fn store_values(precision: Precision, cells: &[AtomicU64], values: &[f32]) {
    match precision {
        Precision::F32 => store_row(cells, values),
        Precision::Bf16 => bf16_lanes::store(cells, values),
    }
}

/// Two `f32`s as one word: `lo` in the low 32 bits, `hi` in the high 32 bits.
#[inline]
fn pack(lo: f32, hi: f32) -> u64 {
    u64::from(lo.to_bits()) | (u64::from(hi.to_bits()) << 32)
}

/// The two `f32`s of a word (the inverse of [`pack`]).
#[inline]
fn unpack(word: u64) -> (f32, f32) {
    (f32::from_bits(word as u32), f32::from_bits((word >> 32) as u32))
}

/// Words a row copy moves per loop iteration: atomic accesses are never merged or vectorized by
/// the compiler, so the copy is unrolled by hand to spend fewer instructions per cache line on
/// loop control (more of a row's lines then fit the out-of-order window at once).
const UNROLL: usize = 4;

/// Copy value words into `out` (`cells.len() == ⌈out.len() / 2⌉`), each word loaded `Relaxed`
/// (callers validate or promise nothing more; see their comments).
#[inline]
fn load_row(cells: &[AtomicU64], out: &mut [f32]) {
    let full = out.len() / (2 * UNROLL) * UNROLL;
    let (out_blocks, out_rest) = out.split_at_mut(2 * full);
    let (cell_blocks, cell_rest) = cells.split_at(full);
    for (o, c) in out_blocks.chunks_exact_mut(2 * UNROLL).zip(cell_blocks.chunks_exact(UNROLL)) {
        for (o, cell) in o.chunks_exact_mut(2).zip(c) {
            // Relaxed: the caller orders the copy (seqlock re-check, or Hogwild's nothing).
            (o[0], o[1]) = unpack(cell.load(Ordering::Relaxed));
        }
    }
    let mut pairs = out_rest.chunks_exact_mut(2);
    for (o, cell) in (&mut pairs).zip(cell_rest) {
        // Relaxed: as above.
        (o[0], o[1]) = unpack(cell.load(Ordering::Relaxed));
    }
    if let [last] = pairs.into_remainder() {
        // Relaxed: as above.
        *last = unpack(cells[cells.len() - 1].load(Ordering::Relaxed)).0;
    }
}

/// Store `values` into value words (`cells.len() == ⌈values.len() / 2⌉`), each word `Relaxed`
/// (callers publish with a later Release store, or promise nothing more).
#[inline]
fn store_row(cells: &[AtomicU64], values: &[f32]) {
    let full = values.len() / (2 * UNROLL) * UNROLL;
    let (value_blocks, value_rest) = values.split_at(2 * full);
    let (cell_blocks, cell_rest) = cells.split_at(full);
    for (v, c) in value_blocks.chunks_exact(2 * UNROLL).zip(cell_blocks.chunks_exact(UNROLL)) {
        for (v, cell) in v.chunks_exact(2).zip(c) {
            // Relaxed: the caller publishes the row (Release unlock), or is Hogwild.
            cell.store(pack(v[0], v[1]), Ordering::Relaxed);
        }
    }
    let mut pairs = value_rest.chunks_exact(2);
    for (v, cell) in (&mut pairs).zip(cell_rest) {
        // Relaxed: as above.
        cell.store(pack(v[0], v[1]), Ordering::Relaxed);
    }
    if let [last] = pairs.remainder() {
        // Relaxed: as above.
        cells[cells.len() - 1].store(pack(*last, 0.0), Ordering::Relaxed);
    }
}

impl RowStore {
    /// `rows × width` zeros, all at the initial version.
    pub fn zeros(rows: usize, width: usize) -> Self {
        Self::from_fn(rows, width, |_, _| 0.0)
    }

    /// Row `r`, column `c` starts as `init(r, c)`. Panics (rather than aborting) if the table
    /// does not fit in memory; [`try_from_fn`](Self::try_from_fn) returns that as an error.
    pub fn from_fn(rows: usize, width: usize, init: impl FnMut(usize, usize) -> f32) -> Self {
        Self::try_from_fn(rows, width, init).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`from_fn`](Self::from_fn), or [`StoreError::TooLarge`] if the table's size overflows
    /// `usize` or the allocator cannot reserve it (`try_reserve_exact`): a caller that sized the
    /// table against the memory it may use gets an error, never an allocation abort.
    ///
    /// ```
    /// use ordo::row_store::{RowStore, StoreError};
    /// assert_eq!(RowStore::try_from_fn(2, 3, |r, c| (r * 3 + c) as f32).unwrap().rows(), 2);
    /// let huge = RowStore::try_from_fn(usize::MAX / 2, 64, |_, _| 0.0);
    /// assert!(matches!(huge, Err(StoreError::TooLarge { .. })));
    /// ```
    pub fn try_from_fn(
        rows: usize,
        width: usize,
        init: impl FnMut(usize, usize) -> f32,
    ) -> Result<Self, StoreError> {
        Self::try_from_fn_in(Precision::F32, rows, width, init)
    }

    /// [`try_from_fn`](Self::try_from_fn) in a given [`Precision`]: with
    /// [`Precision::Bf16`], each `init(r, c)` is kept as its nearest bf16.
    pub fn try_from_fn_in(
        precision: Precision,
        rows: usize,
        width: usize,
        mut init: impl FnMut(usize, usize) -> f32,
    ) -> Result<Self, StoreError> {
        let per_row = stride(width, precision);
        let per_word = precision.per_word();
        let too_large = StoreError::TooLarge { rows, width };
        let len = rows.checked_mul(per_row).ok_or_else(|| too_large.clone())?;
        // Reserved exactly, so the boxed slice is this allocation, not a copy.
        let mut words: Vec<AtomicU64> = Vec::new();
        words.try_reserve_exact(len).map_err(|_| too_large)?;
        let mut four = [0.0f32; 4];
        words.extend(
            (0..len)
                .map(|i| {
                    let (r, k) = (i / per_row, i % per_row);
                    if k == 0 {
                        return 0; // the TID word: initial version
                    }
                    let c = per_word * (k - 1);
                    let n = per_word.min(width - c);
                    for (j, v) in four[..n].iter_mut().enumerate() {
                        *v = init(r, c + j);
                    }
                    match precision {
                        Precision::F32 => pack(four[0], if n == 2 { four[1] } else { 0.0 }),
                        Precision::Bf16 => pack_bf16(&four[..n]),
                    }
                })
                .map(AtomicU64::new),
        );
        Ok(RowStore { width, rows, precision, words: words.into_boxed_slice() })
    }

    /// A store whose row `r` is what `row(r, out)` fills into `out` (`width` floats), at the
    /// version it returns: the inverse of reading every row with [`read`](Self::read), for a
    /// storage that loads rows saved with their versions (a partition file). Rows are asked in
    /// order `0, 1, …`; the first error stops the load and is returned. A version of
    /// `Written(ts)` with `ts ≥ 2⁶³ − 1` is [`StoreError::TimestampTooLarge`].
    ///
    /// ```
    /// use ordo::row_store::{RowStore, Version};
    /// let s = RowStore::try_from_rows(2, 2, |r, out| {
    ///     out.fill(r as f32);
    ///     Ok(if r == 1 { Version::Written(9) } else { Version::Initial })
    /// })
    /// .unwrap();
    /// let mut row = [0.0; 2];
    /// assert_eq!(s.read(1, &mut row), Ok(Version::Written(9)));
    /// assert_eq!(row, [1.0, 1.0]);
    /// ```
    pub fn try_from_rows(
        rows: usize,
        width: usize,
        row: impl FnMut(usize, &mut [f32]) -> Result<Version, StoreError>,
    ) -> Result<Self, StoreError> {
        Self::try_from_rows_reusing(None, rows, width, row)
    }

    /// [`try_from_rows`](Self::try_from_rows) in `spare`'s memory if it has as many words as
    /// this store needs (a partition buffer loading into the rows of a partition it evicted),
    /// else in new memory, `spare` freed first. Every word is written again, so the store is
    /// the same, bit for bit, as one in new memory; what reuse saves is the allocation: a
    /// large one handed back to the allocator may stay in the process's memory for a while
    /// (mimalloc purges freed memory after a delay), and new pages fault in as they are written.
    ///
    /// ```
    /// use ordo::row_store::{RowStore, Version};
    /// let rows = |r: usize, out: &mut [f32]| {
    ///     out.fill(r as f32);
    ///     Ok(Version::Written(r as u64))
    /// };
    /// let spare = RowStore::try_from_fn(2, 2, |_, _| 7.0).unwrap();
    /// let reused = RowStore::try_from_rows_reusing(Some(spare), 2, 2, rows).unwrap();
    /// assert_eq!(reused.snapshot(), RowStore::try_from_rows(2, 2, rows).unwrap().snapshot());
    /// assert_eq!(reused.versions(), [Version::Written(0), Version::Written(1)]);
    /// ```
    pub fn try_from_rows_reusing(
        spare: Option<RowStore>,
        rows: usize,
        width: usize,
        mut row: impl FnMut(usize, &mut [f32]) -> Result<Version, StoreError>,
    ) -> Result<Self, StoreError> {
        let per_row = stride(width, Precision::F32);
        let too_large = StoreError::TooLarge { rows, width };
        let len = rows.checked_mul(per_row).ok_or_else(|| too_large.clone())?;
        // A spare of another size is dropped here, so it is freed before the new memory is
        // taken (as a guard arm's binding it would live to the end of this function).
        let mut words: Vec<AtomicU64> = match spare.filter(|s| s.words.len() == len) {
            // A boxed slice is its allocation exactly: as a vector its capacity is `len`, so
            // the pushes below fill it without growing it.
            Some(spare) => {
                let mut words = spare.words.into_vec();
                words.clear();
                words
            }
            None => Vec::new(),
        };
        words.try_reserve_exact(len).map_err(|_| too_large)?;
        let mut buf = vec![0.0; width];
        for r in 0..rows {
            let word = match row(r, &mut buf)? {
                Version::Initial => 0,
                Version::Written(ts) if ts >= LOCK - 1 => {
                    return Err(StoreError::TimestampTooLarge { ts });
                }
                Version::Written(ts) => ts + 1,
            };
            words.push(AtomicU64::new(word));
            for pair in buf.chunks(2) {
                words.push(AtomicU64::new(pack(pair[0], pair.get(1).copied().unwrap_or(0.0))));
            }
        }
        Ok(RowStore { width, rows, precision: Precision::F32, words: words.into_boxed_slice() })
    }

    /// A store holding `values` (row-major, `rows × width`).
    pub fn from_values(rows: usize, width: usize, values: &[f32]) -> Result<Self, StoreError> {
        Self::from_values_in(Precision::F32, rows, width, values)
    }

    /// [`from_values`](Self::from_values) in a given [`Precision`].
    pub fn from_values_in(
        precision: Precision,
        rows: usize,
        width: usize,
        values: &[f32],
    ) -> Result<Self, StoreError> {
        if values.len() != rows * width {
            return Err(StoreError::DimMismatch { expected: rows * width, got: values.len() });
        }
        Self::try_from_fn_in(precision, rows, width, |r, c| values[r * width + c])
    }

    /// How the values are kept.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Bytes of one row in memory: its TID word and its value words.
    pub fn row_bytes(&self) -> usize {
        8 * stride(self.width, self.precision)
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Row `r`'s TID word and value words.
    fn row_words(&self, r: usize) -> (&AtomicU64, &[AtomicU64]) {
        let per_row = stride(self.width, self.precision);
        let (tid, cells) =
            self.words[r * per_row..(r + 1) * per_row].split_first().expect("stride ≥ 1");
        (tid, cells)
    }

    fn check(&self, row: u64, len: usize) -> Result<usize, StoreError> {
        if row >= self.rows as u64 {
            return Err(StoreError::RowOutOfRange { row, rows: self.rows });
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
        let (tid, cells) = self.row_words(r);
        loop {
            // Acquire: pairs with the writer's Release unlock, so the values of this version
            // (written before the unlock) are what the copy below sees at least.
            let before = tid.load(Ordering::Acquire);
            if before & LOCK != 0 {
                spin_wait();
                continue;
            }
            // Relaxed loads inside: validated by the TID re-read below (seqlock pattern).
            load_values(self.precision, cells, out);
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

    /// Start fetching row `row` (its TID word and every cache line of its values) into this
    /// core's caches, so a [`read`](RowStore::read) or [`write_if_newer`](RowStore::write_if_newer)
    /// of it a little later finds it there. A hint: it changes nothing, and a row out of range
    /// is ignored.
    pub fn prefetch(&self, row: u64) {
        if row < self.rows as u64 {
            let (tid, cells) = self.row_words(row as usize);
            touch(tid);
            // 8 words per 64-byte line: the last word of each run of 8 after the TID word.
            for line in cells.chunks(8) {
                touch(&line[line.len() - 1]);
            }
        }
    }

    /// The row's current version (a snapshot; it may change right after).
    pub fn version(&self, row: u64) -> Result<Version, StoreError> {
        let r = self.check(row, self.width)?;
        // Acquire: a caller that then reads values (via `read`) sees at least this version.
        Ok(Version::from_word(self.row_words(r).0.load(Ordering::Acquire)))
    }

    /// Write `values` as version `ts` if the row holds an older version; otherwise leave the row
    /// alone. Returns whether the write landed. Takes the row lock only to write.
    ///
    /// Errs only on a bad argument (row, width, `ts`), before it touches the row: the promise
    /// of [`RowStorage::write_fails_only_on_bad_arguments`](crate::storage::RowStorage::write_fails_only_on_bad_arguments)
    /// for this store.
    pub fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        let r = self.check(row, values.len())?;
        if ts >= LOCK - 1 {
            return Err(StoreError::TimestampTooLarge { ts });
        }
        let new_word = ts + 1;
        let (tid, cells) = self.row_words(r);
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
        // Relaxed stores inside: published by the Release unlock below.
        store_values(self.precision, cells, values);
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
        // Acquire: as in `version`.
        (0..self.rows)
            .map(|r| Version::from_word(self.row_words(r).0.load(Ordering::Acquire)))
            .collect()
    }

    /// One past the newest version any row holds (`0` if none was written): the engine's
    /// session base. Loads each row's TID word once (the words are in memory, so this is one
    /// pass over `rows` words; no value is copied); a store that keeps no TID word per row
    /// would keep this number instead.
    pub fn next_version(&self) -> u64 {
        // Acquire: as in `version`.
        (0..self.rows)
            .filter_map(|r| Version::from_word(self.row_words(r).0.load(Ordering::Acquire)).ts())
            .map(|ts| ts + 1)
            .max()
            .unwrap_or(0)
    }

    /// The unsynchronized view of the same table that asynchronous (Hogwild) trainers use.
    pub fn hogwild(&self) -> Hogwild<'_> {
        Hogwild { store: self }
    }
}

impl std::fmt::Debug for RowStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowStore")
            .field("rows", &self.rows())
            .field("width", &self.width)
            .field("precision", &self.precision)
            .finish()
    }
}

/// Hogwild access to a [`RowStore`]: no locks, no timestamps, relaxed atomics per word (two
/// floats).
///
/// This is the lost-update baseline (Marius, DGL-KE): a read can mix values of different writes
/// and concurrent writes overwrite each other. It is still free of undefined behaviour (every
/// access is atomic). It neither reads nor changes TID words.
#[derive(Clone, Copy)]
pub struct Hogwild<'a> {
    store: &'a RowStore,
}

impl Hogwild<'_> {
    fn cells(&self, row: u64, len: usize) -> Result<&[AtomicU64], StoreError> {
        let r = self.store.check(row, len)?;
        Ok(self.store.row_words(r).1)
    }

    /// Copy row `row` into `out`, word by word (may be torn).
    pub fn read(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        // Relaxed loads inside: Hogwild promises nothing beyond per-word atomicity.
        load_values(self.store.precision, self.cells(row, out.len())?, out);
        Ok(())
    }

    /// Overwrite row `row` word by word.
    pub fn write(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        // Relaxed stores inside: Hogwild promises nothing beyond per-word atomicity.
        store_values(self.store.precision, self.cells(row, values.len())?, values);
        Ok(())
    }

    /// Add `delta` to row `row` word by word, with a load and a store per word (like an
    /// unsynchronized `+=` or Marius' `indexAdd`): concurrent adds can lose each other.
    pub fn add(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        let cells = self.cells(row, delta.len())?;
        if self.store.precision == Precision::Bf16 {
            for (cell, d) in cells.iter().zip(delta.chunks(4)) {
                // Relaxed load + store, deliberately not an RMW: as below.
                let mut four = unpack_bf16(cell.load(Ordering::Relaxed));
                four.iter_mut().zip(d).for_each(|(v, d)| *v += d);
                // Relaxed: as above.
                cell.store(pack_bf16(&four[..d.len()]), Ordering::Relaxed);
            }
            return Ok(());
        }
        for (cell, d) in cells.iter().zip(delta.chunks(2)) {
            // Relaxed load + store, deliberately not an RMW: this is the lost-update baseline.
            let (lo, hi) = unpack(cell.load(Ordering::Relaxed));
            let hi = if let [_, dh] = d { hi + dh } else { hi };
            // Relaxed: as above.
            cell.store(pack(lo + d[0], hi), Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;
    use crate::bf16_lanes::{STAGE, bf16_bits, bf16_value};

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
    fn odd_widths_keep_every_float_through_the_packed_words() {
        let s = RowStore::from_fn(3, 5, |r, c| (10 * r + c) as f32);
        let mut out = [0.0; 5];
        assert_eq!(s.read(2, &mut out), Ok(Version::Initial));
        assert_eq!(out, [20.0, 21.0, 22.0, 23.0, 24.0]);
        s.hogwild().add(2, &[1.0, 1.0, 1.0, 1.0, 0.5]).unwrap();
        s.hogwild().read(2, &mut out).unwrap();
        assert_eq!(out, [21.0, 22.0, 23.0, 24.0, 24.5]);
        assert_eq!(s.write_if_newer(1, 3, &[-1.0, -2.0, -3.0, -4.0, -5.0]), Ok(true));
        assert_eq!(s.read(1, &mut out), Ok(Version::Written(3)));
        assert_eq!(out, [-1.0, -2.0, -3.0, -4.0, -5.0]);
        assert_eq!(s.snapshot()[..5], [0.0, 1.0, 2.0, 3.0, 4.0], "row 0 untouched");
    }

    #[test]
    fn every_width_round_trips_through_the_unrolled_copy() {
        for width in 0..=2 * 2 * UNROLL + 3 {
            let s = RowStore::zeros(2, width);
            let row: Vec<f32> = (0..width).map(|c| c as f32 + 0.5).collect();
            assert_eq!(s.write_if_newer(1, 0, &row), Ok(true));
            let mut out = vec![-1.0; width];
            assert_eq!(s.read(1, &mut out), Ok(Version::Written(0)));
            assert_eq!(out, row, "width {width}");
            s.hogwild().read(0, &mut out).unwrap();
            assert_eq!(out, vec![0.0; width], "width {width}: row 0 untouched");
        }
    }

    #[test]
    fn bf16_rows_pack_four_values_per_word_and_round_to_nearest() {
        // Widths within a word, and around the copies' staging rounds of 4 × STAGE values.
        for width in (0..=11).chain([4 * STAGE - 1, 4 * STAGE, 4 * STAGE + 1, 8 * STAGE + 3]) {
            let s = RowStore::zeros(2, width);
            let b = RowStore::try_from_fn_in(Precision::Bf16, 2, width, |_, _| 0.0).unwrap();
            assert_eq!(b.row_bytes(), 8 * (1 + width.div_ceil(4)), "width {width}");
            assert_eq!(s.row_bytes(), 8 * (1 + width.div_ceil(2)), "width {width}");
            // bf16s (an f32's top 16 bits) round-trip exactly, in any position of a word.
            let row: Vec<f32> = (0..width).map(|c| -1.5 * (c % 16) as f32 + 0.25).collect();
            assert_eq!(b.write_if_newer(1, 2, &row), Ok(true));
            // An odd width's last word keeps its unused slots 0 (the layout's promise).
            if width % 4 != 0 {
                let last = b.words[2 * stride(width, Precision::Bf16) - 1].load(Ordering::Relaxed);
                assert_eq!(last >> (16 * (width % 4)), 0, "width {width}");
            }
            let mut out = vec![9.0; width];
            assert_eq!(b.read(1, &mut out), Ok(Version::Written(2)));
            assert_eq!(out, row, "width {width}");
            b.hogwild().read(0, &mut out).unwrap();
            assert_eq!(out, vec![0.0; width], "width {width}: row 0 untouched");
        }
        // Others round to the nearest bf16, ties to even.
        let b = RowStore::from_values_in(Precision::Bf16, 1, 3, &[0.1, 1.0 + 1.0 / 256.0, 3.0])
            .unwrap();
        let mut out = [0.0; 3];
        b.read(0, &mut out).unwrap();
        let tenth = f32::from_bits(0x3DCD_0000); // 0.1's nearest bf16, 0.10009765625
        assert_eq!(out, [tenth, 1.0, 3.0]);
        b.hogwild().add(0, &[0.0, 0.0078125, 1.0]).unwrap();
        b.hogwild().read(0, &mut out).unwrap();
        assert_eq!(out, [tenth, 1.0078125, 4.0]);
        assert_eq!(b.snapshot(), out.to_vec());
    }

    #[test]
    fn bf16_conversions_are_halfs() {
        // Every sign, exponent and kept mantissa, with the dropped halves that decide a
        // rounding (0, just above and below the midpoint, the midpoint, the top), NaNs and
        // infinities among them.
        for high in 0..=u32::from(u16::MAX) {
            for low in [0, 1, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF] {
                let v = f32::from_bits(high << 16 | low);
                let want = half::bf16::from_f32(v).to_bits();
                assert_eq!(bf16_bits(v), want, "{:#010x}", v.to_bits());
            }
            let want = half::bf16::from_bits(high as u16).to_f32().to_bits();
            assert_eq!(bf16_value(high as u16).to_bits(), want, "{high:#06x}");
        }
    }

    #[test]
    fn prefetch_changes_nothing_and_ignores_rows_out_of_range() {
        let s = RowStore::from_fn(3, 21, |r, c| (r * 100 + c) as f32);
        assert_eq!(s.write_if_newer(1, 4, &[7.0; 21]), Ok(true));
        let (before, versions) = (s.snapshot(), s.versions());
        for row in 0..5 {
            s.prefetch(row);
        }
        assert_eq!((s.snapshot(), s.versions()), (before, versions));
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
