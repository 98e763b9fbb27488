//! The KGE step in the CPU trainer's shape: the host port of the GPU step
//! ([`ChunkedKernels`](super::ChunkedKernels), `src/kernels/kge_chunked.cu`), whose math and
//! reduction order it fixes (issue 56, item 2): one function per kernel, over the same slots,
//! computing the same f32 expressions in the same order. Only the batch's ids go in
//! ([`ChunkedBatch`], packed by [`ChunkedIds`]: positives, each chunk's shared negatives and the
//! contribution lists, kilobytes), not the expanded scored triples ([`KgeBatch`](super::KgeBatch)) the older
//! kernels take.
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
//! So the result depends on the batch and the state only, never on a schedule. The lists are
//! [`ChunkedIds`]' CSRs, the same words the device reads. The products are summed serially
//! here; on the device cuBLAS sums them in its own fixed order, so the device equals this port
//! within f32 rounding (`tests/cuda_chunked.rs`), and itself bit for bit.
//!
//! Checked here against the f64 reference on the same batch expanded into groups
//! ([`ChunkedBatch::groups`], [`reference_step`](super::reference_step)), with a short last
//! chunk as an epoch's last batch has, and in `ordo-train` against its CPU step
//! (`train/tests/gpu_reference.rs`).

use super::chunked_ids::{KIND_QUERY, KIND_TARGET};
use super::{
    ChunkLimits, ChunkedBatch, ChunkedIds, KgeError, KgeHyper, KgeLoss, KgeModel, KgeShape,
    check_params,
};

/// `Σ v` by the pairwise tree whose shape depends only on the number of terms: level by level,
/// neighbours added, an odd last one carried up. Walked as `kc_relation_update` walks it: a
/// stack of subtree sums, two of the same height merged (left + right), then the stack folded
/// from its top (`tests::level_sum` is the level-by-level definition it is checked against).
fn tree_sum(v: impl Iterator<Item = f32>) -> f32 {
    let mut stack: Vec<(f32, u32)> = Vec::new();
    for mut x in v {
        let mut height = 0;
        while let Some(&(left, h)) = stack.last() {
            if h != height {
                break;
            }
            x += left; // left + right (f32 addition commutes bit for bit)
            stack.pop();
            height += 1;
        }
        stack.push((x, height));
    }
    let mut sums = stack.into_iter().rev().map(|(s, _)| s);
    let top = sums.next().unwrap_or(0.0);
    sums.fold(top, |g, left| left + g)
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

/// The step's buffers, slot-indexed as the device's (`src/kernels/kge_chunked.cu` says what
/// each holds).
struct Buffers {
    q: Vec<f32>,
    t: Vec<f32>,
    n: Vec<f32>,
    s: Vec<f32>,
    g0: Vec<f32>,
    dq: Vec<f32>,
    dn: Vec<f32>,
    ec: Vec<f32>,
    rc: Vec<f32>,
    losses: Vec<f32>,
}

/// One step of `batch` on the batch's entity rows (`rows × 2·dim`: embedding, Adagrad sums)
/// and all relation rows (`relations × 2·dim`), in place; returns the loss summed over the
/// positives and sides (with the L2 term), in f64 in the canonical order.
///
/// Each stage is a function named after the kernel it specifies (`kc_gather`, the product
/// `S = Q·Nᵀ`, `kc_row_loss`, the products `dQ = G·N` and `dN = Gᵀ·Q`, `kc_query_back`,
/// `kc_entity_update`, `kc_relation_update`), over the same slots and in the same order; the
/// products, which cuBLAS runs on the device in its own order, are summed serially here.
pub fn chunked_step(
    shape: &KgeShape,
    hyper: &KgeHyper,
    batch: &ChunkedBatch,
    entities: &mut [f32],
    relations: &mut [f32],
) -> Result<f64, KgeError> {
    batch.check(shape)?;
    // The tables' lengths are checked once, by `chunked_step_ids` (the ids keep `batch.rows`).
    let ids = ChunkedIds::build(batch, shape, &ChunkLimits::of(batch, shape.relations))?;
    chunked_step_ids(shape, hyper, &ids, entities, relations)
}

/// [`chunked_step`] on a batch already packed ([`ChunkedIds`], for any limits it fits: padded
/// slots add nothing), as the device takes it.
pub fn chunked_step_ids(
    shape: &KgeShape,
    hyper: &KgeHyper,
    ids: &ChunkedIds,
    entities: &mut [f32],
    relations: &mut [f32],
) -> Result<f64, KgeError> {
    check_params(shape, ids.rows(), entities.len(), relations.len())?;
    if ids.limits().relations != shape.relations {
        let (got, limit) = (shape.relations, ids.limits().relations);
        return Err(KgeError::OverLimits { what: "relations", got, limit });
    }
    let (l, d) = (*ids.limits(), shape.dim);
    let (rows, negs) = (l.slot_rows() * d, l.negative_slots() * d);
    let scores = l.slot_rows() * l.negatives;
    let mut b = Buffers {
        q: vec![0.0; rows],
        t: vec![0.0; rows],
        n: vec![0.0; negs],
        s: vec![0.0; scores],
        g0: vec![0.0; l.slot_rows()],
        dq: vec![0.0; rows],
        dn: vec![0.0; negs],
        ec: vec![0.0; rows],
        rc: vec![0.0; rows],
        losses: vec![0.0; 2 * l.slot_rows()],
    };
    gather(shape, ids, entities, relations, &mut b);
    forward_product(&l, d, &mut b);
    row_loss_all(shape, hyper, ids, entities, relations, &mut b);
    backward_products(&l, d, &mut b);
    query_back_all(shape, hyper, ids, entities, relations, &mut b);
    entity_update(d, hyper, ids, &b, entities);
    relation_update(d, hyper, ids, &b, relations);
    Ok(ids.total_loss(&b.losses))
}

fn emb(m: &[f32], d: usize, i: u32) -> &[f32] {
    &m[i as usize * 2 * d..][..d]
}

/// `kc_gather`: Q and T at every row slot, N at every negative slot (zeros past the batch).
fn gather(shape: &KgeShape, ids: &ChunkedIds, ent: &[f32], rel: &[f32], b: &mut Buffers) {
    let (d, l) = (shape.dim, ids.limits());
    for row in 0..l.slot_rows() {
        if let Some((side, [h, r, t])) = ids.slot_positive(row) {
            let q = &mut b.q[row * d..][..d];
            let (re, target) = (emb(rel, d, r), if side == 0 { t } else { h });
            if side == 0 {
                query(shape.model, 0, emb(ent, d, h), re, q);
            } else {
                query(shape.model, 1, re, emb(ent, d, t), q);
            }
            b.t[row * d..][..d].copy_from_slice(emb(ent, d, target));
        }
    }
    for slot in 0..l.negative_slots() {
        if slot / l.negatives < ids.side_chunks() {
            b.n[slot * d..][..d].copy_from_slice(emb(ent, d, ids.negative(slot)));
        }
    }
}

/// The product `S = Q·Nᵀ` per side-chunk, over the fixed shape.
fn forward_product(l: &ChunkLimits, d: usize, b: &mut Buffers) {
    let (p, n) = (l.chunk, l.negatives);
    for row in 0..l.slot_rows() {
        let sc = row / p;
        for j in 0..n {
            b.s[row * n + j] = dot(&b.q[row * d..][..d], &b.n[(sc * n + j) * d..][..d]);
        }
    }
}

/// `kc_row_loss`: per row slot the positive's score, the loss of `[s0, S]`, its gradient into
/// `g0` and `S` (in place), and the row's loss and L2 term.
fn row_loss_all(
    shape: &KgeShape,
    hyper: &KgeHyper,
    ids: &ChunkedIds,
    ent: &[f32],
    rel: &[f32],
    b: &mut Buffers,
) {
    let (d, n) = (shape.dim, ids.limits().negatives);
    let mut s = vec![0.0f32; n + 1];
    let mut g = vec![0.0f32; n + 1];
    for row in 0..ids.limits().slot_rows() {
        let sr = &mut b.s[row * n..][..n];
        let Some((side, [h, r, t])) = ids.slot_positive(row) else {
            sr.fill(0.0);
            continue;
        };
        s[0] = dot(&b.q[row * d..][..d], &b.t[row * d..][..d]);
        s[1..].copy_from_slice(sr);
        let loss = row_loss(hyper.loss, &s, &mut g);
        b.g0[row] = g[0];
        sr.copy_from_slice(&g[1..]);
        let (e, target) = if side == 0 { (h, t) } else { (t, h) };
        let sq = |v: &[f32]| dot(v, v);
        let reg = sq(emb(ent, d, e)) + sq(emb(rel, d, r)) + sq(emb(ent, d, target));
        b.losses[2 * row] = loss;
        b.losses[2 * row + 1] = hyper.reg * reg;
    }
}

/// The products `dQ = G·N` and `dN = Gᵀ·Q` per side-chunk, over the fixed shape.
fn backward_products(l: &ChunkLimits, d: usize, b: &mut Buffers) {
    let (p, n) = (l.chunk, l.negatives);
    for row in 0..l.slot_rows() {
        let sc = row / p;
        for k in 0..d {
            b.dq[row * d + k] =
                (0..n).fold(0.0f32, |a, j| a + b.s[row * n + j] * b.n[(sc * n + j) * d + k]);
        }
    }
    for slot in 0..l.negative_slots() {
        let (sc, j) = (slot / n, slot % n);
        for k in 0..d {
            b.dn[slot * d + k] = (0..p).fold(0.0f32, |a, i| {
                let row = sc * p + i;
                a + b.s[row * n + j] * b.q[row * d + k]
            });
        }
    }
}

/// `kc_query_back`: per row slot `dq = (G·N) + g0·t`, then the chain rule to the query's
/// entity (`ec`) and relation (`rc`), each with its L2 term.
fn query_back_all(
    shape: &KgeShape,
    hyper: &KgeHyper,
    ids: &ChunkedIds,
    ent: &[f32],
    rel: &[f32],
    b: &mut Buffers,
) {
    let d = shape.dim;
    let two_reg = 2.0 * hyper.reg;
    for row in 0..ids.limits().slot_rows() {
        let Some((side, [h, r, t])) = ids.slot_positive(row) else { continue };
        let gp = b.g0[row];
        let dq: Vec<f32> = (0..d).map(|k| b.dq[row * d + k] + gp * b.t[row * d + k]).collect();
        let (ee, re) = (emb(ent, d, if side == 0 { h } else { t }), emb(rel, d, r));
        let (de, dr) = if side == 0 {
            let [dx, dy] = query_back(shape.model, 0, ee, re, &dq);
            (dx, dy)
        } else {
            let [dx, dy] = query_back(shape.model, 1, re, ee, &dq);
            (dy, dx)
        };
        for k in 0..d {
            b.ec[row * d + k] = de[k] + two_reg * ee[k];
            b.rc[row * d + k] = dr[k] + two_reg * re[k];
        }
    }
}

/// `kc_entity_update`: each entity row's contributions in its list's order, then Adagrad.
fn entity_update(d: usize, hyper: &KgeHyper, ids: &ChunkedIds, b: &Buffers, ent: &mut [f32]) {
    let two_reg = 2.0 * hyper.reg;
    let mut grad = vec![0.0f32; d];
    for row in 0..ids.rows() {
        let items = ids.entity_items(row);
        if items.is_empty() {
            continue;
        }
        let own = &ent[row * 2 * d..][..d];
        for (k, g) in grad.iter_mut().enumerate() {
            *g = items.iter().fold(0.0f32, |acc, &item| {
                let (slot, kind) = ((item >> 2) as usize, item & 3);
                let c = match kind {
                    KIND_QUERY => b.ec[slot * d + k],
                    KIND_TARGET => b.g0[slot] * b.q[slot * d + k] + two_reg * own[k],
                    _ => b.dn[slot * d + k],
                };
                acc + c
            });
        }
        adagrad(&mut ent[row * 2 * d..(row + 1) * 2 * d], &grad, hyper);
    }
}

/// `kc_relation_update`: each relation's contributions summed by the fixed-shape tree, then
/// Adagrad.
fn relation_update(d: usize, hyper: &KgeHyper, ids: &ChunkedIds, b: &Buffers, rel: &mut [f32]) {
    for r in 0..ids.limits().relations {
        let items = ids.relation_items(r);
        if items.is_empty() {
            continue;
        }
        let grad: Vec<f32> = (0..d)
            .map(|k| tree_sum(items.iter().map(|&slot| b.rc[slot as usize * d + k])))
            .collect();
        adagrad(&mut rel[r * 2 * d..(r + 1) * 2 * d], &grad, hyper);
    }
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

    /// The tree's definition: level by level, neighbours added, an odd last one carried up.
    fn level_sum(mut v: Vec<f32>) -> f32 {
        while v.len() > 1 {
            v = v.chunks(2).map(|p| if p.len() == 2 { p[0] + p[1] } else { p[0] }).collect();
        }
        v.first().copied().unwrap_or(0.0)
    }

    #[test]
    fn the_tree_sum_has_a_fixed_shape() {
        assert_eq!(tree_sum([].into_iter()), 0.0);
        assert_eq!(tree_sum([1.0, 2.0, 3.0].into_iter()), (1.0 + 2.0) + 3.0);
        // ((a + b) + (c + d)) + e, not a serial sum: 1e8 + 1 + (-1e8) + 1 + 1.
        let v = [1e8f32, 1.0, -1e8, 1.0, 1.0];
        assert_eq!(tree_sum(v.into_iter()), ((1e8f32 + 1.0) + (-1e8 + 1.0)) + 1.0);
        // The stack walk (the kernel's) is the level-by-level tree, bit for bit, at every length.
        let mut rng = Rng::new(8);
        for len in 0..70 {
            let v: Vec<f32> =
                (0..len).map(|_| (rng.below(1 << 20) as f32 - 5e5) * 1.37e-3).collect();
            let want = level_sum(v.clone());
            assert_eq!(tree_sum(v.into_iter()).to_bits(), want.to_bits(), "{len} terms");
        }
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
