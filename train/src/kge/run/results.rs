//! What a run hands back: its per-epoch records, test metrics, computation orders and final
//! parameters.

use super::mode::TrainMode;
use crate::kge::eval::ranking::Metrics;
use ordo::row_store::RowStore;

/// One epoch's record.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EpochStats {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Training wall time up to the end of this epoch, seconds (evaluation excluded).
    pub wall_s: f64,
    /// This epoch's training wall time, seconds.
    pub epoch_s: f64,
    /// Mean loss per positive over the epoch.
    pub loss: f64,
    /// Filtered valid metrics after the epoch.
    pub valid: Metrics,
}

/// The outcome of a run.
#[derive(Debug)]
pub struct RunResult {
    /// The mode that ran.
    pub mode: TrainMode,
    /// Per-epoch records.
    pub epochs: Vec<EpochStats>,
    /// Filtered test metrics of the final embeddings.
    pub test: Metrics,
    /// The computation order of each epoch (batch ids in the order the device stepped them).
    pub order: Vec<Vec<u64>>,
    /// Final entity rows (embedding, then optimizer state): the store the run trained, handed
    /// over as it is rather than copied out (on a large graph a copy doubles the peak memory);
    /// [`entity_rows`](Self::entity_rows) copies it when a plain table is wanted.
    pub entities: RowStore,
    /// Floats per entity row.
    pub row_width: usize,
    /// Final relation parameters, `relation rows × relation_dim`.
    pub relations: Vec<f32>,
    /// Floats per relation row.
    pub relation_dim: usize,
    /// Final dense state of the model (relations and their Adagrad sums).
    pub dense: Vec<f32>,
    /// Rows that OAC's validation replaced with a newer value from its cache (stale reads it
    /// repaired), over all epochs; 0 in other modes and in a replay.
    pub rows_replaced: u64,
}

impl RunResult {
    /// Training triples per second over the whole run.
    pub fn triples_per_s(&self, n_train: usize) -> f64 {
        let wall = self.epochs.last().map_or(0.0, |e| e.wall_s);
        (n_train * self.epochs.len()) as f64 / wall.max(1e-9)
    }

    /// Best valid MRR over the epochs.
    pub fn best_valid_mrr(&self) -> f64 {
        self.epochs.iter().map(|e| e.valid.mrr).fold(0.0, f64::max)
    }

    /// The first epoch whose valid MRR reaches `target`, if any.
    pub fn first_reaching(&self, target: f64) -> Option<&EpochStats> {
        self.epochs.iter().find(|e| e.valid.mrr >= target)
    }

    /// Final entity rows as one table, `entities × row_width`, row-major (a copy).
    pub fn entity_rows(&self) -> Vec<f32> {
        self.entities.snapshot()
    }

    /// Entity embeddings only, `entities × dim` (read row by row from the store).
    pub fn entity_embeddings(&self, dim: usize) -> Vec<f32> {
        store_embeddings(&self.entities, dim)
    }
}

/// The entity embeddings (first `dim` floats of each row) of `store`, read row by row without
/// copying the whole store: `N·dim` floats however wide the rows are.
pub(in crate::kge) fn store_embeddings(store: &RowStore, dim: usize) -> Vec<f32> {
    let mut row = vec![0.0; store.width()];
    let mut out = Vec::with_capacity(store.rows() * dim);
    for r in 0..store.rows() {
        store.read(r as u64, &mut row).expect("row in range with matching width");
        out.extend_from_slice(&row[..dim]);
    }
    out
}
