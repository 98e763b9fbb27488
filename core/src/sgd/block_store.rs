//! The dense parameter store of both shared-memory runtimes: the parameter vector `x` in shared
//! memory, split into the partitions of a [`Blocks`], each with a lock (paper 003's ASSM) and
//! each split into rows with a sequence word (consistent lock-free reads in PASSM); and, for
//! paper 001's Algorithm 1, a shared momentum velocity written Hogwild beside it.

use super::Blocks;
use crate::mutation::{Mutant, active};
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering, fence, spin_wait};
use std::time::{Duration, Instant};

/// Words per row: the unit of a consistent lock-free read (the last row of a block is shorter),
/// and the granule at which Hogwild writers are spread over the vector.
pub const ROW_WORDS: usize = 256;

/// The shared parameter vector `x`, partitioned into blocks of rows.
///
/// One store serves both runtimes, each with its own write discipline (a store is written by
/// one discipline for its whole life: the runtime that builds it is the only writer):
/// * **Blocked** (paper 003; built by [`new`](Self::new)): rows are written by
///   [`sub_scaled_locked`](Self::sub_scaled_locked) and
///   [`sub_scaled_owned`](Self::sub_scaled_owned); momentum is each worker's own.
/// * **Hogwild** (paper 001, Algorithm 1; built by [`hogwild`](Self::hogwild)): the store also
///   holds a *shared* velocity `v`, and every word is updated by
///   [`momentum_step`](Self::momentum_step) / [`momentum_range`](Self::momentum_range) with
///   relaxed loads and stores and no lock (Hogwild semantics, paper 001 §3 and its ref. 14):
///   concurrent updates never tear a word and never race in Rust's sense, but may interleave
///   between words and lose concurrent updates of one word, which Hogwild SGD tolerates.
///
/// **Invariants** (of a blocked store; a Hogwild store keeps every sequence word even, so its
/// reads are word-consistent only, as paper 001 allows):
/// * *No torn row:* a row read by [`read_block`](Self::read_block) or
///   [`read_block_locked`](Self::read_block_locked) holds the values of one completed write of
///   that row (every word from the same write), never a mix of two writes.
/// * *At most one writer per block:* a block's rows are written either under the block's lock
///   ([`sub_scaled_locked`](Self::sub_scaled_locked), ASSM) or by the block's single owner
///   ([`sub_scaled_owned`](Self::sub_scaled_owned), PASSM), never both at once (the runtime's
///   phase gate keeps ASSM and PASSM steps apart). With one writer, no update is lost.
///
/// A row's sequence word is even when the row is quiet and odd while it is written (a seqlock
/// with a single writer). Words are `AtomicU32` holding `f32` bits, so a reader racing a writer
/// is no data race in Rust's memory model (and loom can see the protocol); the sequence word,
/// not the words, carries the ordering. Checked by `core/tests/loom_passm.rs`.
#[derive(Debug)]
pub struct BlockStore {
    blocks: Blocks,
    words: Box<[AtomicU32]>,
    /// One sequence word per row, rows numbered block by block.
    seqs: Box<[AtomicU64]>,
    /// `first_row[b]`: block `b`'s first row; `first_row[c]`: the number of rows.
    first_row: Vec<usize>,
    locks: Box<[Mutex<()>]>,
    /// The shared momentum velocity of a Hogwild store (one word per parameter, starting at
    /// zero); empty in a blocked store.
    velocity: Box<[AtomicU32]>,
    /// Writes begun (each block write takes one number; see [`take_version`](Self::take_version)).
    version: AtomicU64,
}

impl BlockStore {
    /// A store holding `init` (`init.len() == blocks.num_params()`), partitioned by `blocks`.
    ///
    /// ```
    /// use ordo::sgd::{BlockStore, Blocks};
    /// let s = BlockStore::new(Blocks::by_weight(&[2, 1], 2)?, &[1.0, 2.0, 3.0]);
    /// s.sub_scaled_owned(1, 0.5, &[0.0, 0.0, 2.0]);
    /// assert_eq!(s.to_vec(), [1.0, 2.0, 2.0]);
    /// # Ok::<(), ordo::sgd::SgdError>(())
    /// ```
    pub fn new(blocks: Blocks, init: &[f32]) -> Self {
        assert_eq!(init.len(), blocks.num_params(), "BlockStore::new: init does not fit blocks");
        let mut first_row = vec![0];
        for b in 0..blocks.len() {
            first_row.push(first_row[b] + blocks.range(b).len().div_ceil(ROW_WORDS));
        }
        let rows = first_row[blocks.len()];
        Self {
            words: init.iter().map(|x| AtomicU32::new(x.to_bits())).collect(),
            seqs: (0..rows).map(|_| AtomicU64::new(0)).collect(),
            locks: (0..blocks.len()).map(|_| Mutex::new(())).collect(),
            velocity: Box::new([]),
            first_row,
            blocks,
            version: AtomicU64::new(0),
        }
    }

    /// A Hogwild store for paper 001's Algorithm 1: `init` as one block, with a shared velocity
    /// of zeros.
    ///
    /// ```
    /// let s = ordo::sgd::BlockStore::hogwild(&[1.0, 2.0]);
    /// s.momentum_range(0, &[1.0, -1.0], 0.5, 0.0); // v ← 0·v + g; x ← x − 0.5·v
    /// assert_eq!(s.to_vec(), [0.5, 2.5]);
    /// ```
    pub fn hogwild(init: &[f32]) -> Self {
        Self {
            velocity: init.iter().map(|_| AtomicU32::new(0f32.to_bits())).collect(),
            ..Self::new(Blocks::whole(init.len()), init)
        }
    }

    /// The partition.
    pub fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// `true` for a model with no parameters.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Block writes begun so far.
    pub fn version(&self) -> u64 {
        // Relaxed: a counter for staleness statistics and monitoring; orders nothing.
        self.version.load(Ordering::Relaxed)
    }

    /// Take the next version number (one per model update).
    pub fn take_version(&self) -> u64 {
        // Relaxed: a ticket; uniqueness comes from the RMW.
        self.version.fetch_add(1, Ordering::Relaxed)
    }

    /// Take the next version number if fewer than `budget` have been taken (always with
    /// `None`): the run's update budget, kept exactly even when several steps finish at once.
    pub fn take_version_within(&self, budget: Option<u64>) -> Option<u64> {
        // Relaxed: a ticket; uniqueness and the bound both come from the one RMW.
        let below = |v: u64| budget.is_none_or(|b| v < b).then_some(v + 1);
        self.version.fetch_update(Ordering::Relaxed, Ordering::Relaxed, below).ok()
    }

    /// Rows of block `b` as (sequence word index, word range).
    fn rows(&self, b: usize) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
        let range = self.blocks.range(b);
        (self.first_row[b]..self.first_row[b + 1]).enumerate().map(move |(k, r)| {
            let start = range.start + k * ROW_WORDS;
            (r, start..(start + ROW_WORDS).min(range.end))
        })
    }

    /// Run `f` holding block `b`'s lock (ASSM) and return its result and the time spent waiting
    /// for the lock. With the mutant [`Mutant::AssmNoLock`] no lock is taken.
    fn locked<R>(&self, b: usize, f: impl FnOnce() -> R) -> (R, Duration) {
        if active(Mutant::AssmNoLock) {
            return (f(), Duration::ZERO);
        }
        let t = Instant::now();
        let _guard = self.locks[b].lock().unwrap_or_else(|e| e.into_inner());
        let wait = t.elapsed();
        (f(), wait)
    }

    /// Copy block `b` into `out[range(b)]` lock-free (PASSM): each row is retried until one
    /// read sees the same even sequence word before and after its words (no torn row).
    pub fn read_block(&self, b: usize, out: &mut [f32]) {
        for (r, words) in self.rows(b) {
            loop {
                // Acquire: pairs with the writer's Release store of the even word that ended
                // its write, so the words read below are at least that write's.
                let before = self.seqs[r].load(Ordering::Acquire);
                if !before.is_multiple_of(2) {
                    spin_wait();
                    continue;
                }
                for j in words.clone() {
                    // Relaxed: validated by the sequence word re-read after the fence below.
                    out[j] = f32::from_bits(self.words[j].load(Ordering::Relaxed));
                }
                // Acquire fence: the word loads above happen before the re-read below, so a
                // write that overlapped them has made the sequence word odd or larger.
                fence(Ordering::Acquire);
                // Relaxed: ordered by the fence above.
                if self.seqs[r].load(Ordering::Relaxed) == before {
                    break;
                }
                spin_wait();
            }
        }
    }

    /// Copy block `b` into `out[range(b)]` holding the block's lock (ASSM); returns the time
    /// spent waiting for the lock.
    pub fn read_block_locked(&self, b: usize, out: &mut [f32]) -> Duration {
        // Under the lock no writer is active, so the rows are read in one pass; the sequence
        // words are still checked (`read_block`), which makes an unlocked read (the AssmNoLock
        // mutant) no less safe than a PASSM read.
        self.locked(b, || self.read_block(b, out)).1
    }

    /// `x_j ← x_j − step · u_j` for the words `j` of block `b` (Algorithm 1, line 8), row by
    /// row under each row's sequence word. The caller must be the block's only writer.
    fn sub_scaled_rows(&self, b: usize, step: f32, u: &[f32]) {
        for (r, words) in self.rows(b) {
            // Relaxed: this thread is the row's only writer, so it reads its own last store.
            let seq = self.seqs[r].load(Ordering::Relaxed);
            debug_assert!(
                seq.is_multiple_of(2),
                "two writers on block {b}: row {r} is being written"
            );
            // Relaxed store then Release fence: a reader that sees any word written below also
            // sees this odd word (or a later one) on its re-read, and retries.
            self.seqs[r].store(seq + 1, Ordering::Relaxed);
            fence(Ordering::Release);
            for j in words {
                // Relaxed: published by the Release store of the even word below.
                let x = f32::from_bits(self.words[j].load(Ordering::Relaxed)) - step * u[j];
                self.words[j].store(x.to_bits(), Ordering::Relaxed);
            }
            // Release: publishes the words above to a reader that acquires this even word.
            self.seqs[r].store(seq + 2, Ordering::Release);
        }
    }

    /// ASSM's write of block `b`: `x_b ← x_b − step · u_b` holding the block's lock, so writers
    /// of the same block are serialized and no update is lost. Returns the lock wait.
    pub fn sub_scaled_locked(&self, b: usize, step: f32, u: &[f32]) -> Duration {
        self.locked(b, || self.sub_scaled_rows(b, step, u)).1
    }

    /// PASSM's write of block `b` by its owner, lock-free: `x_b ← x_b − step · u_b`.
    ///
    /// Precondition (the *single writer* invariant): the caller owns block `b`, and no ASSM
    /// write of `b` is in flight.
    pub fn sub_scaled_owned(&self, b: usize, step: f32, u: &[f32]) {
        self.sub_scaled_rows(b, step, u);
    }

    /// Paper 001's update of the words `start..start + grad.len()` with the shared velocity,
    /// Hogwild: `v_j ← μ·v_j + g_j; x_j ← x_j − η·v_j` word by word (see the type's Hogwild
    /// discipline). Only for a store built by [`hogwild`](Self::hogwild).
    pub fn momentum_range(&self, start: usize, grad: &[f32], lr: f32, momentum: f32) {
        debug_assert_eq!(self.velocity.len(), self.words.len(), "not a Hogwild store");
        let end = start + grad.len();
        let words = self.words[start..end].iter().zip(&self.velocity[start..end]);
        for ((x, v), g) in words.zip(grad) {
            // Relaxed loads/stores: Hogwild update, see the type's discipline (a concurrent
            // update of the same word may be lost; that is the accepted semantics).
            let vel = momentum * f32::from_bits(v.load(Ordering::Relaxed)) + g;
            v.store(vel.to_bits(), Ordering::Relaxed);
            let x_new = f32::from_bits(x.load(Ordering::Relaxed)) - lr * vel;
            x.store(x_new.to_bits(), Ordering::Relaxed);
        }
    }

    /// Paper 001's update of every word ([`momentum_range`](Self::momentum_range) over
    /// `grad.len() == len()` words), visiting the words from row `lane · rows / lanes` on and
    /// wrapping around: concurrent writers given different lanes sweep different rows at a time
    /// instead of fighting over the same cache lines. The order of the words does not change the
    /// result of a lone update (each word's update reads only that word).
    pub fn momentum_step(&self, lane: usize, lanes: usize, grad: &[f32], lr: f32, momentum: f32) {
        let rows = self.len().div_ceil(ROW_WORDS);
        let first = (rows * lane / lanes.max(1) * ROW_WORDS).min(self.len());
        self.momentum_range(first, &grad[first..], lr, momentum);
        self.momentum_range(0, &grad[..first], lr, momentum);
    }

    /// Copy all of `x` into `out`, row-consistently (for monitors and the final result).
    pub fn copy_into(&self, out: &mut [f32]) {
        for b in 0..self.blocks.len() {
            self.read_block(b, out);
        }
    }

    /// `x` as a vector.
    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.len()];
        self.copy_into(&mut v);
        v
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    /// Paper 001's update from any lane is the same lone update: the lane only changes the
    /// order in which words are visited, and each word's update reads only that word.
    #[test]
    fn a_lone_momentum_step_is_the_same_from_every_lane() {
        let n = 3 * ROW_WORDS + 17;
        let init: Vec<f32> = (0..n).map(|j| (j % 13) as f32 - 6.0).collect();
        let g: Vec<f32> = (0..n).map(|j| ((j * 7) % 11) as f32 * 0.25 - 1.0).collect();
        let reference = BlockStore::hogwild(&init);
        for _ in 0..2 {
            reference.momentum_range(0, &g, 0.1, 0.9);
        }
        for (lane, lanes) in [(0, 1), (1, 2), (2, 3), (3, 4), (5, 7)] {
            let s = BlockStore::hogwild(&init);
            for _ in 0..2 {
                s.momentum_step(lane, lanes, &g, 0.1, 0.9);
            }
            assert_eq!(s.to_vec(), reference.to_vec(), "lane {lane} of {lanes}");
        }
    }
}
