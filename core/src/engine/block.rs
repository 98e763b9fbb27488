//! The rows of one batch after its model step: what the device hands to the writers and inserts
//! into the validation cache (shared, never copied).

use crate::engine::row_buffers::RowBuffers;
use std::sync::Arc;

/// A stepped batch's rows: `ids.len()` rows of `width` floats, row-major, in the order of the
/// batch's row ids. Immutable once built: the writers and the validation cache share it.
/// A block built by the engine gives its values buffer back to the session's free list when it
/// is dropped (after the writers and the cache are done with it).
#[derive(Debug, Clone)]
pub struct RowBlock {
    ids: Vec<u64>,
    width: usize,
    values: Vec<f32>,
    /// The values as read from the store, kept only by `Async(AddDelta)` (writers add the delta).
    original: Option<Vec<f32>>,
    /// Where `values` goes when the block is dropped (`None`: freed).
    recycle: Option<Arc<RowBuffers>>,
}

impl PartialEq for RowBlock {
    fn eq(&self, other: &Self) -> bool {
        (&self.ids, self.width, &self.values, &self.original)
            == (&other.ids, other.width, &other.values, &other.original)
    }
}

impl Drop for RowBlock {
    fn drop(&mut self) {
        if let Some(pool) = self.recycle.take() {
            pool.put(std::mem::take(&mut self.values));
        }
    }
}

impl RowBlock {
    /// A block of `ids.len() × width` values. `None` if the lengths disagree.
    pub fn new(ids: Vec<u64>, width: usize, values: Vec<f32>) -> Option<Self> {
        (values.len() == ids.len() * width).then_some(RowBlock {
            ids,
            width,
            values,
            original: None,
            recycle: None,
        })
    }

    pub(crate) fn recycled_into(mut self, pool: &Arc<RowBuffers>) -> Self {
        self.recycle = Some(pool.clone());
        self
    }

    pub(crate) fn with_original(mut self, original: Option<Vec<f32>>) -> Self {
        self.original = original;
        self
    }

    /// The rows' ids (distinct), in the batch's order.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the block has no rows.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The `i`-th row's values.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.width..(i + 1) * self.width]
    }

    /// All values, row-major.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// The `i`-th row as it was read, if kept (`Async(AddDelta)` only).
    pub(crate) fn original_row(&self, i: usize) -> Option<&[f32]> {
        self.original.as_ref().map(|o| &o[i * self.width..(i + 1) * self.width])
    }
}
