#![cfg(ordo_loom)]
//! loom models of the outstanding-batches set and its safe-to-evict value (`ordo::outstanding`),
//! run on the shipped source through the sync shim (`core/src/sync.rs`). The invariant checked is the one in
//! the `Outstanding` doc comment: every batch that can still reach the device acquired a prefix
//! `≥` any STE already handed out, so it saw every write with `ts < STE` in the store.
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2
//! LOOM_MAX_BRANCHES=20000 CARGO_TARGET_DIR=/work/target-loom cargo test --release -p ordo
//! --test loom_outstanding`

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use ordo::mft::Mft;
use ordo::outstanding::Outstanding;

/// One model run: `finishers` threads finish ts `0..finishers` (each writing its "row" before
/// `finish`), a reader registers a batch and then reads every row, and the device computes an
/// STE concurrently, on the main thread or on a spawned one (a spawned device lets loom run it
/// after the others without spending a preemption; on the main thread the model is cheaper). Whatever the interleaving:
/// * the reader's acquired prefix is `≥ ste` (the batch is still registered when `ste` runs,
///   whether the scan counted it or missed it);
/// * every row with `ts < ste` was visible to the reader's reads — so evicting cache entries
///   with `ts < ste` loses nothing the reader needs.
fn late_registering_batch_sees_everything_below_the_ste(finishers: u64, device_on_main: bool) {
    loom::model(move || {
        let mft = Arc::new(Mft::new(4));
        let out = Arc::new(Outstanding::new(2));
        let rows: Arc<Vec<AtomicU64>> =
            Arc::new((0..finishers).map(|_| AtomicU64::new(0)).collect());
        let writers: Vec<_> = (0..finishers)
            .map(|ts| {
                let (mft, rows) = (mft.clone(), rows.clone());
                thread::spawn(move || {
                    // Relaxed: the MFT publishes it (release on finish, acquire on the prefix).
                    rows[ts as usize].store(ts + 1, Ordering::Relaxed);
                    mft.finish(ts).unwrap();
                })
            })
            .collect();
        let reader = {
            let (mft, out, rows) = (mft.clone(), out.clone(), rows.clone());
            thread::spawn(move || {
                let reg = out.register(&mft).unwrap();
                // Relaxed: what the batch reads is ordered only by its registration's acquire.
                let seen: Vec<u64> = rows.iter().map(|r| r.load(Ordering::Relaxed)).collect();
                (reg, seen)
            })
        };
        let ste = if device_on_main {
            out.ste(&mft)
        } else {
            let (mft, out) = (mft.clone(), out.clone());
            thread::spawn(move || out.ste(&mft)).join().unwrap()
        };
        for w in writers {
            w.join().unwrap();
        }
        let (reg, seen) = reader.join().unwrap();
        assert!(ste <= mft.prefix(), "STE {ste} above the finished prefix");
        assert!(
            reg.prefix() >= ste,
            "batch acquired prefix {} below STE {ste} already handed out",
            reg.prefix()
        );
        for ts in 0..ste.min(finishers) {
            assert_eq!(
                seen[ts as usize],
                ts + 1,
                "STE {ste} lets the device evict ts {ts}, but the batch did not see that write"
            );
        }
        out.deregister(reg);
        assert_eq!(out.in_flight(), 0);
    });
}

/// Device, reader and one finisher, all spawned: three threads.
#[test]
fn ste_is_safe_with_one_finisher() {
    late_registering_batch_sees_everything_below_the_ste(1, false);
}

/// Device (main thread), reader and two out-of-order finishers: four threads.
#[test]
fn ste_is_safe_with_two_finishers() {
    late_registering_batch_sees_everything_below_the_ste(2, true);
}

/// Two readers register concurrently (racing for slots) while a finisher advances the MFT and
/// the device computes an STE: both registrations get distinct slots, both acquire a prefix
/// `≥ ste`, and after both leave the STE is the finished prefix.
#[test]
fn two_registering_readers_and_a_finisher() {
    loom::model(|| {
        let mft = Arc::new(Mft::new(4));
        let out = Arc::new(Outstanding::new(2));
        let finisher = {
            let mft = mft.clone();
            thread::spawn(move || {
                mft.finish(0).unwrap();
            })
        };
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (mft, out) = (mft.clone(), out.clone());
                thread::spawn(move || out.register(&mft).unwrap())
            })
            .collect();
        let ste = out.ste(&mft);
        finisher.join().unwrap();
        let regs: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        for reg in &regs {
            assert!(reg.prefix() >= ste, "prefix {} below STE {ste}", reg.prefix());
        }
        assert_eq!(out.in_flight(), 2);
        for reg in regs {
            out.deregister(reg);
        }
        assert_eq!(out.ste(&mft), 1);
    });
}
