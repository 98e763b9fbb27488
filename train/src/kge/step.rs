//! The KGE training step: what the engine's device stage runs for each batch.
//!
//! Entity rows (in the engine's row store) are `[embedding (dim) | Adagrad sums (dim)]`, so the
//! optimizer state travels with the row. Relation embeddings and their Adagrad sums are dense
//! parameters in [`KgeModel`], updated inside [`Model::step`] in computation order.
//!
//! **Determinism:** the step is single-threaded and every reduction runs in a fixed order
//! (chunks in batch order; positives and negatives in index order; ndarray's matrix products are
//! deterministic for fixed shapes), so the same batch on the same rows gives the same bits.

use super::batch::{KgeBatch, SplitMix64};
use super::score::{Loss, ScoreFn, dot};
use ndarray::{Array2, ArrayView2};
use ordo::engine::{BatchRows, Model, StepError};
use thiserror::Error;

/// Adagrad's denominator guard (`--device cuda` passes the same to ordo-gpu's kernels).
pub const ADAGRAD_EPS: f32 = 1e-10;

/// The loss became NaN or infinite: training diverged.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
#[error(
    "loss is {loss} in batch {batch}: training diverged (try a smaller --lr or a different --init)"
)]
pub struct NonFiniteLoss {
    /// The batch id.
    pub batch: u64,
    /// The loss value.
    pub loss: f32,
}

/// Hyper-parameters of the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepConfig {
    /// Scoring function.
    pub score: ScoreFn,
    /// Loss over a positive and its negatives.
    pub loss: Loss,
    /// Embedding floats per entity / relation.
    pub dim: usize,
    /// Adagrad learning rate.
    pub lr: f32,
    /// L2 weight on the embeddings a positive uses (`reg · ‖e‖²` per use; 0 = off).
    pub reg: f32,
}

/// DistMult or ComplEx with Adagrad, as an [`ordo::engine::Model`].
#[derive(Debug, Clone)]
pub struct KgeModel {
    cfg: StepConfig,
    /// Relation embeddings, `relations × dim`.
    rel: Vec<f32>,
    /// Adagrad sums of `rel`.
    rel_acc: Vec<f32>,
    /// Loss summed over the positives stepped since the last [`take_loss`](Self::take_loss), in
    /// computation order.
    loss_sum: f64,
    positives: u64,
    /// Scratch: relation gradients (`relations × dim`) and which relations were touched.
    rel_grad: Vec<f32>,
    rel_touched: Vec<bool>,
}

/// Initial entity rows: embedding uniform in `[-init, init)` from `seed`, Adagrad sums zero.
pub fn init_entities(entities: usize, dim: usize, init: f32, seed: u64) -> Vec<f32> {
    let mut g = SplitMix64::new(seed, 0xE7);
    let mut rows = vec![0.0; entities * 2 * dim];
    for row in rows.chunks_mut(2 * dim) {
        row[..dim].iter_mut().for_each(|v| *v = init * g.symmetric());
    }
    rows
}

impl KgeModel {
    /// A model with relation embeddings uniform in `[-init, init)` from `seed`.
    pub fn new(cfg: StepConfig, relations: usize, init: f32, seed: u64) -> Self {
        let mut g = SplitMix64::new(seed, 0x7E1);
        let rel = (0..relations * cfg.dim).map(|_| init * g.symmetric()).collect();
        KgeModel {
            cfg,
            rel,
            rel_acc: vec![0.0; relations * cfg.dim],
            loss_sum: 0.0,
            positives: 0,
            rel_grad: vec![0.0; relations * cfg.dim],
            rel_touched: vec![false; relations],
        }
    }

    /// The step's hyper-parameters.
    pub fn config(&self) -> &StepConfig {
        &self.cfg
    }

    /// Relation embeddings, `relations × dim`, row-major.
    pub fn relations(&self) -> &[f32] {
        &self.rel
    }

    /// Replace the relation embeddings (e.g. loaded from a file); `false` if the length differs.
    pub fn set_relations(&mut self, rel: &[f32]) -> bool {
        if rel.len() != self.rel.len() {
            return false;
        }
        self.rel.copy_from_slice(rel);
        true
    }

    /// Mean loss per positive since the last call, and reset.
    pub fn take_loss(&mut self) -> f64 {
        let mean = self.loss_sum / self.positives.max(1) as f64;
        (self.loss_sum, self.positives) = (0.0, 0);
        mean
    }

    /// One side of one chunk: `queries` (`c × dim`) scored against their own positives
    /// (`targets`, `c × dim`) and the chunk's shared negatives (`negs`, `n × dim`). Returns the
    /// summed loss; writes `dq` (`c × dim`), `d_targets` (`c × dim`) and `d_negs` (`n × dim`).
    fn side(
        &self,
        queries: &Array2<f32>,
        targets: &Array2<f32>,
        negs: ArrayView2<'_, f32>,
    ) -> (f32, Array2<f32>, Array2<f32>, Array2<f32>) {
        let (c, n) = (queries.nrows(), negs.nrows());
        let neg_scores = queries.dot(&negs.t());
        let mut grads = Array2::<f32>::zeros((c, n));
        let mut d_targets = Array2::<f32>::zeros(queries.raw_dim());
        let mut loss = 0.0;
        let mut scores = vec![0.0; n + 1];
        let mut g = vec![0.0; n + 1];
        let mut g0 = vec![0.0; c];
        for (i, g0i) in g0.iter_mut().enumerate() {
            let q = queries.row(i);
            scores[0] = dot(row(&q), row(&targets.row(i)));
            scores[1..].copy_from_slice(row(&neg_scores.row(i)));
            loss += self.cfg.loss.loss_and_grad(&scores, &mut g);
            *g0i = g[0];
            d_targets.row_mut(i).scaled_add(g[0], &q);
            grads.row_mut(i).as_slice_mut().expect("row-major").copy_from_slice(&g[1..]);
        }
        let mut dq = grads.dot(&negs);
        for (i, &gi) in g0.iter().enumerate() {
            dq.row_mut(i).scaled_add(gi, &targets.row(i));
        }
        let d_negs = grads.t().dot(queries);
        (loss, dq, d_targets, d_negs)
    }

    /// The batch's summed loss and its gradient w.r.t. each batch row's embedding (`rows × dim`);
    /// relation gradients go to `self.rel_grad` (touched ones flagged in `self.rel_touched`).
    fn gradients(&mut self, b: &KgeBatch, rows: &BatchRows<'_>) -> (f32, Vec<f32>) {
        let dim = self.cfg.dim;
        let score = self.cfg.score;
        let mut grad = vec![0.0f32; rows.len() * dim];
        self.rel_grad.iter_mut().for_each(|g| *g = 0.0);
        self.rel_touched.iter_mut().for_each(|t| *t = false);
        let mut batch_loss = 0.0f32;
        let n = b.negatives;
        for (ci, pos) in b.pos.chunks(b.chunk.max(1)).enumerate() {
            let c = pos.len();
            let heads = gather(rows, pos.iter().map(|p| p.0), dim);
            let tails = gather(rows, pos.iter().map(|p| p.2), dim);
            let mut rels = Array2::<f32>::zeros((c, dim));
            for (i, p) in pos.iter().enumerate() {
                let r = p.1 as usize;
                rels.row_mut(i)
                    .as_slice_mut()
                    .expect("row-major")
                    .copy_from_slice(&self.rel[r * dim..(r + 1) * dim]);
            }
            let mut tq = Array2::<f32>::zeros((c, dim));
            let mut hq = Array2::<f32>::zeros((c, dim));
            for (((h, r), t), (q, p)) in rows_of(&heads)
                .zip(rows_of(&rels))
                .zip(rows_of(&tails))
                .zip(rows_of_mut(&mut tq).zip(rows_of_mut(&mut hq)))
            {
                score.tail_query(h, r, q);
                score.head_query(r, t, p);
            }
            let nt_idx = &b.neg_tails[ci * n..(ci + 1) * n];
            let nh_idx = &b.neg_heads[ci * n..(ci + 1) * n];
            let neg_t = gather(rows, nt_idx.iter().copied(), dim);
            let neg_h = gather(rows, nh_idx.iter().copied(), dim);
            // Tail side: candidates are tails; head side: candidates are heads.
            let (lt, dtq, d_tails, d_negt) = self.side(&tq, &tails, neg_t.view());
            let (lh, dhq, d_heads, d_negh) = self.side(&hq, &heads, neg_h.view());
            batch_loss += lt + lh;
            let mut dh = d_heads;
            let mut dt = d_tails;
            let mut dr = Array2::<f32>::zeros((c, dim));
            let inputs = rows_of(&heads).zip(rows_of(&rels)).zip(rows_of(&tails));
            let upstream = rows_of(&dtq).zip(rows_of(&dhq));
            let outputs = rows_of_mut(&mut dh).zip(rows_of_mut(&mut dr)).zip(rows_of_mut(&mut dt));
            for ((((h, r), t), (dq, dp)), ((dhi, dri), dti)) in inputs.zip(upstream).zip(outputs) {
                score.tail_query_backward(h, r, dq, dhi, dri);
                score.head_query_backward(r, t, dp, dri, dti);
            }
            if self.cfg.reg > 0.0 {
                let two_reg = 2.0 * self.cfg.reg;
                dh.scaled_add(two_reg, &heads);
                dt.scaled_add(two_reg, &tails);
                dr.scaled_add(two_reg, &rels);
                let sq = |m: &Array2<f32>| m.iter().map(|x| x * x).sum::<f32>();
                batch_loss += self.cfg.reg * (sq(&heads) + sq(&tails) + sq(&rels));
            }
            scatter_add(&mut grad, pos.iter().map(|p| p.0), &dh, dim);
            scatter_add(&mut grad, pos.iter().map(|p| p.2), &dt, dim);
            scatter_add(&mut grad, nt_idx.iter().copied(), &d_negt, dim);
            scatter_add(&mut grad, nh_idx.iter().copied(), &d_negh, dim);
            for (i, p) in pos.iter().enumerate() {
                let r = p.1 as usize;
                self.rel_touched[r] = true;
                for (a, g) in self.rel_grad[r * dim..(r + 1) * dim].iter_mut().zip(dr.row(i)) {
                    *a += g;
                }
            }
        }
        (batch_loss, grad)
    }
}

/// A row of a standard-layout matrix as a slice.
fn row<'a>(v: &'a ndarray::ArrayView1<'_, f32>) -> &'a [f32] {
    v.as_slice().expect("rows of a standard-layout matrix are contiguous")
}

/// The rows of a standard-layout matrix as slices.
fn rows_of(m: &Array2<f32>) -> std::slice::Chunks<'_, f32> {
    m.as_slice().expect("standard layout").chunks(m.ncols().max(1))
}

/// The rows of a standard-layout matrix as mutable slices.
fn rows_of_mut(m: &mut Array2<f32>) -> std::slice::ChunksMut<'_, f32> {
    let w = m.ncols().max(1);
    m.as_slice_mut().expect("standard layout").chunks_mut(w)
}

/// Copy rows `idx` (local ids) of `rows`' embedding part into a `len × dim` matrix.
fn gather(
    rows: &BatchRows<'_>,
    idx: impl ExactSizeIterator<Item = u32>,
    dim: usize,
) -> Array2<f32> {
    let n = idx.len();
    let mut m = Array2::<f32>::zeros((n, dim));
    for (i, l) in idx.enumerate() {
        m.row_mut(i)
            .as_slice_mut()
            .expect("row-major")
            .copy_from_slice(&rows.row(l as usize)[..dim]);
    }
    m
}

/// Add each row of `d` to row `idx[i]` of `grad` (`rows × dim`), in order.
fn scatter_add(grad: &mut [f32], idx: impl Iterator<Item = u32>, d: &Array2<f32>, dim: usize) {
    for (i, l) in idx.enumerate() {
        let dst = &mut grad[l as usize * dim..(l as usize + 1) * dim];
        for (a, b) in dst.iter_mut().zip(d.row(i)) {
            *a += b;
        }
    }
}

/// Adagrad on `w` with sums `acc`: `acc += g²; w −= lr·g/(√acc + ε)`.
fn adagrad(w: &mut [f32], acc: &mut [f32], g: &[f32], lr: f32) {
    for ((w, a), g) in w.iter_mut().zip(acc.iter_mut()).zip(g) {
        *a += g * g;
        *w -= lr * g / (a.sqrt() + ADAGRAD_EPS);
    }
}

impl Model for KgeModel {
    type Data = KgeBatch;

    fn row_width(&self) -> usize {
        2 * self.cfg.dim
    }

    fn step(&mut self, b: &KgeBatch, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let dim = self.cfg.dim;
        let (batch_loss, grad) = self.gradients(b, rows);
        if !batch_loss.is_finite() {
            return Err(Box::new(NonFiniteLoss { batch: b.id, loss: batch_loss }));
        }
        self.loss_sum += batch_loss as f64;
        self.positives += b.pos.len() as u64;
        let lr = self.cfg.lr;
        for (i, g) in grad.chunks(dim).enumerate() {
            let (w, acc) = rows.row_mut(i).split_at_mut(dim);
            adagrad(w, acc, g, lr);
        }
        for r in 0..self.rel_touched.len() {
            if self.rel_touched[r] {
                let s = r * dim..(r + 1) * dim;
                adagrad(
                    &mut self.rel[s.clone()],
                    &mut self.rel_acc[s.clone()],
                    &self.rel_grad[s],
                    lr,
                );
            }
        }
        Ok(())
    }

    fn dense(&self) -> Vec<f32> {
        [self.rel.as_slice(), &self.rel_acc].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::batch::Sampling;
    use crate::kge::data::Triple;
    use ordo::engine::Batch;

    fn setup(score: ScoreFn, loss: Loss, chunk: usize) -> (KgeModel, Batch<KgeBatch>, Vec<f32>) {
        let dim = 4;
        let cfg = StepConfig { score, loss, dim, lr: 0.1, reg: 0.01 };
        let model = KgeModel::new(cfg, 3, 0.5, 9);
        let train: Vec<Triple> =
            (0..5).map(|i| Triple { h: i, r: i % 3, t: (i * 3 + 1) % 8 }).collect();
        let s = Sampling { seed: 1, batch_size: 5, negatives: 3, chunk, entities: 8 };
        let batch = s.epoch_batches(&train, 0).remove(0);
        let all = init_entities(8, dim, 0.5, 2);
        let values = batch
            .rows
            .iter()
            .flat_map(|&r| all[r as usize * 2 * dim..(r as usize + 1) * 2 * dim].to_vec())
            .collect();
        (model, batch, values)
    }

    /// The batch gradient (chunks, shared negatives, scatter of repeated entities, relations,
    /// regularization) against central finite differences of the batch loss.
    #[test]
    fn batch_gradients_match_finite_differences() {
        for score in [ScoreFn::DistMult, ScoreFn::ComplEx] {
            for loss in [Loss::Softmax, Loss::Logistic] {
                for chunk in [1, 2] {
                    let (mut m, b, mut values) = setup(score, loss, chunk);
                    let ids = b.rows.clone();
                    let dim = m.cfg.dim;
                    let lossf = |m: &mut KgeModel, v: &mut [f32]| {
                        let rows = BatchRows::new(&ids, 2 * dim, v).unwrap();
                        m.gradients(&b.data, &rows).0 as f64
                    };
                    let (_, grad) =
                        m.gradients(&b.data, &BatchRows::new(&ids, 2 * dim, &mut values).unwrap());
                    let rel_grad = m.rel_grad.clone();
                    let eps = 1e-2f32;
                    for i in 0..ids.len() {
                        for j in 0..dim {
                            let k = i * 2 * dim + j;
                            let x = values[k];
                            values[k] = x + eps;
                            let up = lossf(&mut m, &mut values);
                            values[k] = x - eps;
                            let down = lossf(&mut m, &mut values);
                            values[k] = x;
                            let num = (up - down) / (2.0 * eps as f64);
                            let a = grad[i * dim + j] as f64;
                            assert!(
                                (a - num).abs() < 2e-3 + 1e-2 * num.abs(),
                                "{score:?} {loss:?} chunk {chunk} row {i} coord {j}: {a} vs {num}"
                            );
                        }
                    }
                    for (k, &a) in rel_grad.iter().enumerate() {
                        let x = m.rel[k];
                        m.rel[k] = x + eps;
                        let up = lossf(&mut m, &mut values);
                        m.rel[k] = x - eps;
                        let down = lossf(&mut m, &mut values);
                        m.rel[k] = x;
                        let num = (up - down) / (2.0 * eps as f64);
                        let a = a as f64;
                        assert!(
                            (a - num).abs() < 2e-3 + 1e-2 * num.abs(),
                            "{score:?} {loss:?} relation coord {k}: {a} vs {num}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn step_is_deterministic_lowers_the_loss_and_stops_on_nan() {
        let (mut m, b, values) = setup(ScoreFn::ComplEx, Loss::Softmax, 2);
        let w = m.row_width();
        let run = |m: &mut KgeModel, v: &mut Vec<f32>, steps: usize| {
            let mut losses = Vec::new();
            for _ in 0..steps {
                m.step(&b.data, &mut BatchRows::new(&b.rows, w, v).unwrap()).unwrap();
                losses.push(m.take_loss());
            }
            losses
        };
        let (mut m2, mut v1, mut v2) = (m.clone(), values.clone(), values.clone());
        let l1 = run(&mut m, &mut v1, 20);
        let l2 = run(&mut m2, &mut v2, 20);
        assert_eq!(
            v1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            v2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(m.dense(), m2.dense());
        assert!(l1[19] < 0.8 * l1[0], "loss did not fall: {l1:?}");
        assert_eq!(l1, l2);
        let mut bad = values.clone();
        bad[0] = f32::NAN;
        let err = m.step(&b.data, &mut BatchRows::new(&b.rows, w, &mut bad).unwrap()).unwrap_err();
        assert!(err.to_string().contains("loss is NaN in batch 0"), "{err}");
    }
}
