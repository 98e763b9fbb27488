//! The validation cache's bookkeeping, shared by every cache that keeps OAC's rule: which rows
//! have a live cached update, at which ts, in which inserted block; eviction below a bound.
//! The [`CpuValidationCache`](crate::engine::validation_cache::CpuValidationCache) keeps its values
//! in the blocks; `ordo-gpu`'s cache keeps them in device memory and uses this index to plan its
//! table (capacity, tombstones) on the host before it launches anything.

use crate::engine::block::RowBlock;
use crate::mutation::{self, Mutant};
use std::collections::VecDeque;
use std::sync::Arc;

/// A block of rows inserted into a cache: what the index needs of it is its row ids (distinct,
/// in any order).
pub trait CachedRows {
    /// The block's row ids, in the order of its rows.
    fn ids(&self) -> &[u64];
}

impl CachedRows for Arc<RowBlock> {
    fn ids(&self) -> &[u64] {
        RowBlock::ids(self)
    }
}

impl CachedRows for Vec<u64> {
    fn ids(&self) -> &[u64] {
        self
    }
}

/// Where a row's newest cached update lives: the block stamped `ts`, row `index` in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    ts: u64,
    index: u32,
}

/// No live cached update of this row.
const ABSENT: Entry = Entry { ts: u64::MAX, index: 0 };

/// Row id → newest inserted update, over blocks inserted in increasing ts order.
///
/// **Invariant:** `blocks` holds, in increasing ts order, every inserted block with
/// `ts ≥` the last eviction bound; `index[row]` is the entry of the newest held block that
/// contains `row`, or absent if none does; `live` counts the rows that are not absent and
/// `held` the rows of the held blocks (`live ≤ held`: a row inserted twice is held twice and
/// live once). The index is dense (16 bytes per row id up to the largest inserted), so a
/// lookup is one array access.
#[derive(Debug)]
pub struct CacheIndex<B> {
    index: Vec<Entry>,
    blocks: VecDeque<(u64, B)>,
    live: usize,
    held: usize,
}

impl<B> Default for CacheIndex<B> {
    fn default() -> Self {
        CacheIndex { index: Vec::new(), blocks: VecDeque::new(), live: 0, held: 0 }
    }
}

impl<B: CachedRows> CacheIndex<B> {
    /// An empty index.
    ///
    /// ```
    /// use ordo::engine::validation_cache::CacheIndex;
    /// let mut ix: CacheIndex<Vec<u64>> = CacheIndex::new();
    /// ix.insert(0, vec![1, 2]);
    /// ix.insert(1, vec![2, 3]);
    /// assert_eq!((ix.live(), ix.held()), (3, 4));
    /// assert_eq!(ix.lookup(2), Some((1, 0)), "row 2: block 1, its first row");
    /// assert_eq!(ix.block(1), &vec![2, 3]);
    /// assert_eq!(ix.incoming(&[1, 4]), 1, "row 4 would be new");
    /// assert_eq!(ix.evict_before(1), 1, "row 1 goes; row 2's entry is block 1's");
    /// assert_eq!(ix.lookup(1), None);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows with a live cached update.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Rows in the held blocks (a row inserted by two held blocks counts twice).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The ts of the newest held block.
    pub fn last_ts(&self) -> Option<u64> {
        self.blocks.back().map(|(ts, _)| *ts)
    }

    /// The ts of the oldest held block.
    pub fn oldest_ts(&self) -> Option<u64> {
        self.blocks.front().map(|(ts, _)| *ts)
    }

    /// How many of `ids` have no live entry (what an insert of them would add to
    /// [`live`](Self::live)).
    pub fn incoming(&self, ids: &[u64]) -> usize {
        ids.iter().filter(|&&id| self.entry(id).is_none()).count()
    }

    /// `row`'s newest live update: its ts and its row index in the block of that ts
    /// ([`block`](Self::block)).
    #[inline]
    pub fn lookup(&self, row: u64) -> Option<(u64, usize)> {
        self.entry(row).map(|e| (e.ts, e.index as usize))
    }

    /// The held block stamped `ts`. Panics if none is held (a ts from [`lookup`](Self::lookup)
    /// always is).
    #[inline]
    pub fn block(&self, ts: u64) -> &B {
        let front = self.blocks.front().expect("an entry's block is held").0;
        // Stamps are usually contiguous (one block per ts); fall back to a search otherwise.
        match self.blocks.get((ts - front) as usize) {
            Some((t, b)) if *t == ts => b,
            _ => {
                let i = self.blocks.binary_search_by_key(&ts, |(t, _)| *t).expect("held block");
                &self.blocks[i].1
            }
        }
    }

    /// Record `block` (stamped `ts`, newer than every held block) as the newest update of each
    /// of its rows.
    pub fn insert(&mut self, ts: u64, block: B) {
        debug_assert!(self.last_ts().is_none_or(|t| t < ts), "inserts in ts order");
        let ids = block.ids();
        // The block's rows come in the model's order, not necessarily increasing.
        let largest = if mutation::active(Mutant::CacheIndexSizedByLastRow) {
            ids.last()
        } else {
            ids.iter().max()
        };
        if let Some(&max) = largest
            && max as usize >= self.index.len()
        {
            self.index.resize(max as usize + 1, ABSENT);
        }
        for (i, &id) in ids.iter().enumerate() {
            let slot = &mut self.index[id as usize];
            self.live += usize::from(*slot == ABSENT);
            *slot = Entry { ts, index: i as u32 };
        }
        self.held += ids.len();
        self.blocks.push_back((ts, block));
    }

    /// Drop every held block with `ts < bound`, and the entries that still point into them (a
    /// row a later block updated stays live). Returns how many live entries were dropped.
    pub fn evict_before(&mut self, bound: u64) -> usize {
        let mut evicted = 0;
        while self.blocks.front().is_some_and(|(ts, _)| *ts < bound) {
            let (ts, block) = self.blocks.pop_front().expect("front exists");
            for &id in block.ids() {
                let slot = &mut self.index[id as usize];
                if slot.ts == ts {
                    *slot = ABSENT;
                    evicted += 1;
                }
            }
            self.held -= block.ids().len();
        }
        self.live -= evicted;
        evicted
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.index.fill(ABSENT);
        self.blocks.clear();
        (self.live, self.held) = (0, 0);
    }

    #[inline]
    fn entry(&self, row: u64) -> Option<Entry> {
        self.index.get(row as usize).copied().filter(|e| *e != ABSENT)
    }
}
