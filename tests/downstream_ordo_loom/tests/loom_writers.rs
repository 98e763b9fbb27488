//! The user's loom model of `write_batch` and `read_finished` over ordo's `RowStore` and `Mft`.
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p
//! ordo-downstream-ordo-loom` (ordo's crate docs, "Checking your code with loom"). Without the
//! cfg this file is empty: loom is not even a dependency then.
#![cfg(ordo_loom)]

use loom::sync::Arc;
use loom::thread;
use ordo::mft::Mft;
use ordo::row_store::{RowStore, Version};
use ordo_downstream_ordo_loom::{read_finished, write_batch};

/// The values batch `ts` writes (distinct per batch, never the initial 0).
fn value_of(ts: u64) -> [f32; 2] {
    [(ts + 1) as f32; 2]
}

/// Two writers race batches 0 and 1 onto the same row while a third thread reads it through the
/// MFT; the main thread writes batch 0 instead of only joining (three threads in all). Under
/// every interleaving loom explores (at its preemption bound): a reader that sees batch `t`
/// finished sees version `t` or newer with that version's values (never a torn row, never an
/// older one), and at the end the newest batch has won the row whichever write came last.
///
/// The reader is a spawned thread on purpose. With the reads on the main thread (before it
/// joins the writers) loom ran 286 schedules and in none of them did the reader see a finished
/// batch, so its checks never ran; a seeded false check passed. As laid out here loom runs
/// 4,610 schedules (`LOOM_LOG=info`), the reader sees version 0 and version 1 after batch 0
/// finished and version 1 after batch 1, and a false check fails.
#[test]
fn a_finished_batch_is_visible_and_the_newest_batch_wins() {
    loom::model(|| {
        let store = Arc::new(RowStore::zeros(1, 2));
        let mft = Arc::new(Mft::new(4));
        let newer = {
            let (store, mft) = (store.clone(), mft.clone());
            thread::spawn(move || write_batch(&store, &mft, 1, &[0], &value_of(1)).unwrap())
        };
        let reader = {
            let (store, mft) = (store.clone(), mft.clone());
            thread::spawn(move || {
                let mut row = [f32::NAN; 2];
                for upto in [1, 2] {
                    if let Some(version) = read_finished(&store, &mft, upto, 0, &mut row).unwrap() {
                        let ts = version.ts().expect("a finished batch wrote the row");
                        assert!(
                            ts + 1 >= upto,
                            "saw version {ts} after batch {} finished",
                            upto - 1
                        );
                        assert_eq!(row, value_of(ts), "values of another version than {version:?}");
                    }
                }
            })
        };
        write_batch(&store, &mft, 0, &[0], &value_of(0)).unwrap();
        assert_eq!(newer.join().unwrap(), 1, "the newest batch always lands");
        reader.join().unwrap();
        let mut row = [f32::NAN; 2];
        assert_eq!(read_finished(&store, &mft, 2, 0, &mut row).unwrap(), Some(Version::Written(1)));
        assert_eq!(row, value_of(1));
    });
}
