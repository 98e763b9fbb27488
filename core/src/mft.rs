//! MFT: the maximum finished sequential timestamp (paper 000, §3.3).
//!
//! Batches are stamped `ts = 0, 1, 2, …` in computation order and finish (their row writes
//! become visible) in any order. The MFT is the largest `t` such that every `ts ≤ t` has
//! finished. We keep it as the *finished prefix* `p = MFT + 1` (the number of timestamps
//! finished contiguously from 0), so "nothing finished yet" is `p = 0` instead of `−1`.

use crate::mutation::{Mutant, active};
use crate::sync::{AtomicU64, Ordering, atomic_u64_slice, fence};
use thiserror::Error;

/// Why a [`Mft::finish`] was refused. Nothing is recorded when an error is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MftError {
    /// The timestamp is `capacity` or more ahead of the finished prefix: its done flag would
    /// share a ring slot with an unfinished timestamp. Callers admit a timestamp only after
    /// [`Mft::admits`] says so (backpressure), so this error means a protocol bug in the caller.
    #[error(
        "timestamp {ts} runs ahead of the window: finished prefix {prefix}, capacity {capacity}"
    )]
    AheadOfWindow {
        /// The refused timestamp.
        ts: u64,
        /// The finished prefix observed.
        prefix: u64,
        /// The ring's capacity.
        capacity: u64,
    },
    /// The timestamp was already reported finished.
    #[error("timestamp {ts} finished twice")]
    AlreadyFinished {
        /// The timestamp reported twice.
        ts: u64,
    },
}

/// Tracks the maximum finished sequential timestamp.
///
/// **Invariant:** `prefix()` never exceeds an unfinished timestamp: if `prefix() = p` then every
/// `ts < p` has been passed to [`finish`](Mft::finish), and every write that its finisher made
/// before calling `finish` happens-before any load that observes a prefix `> ts` (the prefix is
/// published with release and read with acquire). Conversely, once every `ts < p` has finished,
/// some finisher advances the prefix to at least `p` before its `finish` returns (no timestamp is
/// left behind, whatever the interleaving).
///
/// Backpressure: the done flags live in a ring of `capacity` slots, so a timestamp is accepted
/// only while `ts < prefix + capacity`; [`admits`](Mft::admits) tells a producer when it may
/// hand out the next timestamp, and `finish` refuses with an error (never corrupts) otherwise.
///
/// Checked by `core/tests/loom_mft.rs` (out-of-order finishers, visibility of writes, ring reuse)
/// and `core/tests/prop_mft.rs` (a sequential model, with duplicates and window overruns).
///
/// ```
/// use ordo::mft::Mft;
/// let mft = Mft::new(4);
/// mft.finish(1).unwrap(); // out of order: ts 0 is still running
/// assert_eq!(mft.mft(), None);
/// assert_eq!(mft.finish(0), Ok(2)); // the prefix moves over 0 and 1
/// assert_eq!(mft.mft(), Some(1));
/// assert!(mft.admits(5) && !mft.admits(6)); // window: prefix 2 + capacity 4
/// ```
pub struct Mft {
    /// `done[ts % capacity] == ts + 1` once `ts` has finished (0 = never used).
    done: Box<[AtomicU64]>,
    /// The finished prefix `MFT + 1`; only ever increases, by CAS.
    prefix: AtomicU64,
}

impl Mft {
    /// A tracker that admits timestamps up to `capacity` ahead of the finished prefix.
    /// A capacity of 0 is raised to 1.
    pub fn new(capacity: usize) -> Self {
        Mft { done: atomic_u64_slice(capacity.max(1), 0), prefix: AtomicU64::new(0) }
    }

    /// How many timestamps may be outstanding at once.
    pub fn capacity(&self) -> u64 {
        self.done.len() as u64
    }

    /// The finished prefix `p = MFT + 1`: every `ts < p` has finished.
    pub fn prefix(&self) -> u64 {
        // Acquire: pairs with the AcqRel CAS that advanced it, so the caller sees every row write
        // made before the finish of each ts < p. (Mutant: Relaxed, which carries nothing.)
        let order =
            if active(Mutant::MftPrefixRelaxed) { Ordering::Relaxed } else { Ordering::Acquire };
        self.prefix.load(order)
    }

    /// The MFT: the largest `t` with every `ts ≤ t` finished, or `None` before `ts = 0` finishes.
    pub fn mft(&self) -> Option<u64> {
        self.prefix().checked_sub(1)
    }

    /// The prefix read with a read-modify-write, so that it is ordered in the prefix's
    /// modification order: a thread that later (after a `fence(SeqCst)` that follows ours in the
    /// fence order) loads the prefix reads this value or a newer one. Used by the STE scan.
    pub(crate) fn prefix_rmw(&self) -> u64 {
        // AcqRel: an RMW with acquire to see the writes before the finishes it covers, and
        // release so it heads a release sequence (it never changes the value).
        self.prefix.fetch_add(0, Ordering::AcqRel)
    }

    /// Whether timestamp `ts` may be handed out now (`ts < prefix + capacity`).
    pub fn admits(&self, ts: u64) -> bool {
        ts < self.prefix() + self.capacity()
    }

    /// Report that every write of `ts` is visible. Any thread, any order.
    ///
    /// Returns the finished prefix observed after this call's own advancing.
    pub fn finish(&self, ts: u64) -> Result<u64, MftError> {
        let cap = self.capacity();
        let prefix = self.prefix();
        if ts < prefix {
            return Err(MftError::AlreadyFinished { ts });
        }
        if ts >= prefix + cap && !active(Mutant::MftWindowUnchecked) {
            return Err(MftError::AheadOfWindow { ts, prefix, capacity: cap });
        }
        let slot = &self.done[(ts % cap) as usize];
        // The slot holds 0 or the flag of an older occupant (`≤ ts`); a value `> ts` (that is,
        // `≥ ts + 1`) means ts (or a later occupant, so ts too) already finished. A CAS, not a swap, so a
        // duplicate finish racing a stale prefix can never overwrite a newer occupant's flag.
        // Relaxed load: only a guess for the CAS, which re-validates it.
        let mut seen = slot.load(Ordering::Relaxed);
        loop {
            if seen > ts {
                return Err(MftError::AlreadyFinished { ts });
            }
            // AcqRel: release publishes the caller's row writes to whoever advances the prefix
            // past ts (they acquire this flag); an RMW so the fence argument below holds.
            // (Mutant: Relaxed, so the advancer does not carry the writes.)
            let set =
                if active(Mutant::MftFlagRelaxed) { Ordering::Relaxed } else { Ordering::AcqRel };
            match slot.compare_exchange(seen, ts + 1, set, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        // SeqCst fence: store-buffering between finishers. Without it, finisher A (flag ts+1,
        // then reads flag ts) and finisher B (flag ts, then reads flag ts+1) could both miss the
        // other's flag and leave the prefix behind forever. With the fences one of them sees both.
        if !active(Mutant::MftNoFence) {
            fence(Ordering::SeqCst);
        }
        if active(Mutant::MftCountsFinishes) {
            // AcqRel: as in `advance` (the bug is the counting, not the ordering).
            return Ok(self.prefix.fetch_add(1, Ordering::AcqRel) + 1);
        }
        Ok(self.advance())
    }

    /// Move the prefix over every contiguously finished timestamp. Returns the prefix it leaves.
    fn advance(&self) -> u64 {
        let cap = self.capacity();
        // Relaxed first read: the CAS below re-validates it; a stale value only costs a retry.
        let mut p = self.prefix.load(Ordering::Relaxed);
        loop {
            // Acquire: the finisher's flag CAS released its row writes; whoever publishes the
            // prefix past p must carry them (the CAS's release below passes them on). The flag
            // must be exactly p's: a ring slot also holds the flags of older occupants.
            if self.done[(p % cap) as usize].load(Ordering::Acquire) != p + 1 {
                return p;
            }
            // AcqRel: release publishes the writes acquired above to readers of the prefix
            // (all prefix writes are RMWs, so they form one release sequence). Acquire on failure:
            // we continue from the newer prefix and pass on what its publisher carried.
            match self.prefix.compare_exchange(p, p + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => p += 1,
                Err(now) => {
                    p = now;
                    crate::sync::spin_wait();
                }
            }
        }
    }
}

impl std::fmt::Debug for Mft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mft")
            .field("prefix", &self.prefix())
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_finishes_advance_only_over_a_contiguous_prefix() {
        let m = Mft::new(4);
        assert_eq!(m.mft(), None);
        assert_eq!(m.finish(2), Ok(0));
        assert_eq!(m.finish(1), Ok(0));
        assert_eq!(m.mft(), None);
        assert_eq!(m.finish(0), Ok(3));
        assert_eq!(m.mft(), Some(2));
    }

    #[test]
    fn window_and_duplicates_are_errors_not_corruption() {
        let m = Mft::new(2);
        assert!(m.admits(1));
        assert!(!m.admits(2));
        assert_eq!(m.finish(2), Err(MftError::AheadOfWindow { ts: 2, prefix: 0, capacity: 2 }));
        assert_eq!(m.finish(1), Ok(0));
        assert_eq!(m.finish(1), Err(MftError::AlreadyFinished { ts: 1 }));
        assert_eq!(m.finish(0), Ok(2));
        assert_eq!(m.finish(0), Err(MftError::AlreadyFinished { ts: 0 }));
        // Slots are reused once the prefix has passed their previous occupant.
        assert_eq!(m.finish(3), Ok(2));
        assert_eq!(m.finish(2), Ok(4));
    }
}
