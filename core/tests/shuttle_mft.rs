//! shuttle: the MFT tracker (`ordo::mft::Mft`) with 6 finishers over 200 timestamps and a ring
//! of 4 slots, so timestamps run far ahead of the window and slots are reused ~50 times — what
//! loom's models (3 finishers, 3–5 timestamps) cannot reach. Randomized and PCT schedulers on the
//! shipped source (through ordo's sync shim).
//!
//! Run: `RUSTFLAGS="--cfg ordo_shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release
//! -p ordo --test shuttle_mft`.
//!
//! **Oracle** (the `Mft` invariants): a finish refused as ahead of the window is retried later
//! and leaves no trace; every timestamp is finished exactly once (never "already finished" on its
//! first finish); the prefix never passes a timestamp whose finish has not begun (a ghost set in
//! std types, which shuttle does not schedule on, marked just before the first `finish` call:
//! another finisher may advance the prefix over `ts` between `ts`'s flag and its return, so
//! "returned" would be too strong); at the end the prefix is the number of timestamps. Shuttle sees only sequentially consistent interleavings: orderings are loom's job.
#![cfg(ordo_shuttle)]

use std::sync::Mutex as GhostMutex;

use ordo::mft::{Mft, MftError};
use shuttle::sync::Arc;
use shuttle::thread;

const TIMESTAMPS: u64 = 200;
const FINISHERS: u64 = 6;

fn run_finishers() {
    let mft = Arc::new(Mft::new(4));
    // Ghost: which timestamps have begun finishing (set just before the first `finish`).
    let done = Arc::new(GhostMutex::new(vec![false; TIMESTAMPS as usize]));
    let handles: Vec<_> = (0..FINISHERS)
        .map(|w| {
            let (mft, done) = (mft.clone(), done.clone());
            thread::spawn(move || {
                // Finisher w owns the timestamps ≡ w (mod FINISHERS), in order.
                for ts in (w..TIMESTAMPS).step_by(FINISHERS as usize) {
                    done.lock().unwrap()[ts as usize] = true;
                    let mut retries = 0;
                    loop {
                        match mft.finish(ts) {
                            Ok(_) => break,
                            Err(MftError::AheadOfWindow { .. }) if retries < 100_000 => {
                                retries += 1;
                                thread::yield_now();
                            }
                            Err(e) => panic!("finish of {ts} refused ({retries} retries): {e}"),
                        }
                    }
                    let p = mft.prefix();
                    let d = done.lock().unwrap();
                    let first_open = d.iter().position(|&x| !x).unwrap_or(d.len()) as u64;
                    assert!(
                        p <= first_open,
                        "prefix {p} passed ts {first_open}, not yet finishing"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(mft.prefix(), TIMESTAMPS, "a timestamp was left behind");
}

#[test]
fn six_finishers_reuse_a_small_ring_random() {
    shuttle::check_random(run_finishers, 100);
}

#[test]
fn six_finishers_reuse_a_small_ring_pct() {
    shuttle::check_pct(run_finishers, 100, 3);
}
