//! shuttle: the real `PartitionedStorage`, its I/O threads and a [`Walk`] driven by batches in
//! flight on threads of their own, under shuttle's randomized and PCT schedulers. The walk
//! evicts a partition on the finished prefix (once no batch that can still touch it is in
//! flight), not at a drain; here every interleaving shuttle picks of the trainer entering
//! states, the batches reading, validating and writing their rows, and the I/O threads loading
//! and writing back must keep every row a batch touches resident.
//!
//! Run: `RUSTFLAGS="--cfg ordo_shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release
//! -p ordo --features partition --test shuttle_partition`.
//!
//! **Oracle.** No access of a batch in flight finds its partition evicted (the storage's
//! `NotResident`), and after two epochs every row equals its initial value plus one per batch
//! that wrote it (each row is written by one batch per epoch, and the values are small
//! integers: exact in `f32`), read back through the files after every partition left the
//! buffer. The seeded `partition-evict-unfinished` (a state counted finished once its batches
//! are submitted) fails the first check.
//!
//! **What the checker cannot see.** Shuttle explores sequentially consistent interleavings of
//! the blocking primitives (`crate::sync::blocking`: the slots' `RwLock`s, the I/O queue's
//! `Mutex` and `Condvar`, the load replies, the I/O threads); the storage's own atomics (a dirty
//! flag, counters) and the row store's orderings are not weakened (loom's job, on the row
//! store). The batches here stand in for the engine's pipeline (`shuttle_engine.rs` checks the
//! pipeline itself): each is one thread that reads, validates and writes its two rows, and
//! reports its completion as the engine's `completions` do. The files are `MemoryFiles` (no
//! I/O error, no crash; `prop_partition.rs` and the trainer's fault tests cover those).
#![cfg(ordo_shuttle)]

use ordo::partition::ordering::beta;
use ordo::partition::{Geometry, MemoryFiles, PartitionedStorage, Walk};
use ordo::storage::RowStorage;
use shuttle::sync::mpsc::channel;
use std::sync::Arc;

/// `P` partitions of `2P` rows each, `c` of them in the buffer.
const P: usize = 4;
const C: usize = 2;
const WIDTH: usize = 2;

/// The two rows bucket `(src, dst)`'s batch writes: slot `dst` of partition `src` and slot
/// `P + src` of partition `dst`. No two buckets share a row, so batches in flight together
/// never conflict and every row is written once per epoch.
fn rows_of(src: usize, dst: usize) -> [u64; 2] {
    [(src * 2 * P + dst) as u64, (dst * 2 * P + P + src) as u64]
}

/// One batch in flight: read each row, validate it (its version unchanged), write it back one
/// higher with timestamp `ts`. Panics if a partition it touches was evicted under it.
fn batch(storage: &PartitionedStorage, rows: [u64; 2], ts: u64) {
    let mut values = [0.0f32; WIDTH];
    for row in rows {
        let read = storage.read(row, &mut values).unwrap_or_else(|e| panic!("read {row}: {e}"));
        shuttle::thread::yield_now();
        let again = storage.version(row).unwrap_or_else(|e| panic!("validate {row}: {e}"));
        assert_eq!(read, again, "row {row} changed under its only batch");
        for v in &mut values {
            *v += 1.0;
        }
        let landed =
            storage.write_if_newer(row, ts, &values).unwrap_or_else(|e| panic!("write {row}: {e}"));
        assert!(landed, "row {row}: the write of ts {ts} did not land");
    }
}

/// Two epochs of the plan `beta(P, C)`: states entered as soon as the walk admits them,
/// each bucket's batch on a thread of its own, completions fed back as they arrive; the
/// epoch's end waits for every batch (the trainer's drain).
fn two_epochs() {
    let g = Geometry { rows: P * 2 * P, width: WIDTH, partitions: P };
    let initial = |r: usize| r as f32;
    let storage = Arc::new(
        PartitionedStorage::create(MemoryFiles::default(), g, C, "shuttle", |r, out| {
            out.fill(initial(r))
        })
        .expect("create"),
    );
    let plan = beta(P, C).expect("plan");
    let n = plan.states.len();
    let (done, completions) = channel::<usize>();
    let mut walk = Walk::new(&storage, &plan);
    let mut workers = Vec::new();
    let mut ts = 1;
    for epoch in 0..2 {
        let mut in_flight = 0;
        for k in epoch * n..(epoch + 1) * n {
            let buckets = plan.states[k % n].buckets.clone();
            while !walk.try_enter(k, buckets.len()).expect("enter") {
                // Let a batch finish: the walk may evict what no open state needs.
                walk.finished(completions.recv().expect("a batch in flight")).expect("finished");
                in_flight -= 1;
            }
            for b in buckets {
                let (storage, done, rows) = (storage.clone(), done.clone(), rows_of(b.src, b.dst));
                let at = ts;
                ts += 1;
                in_flight += 1;
                workers.push(shuttle::thread::spawn(move || {
                    batch(&storage, rows, at);
                    done.send(k).expect("the trainer waits");
                }));
            }
            while let Ok(k) = completions.try_recv() {
                walk.finished(k).expect("finished");
                in_flight -= 1;
            }
        }
        // The epoch's end: every batch written (the session's drain).
        for _ in 0..in_flight {
            walk.finished(completions.recv().expect("a batch in flight")).expect("finished");
        }
        walk.drained().expect("drained");
    }
    for w in workers {
        w.join().expect("a batch panicked");
    }
    drop(walk);
    for p in storage.resident() {
        storage.evict(p).expect("evict");
    }
    let table = storage.snapshot().expect("snapshot");
    for r in 0..g.rows {
        let want = initial(r) + 2.0;
        assert_eq!(&table[r * WIDTH..(r + 1) * WIDTH], &[want; WIDTH], "row {r}");
    }
    drop(Arc::into_inner(storage).expect("the batches are joined"));
}

/// Randomized scheduler, 300 executions.
#[test]
fn batches_in_flight_keep_their_partitions_random() {
    shuttle::check_random(two_epochs, 300);
}

/// PCT (depth 3), 200 executions.
#[test]
fn batches_in_flight_keep_their_partitions_pct() {
    shuttle::check_pct(two_epochs, 200, 3);
}
