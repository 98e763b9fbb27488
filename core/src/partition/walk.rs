//! [`Walk`]: a plan's buffer states trained back to back, a partition evicted once no batch
//! that can still touch it is in flight.
//!
//! **The rule.** The caller tells the walk how many batches each state it enters has, and each
//! batch that finishes (is written: the engine's [`Completion`](crate::engine::Completion)s).
//! A state is *open* while some of its batches are unfinished. A resident partition is
//! *needed* while an open state or the state entered last holds it; the walk evicts it as soon as
//! it is not. A batch of state `k` reads, is validated against, and writes only rows of
//! `k`'s two bucket partitions, all of them in state `k`'s buffer; so when the walk evicts a
//! partition, no batch that can still read, validate or write a row of it is in flight, and the
//! storage still behaves, for every row a batch touches, as one in-memory table: the engine's
//! claim (`Oac` equals the synchronous replay of its recorded order) carries over without a
//! drain at each swap, and the pipeline stays full across swaps.
//!
//! **Why not crossbeam-epoch.** This is deferred reclamation, with the buffer states as the
//! epochs: a partition retired in state `k` (the last state that holds it) is reclaimed once
//! every state up to `k` is finished, which is epoch-based reclamation's rule with the trainer as
//! the one thread that advances the epoch. What crossbeam-epoch would add is the per-access pin
//! that keeps freed memory from being read; here every row access already holds its slot's read
//! guard (`PartitionedStorage`'s slots are `RwLock`s) and eviction takes the write guard, so a
//! slot is never freed under a reader whatever the caller does, and an access to an evicted
//! partition is [`PartitionError::NotResident`](super::PartitionError::NotResident), never a
//! stale value. A pin per row access would be a second guard around the same access, so the
//! walk counts batches per state instead.
//!
//! **Memory.** At most `c + 1` partitions are in memory (resident or loading): entering state
//! `k` admits its incoming partition while the outgoing one may still be needed by state
//! `k − 1`'s batches in flight, and the next state's incoming partition is prefetched only once
//! the outgoing one has left. A state that cannot be entered within `c + 1` waits
//! ([`Walk::try_enter`] says so) until earlier states finish. Beside them at most one evicted
//! partition waits for its write-back: [`PartitionedStorage::evict`] first waits for the
//! previous one, so `c + 2` in all however slow the disk.
//!
//! ```
//! use ordo::partition::{Geometry, MemoryFiles, PartitionedStorage, Walk};
//! use ordo::partition::ordering::beta;
//!
//! let g = Geometry { rows: 40, width: 2, partitions: 4 };
//! let s = PartitionedStorage::create(MemoryFiles::default(), g, 2, "walk", |_, out| out.fill(0.0))?;
//! let plan = beta(4, 2)?;
//! let mut walk = Walk::new(&s, &plan);
//! assert!(walk.try_enter(0, 2)?); // state 0, two batches in flight
//! assert!(walk.try_enter(1, 1)?); // state 1 enters at once: c + 1 in memory
//! assert!(!walk.try_enter(2, 1)?, "state 2 waits for state 0's batches");
//! walk.finished(0)?;
//! walk.finished(0)?; // state 0 is finished: its outgoing partition leaves
//! assert!(walk.try_enter(2, 1)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::error::PartitionError;
use super::ordering::{BufferState, Plan};
use super::storage::PartitionedStorage;
use crate::mutation::{Mutant, active};

/// A walk along a plan's states with eviction deferred to when no batch in flight needs the
/// partition (the module docs).
#[derive(Debug)]
pub struct Walk<'s> {
    storage: &'s PartitionedStorage,
    states: Vec<BufferState>,
    /// Entered states with unfinished batches: `(state, batches unfinished)`, oldest first.
    open: Vec<(usize, usize)>,
    /// The state entered last.
    current: Option<usize>,
}

impl<'s> Walk<'s> {
    /// A walk of `plan`'s states (indices wrap around: state `k` is `plan.states[k % n]`)
    /// over `storage`.
    pub fn new(storage: &'s PartitionedStorage, plan: &Plan) -> Self {
        Walk { storage, states: plan.states.clone(), open: Vec::new(), current: None }
    }

    fn state(&self, k: usize) -> &BufferState {
        &self.states[k % self.states.len()]
    }

    /// The partitions a batch in flight may touch, and those of state `also` (the state being
    /// entered, or the state entered last).
    fn needed(&self, also: Option<usize>) -> Vec<usize> {
        let open: &[(usize, usize)] = if active(Mutant::PartitionEvictUnfinished) {
            // The bug: a state counts as finished once its batches are submitted.
            &[]
        } else {
            &self.open
        };
        let mut needed: Vec<usize> = open
            .iter()
            .map(|&(k, _)| k)
            .chain(also)
            .flat_map(|k| self.state(k).resident.iter().copied())
            .collect();
        needed.sort_unstable();
        needed.dedup();
        needed
    }

    /// Evict every resident partition not [`needed`](Self::needed).
    fn evict_unneeded(&self, also: Option<usize>) -> Result<(), PartitionError> {
        let needed = self.needed(also);
        for p in self.storage.resident() {
            if needed.binary_search(&p).is_err() {
                self.storage.evict(p)?;
            }
        }
        Ok(())
    }

    /// Partitions in memory, resident or loading.
    fn in_memory(&self) -> usize {
        self.storage.resident().len() + self.storage.loading()
    }

    /// Enter state `k`, whose `batches` batches the caller submits next (so every batch of the
    /// state entered before is submitted): evict what neither state `k` nor a batch in flight
    /// needs, then, if state `k`'s partitions fit within `c + 1` beside the partitions batches
    /// in flight still need, admit them (waiting for their loads), prefetch the next state's
    /// incoming partition if there is room, and return `true`. `false`: nothing was admitted;
    /// let batches finish ([`finished`](Self::finished), or drain the session and call
    /// [`drained`](Self::drained)) and try again.
    pub fn try_enter(&mut self, k: usize, batches: usize) -> Result<bool, PartitionError> {
        self.evict_unneeded(Some(k))?;
        let resident = self.storage.resident();
        let incoming = self.state(k).resident.iter().filter(|p| !resident.contains(p)).count();
        let loading_elsewhere = self
            .storage
            .loading_partitions()
            .into_iter()
            .filter(|p| !self.state(k).resident.contains(p))
            .count();
        if resident.len() + incoming + loading_elsewhere > self.storage.buffer() + 1 {
            return Ok(false);
        }
        for &p in &self.state(k).resident.clone() {
            self.storage.admit(p)?;
        }
        self.current = Some(k);
        if batches > 0 {
            self.open.push((k, batches));
        }
        self.prefetch_next()?;
        Ok(true)
    }

    /// Prefetch the next state's partitions that are not in memory, while there is room.
    fn prefetch_next(&self) -> Result<(), PartitionError> {
        let Some(k) = self.current else { return Ok(()) };
        let resident = self.storage.resident();
        let loading = self.storage.loading_partitions();
        for &p in &self.state(k + 1).resident {
            if self.in_memory() > self.storage.buffer() {
                break;
            }
            if !resident.contains(&p) && !loading.contains(&p) {
                self.storage.prefetch(p)?;
            }
        }
        Ok(())
    }

    /// One batch of state `k` finished (was written). Evicts the partitions no open state needs
    /// any more and prefetches the next state's. A state not open (already counted finished,
    /// or never entered) is ignored.
    pub fn finished(&mut self, k: usize) -> Result<(), PartitionError> {
        let Some(i) = self.open.iter().position(|&(s, _)| s == k) else { return Ok(()) };
        self.open[i].1 -= 1;
        if self.open[i].1 == 0 {
            self.open.remove(i);
            self.evict_unneeded(self.current)?;
            self.prefetch_next()?;
        }
        Ok(())
    }

    /// Every batch submitted so far finished (the session was drained): only the state entered
    /// last stays needed.
    pub fn drained(&mut self) -> Result<(), PartitionError> {
        self.open.clear();
        self.evict_unneeded(self.current)?;
        self.prefetch_next()
    }

    /// States with batches still in flight, as `(state, unfinished batches)`, oldest first.
    pub fn open(&self) -> &[(usize, usize)] {
        &self.open
    }
}
