//! The KGE step in the CPU trainer's shape: the host port of the GPU step to come, whose math
//! and reduction order it fixes (issue 56, item 2). Only the batch's ids go in
//! ([`ChunkedBatch`]: positives and each chunk's shared negatives, kilobytes), not the
//! expanded scored triples ([`KgeBatch`]) the present kernels take.
//!
//! **Per chunk and side** (tail side: queries `q = h∘r`, targets `t`, the chunk's corrupted
//! tails; head side: queries `q = r∘t̄`, targets `h`, its corrupted heads; ComplEx's products
//! are complex): the `P` queries against the chunk's `n` shared negatives are one matrix
//! product `S = Q·Nᵀ` (`P × n`; on the GPU one strided-batched GEMM over the chunks), each
//! query against its own target a dot product; then softmax (or logistic) and the loss per row;
//! the backward is two more products, `dQ = G·N` and `dN = Gᵀ·Q`, plus `dT = g_pos·Q`, and the
//! chain rule from `dQ` to the query's entity and relation.
//!
//! **Reductions in a fixed order.** Every gradient contribution is kept, in the canonical order
//! (chunk, side, then per positive its query entity and its target, then the negatives); each
//! entity row sums its own contributions in that order and is updated by Adagrad at once (one
//! fused per-row pass, a thread per row on the GPU); each relation sums its contributions by a
//! pairwise tree whose shape depends only on their number (not a block walking them serially).
//! So the result depends on the batch and the state only, never on a schedule.
//!
//! Checked here against the f64 reference on the same batch expanded into groups
//! ([`ChunkedBatch::groups`], [`reference_step`](super::reference_step)), with a short last
//! chunk as an epoch's last batch has, and in `ordo-train` against its CPU step
//! (`train/tests/gpu_reference.rs`).

use super::{KgeBatch, KgeError, KgeHyper, KgeLoss, KgeModel, KgeShape, check_params};

/// A batch as ids only: positives `(head, relation, tail)` by row position, in chunks of
/// `chunk` (the last may be shorter), each chunk with `negatives` corrupted tails and
/// `negatives` corrupted heads shared by its positives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedBatch {
    /// Entity rows of the batch.
    pub rows: usize,
    /// `(head row, relation, tail row)` per positive.
    pub positives: Vec<[u32; 3]>,
    /// Positives per chunk (the last chunk may hold fewer).
    pub chunk: usize,
    /// Shared negatives per chunk and side.
    pub negatives: usize,
    /// Per chunk: its `negatives` tail rows, then its `negatives` head rows.
    pub chunk_negatives: Vec<u32>,
}

impl ChunkedBatch {
    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.positives.len().div_ceil(self.chunk.max(1))
    }

    /// Chunk `c`'s negatives of `side` (0: tails, 1: heads).
    fn side_negatives(&self, c: usize, side: usize) -> &[u32] {
        let n = self.negatives;
        &self.chunk_negatives[(2 * c + side) * n..(2 * c + side + 1) * n]
    }

    /// Check the ids against `shape` and the row count.
    pub fn check(&self, shape: &KgeShape) -> Result<(), KgeError> {
        let bad = || KgeError::BadGroup { triples: self.chunk_negatives.len(), group: self.chunk };
        if self.chunk == 0 || self.chunk_negatives.len() != self.chunks() * 2 * self.negatives {
            return Err(bad());
        }
        let rows = self.rows as u64;
        let row_ok = |i: u32| u64::from(i) < rows;
        let pos_ok = self
            .positives
            .iter()
            .all(|&[h, r, t]| row_ok(h) && row_ok(t) && (r as usize) < shape.relations);
        if !pos_ok || !self.chunk_negatives.iter().all(|&i| row_ok(i)) {
            return Err(bad());
        }
        Ok(())
    }

    /// The same batch as scored-triple groups: per positive, its tail group (the positive,
    /// then its chunk's corrupted tails), then its head group. The f64 reference and the
    /// present kernels take this form.
    pub fn groups(&self) -> KgeBatch {
        let mut triples = Vec::with_capacity(self.positives.len() * 2 * (self.negatives + 1));
        for (c, pos) in self.positives.chunks(self.chunk.max(1)).enumerate() {
            let (tails, heads) = (self.side_negatives(c, 0), self.side_negatives(c, 1));
            for &[h, r, t] in pos {
                triples.push([h, r, t]);
                triples.extend(tails.iter().map(|&e| [h, r, e]));
                triples.push([h, r, t]);
                triples.extend(heads.iter().map(|&e| [e, r, t]));
            }
        }
        KgeBatch { rows: self.rows, triples, group: self.negatives + 1 }
    }
}

/// Gradient contributions in the canonical order: who receives each `dim`-vector.
struct Contributions {
    dim: usize,
    owners: Vec<u32>,
    values: Vec<f32>,
}

impl Contributions {
    fn new(dim: usize) -> Self {
        Contributions { dim, owners: Vec::new(), values: Vec::new() }
    }

    fn push(&mut self, owner: u32, g: impl Iterator<Item = f32>) {
        self.owners.push(owner);
        let before = self.values.len();
        self.values.extend(g);
        debug_assert_eq!(self.values.len() - before, self.dim);
    }

    /// Each owner's contributions, in the order they were pushed (a stable counting sort: on
    /// the GPU the CSR the loader builds).
    fn by_owner(&self, owners: usize) -> Vec<Vec<usize>> {
        let mut lists = vec![Vec::new(); owners];
        for (k, &o) in self.owners.iter().enumerate() {
            lists[o as usize].push(k);
        }
        lists
    }

    fn get(&self, k: usize) -> &[f32] {
        &self.values[k * self.dim..(k + 1) * self.dim]
    }
}

/// `Σ v` by a pairwise tree whose shape depends only on `v.len()` (level by level, neighbours
/// added, an odd last element carried up).
fn tree_sum(mut v: Vec<f32>) -> f32 {
    while v.len() > 1 {
        let next = v.chunks(2).map(|p| if p.len() == 2 { p[0] + p[1] } else { p[0] }).collect();
        v = next;
    }
    v.first().copied().unwrap_or(0.0)
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |s, (x, y)| s + x * y)
}

/// The side's query of a positive, and the chain rule from `∂L/∂q` back to its two inputs.
/// Tail side: `q = h∘r` (inputs h, r); head side: `q = r∘t̄` (inputs r, t); ComplEx halves are
/// real then imaginary parts.
fn query(model: KgeModel, side: usize, x: &[f32], y: &[f32], q: &mut [f32]) {
    let d = q.len();
    match model {
        KgeModel::DistMult => (0..d).for_each(|k| q[k] = x[k] * y[k]),
        KgeModel::ComplEx => {
            let m = d / 2;
            for k in 0..m {
                let (a, b, c, e) = (x[k], x[m + k], y[k], y[m + k]);
                (q[k], q[m + k]) = if side == 0 {
                    (a * c - b * e, b * c + a * e)
                } else {
                    (a * c + b * e, a * e - b * c)
                };
            }
        }
    }
}

/// `(∂L/∂x, ∂L/∂y)` of [`query`]'s inputs from `dq = ∂L/∂q`.
fn query_back(model: KgeModel, side: usize, x: &[f32], y: &[f32], dq: &[f32]) -> [Vec<f32>; 2] {
    let d = dq.len();
    let (mut dx, mut dy) = (vec![0.0; d], vec![0.0; d]);
    match model {
        KgeModel::DistMult => {
            for k in 0..d {
                dx[k] = dq[k] * y[k];
                dy[k] = dq[k] * x[k];
            }
        }
        KgeModel::ComplEx => {
            let m = d / 2;
            for k in 0..m {
                let (a, b, c, e, u, v) = (x[k], x[m + k], y[k], y[m + k], dq[k], dq[m + k]);
                if side == 0 {
                    // q = (ac − be, bc + ae) with x = (a, b), y = (c, e).
                    (dx[k], dx[m + k]) = (u * c + v * e, v * c - u * e);
                    (dy[k], dy[m + k]) = (u * a + v * b, v * a - u * b);
                } else {
                    // q = (ac + be, ae − bc) with x = r = (a, b), y = t = (c, e).
                    (dx[k], dx[m + k]) = (u * c + v * e, u * e - v * c);
                    (dy[k], dy[m + k]) = (u * a - v * b, u * b + v * a);
                }
            }
        }
    }
    [dx, dy]
}

/// The loss of a row of scores (the positive first) and `∂L/∂s` into `g`.
fn row_loss(loss: KgeLoss, s: &[f32], g: &mut [f32]) -> f32 {
    match loss {
        KgeLoss::Softmax => {
            let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (gj, &x) in g.iter_mut().zip(s) {
                *gj = (x - max).exp();
            }
            let z = g.iter().fold(0.0f32, |a, &e| a + e);
            for (j, gj) in g.iter_mut().enumerate() {
                *gj = *gj / z - if j == 0 { 1.0 } else { 0.0 };
            }
            max + z.ln() - s[0]
        }
        KgeLoss::Logistic => {
            let softplus = |x: f32| if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() };
            let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
            let n = (s.len() - 1).max(1) as f32;
            g[0] = -sigmoid(-s[0]);
            let mut l = softplus(-s[0]);
            for j in 1..s.len() {
                l += softplus(s[j]) / n;
                g[j] = sigmoid(s[j]) / n;
            }
            l
        }
    }
}

/// One step of `batch` on the batch's entity rows (`rows × 2·dim`: embedding, Adagrad sums)
/// and all relation rows (`relations × 2·dim`), in place; returns the loss summed over the
/// positives and sides (with the L2 term), in f64 in the canonical order.
pub fn chunked_step(
    shape: &KgeShape,
    hyper: &KgeHyper,
    batch: &ChunkedBatch,
    entities: &mut [f32],
    relations: &mut [f32],
) -> Result<f64, KgeError> {
    batch.check(shape)?;
    check_params(shape, batch.rows, entities.len(), relations.len())?;
    let d = shape.dim;
    let emb = |m: &[f32], i: u32| -> Vec<f32> { m[i as usize * 2 * d..][..d].to_vec() };
    let two_reg = 2.0 * hyper.reg;
    let (mut ent_g, mut rel_g) = (Contributions::new(d), Contributions::new(d));
    let mut loss = 0.0f64;
    for (c, pos) in batch.positives.chunks(batch.chunk).enumerate() {
        for side in 0..2 {
            let negs = batch.side_negatives(c, side);
            let (p, n) = (pos.len(), negs.len());
            // The side's inputs per positive: (query's entity, relation, target).
            let parts: Vec<[u32; 3]> = pos
                .iter()
                .map(|&[h, r, t]| if side == 0 { [h, r, t] } else { [t, r, h] })
                .collect();
            let nmat: Vec<Vec<f32>> = negs.iter().map(|&e| emb(entities, e)).collect();
            let mut q = vec![vec![0.0f32; d]; p];
            for (qi, &[e, r, _]) in q.iter_mut().zip(&parts) {
                let (re, ee) = (emb(relations, r), emb(entities, e));
                // Tail side q(h, r); head side q(r, t).
                if side == 0 {
                    query(shape.model, 0, &ee, &re, qi)
                } else {
                    query(shape.model, 1, &re, &ee, qi)
                }
            }
            // Scores: the positive, then S = Q·Nᵀ; the loss per row; G = ∂L/∂S.
            let mut g = vec![0.0f32; p * (n + 1)];
            let mut s = vec![0.0f32; n + 1];
            for i in 0..p {
                s[0] = dot(&q[i], &emb(entities, parts[i][2]));
                for j in 0..n {
                    s[1 + j] = dot(&q[i], &nmat[j]);
                }
                let l = row_loss(hyper.loss, &s, &mut g[i * (n + 1)..(i + 1) * (n + 1)]);
                let [e, r, t] = parts[i];
                let sq = |v: &[f32]| dot(v, v);
                let reg = hyper.reg
                    * (sq(&emb(entities, e)) + sq(&emb(relations, r)) + sq(&emb(entities, t)));
                loss += f64::from(l) + f64::from(reg);
            }
            // Backward: dQ = g_pos·T + G·N, dT = g_pos·Q, dN = Gᵀ·Q; then per positive the
            // contributions in the canonical order.
            for i in 0..p {
                let gi = &g[i * (n + 1)..(i + 1) * (n + 1)];
                let [e, r, t] = parts[i];
                let target = emb(entities, t);
                let mut dq: Vec<f32> = target.iter().map(|&x| gi[0] * x).collect();
                for j in 0..n {
                    for k in 0..d {
                        dq[k] += gi[1 + j] * nmat[j][k];
                    }
                }
                let (ee, re) = (emb(entities, e), emb(relations, r));
                let [de, dr] = if side == 0 {
                    query_back(shape.model, 0, &ee, &re, &dq)
                } else {
                    let [dr, de] = query_back(shape.model, 1, &re, &ee, &dq);
                    [de, dr]
                };
                ent_g.push(e, de.iter().zip(&ee).map(|(g, x)| g + two_reg * x));
                ent_g.push(t, q[i].iter().zip(&target).map(|(qk, x)| gi[0] * qk + two_reg * x));
                rel_g.push(r, dr.iter().zip(&re).map(|(g, x)| g + two_reg * x));
            }
            for (j, &row) in negs.iter().enumerate() {
                let mut dn = vec![0.0f32; d];
                for (i, qi) in q.iter().enumerate() {
                    let gij = g[i * (n + 1) + 1 + j];
                    for k in 0..d {
                        dn[k] += gij * qi[k];
                    }
                }
                ent_g.push(row, dn.into_iter());
            }
        }
    }
    // One fused pass per entity row: its contributions in order, then Adagrad.
    for (row, list) in ent_g.by_owner(batch.rows).into_iter().enumerate() {
        if list.is_empty() {
            continue;
        }
        let mut grad = vec![0.0f32; d];
        for k in list {
            grad.iter_mut().zip(ent_g.get(k)).for_each(|(a, b)| *a += b);
        }
        adagrad(&mut entities[row * 2 * d..(row + 1) * 2 * d], &grad, hyper);
    }
    // Relations: each one's contributions summed by a fixed-shape tree, then Adagrad.
    for (r, list) in rel_g.by_owner(shape.relations).into_iter().enumerate() {
        if list.is_empty() {
            continue;
        }
        let grad: Vec<f32> =
            (0..d).map(|k| tree_sum(list.iter().map(|&i| rel_g.get(i)[k]).collect())).collect();
        adagrad(&mut relations[r * 2 * d..(r + 1) * 2 * d], &grad, hyper);
    }
    Ok(loss)
}

/// Adagrad on one row (`2·dim`: parameters, sums) with gradient `g`.
fn adagrad(row: &mut [f32], g: &[f32], hyper: &KgeHyper) {
    let (theta, sum) = row.split_at_mut(g.len());
    for k in 0..g.len() {
        sum[k] += g[k] * g[k];
        theta[k] -= hyper.lr * g[k] / (sum[k].sqrt() + hyper.eps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::reference_step;
    use crate::workload::Rng;

    /// A batch of `positives` over `rows` rows, chunks of `chunk` (the last shorter when it
    /// does not divide), `negatives` per chunk side.
    fn batch(
        rng: &mut Rng,
        rows: usize,
        positives: usize,
        chunk: usize,
        negatives: usize,
        relations: usize,
    ) -> ChunkedBatch {
        let row = |rng: &mut Rng| rng.below(rows as u64) as u32;
        let positives = (0..positives)
            .map(|_| [row(rng), rng.below(relations as u64) as u32, row(rng)])
            .collect::<Vec<_>>();
        let chunks = positives.len().div_ceil(chunk);
        let chunk_negatives = (0..chunks * 2 * negatives).map(|_| row(rng)).collect();
        ChunkedBatch { rows, positives, chunk, negatives, chunk_negatives }
    }

    /// The largest difference from the reference, relative to the vector's largest magnitude.
    fn rel_err(got: &[f32], want: &[f64]) -> f64 {
        let scale = want.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
        got.iter().zip(want).map(|(&g, &w)| (f64::from(g) - w).abs()).fold(0.0, f64::max) / scale
    }

    /// Against the f64 reference on the batch expanded into groups: the rows, relations and
    /// Adagrad sums after the step and the loss agree to f32 rounding, for both models and
    /// losses, with L2, and with a short last chunk (7 positives in chunks of 3).
    #[test]
    fn the_chunked_step_equals_the_reference_on_its_groups() {
        for model in [KgeModel::DistMult, KgeModel::ComplEx] {
            for loss in [KgeLoss::Softmax, KgeLoss::Logistic] {
                for (positives, chunk) in [(7, 3), (6, 3), (1, 4)] {
                    let shape = KgeShape { model, dim: 8, relations: 3 };
                    let mut rng = Rng::new(11);
                    let b = batch(&mut rng, 12, positives, chunk, 4, shape.relations);
                    let ent = rng.params(b.rows, shape.dim);
                    let rel = rng.params(shape.relations, shape.dim);
                    let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss };
                    let want = reference_step(&shape, &hyper, &b.groups(), &ent, &rel).unwrap();
                    let (mut e, mut r) = (ent.clone(), rel.clone());
                    let got = chunked_step(&shape, &hyper, &b, &mut e, &mut r).unwrap();
                    let case = format!("{model:?} {loss:?} {positives}/{chunk}");
                    assert!(
                        (got - want.loss).abs() <= 1e-5 * want.loss.abs().max(1.0),
                        "{case}: loss {got} vs {}",
                        want.loss
                    );
                    assert!(rel_err(&e, &want.entities) < 1e-5, "{case}: entities");
                    assert!(rel_err(&r, &want.relations) < 1e-5, "{case}: relations");
                    assert_ne!(e, ent, "{case}: the step changed the rows");
                }
            }
        }
    }

    /// The check has teeth: dropping the head side (only tail-corrupted groups) is caught.
    #[test]
    fn a_step_without_its_head_side_is_caught() {
        let shape = KgeShape { model: KgeModel::ComplEx, dim: 8, relations: 3 };
        let mut rng = Rng::new(5);
        let b = batch(&mut rng, 12, 6, 3, 4, shape.relations);
        let ent = rng.params(b.rows, shape.dim);
        let rel = rng.params(shape.relations, shape.dim);
        let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.0, loss: KgeLoss::Softmax };
        let mut groups = b.groups();
        let g = groups.group;
        groups.triples = groups.triples.chunks(g).step_by(2).flatten().copied().collect();
        let want = reference_step(&shape, &hyper, &groups, &ent, &rel).unwrap();
        let (mut e, mut r) = (ent.clone(), rel.clone());
        chunked_step(&shape, &hyper, &b, &mut e, &mut r).unwrap();
        assert!(rel_err(&e, &want.entities) > 1e-4);
    }

    #[test]
    fn the_tree_sum_has_a_fixed_shape() {
        assert_eq!(tree_sum(vec![]), 0.0);
        assert_eq!(tree_sum(vec![1.0, 2.0, 3.0]), (1.0 + 2.0) + 3.0);
        // ((a + b) + (c + d)) + e, not a serial sum: 1e8 + 1 + (-1e8) + 1 + 1.
        let v = vec![1e8f32, 1.0, -1e8, 1.0, 1.0];
        assert_eq!(tree_sum(v.clone()), ((1e8f32 + 1.0) + (-1e8 + 1.0)) + 1.0);
    }

    #[test]
    fn bad_ids_are_refused_before_anything_changes() {
        let shape = KgeShape { model: KgeModel::DistMult, dim: 4, relations: 2 };
        let mut rng = Rng::new(3);
        let mut b = batch(&mut rng, 6, 4, 2, 2, shape.relations);
        b.positives[1][1] = 9;
        let (mut e, mut r) = (rng.params(6, 4), rng.params(2, 4));
        let before = (e.clone(), r.clone());
        assert!(chunked_step(&shape, &KgeHyper::new(0.1), &b, &mut e, &mut r).is_err());
        assert_eq!((e, r), before);
    }
}
