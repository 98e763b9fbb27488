//! What a run records (the computation order, per-batch staleness, telemetry) and the
//! sequential replay that is the oracle of every equivalence check.

use crate::engine::error::{EngineError, StopCause};
use crate::engine::mode::Mode;
use crate::engine::model::{Batch, BatchRows, Model};
use crate::storage::RowStorage;
use crate::store::RowStore;
use std::borrow::Borrow;
use std::time::Duration;

/// How stale a batch was when the device validated it (`Oac` only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Staleness {
    /// Rows replaced from the validation cache: rows for which a newer version than the one read
    /// existed at validation.
    pub replaced: u32,
    /// The largest ts gap between a replacing cached version and the version read (the
    /// pre-run value counts as ts −1).
    pub max_gap: u64,
}

/// One stamped batch of the computation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stamp {
    /// Its stamp: its place in the computation order (epoch-local, `0, 1, 2, …`).
    pub ts: u64,
    /// The batch's id.
    pub batch_id: u64,
    /// Its position in the run's input (what [`replay`] uses, robust to repeated ids).
    pub position: usize,
    /// The finished prefix (`MFT + 1`, run-local) it read the store at; 0 for `Async`.
    pub read_prefix: u64,
    /// Its staleness at validation.
    pub staleness: Staleness,
    /// The STE the device evicted below just before validating it (`Oac`; 0 otherwise).
    pub ste: u64,
    /// Rows in the validation cache right after its insert.
    pub cache_rows: usize,
}

/// What a run did: the computation order and telemetry.
///
/// The order is what a trainer saves to reproduce a run: [`batch_ids`](RunReport::batch_ids)
/// with [`replay_ids`] rebuilds the final state from the initial one without the run's input.
/// With the `serde` feature the report, its [`Stamp`]s and [`Mode`] serialize, so the whole
/// order (with its telemetry) can be saved in any serde format and loaded elsewhere.
///
/// ```
/// use ordo::engine::{Batch, Engine, EngineConfig, Mode, Model, replay_ids};
/// # use ordo::engine::{BatchRows, StepError};
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
/// use ordo::store::RowStore;
/// let batch = |id: u64| Batch { id, rows: vec![id % 3, 3 + id % 2], data: id as f32 * 0.1 };
/// let store = RowStore::zeros(5, 1);
/// let mut model = Pull { bias: 0.0 };
/// let report = Engine::new(EngineConfig::new(Mode::Oac))?.run(&mut model, &store, (0..30).map(batch))?;
/// assert_eq!(report.order.len(), 30);
/// assert!(report.order.iter().all(|s| s.ste <= s.read_prefix)); // evicted only what it had seen
///
/// // Saved with a checkpoint, the ids are enough to replay the run.
/// let saved: Vec<u64> = report.batch_ids();
/// let (mut table, mut fresh) = (vec![0.0; 5], Pull { bias: 0.0 });
/// replay_ids(&mut fresh, &mut table, &saved, |id| Some(batch(id)))?;
/// assert_eq!(store.snapshot(), table);
/// assert_eq!(model.dense(), fresh.dense());
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RunReport {
    /// The mode.
    pub mode: Mode,
    /// The computation order: the batches stamped in the epoch, in stamp order. From `ts = 0`
    /// (`order[ts]` is the batch stamped `ts`), unless the session handed part of the epoch's
    /// order out earlier ([`Session::drain_order`](crate::engine::Session::drain_order)): then it
    /// holds the stamps after the last one handed out (each names its own [`Stamp::ts`]).
    pub order: Vec<Stamp>,
    /// The store version of run-local `ts = 0` (store versions continue across runs).
    pub ts_base: u64,
    /// The validation cache's largest size, in rows.
    pub cache_peak: usize,
    /// Rows validated against the cache.
    pub rows_validated: u64,
    /// Rows replaced by validation.
    pub rows_replaced: u64,
    /// Wall time of the pipeline (threads started → joined).
    pub elapsed: Duration,
}

impl RunReport {
    /// Batch ids in computation order.
    pub fn batch_ids(&self) -> Vec<u64> {
        self.order.iter().map(|s| s.batch_id).collect()
    }

    /// Input positions in computation order (the argument of [`replay`]).
    pub fn positions(&self) -> Vec<usize> {
        self.order.iter().map(|s| s.position).collect()
    }

    /// Fraction of validated rows that the cache replaced (0 when nothing was validated).
    pub fn hit_rate(&self) -> f64 {
        if self.rows_validated == 0 {
            0.0
        } else {
            self.rows_replaced as f64 / self.rows_validated as f64
        }
    }

    /// The largest version gap validation repaired in any batch ([`Staleness::max_gap`]; 0
    /// when no row was replaced).
    pub fn max_gap(&self) -> u64 {
        self.order.iter().map(|s| s.staleness.max_gap).max().unwrap_or(0)
    }

    /// Batches per second of wall time.
    pub fn batches_per_sec(&self) -> f64 {
        self.order.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

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

/// Replay a recorded computation order by batch **id** ([`RunReport::batch_ids`], which a
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
/// use ordo::store::RowStore;
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
