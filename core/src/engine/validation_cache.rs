//! The validation cache of OAC (paper 000, §3.2): row id → `(ts, values)` of the newest update
//! the device made to the row, for the batches that read the row before that update reached the
//! store.
//!
//! Timestamps here are the engine's run-local computation-order stamps `ts = 0, 1, 2, …`; a row
//! read from the store carries the run-local ts of the write it saw, or `None` for a value older
//! than the run (see [`crate::engine`]).

use crate::engine::block::RowBlock;
pub use crate::engine::cache_index::{CacheIndex, CachedRows};
use crate::engine::error::DeviceError;
use crate::engine::model::BatchRows;
use crate::engine::queue_cache::QueueCache;
use crate::engine::record::Staleness;
use crate::mutation::{self, Mutant};
use std::sync::Arc;

/// Row id → newest device update, with eviction by the safe-to-evict stamp.
///
/// **Invariant (bounded size):** after [`evict_before(ste)`](CpuValidationCache::evict_before)
/// the cache holds only the blocks stamped `ts ≥ ste`. `ste` is the minimum finished prefix
/// announced by the batches in flight ([`crate::outstanding`]), so the cache holds at most the
/// rows of the batches that ran while the oldest in-flight batch was between its read and its
/// validation. (This is "the rows of in-flight batches" of ARCHITECTURE.md made precise: a
/// reader that stalls pins `ste`, and batches that already finished may still be needed by it,
/// so they are kept.)
///
/// **Invariant (validation):** [`validate`](CpuValidationCache::validate) replaces a row exactly
/// when the cache holds a newer update than the version the batch read (`cache ts > read ts`);
/// with eviction below the STE, that is exactly when the store copy the batch read was stale.
///
/// Layout (CPU device): values are never copied on insert; an entry points into the shared
/// [`RowBlock`] that the writers also hold, and a block is freed when it is evicted and its
/// writes are done. Which row points where is the [`CacheIndex`] (shared with `ordo-gpu`'s
/// device cache).
#[derive(Default)]
pub struct CpuValidationCache {
    index: CacheIndex<Arc<RowBlock>>,
    /// The STE of the last eviction.
    ste: u64,
    peak: usize,
}

impl CpuValidationCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows held (in the held blocks): the cache's size, an upper bound on distinct rows.
    pub fn len(&self) -> usize {
        self.index.held()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest [`len`](Self::len) since creation (or [`clear`](Self::clear)).
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Smallest ts still held, if any.
    pub fn oldest_ts(&self) -> Option<u64> {
        self.index.oldest_ts()
    }

    /// Evict every entry with `ts < ste` (the safe-to-evict finished prefix, see
    /// [`crate::outstanding::Outstanding::ste`]). The STE never decreases.
    pub fn evict_before(&mut self, ste: u64) {
        self.ste = self.ste.max(ste);
        let bound = if mutation::active(Mutant::EvictStePlusOne) {
            self.ste.saturating_add(1)
        } else {
            self.ste
        };
        self.index.evict_before(bound);
    }

    /// Replace every row of `rows` whose cached ts is newer than the ts it was read at
    /// (`read[i]`: `None` = a value from before the run). Returns how stale the batch was.
    pub fn validate(&self, read: &[Option<u64>], rows: &mut BatchRows<'_>) -> Staleness {
        let mut st = Staleness::default();
        for (i, r) in read.iter().enumerate().take(rows.len()) {
            let Some((ts, index)) = self.index.lookup(rows.ids()[i]) else { continue };
            let newer = match *r {
                None => true,
                Some(r) if mutation::active(Mutant::ValidateGe) => ts >= r,
                Some(r) => ts > r,
            };
            if newer {
                rows.row_mut(i).copy_from_slice(self.index.block(ts).row(index));
                st.replaced += 1;
                // Gap in versions: how many stamps newer the cached update is (initial = -1).
                st.max_gap = st.max_gap.max(ts + 1 - r.map_or(0, |r| r + 1));
            }
        }
        st
    }

    /// Record `block` as the newest update (stamp `ts`) of each of its rows. Stamps must be
    /// inserted in increasing order.
    pub fn insert(&mut self, ts: u64, block: &Arc<RowBlock>) {
        self.index.insert(ts, block.clone());
        self.peak = self.peak.max(self.len());
    }

    /// Drop everything (between runs: every cached update is in the store by then).
    pub fn clear(&mut self) {
        self.index.clear();
        self.ste = 0;
        self.peak = 0;
    }
}

impl std::fmt::Debug for CpuValidationCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuValidationCache")
            .field("rows", &self.index.held())
            .field("live", &self.index.live())
            .field("ste", &self.ste)
            .field("peak", &self.peak)
            .finish()
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    fn block(ids: &[u64], v: f32) -> Arc<RowBlock> {
        Arc::new(RowBlock::new(ids.to_vec(), 1, vec![v; ids.len()]).unwrap())
    }

    #[test]
    fn validates_only_newer_rows_and_evicts_below_ste() {
        let mut c = CpuValidationCache::new();
        c.insert(0, &block(&[1, 2], 10.0));
        c.insert(1, &block(&[2, 3], 20.0));
        assert_eq!(c.len(), 4, "rows held in blocks");
        let ids = [1, 2, 3];
        let mut vals = [0.0; 3];
        let st =
            c.validate(&[Some(0), None, Some(1)], &mut BatchRows::new(&ids, 1, &mut vals).unwrap());
        // row 1 read at ts 0 = cached ts 0: kept; row 2 initial < 1: replaced; row 3 same ts.
        assert_eq!(vals, [0.0, 20.0, 0.0]);
        assert_eq!(st, Staleness { replaced: 1, max_gap: 2 });
        c.evict_before(1);
        assert_eq!(c.len(), 2, "block 0 gone");
        let mut vals = [0.0; 3];
        c.validate(&[None, None, None], &mut BatchRows::new(&ids, 1, &mut vals).unwrap());
        assert_eq!(vals, [0.0, 20.0, 20.0], "row 1's entry (ts 0) is evicted");
        assert_eq!(c.oldest_ts(), Some(1));
        c.evict_before(2);
        assert!(c.is_empty());
        assert_eq!(c.peak(), 4);
    }
}
/// The engine's view of the cache between batches: empty, evict below the STE, count.
impl QueueCache for CpuValidationCache {
    fn clear(&mut self) -> Result<(), DeviceError> {
        CpuValidationCache::clear(self);
        Ok(())
    }

    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        self.evict_before(ste);
        Ok(())
    }

    fn cached_rows(&self) -> usize {
        self.len()
    }
}
