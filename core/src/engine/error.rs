//! The engine's errors: bad input is rejected before anything runs; a failure inside the
//! pipeline stops it and says which stamped batches are not fully written.

use super::StepError;
use thiserror::Error;

/// What is wrong with a batch (it was rejected before entering the pipeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BatchError {
    /// A row id is not below the store's row count.
    #[error("row {row} is out of range: the store has {rows} rows")]
    RowOutOfRange {
        /// The row id.
        row: u64,
        /// The store's rows.
        rows: usize,
    },
    /// Row ids are not strictly increasing.
    #[error("row ids are not sorted: {prev} then {next}")]
    Unsorted {
        /// The earlier id.
        prev: u64,
        /// The later, smaller id.
        next: u64,
    },
    /// A row id appears twice.
    #[error("row {row} appears twice")]
    Duplicate {
        /// The repeated id.
        row: u64,
    },
}

/// Why a running pipeline stopped.
#[derive(Debug, Error)]
pub enum StopCause {
    /// The model step returned an error (the batch was not stamped).
    #[error("model step failed on batch {batch_id}: {source}")]
    StepFailed {
        /// The batch.
        batch_id: u64,
        /// The model's error.
        source: StepError,
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
    #[error("{stage} failed on batch {batch_id}: {message}")]
    StageFailed {
        /// "reader", "device" or "writer".
        stage: &'static str,
        /// The batch.
        batch_id: u64,
        /// What happened (a store or MFT error, or a panic message).
        message: String,
    },
    /// A test hook asked for a fault.
    #[error("fault injected at {point:?} of batch {batch_id}")]
    Injected {
        /// Where.
        point: super::HookPoint,
        /// The batch.
        batch_id: u64,
    },
}

/// An engine error. The store is untouched when one of the input errors is returned.
#[derive(Debug, Error)]
pub enum EngineError {
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
    Storage(#[source] crate::store::StoreError),
    /// A recorded order names a batch id the replay cannot find.
    #[error("batch {batch_id} of the recorded order is unknown to the replay")]
    UnknownBatch {
        /// The id.
        batch_id: u64,
    },
    /// The session stopped on an earlier failure; [`Session::finish`](super::Session::finish)
    /// returns that failure.
    #[error("the session stopped on an earlier failure; finish() returns it")]
    Halted,
    /// The store's versions are too close to the TID word's limit to stamp this run.
    #[error("the store's timestamps are exhausted")]
    TimestampsExhausted,
    /// The pipeline stopped. Every batch stamped before the stop is fully written, except the
    /// ones listed in `unwritten`.
    #[error("pipeline stopped after stamping {stamped} batches ({} not fully written): {cause}", unwritten.len())]
    Stopped {
        /// The first failure.
        cause: StopCause,
        /// How many batches were stamped (`ts = 0..stamped`).
        stamped: u64,
        /// Input positions of the stamped batches, in computation order (replay them to
        /// reconstruct the store, minus `unwritten`).
        positions: Vec<usize>,
        /// `(ts, batch id)` of stamped batches whose writes did not all land.
        unwritten: Vec<(u64, u64)>,
    },
}
