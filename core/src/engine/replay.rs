//! The sequential replay of a recorded computation order, the oracle of every equivalence
//! check: each batch stepped one by one, in order, on a table or any [`RowStorage`].

use crate::engine::error::{EngineError, StopCause};
use crate::engine::model::{Batch, BatchRows, Model};
use crate::row_store::RowStore;
use crate::storage::RowStorage;
use std::borrow::Borrow;

/// Run `batches[positions[0]]`, `batches[positions[1]]`, … one by one on `table` (row-major,
/// `rows × width`, the store's initial snapshot) with `model` (a fresh model for the dense
/// parameters): the synchronous execution of a recorded computation order. `table` ends as the
/// sequential result; the dense result is `model.dense()`. See [`replay_ids`] to replay by batch
/// id, without the run's input `Vec`, and [`replay_into`] to replay onto any [`RowStorage`].
pub fn replay<M: Model>(
    model: &mut M,
    table: &mut [f32],
    batches: &[Batch<M::Data>],
    positions: &[usize],
) -> Result<(), EngineError<M::Error>> {
    on_table(table, model.row_width(), |store| {
        replay_each(model, store, positions.len(), |i| {
            batches.get(positions[i]).ok_or(EngineError::Config("replay position out of range"))
        })
    })
}

/// Replay a recorded computation order by batch **id** ([`RunReport::batch_ids`](crate::engine::RunReport::batch_ids), which a
/// trainer can save with its checkpoint): `batch_of(id)` supplies each batch (e.g. regenerated
/// from a seeded data loader, or looked up in a map), so the run's input `Vec` is not needed.
/// Otherwise as [`replay`]. An id `batch_of` does not know is [`EngineError::UnknownBatch`].
///
/// ```
/// use ordo::engine::{Batch, replay_ids};
/// # use ordo::engine::{BatchRows, Model, StepError};
/// # /// Pull every row of the batch towards the batch's target; a dense bias counts the steps.
/// # struct Pull { bias: f32 }
/// # impl Model for Pull {
/// #     type Data = f32;
/// #     type Error = StepError;
/// #     fn row_width(&self) -> usize { 1 }
/// #     fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
/// #         rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v) + self.bias);
/// #         self.bias += 0.01;
/// #         Ok(())
/// #     }
/// #     fn dense(&self) -> Vec<f32> { vec![self.bias] }
/// # }
/// let batch = |id: u64| (id < 4).then(|| Batch { id, rows: vec![id % 2], data: id as f32 });
/// let mut table = vec![0.0; 2];
/// replay_ids(&mut Pull { bias: 0.0 }, &mut table, &[3, 0, 2, 1], batch)?;
/// assert!(replay_ids(&mut Pull { bias: 0.0 }, &mut table, &[9], batch).is_err());
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
pub fn replay_ids<M: Model, B: Borrow<Batch<M::Data>>>(
    model: &mut M,
    table: &mut [f32],
    ids: &[u64],
    batch_of: impl FnMut(u64) -> Option<B>,
) -> Result<(), EngineError<M::Error>> {
    on_table(table, model.row_width(), |store| replay_into(model, store, ids, batch_of))
}

/// [`replay_ids`] onto any [`RowStorage`] (e.g. the trainer's own, over several tables or a
/// file): each batch's rows are [`read`](RowStorage::read), stepped, and written back with
/// [`write_if_newer`](RowStorage::write_if_newer) at versions `v, v + 1, …` from the storage's
/// [`next_version`](RowStorage::next_version) `v`, one batch after the other. A storage failure
/// is [`EngineError::Storage`]; a failed step is [`EngineError::Stopped`] with the batches before
/// it applied (its `prefix`).
///
/// ```
/// use ordo::engine::{Batch, BatchRows, Model, replay_into};
/// use ordo::storage::RowStorage;
/// use ordo::row_store::RowStore;
///
/// struct Double;
/// impl Model for Double {
///     type Data = ();
///     type Error = std::convert::Infallible;
///     fn row_width(&self) -> usize { 1 }
///     fn step(&mut self, _: &(), rows: &mut BatchRows<'_>) -> Result<(), Self::Error> {
///         rows.values_mut().iter_mut().for_each(|v| *v = 2.0 * *v + 1.0);
///         Ok(())
///     }
/// }
/// let store = RowStore::zeros(3, 1);
/// let batch = |id: u64| Some(Batch { id, rows: vec![id % 3], data: () });
/// replay_into(&mut Double, &store, &[0, 3, 1], batch)?;
/// assert_eq!(store.snapshot(), vec![3.0, 1.0, 0.0]);
/// # Ok::<(), ordo::engine::EngineError<std::convert::Infallible>>(())
/// ```
pub fn replay_into<M: Model, S: RowStorage + ?Sized, B: Borrow<Batch<M::Data>>>(
    model: &mut M,
    storage: &S,
    ids: &[u64],
    mut batch_of: impl FnMut(u64) -> Option<B>,
) -> Result<(), EngineError<M::Error>> {
    replay_each(model, storage, ids.len(), |i| {
        batch_of(ids[i]).ok_or(EngineError::UnknownBatch { batch_id: ids[i] })
    })
}

/// The flat table as a [`RowStore`] for the replay `f`, copied back after it (also on error).
fn on_table<E>(
    table: &mut [f32],
    width: usize,
    f: impl FnOnce(&RowStore) -> Result<(), EngineError<E>>,
) -> Result<(), EngineError<E>> {
    let rows = table.len().checked_div(width).unwrap_or(0);
    let store = RowStore::from_values(rows, width, table).map_err(EngineError::Storage)?;
    let out = f(&store);
    table.copy_from_slice(&store.snapshot());
    out
}

/// Step the `n` batches `batch(0)`, `batch(1)`, … one by one on `storage`.
fn replay_each<M: Model, S: RowStorage + ?Sized, B: Borrow<Batch<M::Data>>>(
    model: &mut M,
    storage: &S,
    n: usize,
    mut batch: impl FnMut(usize) -> Result<B, EngineError<M::Error>>,
) -> Result<(), EngineError<M::Error>> {
    let width = model.row_width();
    if width != storage.width() {
        return Err(EngineError::WidthMismatch { model: width, store: storage.width() });
    }
    let base = storage.next_version().map_err(EngineError::Storage)?;
    let mut values = Vec::new();
    let mut done = Vec::with_capacity(n);
    for p in 0..n {
        let batch = batch(p)?;
        let batch = batch.borrow();
        crate::engine::validate_batch(p, batch, storage.rows())?;
        values.clear();
        values.resize(batch.rows.len() * width, 0.0);
        for (&r, out) in batch.rows.iter().zip(values.chunks_mut(width.max(1))) {
            storage.read(r, out).map_err(EngineError::Storage)?;
        }
        let mut view = BatchRows::new(&batch.rows, width, &mut values).expect("sized above");
        model.step(&batch.data, &mut view).map_err(|source| EngineError::Stopped {
            cause: StopCause::StepFailed { batch_id: batch.id, source },
            stamped: p as u64,
            order: done.clone(),
            unwritten: Vec::new(),
            prefix: Some(p as u64),
        })?;
        for (&r, row) in batch.rows.iter().zip(values.chunks(width.max(1))) {
            storage.write_if_newer(r, base + p as u64, row).map_err(EngineError::Storage)?;
        }
        done.push(batch.id);
    }
    Ok(())
}
