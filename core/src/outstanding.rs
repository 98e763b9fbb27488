//! Outstanding batches and the safe-to-evict value STE (paper 000, §3.3).
//!
//! Every batch in flight announces the MFT it read (here: the finished prefix `p = MFT + 1`)
//! in a slot *before* it reads any row. The STE handed to the device is the minimum announced
//! prefix; the device may evict every validation-cache entry with `ts < STE` (in MFT terms,
//! `ts ≤ STE_mft`), because every batch that can still reach it has already read those writes
//! from the store.

use crate::mft::Mft;
use crate::mutation::{Mutant, active};
use crate::sync::{Arc, AtomicU64, Ordering, atomic_u64_slice, fence};
use thiserror::Error;

const EMPTY: u64 = u64::MAX;

/// Why a batch could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum OutstandingError {
    /// Every slot holds an in-flight batch; the caller must wait for one to deregister.
    #[error("all {capacity} outstanding-batch slots are in use")]
    Full {
        /// Number of slots.
        capacity: usize,
    },
}

/// The set of in-flight batches and the minimum finished prefix they announced.
///
/// **Invariant (safe eviction):** let `s = ste(mft)`. Every batch that is registered, or will
/// ever register later, reads its rows only after acquiring a finished prefix `≥ s` from `mft`.
/// So every write with `ts < s` is visible in the store to every batch that can still reach the
/// device, and cache entries with `ts < s` are never needed again.
///
/// Why it holds (the argument the orderings carry):
/// * A batch registered when the scan in `ste` reads its slot contributes its announced prefix
///   `a` to the minimum, so `s ≤ a`; it read its rows after acquiring `a`.
/// * A batch `B` whose announcement the scan missed: `register` does *announce; fence(SeqCst);
///   load prefix* and `ste` does *RMW-read prefix = q; fence(SeqCst); scan*. The scan missed
///   `B`'s announcement, so `B`'s fence follows the scan's fence in the single fence order, and
///   then `B`'s load of the prefix reads `q` or a later value of the prefix (the RMW is a
///   modification sequenced before the scan's fence). `s ≤ q` because `q` is in the minimum, and
///   the prefix only grows, so `B` acquires a prefix `≥ s` before it reads any row.
///
/// This is the hazard-pointer pattern; plain `SeqCst` loads and stores would not do (and loom
/// models them as acquire/release), hence the explicit fences and the RMW read.
///
/// Checked by `core/tests/loom_outstanding.rs`, which kills the mutants that drop the scan's
/// fence, skip the register's fence-and-re-read, or leave the prefix out of the minimum. loom
/// models a `SeqCst` fence as a global acquire-release, which is stronger than the fence rules
/// of the Rust/C++ model, so it cannot tell the RMW read from a plain load; the RMW is kept for
/// the argument above, which needs a modification of the prefix sequenced before the fence.
///
/// ```
/// use ordo::{mft::Mft, outstanding::Outstanding};
/// let (mft, out) = (Mft::new(8), Outstanding::new(4));
/// let batch = out.register(&mft).unwrap(); // announces prefix 0, then reads its rows
/// mft.finish(0).unwrap();
/// assert_eq!(out.ste(&mft), 0); // the batch may still need ts 0 from the cache
/// out.deregister(batch);
/// assert_eq!(out.ste(&mft), 1); // cache entries with ts < 1 may be evicted
/// ```
pub struct Outstanding {
    /// One slot per in-flight batch: its announced prefix, or `EMPTY`. Shared with the
    /// registrations, so each one clears its own owner's slot.
    slots: Arc<Box<[AtomicU64]>>,
}

/// A registered batch: an RAII guard of its slot in the [`Outstanding`] set that issued it.
/// Dropping it (or handing it to [`Outstanding::deregister`]) deregisters the batch; do so when
/// its writes are finished in the MFT.
///
/// **Invariant (owner-bound):** a registration holds its owner's slots and clears only its own
/// slot, exactly once, so it can never clear a live slot of another set or another batch.
///
/// ```
/// use ordo::{mft::Mft, outstanding::Outstanding};
/// let (mft, a, b) = (Mft::new(4), Outstanding::new(1), Outstanding::new(1));
/// let batch = a.register(&mft)?;
/// assert!(a.register(&mft).is_err(), "a's one slot is taken");
/// assert!(batch.belongs_to(&a) && !batch.belongs_to(&b));
/// {
///     let other = b.register(&mft)?;
///     assert_eq!(b.in_flight(), 1);
/// } // dropping `other` frees b's slot, and only b's
/// assert_eq!((a.in_flight(), b.in_flight()), (1, 0));
/// drop(batch);
/// assert_eq!(a.in_flight(), 0);
/// # Ok::<(), ordo::outstanding::OutstandingError>(())
/// ```
#[must_use = "dropping a registration deregisters the batch at once"]
pub struct Registration {
    slots: Arc<Box<[AtomicU64]>>,
    slot: usize,
    prefix: u64,
}

impl Registration {
    /// The finished prefix (`MFT + 1`) this batch acquired before reading its rows: every write
    /// with `ts < prefix()` is visible to its reads.
    pub fn prefix(&self) -> u64 {
        self.prefix
    }

    /// Whether `set` issued this registration.
    pub fn belongs_to(&self, set: &Outstanding) -> bool {
        Arc::ptr_eq(&self.slots, &set.slots)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Release: nothing after depends on it, but a scan that sees EMPTY must not be able
        // to see it before the batch's earlier actions in this thread; Release is the cheap
        // bound.
        self.slots[self.slot].store(EMPTY, Ordering::Release);
    }
}

impl PartialEq for Registration {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.slots, &other.slots)
            && (self.slot, self.prefix) == (other.slot, other.prefix)
    }
}

impl Eq for Registration {}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("slot", &self.slot)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Outstanding {
    /// Room for `capacity` batches in flight at once (at least 1).
    pub fn new(capacity: usize) -> Self {
        Outstanding { slots: Arc::new(atomic_u64_slice(capacity.max(1), EMPTY)) }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Announce a new in-flight batch. Call before reading any of its rows; read them only after
    /// this returns (the returned prefix is what the reads are guaranteed to reflect).
    pub fn register(&self, mft: &Mft) -> Result<Registration, OutstandingError> {
        let announced = mft.prefix();
        let mut claimed = None;
        for (i, slot) in self.slots.iter().enumerate() {
            // Relaxed: the claim is ordered before the prefix re-read by the SeqCst fence below,
            // which is all the scan argument needs; the CAS makes the claim exclusive.
            if slot.compare_exchange(EMPTY, announced, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                claimed = Some(i);
                break;
            }
        }
        let Some(slot) = claimed else {
            return Err(OutstandingError::Full { capacity: self.slots.len() });
        };
        if active(Mutant::RegisterNoRecheck) {
            return Ok(Registration { slots: self.slots.clone(), slot, prefix: announced });
        }
        // SeqCst fence: orders our announcement before the prefix load below, against the scan's
        // fence in `ste` (store-buffering pattern); see the type's invariant.
        fence(Ordering::SeqCst);
        // Acquire (inside `prefix`): we read rows after this, and must see every write < prefix.
        let prefix = mft.prefix();
        if prefix != announced {
            // Raise the announcement to what we really acquired (never lower it): a scan that
            // read the old value computed a smaller, still safe, STE. Relaxed: a slot's value only
            // feeds a minimum; a stale read of it is smaller and safe.
            self.slots[slot].store(prefix, Ordering::Relaxed);
        }
        Ok(Registration { slots: self.slots.clone(), slot, prefix })
    }

    /// The safe-to-evict prefix: cache entries with `ts < ste` may be evicted.
    /// Never larger than the current finished prefix.
    pub fn ste(&self, mft: &Mft) -> u64 {
        let mut min = if active(Mutant::SteIgnoresMft) { EMPTY } else { mft.prefix_rmw() };
        if !active(Mutant::SteScanNoFence) {
            // SeqCst fence: pairs with the fence in `register` (see the type's invariant).
            fence(Ordering::SeqCst);
        }
        for slot in self.slots.iter() {
            // Relaxed: the fence orders the scan; a slot's value only feeds the minimum.
            let v = slot.load(Ordering::Relaxed);
            if v != EMPTY && v < min {
                min = v;
            }
        }
        min
    }

    /// Remove a batch once all its row writes are finished in the MFT (the same as dropping
    /// the registration). A registration always clears its own owner's slot; handing one to a
    /// set that did not issue it is a caller bug, caught in debug builds.
    pub fn deregister(&self, registration: Registration) {
        debug_assert!(registration.belongs_to(self), "a registration from another Outstanding set");
        drop(registration);
    }

    /// Number of batches registered right now (a racy snapshot, for telemetry).
    pub fn in_flight(&self) -> usize {
        self.slots.iter().filter(|s| s.load(Ordering::Relaxed) != EMPTY).count()
    }
}

impl std::fmt::Debug for Outstanding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outstanding")
            .field("capacity", &self.capacity())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn ste_is_the_minimum_announced_prefix_and_never_above_the_mft() {
        let mft = Mft::new(8);
        let out = Outstanding::new(2);
        assert_eq!(out.ste(&mft), 0);
        let a = out.register(&mft).unwrap();
        mft.finish(0).unwrap();
        mft.finish(1).unwrap();
        assert_eq!(a.prefix(), 0);
        assert_eq!(out.ste(&mft), 0, "batch a still pins ts 0");
        let b = out.register(&mft).unwrap();
        assert_eq!(b.prefix(), 2);
        assert_eq!(out.register(&mft), Err(OutstandingError::Full { capacity: 2 }));
        out.deregister(a);
        assert_eq!(out.ste(&mft), 2);
        out.deregister(b);
        assert_eq!(out.ste(&mft), 2, "STE never exceeds the finished prefix");
    }

    #[test]
    fn a_registration_clears_only_its_own_slot_in_its_own_set() {
        let (mft, a, b) = (Mft::new(4), Outstanding::new(2), Outstanding::new(2));
        let ra = a.register(&mft).unwrap();
        let rb = b.register(&mft).unwrap();
        assert!(ra.belongs_to(&a) && !ra.belongs_to(&b));
        drop(ra);
        assert_eq!((a.in_flight(), b.in_flight()), (0, 1), "dropping deregisters in its owner");
        b.deregister(rb);
        assert_eq!(b.in_flight(), 0);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "another Outstanding set")]
    fn handing_a_registration_to_another_set_panics_in_debug() {
        let (mft, a, b) = (Mft::new(4), Outstanding::new(2), Outstanding::new(2));
        let _live = b.register(&mft).unwrap();
        b.deregister(a.register(&mft).unwrap());
    }
}
