//! Host-side bookkeeping of a validation cache's table: which rows are live with which ts, and
//! how many slots hold tombstones. It lets the host report an overflow, and decide a
//! compaction, before launching anything — without reading device memory back.

use super::CacheError;
use std::collections::{HashMap, VecDeque};

/// What an insert needs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InsertPlan {
    /// Insert directly.
    Direct,
    /// Rebuild the table without tombstones, then insert.
    RehashFirst,
}

/// **Invariant:** `live` maps exactly the rows whose table entry is live to that entry's ts;
/// `batches` lists every insert not yet fully evicted, in ts order; `tombstones` counts the
/// table's evicted slots since the last rehash. So `live.len() + tombstones` is the number of
/// non-empty slots, which [`plan_insert`](Ledger::plan_insert) keeps ≤ slots / 2.
#[derive(Debug)]
pub(crate) struct Ledger {
    capacity: usize,
    slots: usize,
    live: HashMap<u64, u64>,
    batches: VecDeque<(u64, Vec<u64>)>,
    tombstones: usize,
    last_ts: Option<u64>,
}

impl Ledger {
    pub(crate) fn new(capacity: usize, slots: usize) -> Self {
        Ledger {
            capacity,
            slots,
            live: HashMap::new(),
            batches: VecDeque::new(),
            tombstones: 0,
            last_ts: None,
        }
    }

    pub(crate) fn live(&self) -> usize {
        self.live.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Check an insert of `rows` (already checked sorted) with `ts`; changes nothing.
    pub(crate) fn plan_insert(&self, rows: &[u64], ts: u64) -> Result<InsertPlan, CacheError> {
        if let Some(last) = self.last_ts
            && ts <= last
        {
            return Err(CacheError::TsNotIncreasing { ts, last });
        }
        let incoming = rows.iter().filter(|r| !self.live.contains_key(r)).count();
        let live = self.live.len();
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
        for &row in rows {
            self.live.insert(row, ts);
        }
        self.batches.push_back((ts, rows.to_vec()));
        self.last_ts = Some(ts);
    }

    /// The table was rebuilt: no tombstones left.
    pub(crate) fn rehashed(&mut self) {
        self.tombstones = 0;
    }

    /// Drop every live entry with `ts + 1 ≤ bound` (i.e. `ts < bound`); returns how many.
    pub(crate) fn evict(&mut self, bound: u64) -> usize {
        let mut evicted = 0;
        while let Some((ts, _)) = self.batches.front() {
            if *ts >= bound {
                break;
            }
            let (ts, rows) = self.batches.pop_front().unwrap_or_default();
            for row in rows {
                // A later insert of the same row replaced this entry in place: still live.
                if self.live.get(&row) == Some(&ts) {
                    self.live.remove(&row);
                    evicted += 1;
                }
            }
        }
        self.tombstones += evicted;
        evicted
    }
}
