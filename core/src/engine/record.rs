//! What a run records: the computation order ([`Stamp`]s), per-batch staleness and telemetry
//! ([`RunReport`]). Its sequential replay is [`replay`](crate::engine::replay()).

use crate::engine::mode::Mode;
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
    /// Its position in the run's input (what [`replay`](crate::engine::replay) uses, robust to
    /// repeated ids).
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
/// with [`replay_ids`](crate::engine::replay_ids) rebuilds the final state from the initial one
/// without the run's input.
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
/// use ordo::row_store::RowStore;
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

    /// Input positions in computation order (the argument of [`replay`](crate::engine::replay)).
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
