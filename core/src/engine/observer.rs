//! Progress of a running pipeline, for a progress bar or telemetry: an [`Observer`] is told of
//! every stamped and every written batch. Separate from the fault-injection hook of the
//! `testing` feature: an observer cannot change what the pipeline does.

use crate::engine::completion::Completion;
use crate::engine::record::Stamp;
use std::fmt;
use std::sync::Arc;
// Telemetry counters are never part of the protocol, so they are std atomics under every cfg
// (loom does not need to see them).
use std::sync::atomic::{AtomicU64, Ordering};

/// Told of the pipeline's progress. Called from the engine's threads: keep it cheap.
///
/// ```
/// use ordo::engine::{Batch, Engine, EngineConfig, Mode, Progress};
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
/// use ordo::row_store::RowStore;
/// use std::sync::Arc;
/// let progress = Arc::new(Progress::default());
/// let engine = Engine::new(EngineConfig::new(Mode::Oac).observe(progress.clone()))?;
/// let batches = (0..30).map(|i| Batch { id: i, rows: vec![i % 3], data: 1.0 });
/// engine.run(&mut Pull { bias: 0.0 }, &RowStore::zeros(3, 1), batches)?;
/// let now = progress.snapshot();
/// assert_eq!((now.stamped, now.written), (30, 30));
/// assert_eq!(now.staleness.iter().sum::<u64>(), 30);
/// # Ok::<(), ordo::engine::EngineError>(())
/// ```
pub trait Observer: Send + Sync {
    /// The device stamped a batch (`stamp` is its entry of the computation order).
    fn stamped(&self, stamp: &Stamp) {
        let _ = stamp;
    }

    /// The writers are done with a batch.
    fn written(&self, completion: &Completion) {
        let _ = completion;
    }
}

/// Buckets of [`Progress`]'s staleness histogram: a batch's largest version gap repaired by
/// validation ([`Staleness::max_gap`](crate::engine::Staleness::max_gap)) of 0, 1, 2–3, 4–7, … ,
/// ≥ 2^(BUCKETS−2).
pub const STALENESS_BUCKETS: usize = 8;

/// An [`Observer`] that counts: batches stamped and written, rows repaired by validation, and a
/// histogram of per-batch staleness.
#[derive(Debug, Default)]
pub struct Progress {
    stamped: AtomicU64,
    written: AtomicU64,
    repaired: AtomicU64,
    staleness: [AtomicU64; STALENESS_BUCKETS],
}

/// What a [`Progress`] has counted so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgressSnapshot {
    /// Batches stamped by the device.
    pub stamped: u64,
    /// Batches the writers are done with.
    pub written: u64,
    /// Row reads repaired from the validation cache (`Oac`).
    pub repaired: u64,
    /// Batches per staleness bucket (see [`STALENESS_BUCKETS`]).
    pub staleness: [u64; STALENESS_BUCKETS],
}

impl Progress {
    /// The counts now (each counter read on its own: a racy but monotone snapshot).
    pub fn snapshot(&self) -> ProgressSnapshot {
        // Relaxed: independent telemetry counters; nothing is read through them.
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProgressSnapshot {
            stamped: get(&self.stamped),
            written: get(&self.written),
            repaired: get(&self.repaired),
            staleness: std::array::from_fn(|i| get(&self.staleness[i])),
        }
    }
}

impl Observer for Progress {
    fn stamped(&self, stamp: &Stamp) {
        let gap = stamp.staleness.max_gap;
        let bucket =
            if gap == 0 { 0 } else { (gap.ilog2() as usize + 1).min(STALENESS_BUCKETS - 1) };
        // Relaxed: independent telemetry counters.
        self.staleness[bucket].fetch_add(1, Ordering::Relaxed);
        self.repaired.fetch_add(u64::from(stamp.staleness.replaced), Ordering::Relaxed);
        self.stamped.fetch_add(1, Ordering::Relaxed);
    }

    fn written(&self, _: &Completion) {
        // Relaxed: an independent telemetry counter.
        self.written.fetch_add(1, Ordering::Relaxed);
    }
}

/// The configured observer (a `Debug` wrapper for [`EngineConfig`](crate::engine::EngineConfig)).
#[derive(Clone)]
pub(crate) struct ObserverHandle(pub Arc<dyn Observer>);

impl fmt::Debug for ObserverHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer(..)")
    }
}
