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

/// Row ids a page of the index covers (64 KiB of entries).
const PAGE: usize = 1 << 12;

/// The entries of up to `PAGE` consecutive row ids (fewer in the last page), and how many of
/// them are not absent.
#[derive(Debug)]
struct Page {
    entries: Vec<Entry>,
    used: usize,
}

/// Row id → newest inserted update, over blocks inserted in increasing ts order.
///
/// **Invariant:** `blocks` holds, in increasing ts order, every inserted block with
/// `ts ≥` the last eviction bound; `index[row]` is the entry of the newest held block that
/// contains `row`, or absent if none does; `live` counts the rows that are not absent and
/// `held` the rows of the held blocks (`live ≤ held`: a row inserted twice is held twice and
/// live once). The index covers the row ids up to the largest inserted, in pages of 4,096: a
/// page exists only while one of its rows is live, so a lookup is two array accesses and
/// memory follows the rows in flight, not the table. (Dense, 16 bytes per row id, it held
/// 0.6 GB for a 38M-entity table while the batches in flight touched a few partitions of it.)
#[derive(Debug)]
pub struct CacheIndex<B> {
    /// Page `k` holds the entries of row ids `k · PAGE .. min((k + 1) · PAGE, rows)`; `None`
    /// while none of them is live.
    index: Vec<Option<Page>>,
    /// Row ids covered: one past the largest inserted.
    rows: usize,
    blocks: VecDeque<(u64, B)>,
    live: usize,
    held: usize,
}

impl<B> Default for CacheIndex<B> {
    fn default() -> Self {
        CacheIndex { index: Vec::new(), rows: 0, blocks: VecDeque::new(), live: 0, held: 0 }
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
            && max as usize >= self.rows
        {
            // The last page so far may have been short: it grows to its new length.
            if let Some(Some(last)) = self.rows.checked_sub(1).map(|r| &mut self.index[r / PAGE]) {
                let start = (self.rows - 1) / PAGE * PAGE;
                last.entries.resize(PAGE.min(max as usize + 1 - start), ABSENT);
            }
            self.rows = max as usize + 1;
            self.index.resize_with(self.rows.div_ceil(PAGE), || None);
        }
        for (i, &id) in ids.iter().enumerate() {
            let k = id as usize / PAGE;
            let len = PAGE.min(self.rows.saturating_sub(k * PAGE));
            let page =
                self.index[k].get_or_insert_with(|| Page { entries: vec![ABSENT; len], used: 0 });
            let slot = &mut page.entries[id as usize % PAGE];
            if *slot == ABSENT {
                self.live += 1;
                page.used += 1;
            }
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
                let k = id as usize / PAGE;
                // A page already freed holds no entry of this block.
                let Some(page) = self.index[k].as_mut() else { continue };
                let slot = &mut page.entries[id as usize % PAGE];
                if slot.ts == ts {
                    *slot = ABSENT;
                    evicted += 1;
                    page.used -= 1;
                    if page.used == 0 {
                        self.index[k] = None;
                    }
                }
            }
            self.held -= block.ids().len();
        }
        self.live -= evicted;
        evicted
    }

    /// Drop everything.
    pub fn clear(&mut self) {
        self.index.iter_mut().for_each(|page| *page = None);
        self.blocks.clear();
        (self.live, self.held) = (0, 0);
    }

    #[inline]
    fn entry(&self, row: u64) -> Option<Entry> {
        let page = self.index.get(row as usize / PAGE)?.as_ref()?;
        page.entries.get(row as usize % PAGE).copied().filter(|e| *e != ABSENT)
    }

    /// Pages of the index that exist (each holds a live entry).
    #[cfg(all(test, not(ordo_loom)))]
    fn pages(&self) -> usize {
        self.index.iter().filter(|p| p.is_some()).count()
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::{CacheIndex, PAGE};

    /// Memory follows the live rows, not the largest row id: a page exists only while one of
    /// its rows is live, and eviction frees it; lookups see the same entries as before.
    #[test]
    fn pages_exist_only_while_a_row_of_them_is_live() {
        let far = 40_000_000u64;
        let mut ix: CacheIndex<Vec<u64>> = CacheIndex::new();
        ix.insert(0, vec![far, 3]);
        ix.insert(1, vec![far + 1, PAGE as u64]);
        assert_eq!(ix.pages(), 3, "rows 3, {PAGE} and {far}'s pages");
        assert_eq!((ix.live(), ix.held()), (4, 4));
        assert_eq!((ix.lookup(far), ix.lookup(far + 1)), (Some((0, 0)), Some((1, 0))));
        assert_eq!(ix.lookup(far + 2), None);
        assert_eq!(ix.lookup(u64::MAX), None, "beyond every page");
        assert_eq!(ix.evict_before(1), 2);
        assert_eq!(ix.pages(), 2, "row 3's page is freed, {far}'s keeps row {}", far + 1);
        assert_eq!((ix.lookup(3), ix.lookup(far)), (None, None));
        ix.insert(2, vec![3]);
        assert_eq!(ix.lookup(3), Some((2, 0)), "a freed page comes back");
        assert_eq!(ix.evict_before(3), 3);
        assert_eq!((ix.pages(), ix.live(), ix.held()), (0, 0, 0));
    }

    /// The last page covers the row ids up to the largest inserted and grows with it, keeping
    /// its entries.
    #[test]
    fn the_last_page_grows_with_the_largest_row() {
        let mut ix: CacheIndex<Vec<u64>> = CacheIndex::new();
        ix.insert(0, vec![2, 0]);
        assert_eq!(ix.lookup(3), None, "beyond the largest row");
        ix.insert(1, vec![5]);
        assert_eq!(
            (ix.lookup(0), ix.lookup(2), ix.lookup(5)),
            (Some((0, 1)), Some((0, 0)), Some((1, 0)))
        );
        ix.insert(2, vec![PAGE as u64 + 1, 4]);
        assert_eq!((ix.lookup(4), ix.lookup(PAGE as u64 + 1)), (Some((2, 1)), Some((2, 0))));
        assert_eq!((ix.pages(), ix.live()), (2, 5));
        ix.clear();
        ix.insert(3, vec![1]);
        assert_eq!((ix.lookup(1), ix.lookup(2), ix.pages()), (Some((3, 0)), None, 1));
    }
}
