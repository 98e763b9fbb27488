//! The validation cache of OAC (paper 000, §3.2): row id → `(ts, values)` of the newest update
//! the device made to the row, for the batches that read the row before that update reached the
//! store.
//!
//! Timestamps here are the engine's run-local computation-order stamps `ts = 0, 1, 2, …`; a row
//! read from the store carries the run-local ts of the write it saw, or `None` for a value older
//! than the run (see [`crate::engine`]).

use crate::engine::{BatchRows, RowBlock, Staleness};
use crate::mutation::{self, Mutant};
use crate::sync::Arc;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hasher for row ids (they are dense integers; SipHash would dominate the
/// device stage's time).
#[derive(Default, Clone, Copy)]
struct RowIdHasher(u64);

impl Hasher for RowIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (x ^ (x >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }
}

/// Where the newest cached update of a row lives: the block stamped `ts`, row `index` in it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    ts: u64,
    index: u32,
}

/// Row id → newest device update, with eviction by the safe-to-evict stamp.
///
/// **Invariant (bounded size):** after [`evict_before(ste)`](ValidationCache::evict_before)
/// every entry has `ts ≥ ste`, and each row has at most one entry (its newest update). So the
/// cache holds at most the rows of the batches stamped at or after `ste`, the minimum finished
/// prefix announced by the batches in flight ([`crate::outstanding`]): the rows of the batches
/// that ran while the oldest in-flight batch was between its read and its validation.
/// (This is "the rows of in-flight batches" of ARCHITECTURE.md made precise: a reader that stalls
/// pins `ste`, so batches that already finished may still be needed by it, and are kept.)
///
/// **Invariant (validation):** [`validate`](ValidationCache::validate) replaces a row exactly when
/// the cache holds a newer update than the version the batch read (`cache ts > read ts`); with
/// eviction below the STE, that is exactly when the store copy the batch read was stale.
///
/// The values are not copied on insert: an entry points into the shared [`RowBlock`] that the
/// writers also hold, and the block is freed when its last entry is evicted or overwritten and
/// its writes are done.
#[derive(Default)]
pub struct ValidationCache {
    entries: HashMap<u64, Entry, BuildHasherDefault<RowIdHasher>>,
    /// Inserted blocks in increasing ts order (the device inserts in computation order).
    blocks: VecDeque<(u64, Arc<RowBlock>)>,
    peak: usize,
}

impl ValidationCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of rows cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no row is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The largest number of rows cached at once since creation (or [`clear`](Self::clear)).
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Total rows of the blocks still referenced (an upper bound on `len`, see the invariant).
    pub fn rows_of_live_blocks(&self) -> usize {
        self.blocks.iter().map(|(_, b)| b.len()).sum()
    }

    /// Smallest ts still cached, if any.
    pub fn oldest_ts(&self) -> Option<u64> {
        self.blocks.front().map(|(ts, _)| *ts)
    }

    /// Evict every entry with `ts < ste` (the safe-to-evict finished prefix, see
    /// [`crate::outstanding::Outstanding::ste`]).
    pub fn evict_before(&mut self, ste: u64) {
        while let Some((ts, _)) = self.blocks.front() {
            let ts = *ts;
            let evict =
                if mutation::active(Mutant::EvictStePlusOne) { ts <= ste } else { ts < ste };
            if !evict {
                break;
            }
            let (_, block) = self.blocks.pop_front().expect("front exists");
            for id in block.ids() {
                // Only the entry this block put there; a newer block may own the row now.
                if self.entries.get(id).is_some_and(|e| e.ts == ts) {
                    self.entries.remove(id);
                }
            }
        }
    }

    /// Replace every row of `rows` whose cached ts is newer than the ts it was read at
    /// (`read[i]`: `None` = a value from before the run). Returns how stale the batch was.
    pub fn validate(&self, read: &[Option<u64>], rows: &mut BatchRows<'_>) -> Staleness {
        let mut st = Staleness::default();
        for (i, r) in read.iter().enumerate().take(rows.len()) {
            let id = rows.ids()[i];
            let Some(e) = self.entries.get(&id) else { continue };
            let newer = match *r {
                None => true,
                Some(r) if mutation::active(Mutant::ValidateGe) => e.ts >= r,
                Some(r) => e.ts > r,
            };
            if newer {
                let block = self.block(e.ts);
                rows.row_mut(i).copy_from_slice(block.row(e.index as usize));
                st.replaced += 1;
                // Gap in versions: how many stamps newer the cached update is (initial = -1).
                let gap = e.ts + 1 - r.map_or(0, |r| r + 1);
                st.max_gap = st.max_gap.max(gap);
            }
        }
        st
    }

    /// Record `block` as the newest update (stamp `ts`) of each of its rows. Stamps must be
    /// inserted in increasing order.
    pub fn insert(&mut self, ts: u64, block: &Arc<RowBlock>) {
        debug_assert!(self.blocks.back().is_none_or(|(t, _)| *t < ts), "inserts in ts order");
        for (i, id) in block.ids().iter().enumerate() {
            self.entries.insert(*id, Entry { ts, index: i as u32 });
        }
        self.blocks.push_back((ts, block.clone()));
        self.peak = self.peak.max(self.entries.len());
    }

    /// Drop everything (between runs: every cached update is in the store by then).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.blocks.clear();
        self.peak = 0;
    }

    fn block(&self, ts: u64) -> &RowBlock {
        let i =
            self.blocks.binary_search_by_key(&ts, |(t, _)| *t).expect("an entry's block is live");
        &self.blocks[i].1
    }
}

impl std::fmt::Debug for ValidationCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidationCache")
            .field("rows", &self.len())
            .field("blocks", &self.blocks.len())
            .field("peak", &self.peak)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn block(ids: &[u64], v: f32) -> Arc<RowBlock> {
        Arc::new(RowBlock::new(ids.to_vec(), 1, vec![v; ids.len()]).unwrap())
    }

    #[test]
    fn validates_only_newer_rows_and_evicts_below_ste() {
        let mut c = ValidationCache::new();
        c.insert(0, &block(&[1, 2], 10.0));
        c.insert(1, &block(&[2, 3], 20.0));
        assert_eq!(c.len(), 3);
        let ids = [1, 2, 3];
        let mut vals = [0.0; 3];
        let st =
            c.validate(&[Some(0), None, Some(1)], &mut BatchRows::new(&ids, 1, &mut vals).unwrap());
        // row 1 read at ts 0 = cached ts 0: kept; row 2 initial < 1: replaced; row 3 same ts.
        assert_eq!(vals, [0.0, 20.0, 0.0]);
        assert_eq!(st, Staleness { replaced: 1, max_gap: 2 });
        c.evict_before(1);
        assert_eq!(c.len(), 2, "row 1 (ts 0) gone, row 2 now belongs to ts 1");
        assert_eq!(c.oldest_ts(), Some(1));
        c.evict_before(2);
        assert!(c.is_empty());
        assert_eq!(c.peak(), 3);
    }
}
