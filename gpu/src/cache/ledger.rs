//! Host-side bookkeeping of a validation cache's table: which rows are live with which ts, and
//! how many slots hold tombstones. It lets the host report an overflow, and decide a
//! compaction, before launching anything — without reading device memory back.

use super::error::CacheError;
use ordo::engine::validation_cache::CacheIndex;

/// What an insert needs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InsertPlan {
    /// Insert directly.
    Direct,
    /// Rebuild the table without tombstones, then insert.
    RehashFirst,
}

/// **Invariant:** `index` (the core cache's bookkeeping) knows exactly the rows whose table
/// entry is live and the inserts not yet fully evicted, in ts order; `tombstones` counts the
/// table's evicted slots since the last rehash. So `index.live() + tombstones` is the number of
/// non-empty slots, which [`plan_insert`](Ledger::plan_insert) keeps ≤ slots / 2.
#[derive(Debug)]
pub(crate) struct Ledger {
    capacity: usize,
    slots: usize,
    index: CacheIndex<Vec<u64>>,
    tombstones: usize,
}

impl Ledger {
    pub(crate) fn new(capacity: usize, slots: usize) -> Self {
        Ledger { capacity, slots, index: CacheIndex::new(), tombstones: 0 }
    }

    pub(crate) fn live(&self) -> usize {
        self.index.live()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Check an insert of `rows` (already checked sorted) with `ts`; changes nothing.
    pub(crate) fn plan_insert(&self, rows: &[u64], ts: u64) -> Result<InsertPlan, CacheError> {
        if let Some(last) = self.index.last_ts()
            && ts <= last
        {
            return Err(CacheError::TsNotIncreasing { ts, last });
        }
        let incoming = self.index.incoming(rows);
        let live = self.index.live();
        if live + incoming > self.capacity {
            return Err(CacheError::Overflow { live, incoming, capacity: self.capacity });
        }
        // slots ≥ 2 × capacity, so after a rehash live + incoming ≤ capacity ≤ slots / 2.
        if 2 * (live + self.tombstones + incoming) > self.slots {
            Ok(InsertPlan::RehashFirst)
        } else {
            Ok(InsertPlan::Direct)
        }
    }

    /// Record an insert that [`plan_insert`](Ledger::plan_insert) accepted.
    pub(crate) fn commit_insert(&mut self, rows: &[u64], ts: u64) {
        self.index.insert(ts, rows.to_vec());
    }

    /// The table was rebuilt: no tombstones left.
    pub(crate) fn rehashed(&mut self) {
        self.tombstones = 0;
    }

    /// Drop every live entry with `ts + 1 ≤ bound` (i.e. `ts < bound`); returns how many.
    pub(crate) fn evict(&mut self, bound: u64) -> usize {
        let evicted = self.index.evict_before(bound);
        self.tombstones += evicted;
        evicted
    }
}
