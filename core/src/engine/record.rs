//! What a run records (the computation order, per-batch staleness, telemetry) and the
//! sequential replay that is the oracle of every equivalence check.

use super::{Batch, BatchRows, EngineError, Mode, Model, StopCause};
use std::borrow::Borrow;
use std::time::Duration;

/// How stale a batch was when the device validated it (`Oac` only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
///
/// ```
/// use ordo::engine::{Batch, Engine, EngineConfig, Mode, Model, replay_ids, testing::MixModel};
/// use ordo::store::RowStore;
/// let batch = |id: u64| Batch { id, rows: vec![id % 3, 3 + id % 2], data: id as f32 * 0.1 };
/// let store = RowStore::zeros(5, 1);
/// let mut model = MixModel::new(1);
/// let report = Engine::new(EngineConfig::new(Mode::Oac))?.run(&mut model, &store, (0..30).map(batch))?;
/// assert_eq!(report.order.len(), 30);
/// assert!(report.order.iter().all(|s| s.ste <= s.read_prefix)); // evicted only what it had seen
///
/// // Saved with a checkpoint, the ids are enough to replay the run.
/// let saved: Vec<u64> = report.batch_ids();
/// let (mut table, mut fresh) = (vec![0.0; 5], MixModel::new(1));
/// replay_ids(&mut fresh, &mut table, &saved, |id| Some(batch(id)))?;
/// assert_eq!(store.snapshot(), table);
/// assert_eq!(model.dense(), fresh.dense());
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// The mode.
    pub mode: Mode,
    /// The computation order: the batches stamped in the epoch, in stamp order. From `ts = 0`
    /// (`order[ts]` is the batch stamped `ts`), unless the session handed part of the epoch's
    /// order out earlier ([`Session::drain_order`](super::Session::drain_order)): then it
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
/// id, without the run's input `Vec`.
pub fn replay<M: Model>(
    model: &mut M,
    table: &mut [f32],
    batches: &[Batch<M::Data>],
    positions: &[usize],
) -> Result<(), EngineError> {
    for &p in positions {
        let batch = batches.get(p).ok_or(EngineError::Config("replay position out of range"))?;
        replay_one(model, table, p, batch)?;
    }
    Ok(())
}

/// Replay a recorded computation order by batch **id** ([`RunReport::batch_ids`], which a
/// trainer can save with its checkpoint): `batch_of(id)` supplies each batch (e.g. regenerated
/// from a seeded data loader, or looked up in a map), so the run's input `Vec` is not needed.
/// Otherwise as [`replay`]. An id `batch_of` does not know is [`EngineError::UnknownBatch`].
///
/// ```
/// use ordo::engine::{Batch, replay_ids, testing::MixModel};
/// let batch = |id: u64| (id < 4).then(|| Batch { id, rows: vec![id % 2], data: id as f32 });
/// let mut table = vec![0.0; 2];
/// replay_ids(&mut MixModel::new(1), &mut table, &[3, 0, 2, 1], batch)?;
/// assert!(replay_ids(&mut MixModel::new(1), &mut table, &[9], batch).is_err());
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
pub fn replay_ids<M: Model, B: Borrow<Batch<M::Data>>>(
    model: &mut M,
    table: &mut [f32],
    ids: &[u64],
    mut batch_of: impl FnMut(u64) -> Option<B>,
) -> Result<(), EngineError> {
    for (p, &id) in ids.iter().enumerate() {
        let batch = batch_of(id).ok_or(EngineError::UnknownBatch { batch_id: id })?;
        replay_one(model, table, p, batch.borrow())?;
    }
    Ok(())
}

/// Step one batch on `table` (`position` only labels an error).
fn replay_one<M: Model>(
    model: &mut M,
    table: &mut [f32],
    position: usize,
    batch: &Batch<M::Data>,
) -> Result<(), EngineError> {
    let width = model.row_width();
    let rows = table.len() / width.max(1);
    super::validate_batch(position, batch, rows)?;
    let mut values = Vec::with_capacity(batch.rows.len() * width);
    for &r in &batch.rows {
        values.extend_from_slice(&table[r as usize * width..(r as usize + 1) * width]);
    }
    let mut view = BatchRows::new(&batch.rows, width, &mut values).expect("sized above");
    model.step(&batch.data, &mut view).map_err(|source| EngineError::Stopped {
        cause: StopCause::StepFailed { batch_id: batch.id, source },
        stamped: 0,
        order: Vec::new(),
        unwritten: Vec::new(),
    })?;
    for (i, &r) in batch.rows.iter().enumerate() {
        table[r as usize * width..(r as usize + 1) * width]
            .copy_from_slice(&values[i * width..(i + 1) * width]);
    }
    Ok(())
}
