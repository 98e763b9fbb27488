//! The engine's errors: bad input is rejected before anything runs; a failure inside the
//! pipeline stops it and says which stamped batches are not fully written.

use crate::engine::model::StepError;
use crate::mft::MftError;
use crate::row_store::StoreError;
use std::panic::{AssertUnwindSafe, catch_unwind};
use thiserror::Error;

/// An error from a [`DeviceQueue`](crate::engine::DeviceQueue) (e.g. a CUDA failure): any error
/// type, kept whole so [`std::error::Error::source`] chains reach its cause.
pub type DeviceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A stage of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Stage {
    /// A reader (registration and row reads).
    #[error("reader")]
    Reader,
    /// The device stage (validation, cache, and the model step).
    #[error("device")]
    Device,
    /// A writer (row writes, MFT finish).
    #[error("writer")]
    Writer,
}

/// What went wrong inside a pipeline stage outside the model step.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StageError {
    /// The store refused a read or write.
    #[error("store operation failed")]
    Store(#[from] StoreError),
    /// The MFT refused to finish a ts.
    #[error("MFT operation failed")]
    Mft(#[from] MftError),
    /// The device stage failed (eviction, validation or cache insert).
    #[error("device stage failed")]
    Device(#[source] DeviceError),
    /// The stage panicked.
    #[error("panicked: {0}")]
    Panicked(String),
    /// Every writer thread is gone.
    #[error("no writer left")]
    NoWriter,
    /// The device was handed the batch at `position` to run inline while the batch at `next`
    /// was still to come: the session broke the submission order it promises (an engine bug,
    /// never the input's). Reported instead of waiting forever for `next`.
    #[error("the device was handed position {position} inline before position {next}")]
    OutOfTurn {
        /// The inline batch's position in the epoch.
        position: usize,
        /// The position the device takes next.
        next: usize,
    },
}

/// What is wrong with a batch (it was rejected before entering the pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The batch touches no row. A step on no rows could only change the dense parameters, and
    /// an empty batch is almost always a loader's bug (an exhausted shard, a filter that kept
    /// nothing), so it is refused like any other malformed batch.
    #[error("the batch has no rows")]
    Empty,
    /// A row id is not below the store's row count.
    #[error("row {row} is out of range: the store has {rows} rows")]
    RowOutOfRange {
        /// The row id.
        row: u64,
        /// The store's rows.
        rows: usize,
    },
    /// A row id appears twice.
    #[error("row {row} appears twice")]
    Duplicate {
        /// The repeated id.
        row: u64,
    },
}

/// Why a running pipeline stopped. `E` is the model's step error
/// ([`Model::Error`](crate::engine::Model::Error)).
///
/// Each cause's `Display` names what failed and on which batch; the error underneath (the
/// model's, the store's, the device's) is its [`source`](std::error::Error::source), never
/// printed twice, so a reporter that walks the `source()` chain prints each cause once.
#[derive(Debug, Error)]
pub enum StopCause<E = StepError> {
    /// The model step returned an error (the batch was not stamped).
    #[error("model step failed on batch {batch_id}")]
    StepFailed {
        /// The batch.
        batch_id: u64,
        /// The model's error, as its step returned it.
        source: E,
    },
    /// The model step panicked (the batch was not stamped).
    #[error("model step panicked on batch {batch_id}: {message}")]
    StepPanicked {
        /// The batch.
        batch_id: u64,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// A pipeline stage (reader, device, writer) failed outside the model step.
    #[error("{stage} failed on batch {batch_id}")]
    StageFailed {
        /// Which stage.
        stage: Stage,
        /// The batch it failed on (every stage failure happens on one).
        batch_id: u64,
        /// What happened.
        source: StageError,
    },
    /// A test hook asked for a fault.
    #[error("fault injected at {point:?} of batch {batch_id}")]
    Injected {
        /// Where.
        point: crate::engine::hook::HookPoint,
        /// The batch.
        batch_id: u64,
    },
}

/// An engine error. The store is untouched when one of the input errors is returned.
///
/// `E` is the model's step error ([`Model::Error`](crate::engine::Model::Error)): a failed step
/// comes back as `Stopped { cause: StopCause::StepFailed { source, .. }, .. }` with `source: E`, so
/// the caller matches its own error type. Calls that run no model (e.g.
/// [`Engine::new`](crate::engine::Engine::new)) return the default `EngineError<StepError>`; see
/// [`EngineError::map_step`] to join them.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EngineError<E = StepError> {
    /// A bad configuration.
    #[error("bad engine configuration: {0}")]
    Config(&'static str),
    /// The model's row width is not the store's.
    #[error("the model's rows are {model} floats wide but the store's are {store}")]
    WidthMismatch {
        /// `Model::row_width`.
        model: usize,
        /// `RowStore::width`.
        store: usize,
    },
    /// A malformed batch.
    #[error("batch {batch_id} (position {position}) rejected: {kind}")]
    InvalidBatch {
        /// Its position in the input.
        position: usize,
        /// Its id.
        batch_id: u64,
        /// What is wrong.
        kind: BatchError,
    },
    /// The store refused an operation before the run started (e.g. reading its versions).
    #[error("the store failed: {0}")]
    Storage(#[source] crate::row_store::StoreError),
    /// A recorded order names a batch id the replay cannot find.
    #[error("batch {batch_id} of the recorded order is unknown to the replay")]
    UnknownBatch {
        /// The id.
        batch_id: u64,
    },
    /// The session stopped on an earlier failure
    /// ([`Session::finish`](crate::engine::Session::finish) returns that failure), or was closed
    /// ([`Session::close`](crate::engine::Session::close)).
    #[error("the session stopped on an earlier failure; finish() returns it")]
    Halted,
    /// The store's versions are too close to the TID word's limit to stamp this run.
    #[error("the store's timestamps are exhausted")]
    TimestampsExhausted,
    /// The device stage's reset failed when the session started (nothing ran).
    #[error("the device stage's reset failed")]
    DeviceReset(#[source] DeviceError),
    /// The pipeline stopped.
    ///
    /// **What the store holds:** in `Oac`, `Sync` and `Bounded(1)`, exactly the first
    /// `prefix` batches of `order`: the store equals [`replay`](crate::engine::replay) of
    /// `order[..prefix]` from the epoch's initial state, whatever failed (a write, a step, the
    /// device), because writers hold back every batch after one whose writes did not all land
    /// and roll back the rows a failed batch wrote (the invariant on the engine's writer).
    /// Every batch of `unwritten` is at `ts ≥ prefix`, so [`applied`](EngineError::applied) is
    /// `order[..prefix]`. `prefix` is `None` in `Async` and `Bounded(k > 1)` (no order is
    /// claimed), or if a roll-back write failed too, or a failed batch had landed rows it kept
    /// no copies of (its storage promised writes that fail only on bad arguments, see
    /// [`RowStorage::write_fails_only_on_bad_arguments`](crate::storage::RowStorage::write_fails_only_on_bad_arguments),
    /// and failed anyway); then a batch of `unwritten` may be partly written, and each row still
    /// holds one whole version. The model's dense parameters include
    /// every stamped batch.
    #[error("pipeline stopped after stamping {stamped} batches ({} not fully written)", unwritten.len())]
    #[non_exhaustive]
    Stopped {
        /// The first failure.
        #[source]
        cause: StopCause<E>,
        /// How many batches were stamped (`ts = 0..stamped`, epoch-local).
        stamped: u64,
        /// Ids of the stamped batches, in computation order: `order[ts]`, or, if the session
        /// handed part of the epoch's order out
        /// ([`Session::drain_order`](crate::engine::Session::drain_order)), the batches stamped
        /// `stamped - order.len()..stamped`.
        order: Vec<u64>,
        /// `(ts, batch id)` of stamped batches whose writes did not all land.
        unwritten: Vec<(u64, u64)>,
        /// How many of the epoch's stamped batches the store holds, counted from its first
        /// (`ts < prefix`): it equals the replay of `order[..prefix]`, or, if the session handed
        /// `d = stamped - order.len()` stamps out, of those followed by `order[..prefix - d]`
        /// (`None`: no prefix; see above).
        prefix: Option<u64>,
    },
}

impl<E> StopCause<E> {
    /// The same cause with its step error mapped by `f`.
    pub fn map_step<F>(self, f: impl FnOnce(E) -> F) -> StopCause<F> {
        match self {
            StopCause::StepFailed { batch_id, source } => {
                StopCause::StepFailed { batch_id, source: f(source) }
            }
            StopCause::StepPanicked { batch_id, message } => {
                StopCause::StepPanicked { batch_id, message }
            }
            StopCause::StageFailed { stage, batch_id, source } => {
                StopCause::StageFailed { stage, batch_id, source }
            }
            StopCause::Injected { point, batch_id } => StopCause::Injected { point, batch_id },
        }
    }
}

impl<E> EngineError<E> {
    /// The same error with its step error mapped by `f` (e.g. `EngineError<MyError>` into the
    /// `EngineError<StepError>` of a call that runs no model, with `|e| StepError::new(e)`).
    pub fn map_step<F>(self, f: impl FnOnce(E) -> F) -> EngineError<F> {
        use EngineError::*;
        match self {
            Config(what) => Config(what),
            WidthMismatch { model, store } => WidthMismatch { model, store },
            InvalidBatch { position, batch_id, kind } => InvalidBatch { position, batch_id, kind },
            Storage(e) => Storage(e),
            UnknownBatch { batch_id } => UnknownBatch { batch_id },
            Halted => Halted,
            TimestampsExhausted => TimestampsExhausted,
            DeviceReset(e) => DeviceReset(e),
            Stopped { cause, stamped, order, unwritten, prefix } => {
                Stopped { cause: cause.map_step(f), stamped, order, unwritten, prefix }
            }
        }
    }

    /// For [`EngineError::Stopped`]: ids of the stamped batches of `order` whose every write
    /// landed, in computation order. `None` for other errors (nothing ran).
    pub fn applied(&self) -> Option<Vec<u64>> {
        let EngineError::Stopped { order, unwritten, stamped, .. } = self else { return None };
        // `order` is the tail of the epoch's stamps that was not handed out before the stop.
        let first = stamped - order.len() as u64;
        Some(
            order
                .iter()
                .enumerate()
                .filter(|&(i, _)| !unwritten.iter().any(|&(u, _)| u == first + i as u64))
                .map(|(_, &id)| id)
                .collect(),
        )
    }
}

/// Run `f`, turning a panic into a stage failure.
pub(crate) fn guarded<T, E>(
    stage: Stage,
    batch_id: u64,
    f: impl FnOnce() -> Result<T, StopCause<E>>,
) -> Result<T, StopCause<E>> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(StopCause::StageFailed {
            stage,
            batch_id,
            source: StageError::Panicked(panic_message(&*p)),
        })
    })
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("the learning rate went to NaN")]
    struct Diverged;

    /// Each `Display` along a stop's `source()` chain: what a reporter that walks it prints.
    fn chain(err: &dyn std::error::Error) -> Vec<String> {
        std::iter::successors(Some(err), |e| e.source()).map(|e| e.to_string()).collect()
    }

    /// A failed step's error is printed once: the stop names the batch, the cause is its
    /// source, and no level repeats the text of the level under it.
    #[test]
    fn a_failed_step_prints_its_cause_once_along_the_chain() {
        let err: EngineError<Diverged> = EngineError::Stopped {
            cause: StopCause::StepFailed { batch_id: 7, source: Diverged },
            stamped: 3,
            order: vec![1, 2, 3],
            unwritten: Vec::new(),
            prefix: Some(3),
        };
        let lines = chain(&err);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[1].contains("batch 7"), "{lines:?}");
        assert_eq!(lines[2], Diverged.to_string());
        for (i, upper) in lines.iter().enumerate() {
            for lower in &lines[i + 1..] {
                assert!(!upper.contains(lower.as_str()), "{upper:?} repeats {lower:?}");
            }
        }
    }
}
