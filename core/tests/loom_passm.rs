//! loom models of paper 003's shared model (`ordo::sgd::BlockStore`): PASSM's lock-free writes
//! by block owners, ASSM's locked writes, and PASSM+'s phase gate between them.
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2
//! CARGO_TARGET_DIR=$CARGO_TARGET_DIR/loom cargo test --release -p ordo --test loom_passm`.
//!
//! Checked, under every interleaving loom explores: *at most one writer per block* (the
//! store's debug assertion fires when a writer finds a row mid-write, and each block ends with
//! exactly its owner's updates), *no torn row* (every write moves all words of a row by the same
//! amount from equal initial values, so a consistent row has equal words), and *no lost update*
//! in ASSM (two workers writing one partition: the result is the sum of both updates).
//!
//! What loom does not see: it models `SeqCst` loads and stores as `AcqRel` (the store uses none),
//! does not model load buffering, and bounds preemptions (2 here); the models are two workers and
//! one reader over one- or two-row blocks.
#![cfg(ordo_loom)]

use loom::sync::Arc;
use loom::thread;
use ordo::sgd::assm::{assm_read, assm_write};
use ordo::sgd::passm::{passm_read, passm_write};
use ordo::sgd::{BlockStore, Blocks, Method, PhaseGate};

/// A store of `layers` layers of `words` words each, one block per layer, all words 0.
fn store(layers: usize, words: usize) -> Arc<BlockStore> {
    let blocks = Blocks::by_weight(&vec![words; layers], layers).unwrap();
    Arc::new(BlockStore::new(blocks, &vec![0.0; layers * words]))
}

/// Every row of `x` (one row per block here) has equal words.
fn assert_rows_whole(s: &BlockStore, x: &[f32]) {
    for b in 0..s.blocks().len() {
        let row = &x[s.blocks().range(b)];
        assert!(row.iter().all(|v| *v == row[0]), "torn row in block {b}: {row:?}");
    }
}

#[test]
fn passm_owners_are_the_only_writers_and_readers_see_whole_rows() {
    loom::model(|| {
        let s = store(2, 2);
        let ones = vec![1.0f32; 4];
        let writers: Vec<_> = (0..2)
            .map(|owner| {
                let (s, u) = (Arc::clone(&s), ones.clone());
                thread::spawn(move || passm_write(&s, owner, 1.0, &u))
            })
            .collect();
        let mut x = vec![0.0; 4];
        passm_read(&s, &mut x);
        assert_rows_whole(&s, &x);
        writers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(s.to_vec(), [-1.0; 4], "each block has exactly its owner's update");
    });
}

#[test]
fn assm_loses_no_update_of_a_shared_partition() {
    loom::model(|| {
        let s = store(1, 2);
        let writers: Vec<_> = (0..2)
            .map(|k| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    assm_write(&s, 1.0, &[1.0 + k as f32; 2]);
                })
            })
            .collect();
        let mut x = vec![0.0; 2];
        assm_read(&s, &mut x);
        assert_rows_whole(&s, &x);
        writers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(s.to_vec(), [-3.0; 2], "the sum of both updates");
    });
}

#[test]
fn the_phase_gate_keeps_assm_writers_off_a_passm_owners_block() {
    loom::model(|| {
        let s = store(1, 1);
        let gate = Arc::new(PhaseGate::new(Method::Assm));
        let assm = {
            let (s, gate) = (Arc::clone(&s), Arc::clone(&gate));
            thread::spawn(move || {
                assert!(gate.enter(Method::Assm, || false));
                assm_write(&s, 1.0, &[1.0]);
                gate.leave();
            })
        };
        assert!(gate.enter(Method::Passm, || false));
        passm_write(&s, 0, 1.0, &[2.0]);
        gate.leave();
        assm.join().unwrap();
        assert_eq!(s.to_vec(), [-3.0]);
    });
}
