//! The one place that chooses between loom and std.
//!
//! Under `RUSTFLAGS="--cfg ordo_loom"` every atomic, fence, `Arc`, thread and spin hint in the crate
//! comes from [loom](https://docs.rs/loom), so the loom models in `core/tests/loom_*.rs` check
//! the shipped source itself; otherwise they are the std types. Code in this crate imports
//! synchronization types only from here.
//!
//! Under `RUSTFLAGS="--cfg ordo_shuttle"` they come from [shuttle](https://docs.rs/shuttle) instead
//! (`Arc` stays std's, as in shuttle), so `core/tests/shuttle_*.rs` run the shipped source under
//! shuttle's randomized and PCT schedulers, with more threads and longer runs than loom can
//! explore. Shuttle explores sequentially consistent interleavings only: every ordering is
//! treated as `SeqCst`, so a weakened ordering is invisible to it (loom's job).
//!
//! What loom does not see (TOOLING.md): it models `SeqCst` *loads and stores* as `AcqRel`
//! (we use `fence(SeqCst)` and read-modify-writes where sequential consistency matters, which
//! loom models faithfully), it does not model load buffering, and it bounds preemptions.
//!
//! Crate-private: a downstream crate's own `--cfg loom` never reaches it, and ordo's public API is
//! the same under every cfg (its loom and shuttle tests name loom and shuttle directly).

// One set of names under every cfg; some (`Condvar`, `thread`, `AtomicI64`) are used only by the
// model-checker harness under `ordo_loom` / `ordo_shuttle`.
#![allow(unused_imports)]

// Under loom, ordo's checks include its own `debug_assert!`s on shared state: a second writer
// on a PASSM block (`sgd/block_store.rs`, which `core/tests/loom_passm.rs` relies on), a
// registration handed to another `Outstanding` set, an interval word out of range. Without
// debug assertions those checks vanish and a loom run passes checking less, so such a build is
// refused. (loom itself does not need them: its own checks panic in every profile.)
#[cfg(all(ordo_loom, not(debug_assertions)))]
compile_error!(
    "ordo under `--cfg ordo_loom` needs debug assertions: its loom checks include its own \
     `debug_assert!`s (e.g. one writer per PASSM block), which this build would skip silently. \
     Use the dev profile (`cargo test`), or for `--release` set \
     RUSTFLAGS=\"--cfg ordo_loom -C debug-assertions\"."
);

#[cfg(ordo_loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, fence};
#[cfg(ordo_loom)]
pub use loom::sync::{Arc, Condvar, Mutex};
#[cfg(ordo_loom)]
pub use loom::thread;

#[cfg(all(ordo_shuttle, not(ordo_loom)))]
pub use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, fence};
#[cfg(all(ordo_shuttle, not(ordo_loom)))]
pub use shuttle::sync::{Arc, Condvar, Mutex};
#[cfg(all(ordo_shuttle, not(ordo_loom)))]
pub use shuttle::thread;

#[cfg(not(any(ordo_loom, ordo_shuttle)))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, fence};
#[cfg(not(any(ordo_loom, ordo_shuttle)))]
pub use std::sync::{Arc, Condvar, Mutex};
#[cfg(not(any(ordo_loom, ordo_shuttle)))]
pub use std::thread;

pub use std::sync::atomic::Ordering;

/// The engine's thread glue (the stop flag, scoped threads): std under every cfg, so `Engine`
/// exists under `--cfg ordo_loom` too. loom checks the pipeline's protocol through
/// `engine::model_harness`, which drives the same stage tasks on loom threads; an `Engine` run
/// under `ordo_loom` outside a loom model panics (its primitives are loom's).
pub(crate) mod host {
    pub use std::sync::Mutex;
    pub use std::sync::atomic::AtomicBool;
    pub use std::thread;
}

/// The partition buffer's blocking primitives: its locks, condition variable, I/O threads and
/// their reply channels. Shuttle's under `ordo_shuttle`, so `core/tests/shuttle_partition.rs`
/// schedules the real `PartitionedStorage`, its callers and its I/O threads together; std's
/// (and crossbeam-channel's) otherwise, loom included: loom's `Condvar` has no `wait_while`,
/// and no loom model drives the I/O threads. The storage's own atomics (a dirty flag, counters)
/// stay std's: shuttle treats every access as sequentially consistent anyway.
#[cfg(feature = "partition")]
pub(crate) mod blocking {
    #[cfg(all(ordo_shuttle, not(ordo_loom)))]
    pub use shuttle::sync::mpsc::{Receiver, SyncSender as Sender};
    #[cfg(all(ordo_shuttle, not(ordo_loom)))]
    pub use shuttle::sync::{Condvar, Mutex, RwLock};
    #[cfg(all(ordo_shuttle, not(ordo_loom)))]
    pub use shuttle::thread::{Builder, JoinHandle};

    /// A channel of `cap` messages (the I/O threads' reply to one load).
    #[cfg(all(ordo_shuttle, not(ordo_loom)))]
    pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
        shuttle::sync::mpsc::sync_channel(cap)
    }

    #[cfg(not(all(ordo_shuttle, not(ordo_loom))))]
    pub use crossbeam_channel::{Receiver, Sender, bounded};
    #[cfg(not(all(ordo_shuttle, not(ordo_loom))))]
    pub use std::sync::{Condvar, Mutex, RwLock};
    #[cfg(not(all(ordo_shuttle, not(ordo_loom))))]
    pub use std::thread::{Builder, JoinHandle};
}

/// Back off inside a spin or CAS-retry loop.
///
/// Under loom this yields to the scheduler (a spin loop that never yields makes loom explore
/// an unbounded number of states), under shuttle likewise; otherwise it is a CPU spin hint.
#[inline]
pub fn spin_wait() {
    #[cfg(ordo_loom)]
    loom::thread::yield_now();
    #[cfg(all(ordo_shuttle, not(ordo_loom)))]
    shuttle::thread::yield_now();
    #[cfg(not(any(ordo_loom, ordo_shuttle)))]
    std::hint::spin_loop();
}

/// Bring `word`'s cache line towards this core ahead of a later access: on x86_64 the
/// `prefetcht0` instruction through `safe_arch` (`core::arch`'s prefetch needs `unsafe`, which
/// this crate forbids), elsewhere a load whose value is dropped.
///
/// It changes no value and orders nothing, so under loom and shuttle it does nothing: an extra
/// load there would only widen the explored state space without checking anything.
#[inline]
pub fn touch(word: &AtomicU64) {
    #[cfg(all(target_arch = "x86_64", not(any(ordo_loom, ordo_shuttle))))]
    safe_arch::prefetch_t0(word);
    #[cfg(all(not(target_arch = "x86_64"), not(any(ordo_loom, ordo_shuttle))))]
    // Relaxed: the value is discarded; only the cache line's arrival matters.
    std::hint::black_box(word.load(Ordering::Relaxed));
    #[cfg(any(ordo_loom, ordo_shuttle))]
    let _ = word;
}

/// Build an array of atomics (loom's atomics have no `const fn new`, so arrays are built here).
pub fn atomic_u64_slice(len: usize, value: u64) -> Box<[AtomicU64]> {
    (0..len).map(|_| AtomicU64::new(value)).collect()
}
