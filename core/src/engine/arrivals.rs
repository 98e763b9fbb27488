//! The device's reorder buffer: read batches that arrived before their turn.
//!
//! # The invariant: the device takes batches in submission order
//!
//! In every mode the device takes (stamps, or fails) the batch at position `p` of an epoch only
//! after it took positions `0..p`, whatever order the parallel readers finish them in. So the
//! computation order ([`RunReport::positions`](crate::engine::RunReport::positions)) is the
//! identity, `0, 1, 2, …`: a run of a mode that promises its recorded order (`Oac`, `Sync`,
//! `Bounded(1)`) equals the sequential run of the batches as submitted, and two runs of those
//! modes on the same input equal each other, bit for bit. Kept here: [`Arrivals::take`] hands
//! out position `next` only; a batch that comes early waits in the buffer.
//!
//! **Why it cannot deadlock.** The buffer waits for one position, `next`; it must come:
//! - the submitter's queue to the readers is FIFO, so `next` was taken by a reader before any
//!   batch after it;
//! - a reader starts a batch only within the *read-ahead* of the device,
//!   `position < next + read_ahead` ([`RunCtx::may_read`](crate::engine::context::RunCtx));
//!   `read_ahead ≤` the outstanding slots ([`EngineConfig::read_ahead`]). So at most
//!   `read_ahead − 1` batches after `next` hold a slot; every other registered batch is
//!   stamped, and stamped batches are written without the device (the device collects the
//!   batches on it whenever it has nothing to take). So `next`'s reader gets a slot, reads, and
//!   hands it over;
//! - the device moves every read batch from the readers' queue into this buffer at each step,
//!   so a reader never waits on a full queue for long, and the buffer holds fewer than
//!   `read_ahead` batches;
//! - a stop (a failure, or a close) ends every wait: readers give up their batch, the device
//!   takes nothing more, and the batches left here are dropped with their registrations.
//!
//! [`EngineConfig::read_ahead`]: crate::engine::EngineConfig::read_ahead

use crate::engine::reader::ReadBatch;
use crate::mutation::{self, Mutant};
use std::collections::VecDeque;

/// Read batches waiting for their turn, in arrival order (fewer than the read-ahead, so a scan
/// for a position costs less than a map would).
pub(crate) struct Arrivals<D> {
    waiting: VecDeque<ReadBatch<D>>,
}

impl<D> Default for Arrivals<D> {
    fn default() -> Self {
        Arrivals { waiting: VecDeque::new() }
    }
}

impl<D> Arrivals<D> {
    /// A batch a reader finished.
    pub fn arrive(&mut self, batch: ReadBatch<D>) {
        self.waiting.push_back(batch);
    }

    /// The batch at position `next`, if it has arrived (the module's invariant).
    pub fn take(&mut self, next: usize) -> Option<ReadBatch<D>> {
        if mutation::active(Mutant::DeviceTakesArrivalOrder) {
            // The bug: whichever batch a reader finished first.
            return self.waiting.pop_front();
        }
        let i = self.waiting.iter().position(|b| b.position == next)?;
        self.waiting.remove(i)
    }

    /// Whether the batch at position `next` has arrived.
    pub fn ready(&self, next: usize) -> bool {
        if mutation::active(Mutant::DeviceTakesArrivalOrder) {
            return !self.waiting.is_empty();
        }
        self.waiting.iter().any(|b| b.position == next)
    }

    /// Whether no batch waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}
