//! The OAC pipeline engine (paper 000): parallel readers, one device stage that fixes the
//! computation order, parallel writers; modes `Sync`, `Async`, `Bounded(k)` and `Oac` behind one
//! API.
//!
//! ```text
//! readers (parallel):  wait for the read-ahead → register in Outstanding (announce MFT)
//!     → read rows + versions → queue
//! device (one at a time, in submission order = computation order):
//!     take the next position (early arrivals wait) → admission (Mft::admits)
//!     → evict below STE → validate → Model::step → stamp ts
//!     → cache insert → queue
//! writers (parallel):  write_if_newer each row → Mft::finish(ts) → deregister
//! ```
//!
//! **One device interface.** Every device is a [`DeviceQueue`]: the device stage stamps and
//! submits batches in order and collects them later, up to [`DeviceQueue::depth`] at a time,
//! and the queue validates and inserts in submission order. A device that overlaps transfers
//! with compute (a GPU pipeline) holds several; the synchronous in-thread step, the default
//! [`CpuDevice`], is the depth-1 case. [`Engine::session`] (scoped) and [`Engine::start`]
//! (owned) take any device; [`Engine::run`] is one epoch of a session on the [`CpuDevice`]. The
//! claim below holds at every depth.
//!
//! **The order:** in every mode the device takes the batches in submission order, holding a
//! batch that a reader finished early until every batch submitted before it was taken (the
//! invariant and why it cannot deadlock: `engine/arrivals.rs`). So the recorded computation
//! order ([`RunReport::positions`]) is the identity, `0, 1, 2, …`, however the readers race.
//!
//! **The claim:** in `Oac` (and `Sync`, `Bounded(1)`) the final store and dense parameters equal,
//! bit for bit, [`replay`] of the recorded computation order on the initial state, for a
//! deterministic model step: the sequential run of the batches as submitted, so an `Oac` run
//! equals the `Sync` run of the same input. `Async` and `Bounded(k > 1)` promise nothing about
//! the values (their order is the submission order too).
//!
//! **Timestamps.** Inside a run, batches are stamped `ts = 0, 1, 2, …` (run-local: the MFT, the
//! STE, the validation cache and the report use these); the store receives `ts_base + ts`, where
//! `ts_base` is one past the newest version in the store when the run starts, so one store can be
//! trained for many epochs.
//!
//! # Plugging in a model
//!
//! ```
//! use ordo::engine::{Batch, BatchRows, Engine, EngineConfig, Mode, Model, StepError, replay};
//! use ordo::row_store::RowStore;
//!
//! /// Pull every row of the batch towards the batch's target; a dense bias counts the steps.
//! struct Pull { bias: f32 }
//! impl Model for Pull {
//!     type Data = f32;
//!     type Error = StepError;
//!     fn row_width(&self) -> usize { 2 }
//!     fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
//!         rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v) + self.bias);
//!         self.bias += 0.01;
//!         Ok(())
//!     }
//!     fn dense(&self) -> Vec<f32> { vec![self.bias] }
//! }
//!
//! let store = RowStore::zeros(100, 2);
//! let batches: Vec<Batch<f32>> =
//!     (0..50).map(|i| Batch { id: i, rows: vec![i % 7, 10 + i % 3, 50 + i], data: i as f32 }).collect();
//! let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
//! let mut model = Pull { bias: 0.0 };
//! let report = engine.run(&mut model, &store, batches.clone())?;
//!
//! // The recorded order is the submission order; the same batches, one by one, in that order:
//! // bit-identical.
//! assert!(report.positions().into_iter().eq(0..50));
//! let (mut table, mut fresh) = (vec![0.0; 200], Pull { bias: 0.0 });
//! replay(&mut fresh, &mut table, &batches, &report.positions())?;
//! assert_eq!(store.snapshot(), table);
//! assert_eq!(model.dense(), fresh.dense());
//! # Ok::<(), ordo::engine::EngineError>(())
//! ```

mod arrivals;
mod block;
mod cache_index;
#[cfg(feature = "testing")]
mod check;
mod completion;
mod config;
mod context;
mod cpu_device;
mod device_queue;
mod driver;
mod error;
mod hook;
mod mode;
pub mod model;
mod observer;
mod owned_session;
mod pipeline;
mod queue_cache;
mod reader;
mod record;
mod replay;
mod row_buffers;
mod sequencer;
mod session;
mod stage_loops;
mod stop;
pub mod validation_cache;
mod writer;

/// The pipeline on loom's or shuttle's threads, for ordo's own model-checking tests
/// (`core/tests/loom_engine.rs`, `core/tests/shuttle_engine.rs`). Integration tests reach only
/// public items, so it is public; but it exists only under ordo's private checker cfgs
/// (`ordo_loom`, `ordo_shuttle`, which a downstream crate never sets) *and* feature `testing`,
/// and is hidden from the docs, so the documented API is the same under every cfg.
#[cfg(all(feature = "testing", any(ordo_loom, ordo_shuttle)))]
#[doc(hidden)]
pub use check::model_harness;
#[cfg(feature = "testing")]
pub use check::{simulation, testing};

pub use block::RowBlock;
#[cfg(feature = "testing")]
pub use check::deferred_device::DeferredCpuDevice;
pub use completion::Completion;
pub use config::EngineConfig;
pub use cpu_device::CpuDevice;
pub use device_queue::{DeviceQueue, Submission, SubmitError, host_step};
pub use error::{BatchError, DeviceError, EngineError, Stage, StageError, StopCause};
pub use hook::HookPoint;
/// Fault injection (delays and failures at each [`HookPoint`]) is for tests only: its types are
/// public with the `testing` feature (crate-private in `hook` otherwise).
#[cfg(feature = "testing")]
pub use hook::{HookAction, StageHook};
pub use mode::{AsyncWrite, Mode};
pub use model::{Batch, BatchRows, Model, StepError};
pub use observer::{Observer, Progress, ProgressSnapshot, STALENESS_BUCKETS};
pub use owned_session::{Closed, OwnedSession};
pub use pipeline::Engine;
pub use queue_cache::QueueCache;
pub use record::{RunReport, Staleness, Stamp};
pub use replay::{replay, replay_ids, replay_into};
pub use session::{Session, TrySubmitError};

use crate::storage::RowStorage;

/// Check one batch against a store of `rows` rows: at least one row, ids in range and distinct.
/// The error is [`EngineError::InvalidBatch`], as the engine error of any model (`E`).
///
/// The ids may come in any order: a model lays its rows out as its step reads them (the KGE
/// trainer puts each chunk's negatives side by side). Strictly increasing ids, the usual
/// case, are checked in one pass; any other order is checked for repeats on a sorted copy.
pub fn validate_batch<D, E>(
    position: usize,
    batch: &Batch<D>,
    rows: usize,
) -> Result<(), EngineError<E>> {
    let bad = |kind| Err(EngineError::InvalidBatch { position, batch_id: batch.id, kind });
    if batch.rows.is_empty() {
        return bad(BatchError::Empty);
    }
    if let Some(&row) = batch.rows.iter().find(|&&r| r >= rows as u64) {
        return bad(BatchError::RowOutOfRange { row, rows });
    }
    if batch.rows.windows(2).all(|w| w[0] < w[1]) {
        return Ok(());
    }
    let mut sorted = batch.rows.clone();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => bad(BatchError::Duplicate { row: w[0] }),
        None => Ok(()),
    }
}

/// Collect and check every batch before anything runs.
fn prepare<M: Model, S: RowStorage + ?Sized>(
    model: &M,
    store: &S,
    batches: impl IntoIterator<Item = Batch<M::Data>>,
) -> Result<Vec<Batch<M::Data>>, EngineError<M::Error>> {
    if model.row_width() != store.width() {
        return Err(EngineError::WidthMismatch { model: model.row_width(), store: store.width() });
    }
    let batches: Vec<_> = batches.into_iter().collect();
    for (p, b) in batches.iter().enumerate() {
        validate_batch(p, b, store.rows())?;
    }
    Ok(batches)
}
