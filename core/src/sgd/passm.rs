//! PASSM (paper 003 §1, §4): worker `c` owns block `c`, computes the subgradient restricted to
//! it and writes it lock-free: it is the block's only writer. Reads of other blocks are
//! lock-free too (row-consistent, [`BlockStore::read_block`]).

use super::BlockStore;
use crate::mutation::{Mutant, active};

/// PASSM's read: copy every block into `out` without locks (each row consistent; rows of
/// different blocks may come from different moments, the paper's *inconsistent read*).
pub fn passm_read(store: &BlockStore, out: &mut [f32]) {
    store.copy_into(out);
}

/// PASSM's write by the owner of block `owner`: `x_owner ← x_owner − step·u_owner`, lock-free.
///
/// Invariant (*one writer per block*): worker `c` writes only block `c`, so each block has a
/// single writer and a lock-free write loses nothing. With the mutant
/// [`Mutant::PassmWritesForeignBlock`] the worker writes every block, lock-free.
pub fn passm_write(store: &BlockStore, owner: usize, step: f32, u: &[f32]) {
    if active(Mutant::PassmWritesForeignBlock) {
        (0..store.blocks().len()).for_each(|b| store.sub_scaled_owned(b, step, u));
    } else {
        store.sub_scaled_owned(owner, step, u);
    }
}
