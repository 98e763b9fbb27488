#![cfg(ordo_loom)]
//! loom models of the MFT tracker (`ordo::mft::Mft`), run on the shipped source through the
//! sync shim (`core/src/sync.rs`). Invariants are those of the `Mft` doc comment.
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2
//! LOOM_MAX_BRANCHES=20000 CARGO_TARGET_DIR=/work/target-loom cargo test --release -p ordo
//! --test loom_mft`

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use ordo::mft::Mft;

/// Three finishers report ts 2, 1, 0 (one each) in any order; the finisher of ts 2 then
/// observes the prefix.
/// * the observed prefix `p` never exceeds an unfinished ts: every `ts < p` has its data word
///   set, and each finisher sets it (Relaxed) *before* `finish(ts)`, so this also checks that a
///   write made before `finish(ts)` is visible to whoever acquires a prefix `> ts` (the observer
///   wrote neither ts 0's nor ts 1's data);
/// * no ts is left behind: after all join, the prefix is 3.
#[test]
fn out_of_order_finishers_publish_their_writes_and_leave_no_ts_behind() {
    loom::model(|| {
        let mft = Arc::new(Mft::new(4));
        let data: Arc<[AtomicU64; 3]> =
            Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
        let finishers: Vec<_> = [2u64, 1, 0]
            .into_iter()
            .map(|ts| {
                let (mft, data) = (mft.clone(), data.clone());
                thread::spawn(move || {
                    // Relaxed: the MFT must carry this write to readers of the prefix.
                    data[ts as usize].store(ts + 1, Ordering::Relaxed);
                    let returned = mft.finish(ts).expect("in window, finished once");
                    assert!(returned <= 3);
                    if ts == 2 {
                        let p = mft.prefix();
                        for t in 0..p {
                            // Relaxed: visibility must come from the prefix's acquire alone.
                            assert_eq!(
                                data[t as usize].load(Ordering::Relaxed),
                                t + 1,
                                "prefix {p} passed ts {t} but its write is not visible"
                            );
                        }
                    }
                })
            })
            .collect();
        for f in finishers {
            f.join().unwrap();
        }
        assert_eq!(mft.prefix(), 3, "a finished timestamp was left behind");
        assert_eq!(mft.mft(), Some(2));
    });
}

/// Two finishers race on adjacent timestamps while an observer (third thread) checks
/// monotonicity: the classic store-buffering shape (each raises its own flag, then looks at the
/// other's). After join the prefix must be 2 whatever the interleaving.
#[test]
fn two_adjacent_finishers_and_an_observer() {
    loom::model(|| {
        let mft = Arc::new(Mft::new(2));
        let a = {
            let mft = mft.clone();
            thread::spawn(move || mft.finish(1).unwrap())
        };
        let b = {
            let mft = mft.clone();
            thread::spawn(move || mft.finish(0).unwrap())
        };
        let obs = {
            let mft = mft.clone();
            thread::spawn(move || {
                let first = mft.prefix();
                let second = mft.prefix();
                assert!(first <= second, "the prefix went backwards");
                assert!(second <= 2);
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        obs.join().unwrap();
        assert_eq!(mft.prefix(), 2, "a finished timestamp was left behind");
    });
}

/// Ring reuse: capacity 2, ts 2 never finishes. One thread finishes 0 then 1; another waits for
/// admission of ts 3 (backpressure) and finishes it, reusing the slot of ts 1. The prefix must
/// stop at 2 (ts 2 is unfinished, although its slot still holds ts 0's flag), and the main thread
/// never observes more.
#[test]
fn mft_never_passes_an_unfinished_ts_when_ring_slots_are_reused() {
    loom::model(|| {
        let mft = Arc::new(Mft::new(2));
        let low = {
            let mft = mft.clone();
            thread::spawn(move || {
                mft.finish(0).unwrap();
                mft.finish(1).unwrap();
            })
        };
        let ahead = {
            let mft = mft.clone();
            thread::spawn(move || {
                while !mft.admits(3) {
                    thread::yield_now();
                }
                mft.finish(3).unwrap();
            })
        };
        assert!(mft.prefix() <= 2, "the MFT passed unfinished ts 2");
        low.join().unwrap();
        ahead.join().unwrap();
        assert_eq!(mft.prefix(), 2, "the MFT passed unfinished ts 2");
        assert_eq!(mft.finish(2), Ok(4));
    });
}
