//! ASSM (paper 003 §1, Appendix C.4): every worker reads and writes the whole model, each
//! partition under its lock, so no update of a partition is lost and no read is torn.

use super::BlockStore;
use std::time::Duration;

/// ASSM's read (Algorithm 1, line 5 with `i = {1..n}`): copy every block into `out`, each
/// under its lock. Returns the total time spent waiting for the locks.
pub fn assm_read(store: &BlockStore, out: &mut [f32]) -> Duration {
    (0..store.blocks().len()).map(|b| store.read_block_locked(b, out)).sum()
}

/// ASSM's write (Algorithm 1, line 8 with `i = {1..n}`): `x ← x − step·u`, block by block, each
/// under its lock (a worker holds one lock at a time, so there is no deadlock). Returns the
/// total time spent waiting for the locks.
pub fn assm_write(store: &BlockStore, step: f32, u: &[f32]) -> Duration {
    (0..store.blocks().len()).map(|b| store.sub_scaled_locked(b, step, u)).sum()
}
