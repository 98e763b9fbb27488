//! Knowledge-graph embedding kernels: DistMult and ComplEx scores, softmax cross-entropy over a
//! positive and its negatives, and Adagrad on entity rows and relation parameters.
//!
//! **The math** (one batch step; `d` = `dim`):
//! * Parameters: entity rows of `2d` floats (embedding, then its Adagrad sums — the row layout of
//!   the CPU trainer, so optimizer state travels with the row) and relation rows of `2d` floats
//!   (parameters, then Adagrad sums), kept on the device.
//! * Scores: DistMult `s = Σ_k h_k r_k t_k`; ComplEx with `d = 2m` (real parts `0..m`, imaginary
//!   parts `m..2m`) `s = Re Σ_k h_k r_k conj(t_k) = Σ_k (a c e + b c f + a d f − b d e)` with
//!   `h = a + ib`, `r = c + id`, `t = e + if`.
//! * Loss, **summed** over the `B` groups (not averaged: the step of `ordo-train`'s CPU trainer,
//!   whose batches are the sum of their positives' losses): the scored triples come in groups of
//!   `group = 1 + negatives`, the first of each group the positive. Softmax cross-entropy
//!   ([`KgeLoss::Softmax`]): `L = −s_pos + log Σ_j exp s_j`, `∂L/∂s_j = softmax_j − [j = pos]`.
//!   Logistic ([`KgeLoss::Logistic`], `n = max(group − 1, 1)`): `L = softplus(−s_pos) +
//!   Σ_{j≥1} softplus(s_j) / n`, `∂L/∂s_pos = −σ(−s_pos)`, `∂L/∂s_j = σ(s_j) / n`.
//! * L2 ([`KgeHyper::reg`]): each group's positive adds `reg · (‖h‖² + ‖r‖² + ‖t‖²)` to the loss
//!   and `2 · reg · x` to the gradient of each of its three embeddings `x`. (`ordo-train` scores
//!   each positive in two groups, tail- and head-corrupted, so it passes half its weight.)
//! * Gradients: chain rule through the scores (see [`partials`]); every parameter's gradient is
//!   computed from the values *before* the step.
//! * Adagrad: `G += g²; θ −= lr · g / (√G + eps)` for every entity row of the batch and every
//!   relation (a relation no triple uses has `g = 0`, so with `eps > 0` it is left unchanged, as
//!   the CPU trainer, which updates only the relations it touched, leaves it).
//!
//! **Determinism:** on the GPU every output is owned by one thread (or one warp with a fixed
//! shuffle tree), and sums over contributions run in a fixed order given by [`Contributions`]
//! (a CSR built on the host); there are no floating-point atomics. So the same inputs give the
//! same bits on the same device and build, which is what OAC's replay check compares. Against
//! the f64 reference ([`reference_step`]) the kernels agree to about 1e-6 relative (f32
//! rounding, `expf`/`logf`); the CUDA tests use 1e-5.
//!
//! **Against the CPU trainer** (`ordo-train`, `train/src/kge/model/step.rs`): the same step by
//! definition (summed loss, shared negatives expressed as repeated rows in the groups, the same
//! Adagrad and eps, relation update from the pre-step values), checked without a GPU by
//! `train/tests/gpu_reference.rs` (this reference in f64 vs the trainer in f32, 1e-5 relative on
//! the scale of each vector). Not bit-equal: the f32 sums run in other orders (the trainer sums
//! through ndarray's matrix products chunk by chunk, the kernels lane-strided then by a shuffle
//! tree for a score and in CSR order for a gradient), and `expf`/`logf` differ from Rust's. One
//! step differs by f32 rounding (≈ 1e-6 relative); over many steps the differences compound like
//! any two f32 orders, so GPU runs are compared with the CPU bit-for-bit only against a replay
//! *on the GPU*, and with the CPU replay within a tolerance (see `train/tests/gpu_kge.rs`).

mod chunked;
mod chunked_batch;
mod chunked_cuda;
mod chunked_ids;
mod cuda;
mod reference;

pub use chunked::{chunked_step, chunked_step_ids};
pub use chunked_batch::ChunkedBatch;
pub use chunked_cuda::ChunkedKernels;
pub use chunked_ids::{ChunkLimits, ChunkedIds};
pub use cuda::{DeviceKgeBatch, KgeKernels};
pub use reference::{KgeReference, partials, reference_loss, reference_step};

/// Adagrad's epsilon of `ordo-train`'s CPU trainer (`train/src/kge/model/step.rs`), the default
/// here.
pub const ADAGRAD_EPS: f32 = 1e-10;

use thiserror::Error;

/// The scoring function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KgeModel {
    /// `Σ h r t` (Yang et al., 2015).
    DistMult,
    /// `Re Σ h r conj(t)` with complex embeddings (Trouillon et al., 2016); `dim` must be even.
    ComplEx,
}

impl KgeModel {
    /// The kernels' model code.
    pub(crate) fn code(self) -> u32 {
        match self {
            KgeModel::DistMult => 0,
            KgeModel::ComplEx => 1,
        }
    }
}

/// The loss over a group (a positive and its negatives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KgeLoss {
    /// Softmax cross-entropy over the group.
    #[default]
    Softmax,
    /// Logistic: the positive against 1, the mean over the negatives against 0.
    Logistic,
}

impl KgeLoss {
    /// The kernels' loss code.
    pub(crate) fn code(self) -> u32 {
        match self {
            KgeLoss::Softmax => 0,
            KgeLoss::Logistic => 1,
        }
    }
}

/// Learning rate, Adagrad's epsilon, the L2 weight and the loss.
///
/// ```
/// let h = ordo_gpu::kge::KgeHyper::new(0.1);
/// assert_eq!((h.eps, h.reg), (ordo_gpu::kge::ADAGRAD_EPS, 0.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KgeHyper {
    /// Learning rate.
    pub lr: f32,
    /// Added to `√G` in Adagrad's denominator.
    pub eps: f32,
    /// L2 weight on each group's positive embeddings (see the module docs).
    pub reg: f32,
    /// The loss over each group.
    pub loss: KgeLoss,
}

impl KgeHyper {
    /// Softmax loss, no L2, [`ADAGRAD_EPS`], learning rate `lr`.
    pub fn new(lr: f32) -> Self {
        KgeHyper { lr, eps: ADAGRAD_EPS, reg: 0.0, loss: KgeLoss::Softmax }
    }
}

/// Shapes of a KGE step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KgeShape {
    /// The scoring function.
    pub model: KgeModel,
    /// Embedding size (floats per embedding; rows are `2 × dim` with the Adagrad sums).
    pub dim: usize,
    /// Number of relations.
    pub relations: usize,
}

/// A bad KGE batch or parameter buffer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KgeError {
    /// `dim` is zero, or odd for ComplEx.
    #[error("embedding size {dim} is not valid for {model:?}")]
    BadDim {
        /// The model.
        model: KgeModel,
        /// The rejected size.
        dim: usize,
    },
    /// The group size is zero or does not divide the number of scored triples.
    #[error("{triples} scored triples do not form groups of {group}")]
    BadGroup {
        /// Number of scored triples.
        triples: usize,
        /// Group size (1 + negatives).
        group: usize,
    },
    /// A triple refers to an entity row or relation that does not exist.
    #[error("triple {index} refers to {what} {id}, but there are only {count}")]
    OutOfRange {
        /// Index of the triple.
        index: usize,
        /// "entity row" or "relation".
        what: &'static str,
        /// The rejected id.
        id: u32,
        /// How many exist.
        count: usize,
    },
    /// A parameter buffer has the wrong length.
    #[error("{what} holds {got} floats, expected {expected}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// A batch larger than the sizes the device step was built for (or of another chunk or
    /// negative count): refused before anything is uploaded.
    #[error("the batch has {got} {what}, over the step's limit of {limit}")]
    OverLimits {
        /// Which size.
        what: &'static str,
        /// The batch's.
        got: usize,
        /// The step's.
        limit: usize,
    },
    /// Too many scored triples for the kernels' 31-bit contribution encoding.
    #[error("{0} scored triples exceed the kernels' limit of 2^30")]
    TooManyTriples(usize),
}

/// One step's input: the scored triples over the batch's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KgeBatch {
    /// Number of entity rows of the batch (the batch's sorted row ids, by position).
    pub rows: usize,
    /// `(head row, relation, tail row)` per scored triple, rows by position in the batch, in
    /// groups of `group`: the positive first, then its negatives.
    pub triples: Vec<[u32; 3]>,
    /// `1 + negatives per positive`.
    pub group: usize,
}

impl KgeBatch {
    /// Check the batch against `shape`.
    pub fn check(&self, shape: &KgeShape) -> Result<(), KgeError> {
        check_shape(shape)?;
        let n = self.triples.len();
        if self.group == 0 || !n.is_multiple_of(self.group) {
            return Err(KgeError::BadGroup { triples: n, group: self.group });
        }
        if n >= 1 << 30 {
            return Err(KgeError::TooManyTriples(n));
        }
        for (index, &[h, r, t]) in self.triples.iter().enumerate() {
            for (id, what, count) in [
                (h, "entity row", self.rows),
                (r, "relation", shape.relations),
                (t, "entity row", self.rows),
            ] {
                if id as usize >= count {
                    return Err(KgeError::OutOfRange { index, what, id, count });
                }
            }
        }
        Ok(())
    }

    /// Number of positives (groups).
    pub fn positives(&self) -> usize {
        self.triples.len().checked_div(self.group).unwrap_or(0)
    }
}

pub(crate) fn check_shape(shape: &KgeShape) -> Result<(), KgeError> {
    let odd = shape.model == KgeModel::ComplEx && shape.dim % 2 == 1;
    if shape.dim == 0 || odd {
        return Err(KgeError::BadDim { model: shape.model, dim: shape.dim });
    }
    Ok(())
}

pub(crate) fn check_params(
    shape: &KgeShape,
    rows: usize,
    entities: usize,
    relations: usize,
) -> Result<(), KgeError> {
    let w = 2 * shape.dim;
    let want =
        [("entity rows", rows * w, entities), ("relation rows", shape.relations * w, relations)];
    for (what, expected, got) in want {
        if expected != got {
            return Err(KgeError::LengthMismatch { what, expected, got });
        }
    }
    Ok(())
}

/// Which scored triples touch each entity row and each relation, in a fixed order: the order in
/// which the gradient kernels sum contributions (so their results are deterministic).
///
/// Entity items are `score << 1 | role` (role 0 = head, 1 = tail), sorted by score then role;
/// relation items are score indices, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contributions {
    /// `rows + 1` offsets into `entity_items`.
    pub entity_offsets: Vec<u32>,
    /// Entity contributions.
    pub entity_items: Vec<u32>,
    /// `relations + 1` offsets into `relation_items`.
    pub relation_offsets: Vec<u32>,
    /// Relation contributions.
    pub relation_items: Vec<u32>,
}

impl Contributions {
    /// Build the lists for a checked batch (a counting sort: stable, so items stay sorted).
    pub fn build(batch: &KgeBatch, relations: usize) -> Self {
        let (entity_offsets, entity_items) = csr(
            batch.rows,
            batch
                .triples
                .iter()
                .enumerate()
                .flat_map(|(j, &[h, _, t])| [(h, (j as u32) << 1), (t, (j as u32) << 1 | 1)]),
        );
        let (relation_offsets, relation_items) =
            csr(relations, batch.triples.iter().enumerate().map(|(j, &[_, r, _])| (r, j as u32)));
        Contributions { entity_offsets, entity_items, relation_offsets, relation_items }
    }
}

fn csr(keys: usize, items: impl Iterator<Item = (u32, u32)> + Clone) -> (Vec<u32>, Vec<u32>) {
    let mut offsets = vec![0u32; keys + 1];
    for (k, _) in items.clone() {
        offsets[k as usize + 1] += 1;
    }
    for i in 0..keys {
        offsets[i + 1] += offsets[i];
    }
    let mut next = offsets.clone();
    let mut out = vec![0u32; offsets[keys] as usize];
    for (k, item) in items {
        out[next[k as usize] as usize] = item;
        next[k as usize] += 1;
    }
    (offsets, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contributions_list_each_role_once_in_score_order() {
        // Row 0 is the head of both triples and the tail of the second (a self-loop).
        let b = KgeBatch { rows: 2, triples: vec![[0, 1, 1], [0, 0, 0]], group: 2 };
        let c = Contributions::build(&b, 2);
        assert_eq!(c.entity_offsets, [0, 3, 4]);
        // Items are score << 1 | role: (0, head), (1, head), (1, tail), then row 1: (0, tail).
        assert_eq!(c.entity_items, [0, 2, 3, 1]);
        assert_eq!(c.relation_offsets, [0, 1, 2]);
        assert_eq!(c.relation_items, [1, 0]);
    }

    #[test]
    fn bad_batches_are_rejected() {
        let shape = KgeShape { model: KgeModel::ComplEx, dim: 4, relations: 2 };
        let b = KgeBatch { rows: 2, triples: vec![[0, 2, 1]], group: 1 };
        assert_eq!(
            b.check(&shape),
            Err(KgeError::OutOfRange { index: 0, what: "relation", id: 2, count: 2 })
        );
        let b = KgeBatch { rows: 2, triples: vec![[0, 1, 1]; 3], group: 2 };
        assert_eq!(b.check(&shape), Err(KgeError::BadGroup { triples: 3, group: 2 }));
        let odd = KgeShape { dim: 3, ..shape };
        let b = KgeBatch { rows: 2, triples: vec![[0, 1, 1]], group: 1 };
        assert_eq!(b.check(&odd), Err(KgeError::BadDim { model: KgeModel::ComplEx, dim: 3 }));
    }
}
