//! A downstream crate of `ordo`, written as a user's code would be: its own concurrent writer
//! over ordo's primitives ([`RowStore`] rows written newest-version-wins, an [`Mft`] that tells
//! readers which batches have finished), and its own loom test of that code
//! (`tests/loom_writers.rs`), run the way ordo's crate docs describe ("Checking your code with
//! loom"):
//!
//! ```text
//! RUSTFLAGS="--cfg ordo_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p ordo-downstream-ordo-loom
//! ```
//!
//! Under `--cfg ordo_loom` every atomic, fence and spin inside ordo's primitives is loom's, so
//! loom explores the interleavings of this crate's threads *through* ordo's code. The tests of
//! this crate that run on real threads are gated off under that cfg (ordo's primitives then
//! only work inside a `loom::model`), and the loom test is gated on.

use ordo::mft::{Mft, MftError};
use ordo::row_store::{RowStore, StoreError, Version};

/// Why a batch's write failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The store refused a row (out of range, wrong width, timestamp too large).
    #[error("store refused a row")]
    Store(#[from] StoreError),
    /// The MFT refused the timestamp (already finished, or ahead of its window).
    #[error("finish refused")]
    Finish(#[from] MftError),
}

/// Write batch `ts`'s `values` (one row's worth, repeated) to each of `rows`, newest version
/// winning per row, then report `ts` finished. Returns how many rows the write landed on (an
/// older batch lands nowhere a newer one already wrote).
///
/// **Invariant (what the loom test checks):** once the MFT's finished prefix passes `ts`, every
/// reader sees each of `rows` at version `ts` or newer, with that version's values.
pub fn write_batch(
    store: &RowStore,
    mft: &Mft,
    ts: u64,
    rows: &[u64],
    values: &[f32],
) -> Result<usize, WriteError> {
    let mut landed = 0;
    for &row in rows {
        landed += usize::from(store.write_if_newer(row, ts, values)?);
    }
    mft.finish(ts)?;
    Ok(landed)
}

/// Read `row` into `out` if every batch below `upto` has finished; `None` (and `out` untouched)
/// otherwise.
pub fn read_finished(
    store: &RowStore,
    mft: &Mft,
    upto: u64,
    row: u64,
    out: &mut [f32],
) -> Result<Option<Version>, StoreError> {
    if mft.prefix() < upto {
        return Ok(None);
    }
    store.read(row, out).map(Some)
}

// Real threads: ordo's primitives are loom's under `--cfg ordo_loom` and work only inside a
// `loom::model`, so these tests run only in the ordinary build.
#[cfg(all(test, not(ordo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_newest_batch_wins_every_row_on_real_threads() {
        let (store, mft) = (RowStore::zeros(4, 2), Mft::new(64));
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (store, mft) = (&store, &mft);
                // Thread t writes batches t, t + 4, t + 8, ...: they race on every row.
                s.spawn(move || {
                    for ts in (t..64).step_by(4) {
                        while !mft.admits(ts) {
                            std::hint::spin_loop();
                        }
                        write_batch(store, mft, ts, &[0, 1, 2, 3], &[ts as f32; 2]).unwrap();
                    }
                });
            }
        });
        let mut row = [0.0; 2];
        for r in 0..4 {
            assert_eq!(
                read_finished(&store, &mft, 64, r, &mut row),
                Ok(Some(Version::Written(63)))
            );
            assert_eq!(row, [63.0; 2]);
        }
        assert_eq!(
            write_batch(&store, &mft, 3, &[0], &[0.0; 2]),
            Err(MftError::AlreadyFinished { ts: 3 }.into())
        );
    }
}
