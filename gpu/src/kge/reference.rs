//! The f64 reference of the KGE step: the specification the CUDA kernels are tested against
//! (within 1e-5 relative), written for obviousness rather than speed.

use super::{KgeBatch, KgeError, KgeHyper, KgeLoss, KgeModel, KgeShape, check_params};

/// The score `s(h, r, t)` (see the module docs of [`crate::kge`]).
pub fn score(model: KgeModel, h: &[f64], r: &[f64], t: &[f64]) -> f64 {
    match model {
        KgeModel::DistMult => (0..h.len()).map(|k| h[k] * r[k] * t[k]).sum(),
        KgeModel::ComplEx => {
            let m = h.len() / 2;
            (0..m)
                .map(|k| {
                    let (a, b, c, d, e, f) = (h[k], h[m + k], r[k], r[m + k], t[k], t[m + k]);
                    a * c * e + b * c * f + a * d * f - b * d * e
                })
                .sum()
        }
    }
}

/// The partial derivatives `(∂s/∂h, ∂s/∂r, ∂s/∂t)` of the score, each of length `dim`.
pub fn partials(model: KgeModel, h: &[f64], r: &[f64], t: &[f64]) -> [Vec<f64>; 3] {
    let n = h.len();
    let (mut dh, mut dr, mut dt) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    match model {
        KgeModel::DistMult => {
            for k in 0..n {
                dh[k] = r[k] * t[k];
                dr[k] = h[k] * t[k];
                dt[k] = h[k] * r[k];
            }
        }
        KgeModel::ComplEx => {
            let m = n / 2;
            for k in 0..m {
                let (a, b, c, d, e, f) = (h[k], h[m + k], r[k], r[m + k], t[k], t[m + k]);
                (dh[k], dh[m + k]) = (c * e + d * f, c * f - d * e);
                (dr[k], dr[m + k]) = (a * e + b * f, a * f - b * e);
                (dt[k], dt[m + k]) = (a * c - b * d, b * c + a * d);
            }
        }
    }
    [dh, dr, dt]
}

/// Everything one reference step computes, in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct KgeReference {
    /// The loss summed over the groups (with the L2 term).
    pub loss: f64,
    /// One score per scored triple.
    pub scores: Vec<f64>,
    /// `∂L/∂s` per scored triple.
    pub coefficients: Vec<f64>,
    /// Gradient per entity row (`rows × dim`).
    pub entity_grads: Vec<f64>,
    /// Gradient per relation (`relations × dim`).
    pub relation_grads: Vec<f64>,
    /// Entity rows after Adagrad (`rows × 2·dim`: embedding, sums).
    pub entities: Vec<f64>,
    /// Relation rows after Adagrad (`relations × 2·dim`).
    pub relations: Vec<f64>,
}

/// The loss of `batch` at the given (f64) parameters, rows `2·dim` wide.
pub fn reference_loss(
    shape: &KgeShape,
    hyper: &KgeHyper,
    batch: &KgeBatch,
    entities: &[f64],
    relations: &[f64],
) -> f64 {
    let scores = scores(shape, batch, entities, relations);
    group_loss(hyper.loss, batch, &scores).0 + l2(shape, hyper, batch, entities, relations)
}

fn emb(rows: &[f64], i: u32, dim: usize) -> &[f64] {
    &rows[i as usize * 2 * dim..i as usize * 2 * dim + dim]
}

fn scores(shape: &KgeShape, batch: &KgeBatch, ent: &[f64], rel: &[f64]) -> Vec<f64> {
    let d = shape.dim;
    batch
        .triples
        .iter()
        .map(|&[h, r, t]| score(shape.model, emb(ent, h, d), emb(rel, r, d), emb(ent, t, d)))
        .collect()
}

/// The positives' triples (the first of each group).
fn positives(batch: &KgeBatch) -> impl Iterator<Item = &[u32; 3]> {
    batch.triples.iter().step_by(batch.group.max(1))
}

/// `reg · Σ over the groups' positives of ‖h‖² + ‖r‖² + ‖t‖²`.
fn l2(shape: &KgeShape, hyper: &KgeHyper, batch: &KgeBatch, ent: &[f64], rel: &[f64]) -> f64 {
    let d = shape.dim;
    let sq = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>();
    let sum: f64 = positives(batch)
        .map(|&[h, r, t]| sq(emb(ent, h, d)) + sq(emb(rel, r, d)) + sq(emb(ent, t, d)))
        .sum();
    f64::from(hyper.reg) * sum
}

fn softplus(x: f64) -> f64 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// (loss summed over the groups, ∂L/∂s per score), without the L2 term.
fn group_loss(loss: KgeLoss, batch: &KgeBatch, scores: &[f64]) -> (f64, Vec<f64>) {
    let mut coef = vec![0.0; scores.len()];
    let mut total = 0.0;
    for (g, s) in scores.chunks(batch.group).enumerate() {
        let c = &mut coef[g * batch.group..(g + 1) * batch.group];
        match loss {
            KgeLoss::Softmax => {
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - max).exp()).sum();
                total += max + z.ln() - s[0];
                for (j, x) in s.iter().enumerate() {
                    c[j] = (x - max).exp() / z - if j == 0 { 1.0 } else { 0.0 };
                }
            }
            KgeLoss::Logistic => {
                let n = (s.len() - 1).max(1) as f64;
                total += softplus(-s[0]);
                c[0] = -sigmoid(-s[0]);
                for j in 1..s.len() {
                    total += softplus(s[j]) / n;
                    c[j] = sigmoid(s[j]) / n;
                }
            }
        }
    }
    (total, coef)
}

fn adagrad(rows: &mut [f64], grads: &[f64], dim: usize, hyper: &KgeHyper) {
    let (lr, eps) = (f64::from(hyper.lr), f64::from(hyper.eps));
    for (row, g) in rows.chunks_mut(2 * dim).zip(grads.chunks(dim)) {
        let (theta, sum) = row.split_at_mut(dim);
        for k in 0..dim {
            sum[k] += g[k] * g[k];
            theta[k] -= lr * g[k] / (sum[k].sqrt() + eps);
        }
    }
}

/// One step of the KGE model in f64 on f32 parameters: `entities` are the batch's rows
/// (`batch.rows × 2·dim`), `relations` all relation rows (`relations × 2·dim`).
pub fn reference_step(
    shape: &KgeShape,
    hyper: &KgeHyper,
    batch: &KgeBatch,
    entities: &[f32],
    relations: &[f32],
) -> Result<KgeReference, KgeError> {
    batch.check(shape)?;
    check_params(shape, batch.rows, entities.len(), relations.len())?;
    let d = shape.dim;
    let mut ent: Vec<f64> = entities.iter().map(|&x| f64::from(x)).collect();
    let mut rel: Vec<f64> = relations.iter().map(|&x| f64::from(x)).collect();
    let scores = scores(shape, batch, &ent, &rel);
    let (loss, coefficients) = group_loss(hyper.loss, batch, &scores);
    let loss = loss + l2(shape, hyper, batch, &ent, &rel);
    let two_reg = 2.0 * f64::from(hyper.reg);
    let mut entity_grads = vec![0.0; batch.rows * d];
    let mut relation_grads = vec![0.0; shape.relations * d];
    for (j, &[h, r, t]) in batch.triples.iter().enumerate() {
        let (he, re, te) = (emb(&ent, h, d), emb(&rel, r, d), emb(&ent, t, d));
        let [dh, dr, dt] = partials(shape.model, he, re, te);
        let c = coefficients[j];
        // The group's positive carries the L2 term.
        let w = if j % batch.group == 0 { two_reg } else { 0.0 };
        for k in 0..d {
            entity_grads[h as usize * d + k] += c * dh[k] + w * he[k];
            relation_grads[r as usize * d + k] += c * dr[k] + w * re[k];
            entity_grads[t as usize * d + k] += c * dt[k] + w * te[k];
        }
    }
    adagrad(&mut ent, &entity_grads, d, hyper);
    adagrad(&mut rel, &relation_grads, d, hyper);
    Ok(KgeReference {
        loss,
        scores,
        coefficients,
        entity_grads,
        relation_grads,
        entities: ent,
        relations: rel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Rng, random_kge_batch};

    fn setup(model: KgeModel, seed: u64) -> (KgeShape, KgeBatch, Vec<f32>, Vec<f32>) {
        let shape = KgeShape { model, dim: 6, relations: 3 };
        let mut rng = Rng::new(seed);
        let batch = random_kge_batch(&mut rng, 5, 3, 4, shape.relations);
        let ent = rng.params(batch.rows, shape.dim);
        let rel = rng.params(shape.relations, shape.dim);
        (shape, batch, ent, rel)
    }

    /// The analytic gradients equal central finite differences of the loss (in f64).
    #[test]
    fn gradients_match_finite_differences() {
        let cases = [KgeModel::DistMult, KgeModel::ComplEx]
            .into_iter()
            .flat_map(|m| [(m, KgeLoss::Softmax), (m, KgeLoss::Logistic)]);
        for (model, loss) in cases {
            let (shape, batch, ent, rel) = setup(model, 7);
            let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss };
            let r = reference_step(&shape, &hyper, &batch, &ent, &rel).unwrap();
            let ent64: Vec<f64> = ent.iter().map(|&x| f64::from(x)).collect();
            let rel64: Vec<f64> = rel.iter().map(|&x| f64::from(x)).collect();
            let d = shape.dim;
            let h = 1e-6;
            let fd = |ent: &[f64], rel: &[f64], which: usize, idx: usize| {
                let (mut e1, mut r1) = (ent.to_vec(), rel.to_vec());
                let (mut e2, mut r2) = (ent.to_vec(), rel.to_vec());
                if which == 0 {
                    e1[idx] += h;
                    e2[idx] -= h;
                } else {
                    r1[idx] += h;
                    r2[idx] -= h;
                }
                (reference_loss(&shape, &hyper, &batch, &e1, &r1)
                    - reference_loss(&shape, &hyper, &batch, &e2, &r2))
                    / (2.0 * h)
            };
            for row in 0..batch.rows {
                for k in 0..d {
                    let want = fd(&ent64, &rel64, 0, row * 2 * d + k);
                    let got = r.entity_grads[row * d + k];
                    assert!(
                        (got - want).abs() < 1e-7,
                        "{model:?} {loss:?} entity {row}/{k}: {got} vs {want}"
                    );
                }
            }
            for rr in 0..shape.relations {
                for k in 0..d {
                    let want = fd(&ent64, &rel64, 1, rr * 2 * d + k);
                    let got = r.relation_grads[rr * d + k];
                    assert!(
                        (got - want).abs() < 1e-7,
                        "{model:?} {loss:?} relation {rr}/{k}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// ComplEx with zero imaginary parts is DistMult on the real parts.
    #[test]
    fn complex_with_real_embeddings_is_distmult() {
        let h = [0.3, -0.2, 0.0, 0.0];
        let r = [0.5, 0.7, 0.0, 0.0];
        let t = [-0.4, 0.9, 0.0, 0.0];
        let c = score(KgeModel::ComplEx, &h, &r, &t);
        let d = score(KgeModel::DistMult, &h[..2], &r[..2], &t[..2]);
        assert!((c - d).abs() < 1e-15);
        // And the imaginary parts matter: Re(h r conj t) with h = i, r = 1, t = i is 1.
        let c = score(KgeModel::ComplEx, &[0.0, 1.0], &[1.0, 0.0], &[0.0, 1.0]);
        assert!((c - 1.0).abs() < 1e-15);
    }

    /// Adagrad: one step by hand, and the sums travel in the row.
    #[test]
    fn adagrad_updates_embedding_and_sum() {
        let mut row = [1.0, 2.0, 0.0, 3.0];
        adagrad(&mut row, &[0.5, -1.0], 2, &KgeHyper { eps: 0.0, ..KgeHyper::new(0.1) });
        assert_eq!(row[2], 0.25);
        assert_eq!(row[3], 4.0);
        let lr = f64::from(0.1f32);
        assert!((row[0] - (1.0 - lr)).abs() < 1e-15);
        assert!((row[1] - (2.0 + lr / 2.0)).abs() < 1e-15);
    }

    /// A step lowers the loss of its own batch (small learning rate).
    #[test]
    fn a_step_lowers_the_batch_loss() {
        let (shape, batch, ent, rel) = setup(KgeModel::ComplEx, 11);
        let hyper = KgeHyper { lr: 0.01, eps: 1e-6, reg: 0.01, loss: KgeLoss::Softmax };
        let r = reference_step(&shape, &hyper, &batch, &ent, &rel).unwrap();
        let after = reference_loss(&shape, &hyper, &batch, &r.entities, &r.relations);
        assert!(after < r.loss, "{after} !< {}", r.loss);
    }

    #[test]
    fn wrong_parameter_lengths_are_typed_errors() {
        let (shape, batch, ent, rel) = setup(KgeModel::DistMult, 1);
        let hyper = KgeHyper::new(0.1);
        let err = reference_step(&shape, &hyper, &batch, &ent[1..], &rel).unwrap_err();
        assert!(matches!(err, KgeError::LengthMismatch { what: "entity rows", .. }));
    }
}
