//! What a trainer plugs into the engine: a batch and the model step that consumes it.
//!
//! The engine owns threads, queues and bookkeeping; the trainer owns the math.

/// An error from a model step; it stops the pipeline and is returned to the caller.
pub type StepError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One unit of work: the rows it reads and writes, and the trainer's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<D> {
    /// The caller's id for this batch; the engine records the computation order by it.
    pub id: u64,
    /// Row ids the batch reads and writes: strictly increasing (sorted, no duplicates), each
    /// below the store's row count. The engine rejects a batch that breaks this before it
    /// enters the pipeline.
    pub rows: Vec<u64>,
    /// The trainer's payload (e.g. triples and negative samples).
    pub data: D,
}

/// The rows of one batch as a model step sees them: `ids.len()` rows of `width` floats, in the
/// order of the batch's (sorted) row ids.
#[derive(Debug)]
pub struct BatchRows<'a> {
    ids: &'a [u64],
    width: usize,
    values: &'a mut [f32],
}

impl<'a> BatchRows<'a> {
    /// Wrap `values` (`ids.len() × width`, row-major). `None` if the lengths disagree.
    pub fn new(ids: &'a [u64], width: usize, values: &'a mut [f32]) -> Option<Self> {
        (values.len() == ids.len() * width).then_some(BatchRows { ids, width, values })
    }

    /// The batch's row ids (sorted).
    pub fn ids(&self) -> &[u64] {
        self.ids
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Position of row id `id` in this batch (binary search), if the batch has it.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// The `i`-th row of the batch.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// The `i`-th row of the batch, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.values[i * self.width..(i + 1) * self.width]
    }

    /// All rows, row-major.
    pub fn values(&self) -> &[f32] {
        self.values
    }

    /// All rows, row-major, mutable (e.g. for `par_chunks_mut(width)`).
    pub fn values_mut(&mut self) -> &mut [f32] {
        self.values
    }
}

/// The math of one training step, supplied by the trainer.
///
/// The device stage calls [`step`](Model::step) for one batch at a time, in the computation
/// order; the engine guarantees that the rows it passes hold the newest values of every batch
/// earlier in that order (in `Oac`, `Sync` and `Bounded(1)` modes). For OAC's equivalence
/// guarantee the step must be deterministic: the same data and rows give the same bits
/// (parallelism inside a step is fine if its reductions have a fixed order).
///
/// Dense parameters that every batch touches (e.g. relation embeddings) live in `self` and are
/// updated inside `step`, in order. Per-row optimizer state (e.g. Adagrad sums) is part of the
/// row, so it travels with the row and the guarantee covers it.
///
/// ```
/// use ordo::engine::{BatchRows, Model, StepError};
///
/// /// Adds the batch's scalar to every float of every row it touches.
/// struct AddAll;
///
/// impl Model for AddAll {
///     type Data = f32;
///     fn row_width(&self) -> usize { 2 }
///     fn step(&mut self, data: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
///         rows.values_mut().iter_mut().for_each(|v| *v += data);
///         Ok(())
///     }
/// }
/// let ids = [3, 7];
/// let mut values = [0.0; 4];
/// AddAll.step(&1.5, &mut BatchRows::new(&ids, 2, &mut values).unwrap()).unwrap();
/// assert_eq!(values, [1.5; 4]);
/// ```
pub trait Model: Send {
    /// The batch payload the step consumes.
    type Data: Send + Sync + 'static;

    /// Floats per row (embedding followed by per-row optimizer state); must equal the store's
    /// row width.
    fn row_width(&self) -> usize;

    /// Update the batch's rows in place (and any dense parameters in `self`). An error stops the
    /// pipeline; the engine returns it to the caller.
    fn step(&mut self, data: &Self::Data, rows: &mut BatchRows<'_>) -> Result<(), StepError>;

    /// The dense parameters, flattened, for checkpoints and equivalence checks.
    fn dense(&self) -> Vec<f32> {
        Vec::new()
    }
}
