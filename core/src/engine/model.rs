//! What a trainer plugs into the engine: a batch and the model step that consumes it.
//!
//! The engine owns threads, queues and bookkeeping; the trainer owns the math.

use std::error::Error;
use std::fmt;

/// A step error of any type, for a [`Model`] that does not name its own
/// ([`Model::Error`]`= StepError`): a box around the error, which shows it and chains its
/// [`source`](Error::source) as its own. `"text".into()`, a `String` and a boxed error convert.
/// A model that names its own error type gets it back typed from the engine instead.
pub struct StepError(Box<dyn Error + Send + Sync + 'static>);

impl StepError {
    /// Box `error`.
    pub fn new(error: impl Into<Box<dyn Error + Send + Sync + 'static>>) -> Self {
        StepError(error.into())
    }

    /// The boxed error.
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.0
    }

    /// The error inside.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for StepError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl From<&str> for StepError {
    fn from(message: &str) -> Self {
        StepError(message.into())
    }
}

impl From<String> for StepError {
    fn from(message: String) -> Self {
        StepError(message.into())
    }
}

impl From<Box<dyn Error + Send + Sync + 'static>> for StepError {
    fn from(error: Box<dyn Error + Send + Sync + 'static>) -> Self {
        StepError(error)
    }
}

/// One unit of work: the rows it reads and writes, and the trainer's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<D> {
    /// The caller's id for this batch; the engine records the computation order by it.
    pub id: u64,
    /// Row ids the batch reads and writes: distinct, each below the store's row count, in the
    /// order the step wants its rows (usually increasing). The engine rejects a batch that
    /// breaks this before it enters the pipeline.
    pub rows: Vec<u64>,
    /// The trainer's payload (e.g. triples and negative samples).
    pub data: D,
}

/// The rows of one batch as a model step sees them: `ids.len()` rows of `width` floats, in the
/// order of the batch's row ids.
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

    /// The batch's row ids, in the batch's order.
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

    /// Position of row id `id` in this batch, if the batch has it: a binary search, which
    /// finds every row of an increasing batch, then a scan for a batch in another order.
    ///
    /// ```
    /// use ordo::engine::BatchRows;
    /// let (ids, mut values) = ([9, 2, 5], [0.0; 3]);
    /// let rows = BatchRows::new(&ids, 1, &mut values).unwrap();
    /// assert_eq!((rows.position(2), rows.position(9), rows.position(4)), (Some(1), Some(0), None));
    /// ```
    pub fn position(&self, id: u64) -> Option<usize> {
        match self.ids.binary_search(&id) {
            Ok(i) => Some(i),
            Err(_) => self.ids.iter().position(|&r| r == id),
        }
    }

    /// The `i`-th row of the batch.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// The `i`-th row of the batch, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.values[i * self.width..(i + 1) * self.width]
    }

    /// Rows `i` and `j` of the batch, both mutable at once (e.g. the user and the item row of
    /// one rating). `None` when `i == j` (one row cannot be lent twice) or either is not below
    /// [`len`](BatchRows::len); never panics.
    ///
    /// ```
    /// use ordo::engine::BatchRows;
    /// let (ids, mut values) = ([2, 5, 9], [1.0, 2.0, 3.0]);
    /// let mut rows = BatchRows::new(&ids, 1, &mut values).unwrap();
    /// let (a, b) = rows.pair_mut(2, 0).unwrap();
    /// std::mem::swap(&mut a[0], &mut b[0]);
    /// assert_eq!(rows.values(), &[3.0, 2.0, 1.0]);
    /// assert!(rows.pair_mut(1, 1).is_none());
    /// assert!(rows.pair_mut(0, 3).is_none());
    /// ```
    pub fn pair_mut(&mut self, i: usize, j: usize) -> Option<(&mut [f32], &mut [f32])> {
        let (n, w) = (self.len(), self.width);
        if i == j || i >= n || j >= n {
            return None;
        }
        let (lo, hi) = (i.min(j), i.max(j));
        let (head, tail) = self.values.split_at_mut(hi * w);
        let (low, high) = (&mut head[lo * w..(lo + 1) * w], &mut tail[..w]);
        Some(if i < j { (low, high) } else { (high, low) })
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
/// use ordo::engine::{BatchRows, Model};
///
/// /// The model's own step error: the engine hands it back typed.
/// #[derive(Debug, PartialEq)]
/// struct NotFinite;
/// impl std::fmt::Display for NotFinite {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("not finite") }
/// }
/// impl std::error::Error for NotFinite {}
///
/// /// Adds the batch's scalar to every float of every row it touches.
/// struct AddAll;
///
/// impl Model for AddAll {
///     type Data = f32;
///     type Error = NotFinite;
///     fn row_width(&self) -> usize { 2 }
///     fn step(&mut self, data: &f32, rows: &mut BatchRows<'_>) -> Result<(), NotFinite> {
///         if !data.is_finite() {
///             return Err(NotFinite);
///         }
///         rows.values_mut().iter_mut().for_each(|v| *v += data);
///         Ok(())
///     }
/// }
/// let ids = [3, 7];
/// let mut values = [0.0; 4];
/// AddAll.step(&1.5, &mut BatchRows::new(&ids, 2, &mut values).unwrap()).unwrap();
/// assert_eq!(values, [1.5; 4]);
/// assert_eq!(AddAll.step(&f32::NAN, &mut BatchRows::new(&ids, 2, &mut values).unwrap()), Err(NotFinite));
/// ```
pub trait Model: Send {
    /// The batch payload the step consumes.
    type Data: Send + Sync + 'static;

    /// What a failed step returns; the engine hands it back to the caller as this type
    /// ([`StopCause::StepFailed`](crate::engine::StopCause::StepFailed) inside
    /// [`EngineError`](crate::engine::EngineError)`<Self::Error>`), so the caller matches it
    /// without a downcast. A step that cannot fail names [`std::convert::Infallible`]; one that
    /// returns errors of several types names [`StepError`].
    type Error: Error + Send + Sync + 'static;

    /// Floats per row (embedding followed by per-row optimizer state); must equal the store's
    /// row width.
    fn row_width(&self) -> usize;

    /// Update the batch's rows in place (and any dense parameters in `self`). An error stops the
    /// pipeline; the engine returns it to the caller.
    fn step(&mut self, data: &Self::Data, rows: &mut BatchRows<'_>) -> Result<(), Self::Error>;

    /// The dense parameters, flattened, for checkpoints and equivalence checks.
    fn dense(&self) -> Vec<f32> {
        Vec::new()
    }
}
