#![cfg(ordo_loom)]
//! loom models of the timestamped row store (`ordo::row_store::RowStore`), run on the shipped source
//! through ordo's sync shim. Rows are 4 floats wide: two value words of two floats each (the
//! store packs two floats per atomic word, so a 2-float row would be one word and could not
//! tear; loom keeps 7 stores per atomic).
//! Invariants are those of the `RowStore` doc comment.
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2
//! LOOM_MAX_BRANCHES=20000 CARGO_TARGET_DIR=/work/target-loom cargo test --release -p ordo
//! --test loom_store`

use loom::sync::Arc;
use loom::thread;
use ordo::row_store::{RowStore, Version};

/// Floats per row: two value words.
const ROW: usize = 4;

/// The values that the write of batch `ts` puts in every float of the row.
fn value_of(ts: u64) -> f32 {
    (ts + 1) as f32
}

/// Read row 0 and check it is not torn: all floats equal, and equal to the value of the version
/// the read returned (0 for the initial row). Returns the version.
fn read_untorn(store: &RowStore) -> Version {
    let mut out = [f32::NAN; ROW];
    let version = store.read(0, &mut out).unwrap();
    let expected = match version {
        Version::Initial => 0.0,
        Version::Written(ts) => value_of(ts),
    };
    assert_eq!(out, [expected; ROW], "torn or mislabelled read at {version:?}");
    version
}

/// No torn read: one writer writes `[1, 1]` as ts 0 over the initial `[0, 0]` while two readers
/// (a spawned thread and the main thread) read the row: three threads.
///
/// The main thread takes part instead of only joining: with three spawned threads and an idle
/// main thread, loom's exploration of the spinning readers ran past its branch limit.
#[test]
fn readers_never_see_a_torn_row() {
    loom::model(|| {
        let store = Arc::new(RowStore::zeros(1, ROW));
        let writer = {
            let store = store.clone();
            thread::spawn(move || assert!(store.write_if_newer(0, 0, &[value_of(0); ROW]).unwrap()))
        };
        let reader = {
            let store = store.clone();
            thread::spawn(move || read_untorn(&store))
        };
        read_untorn(&store);
        writer.join().unwrap();
        reader.join().unwrap();
        assert_eq!(read_untorn(&store), Version::Written(0));
    });
}

/// No older-overwrites-newer: writers of ts 1 and ts 2 race on the same row while the main thread
/// reads it (three threads). Whatever the order, the row ends at version 2 with ts 2's values,
/// the ts 2 write always lands, and the reader is never torn.
#[test]
fn an_older_write_never_overwrites_a_newer_one() {
    loom::model(|| {
        let store = Arc::new(RowStore::zeros(1, ROW));
        let writers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|ts| {
                let store = store.clone();
                thread::spawn(move || store.write_if_newer(0, ts, &[value_of(ts); ROW]).unwrap())
            })
            .collect();
        read_untorn(&store);
        let landed: Vec<bool> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(landed[1], "the newest write must land");
        assert_eq!(
            read_untorn(&store),
            Version::Written(2),
            "an older write overwrote a newer one"
        );
    });
}
