//! Scoring functions of the bilinear KGE models and their gradients.
//!
//! Both models score a triple linearly in each entity: `score(h, r, t) = q(h, r) · t =
//! h · p(r, t)`. So ranking all tails (or all heads) is one matrix product with the entity table,
//! and shared negatives turn training into dense products too. `q` is the *tail query*, `p` the
//! *head query*.
//!
//! Embeddings are `dim` floats. ComplEx reads them as `dim / 2` complex numbers: real parts
//! first, imaginary parts second (so `dim` must be even).

use thiserror::Error;

/// The scoring function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScoreFn {
    /// DistMult (Yang et al. 2015): `Σ h∘r∘t`.
    #[value(name = "distmult")]
    DistMult,
    /// ComplEx (Trouillon et al. 2016): `Re Σ h∘r∘conj(t)`.
    #[value(name = "complex")]
    ComplEx,
}

/// A dimension the scoring function cannot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{model:?} needs a positive{} embedding dimension, got {dim}", if *.model == ScoreFn::ComplEx { " even" } else { "" })]
pub struct DimError {
    /// The scoring function.
    pub model: ScoreFn,
    /// The rejected dimension.
    pub dim: usize,
}

impl ScoreFn {
    /// `Ok` if `dim` suits this scoring function.
    pub fn check_dim(self, dim: usize) -> Result<(), DimError> {
        let ok = dim > 0 && (self == ScoreFn::DistMult || dim.is_multiple_of(2));
        if ok { Ok(()) } else { Err(DimError { model: self, dim }) }
    }

    /// Tail query `q` with `score(h, r, t) = q · t`, written into `q`.
    pub fn tail_query(self, h: &[f32], r: &[f32], q: &mut [f32]) {
        match self {
            ScoreFn::DistMult => {
                for ((q, h), r) in q.iter_mut().zip(h).zip(r) {
                    *q = h * r;
                }
            }
            ScoreFn::ComplEx => {
                let k = h.len() / 2;
                let (hr, hi) = h.split_at(k);
                let (rr, ri) = r.split_at(k);
                let (qr, qi) = q.split_at_mut(k);
                for j in 0..k {
                    qr[j] = hr[j] * rr[j] - hi[j] * ri[j];
                    qi[j] = hr[j] * ri[j] + hi[j] * rr[j];
                }
            }
        }
    }

    /// Head query `p` with `score(h, r, t) = h · p`, written into `p`.
    pub fn head_query(self, r: &[f32], t: &[f32], p: &mut [f32]) {
        match self {
            ScoreFn::DistMult => self.tail_query(r, t, p),
            ScoreFn::ComplEx => {
                let k = t.len() / 2;
                let (tr, ti) = t.split_at(k);
                let (rr, ri) = r.split_at(k);
                let (pr, pi) = p.split_at_mut(k);
                for j in 0..k {
                    pr[j] = rr[j] * tr[j] + ri[j] * ti[j];
                    pi[j] = rr[j] * ti[j] - ri[j] * tr[j];
                }
            }
        }
    }

    /// Back-propagate `dq` (the gradient w.r.t. the tail query) to `dh` and `dr` (added).
    pub fn tail_query_backward(
        self,
        h: &[f32],
        r: &[f32],
        dq: &[f32],
        dh: &mut [f32],
        dr: &mut [f32],
    ) {
        match self {
            ScoreFn::DistMult => {
                for j in 0..h.len() {
                    dh[j] += dq[j] * r[j];
                    dr[j] += dq[j] * h[j];
                }
            }
            ScoreFn::ComplEx => {
                let k = h.len() / 2;
                for j in 0..k {
                    let (hr, hi, rr, ri) = (h[j], h[k + j], r[j], r[k + j]);
                    let (gr, gi) = (dq[j], dq[k + j]);
                    dh[j] += gr * rr + gi * ri;
                    dh[k + j] += -gr * ri + gi * rr;
                    dr[j] += gr * hr + gi * hi;
                    dr[k + j] += -gr * hi + gi * hr;
                }
            }
        }
    }

    /// Back-propagate `dp` (the gradient w.r.t. the head query) to `dr` and `dt` (added).
    pub fn head_query_backward(
        self,
        r: &[f32],
        t: &[f32],
        dp: &[f32],
        dr: &mut [f32],
        dt: &mut [f32],
    ) {
        match self {
            ScoreFn::DistMult => self.tail_query_backward(t, r, dp, dt, dr),
            ScoreFn::ComplEx => {
                let k = t.len() / 2;
                for j in 0..k {
                    let (tr, ti, rr, ri) = (t[j], t[k + j], r[j], r[k + j]);
                    let (gr, gi) = (dp[j], dp[k + j]);
                    // p_re = rr·tr + ri·ti ; p_im = rr·ti − ri·tr
                    dr[j] += gr * tr + gi * ti;
                    dr[k + j] += gr * ti - gi * tr;
                    dt[j] += gr * rr - gi * ri;
                    dt[k + j] += gr * ri + gi * rr;
                }
            }
        }
    }

    /// `score(h, r, t)`.
    pub fn score(self, h: &[f32], r: &[f32], t: &[f32]) -> f32 {
        let mut q = vec![0.0; h.len()];
        self.tail_query(h, r, &mut q);
        dot(&q, t)
    }
}

/// `a · b`, summed left to right.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The training loss over one positive's scores and its negatives'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Loss {
    /// Softmax cross-entropy: `−s₀ + log Σᵢ exp sᵢ` over the positive (index 0) and negatives.
    #[value(name = "softmax")]
    Softmax,
    /// Logistic: `softplus(−s₀) + mean over negatives of softplus(sᵢ)`.
    #[value(name = "logistic")]
    Logistic,
}

fn softplus(x: f32) -> f32 {
    if x > 0.0 { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

impl Loss {
    /// The loss of `scores` (the positive first) and its gradient w.r.t. each score, written to
    /// `grad` (same length).
    pub fn loss_and_grad(self, scores: &[f32], grad: &mut [f32]) -> f32 {
        match self {
            Loss::Softmax => {
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for (g, s) in grad.iter_mut().zip(scores) {
                    *g = (s - max).exp();
                    sum += *g;
                }
                for g in grad.iter_mut() {
                    *g /= sum;
                }
                grad[0] -= 1.0;
                max + sum.ln() - scores[0]
            }
            Loss::Logistic => {
                let n = (scores.len() - 1).max(1) as f32;
                let mut loss = softplus(-scores[0]);
                grad[0] = -sigmoid(-scores[0]);
                for (g, s) in grad[1..].iter_mut().zip(&scores[1..]) {
                    loss += softplus(*s) / n;
                    *g = sigmoid(*s) / n;
                }
                loss
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn vecs(seed: &mut u64, n: usize, dim: usize) -> Vec<Vec<f32>> {
        (0..n).map(|_| (0..dim).map(|_| lcg(seed)).collect()).collect()
    }

    /// Central finite differences in f64 of `f` at `x`, coordinate by coordinate.
    fn numeric_grad(x: &[f32], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        let eps = 1e-5;
        let x: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        (0..x.len())
            .map(|i| {
                let (mut a, mut b) = (x.clone(), x.clone());
                a[i] += eps;
                b[i] -= eps;
                (f(&a) - f(&b)) / (2.0 * eps)
            })
            .collect()
    }

    /// Reference scores in f64, straight from the papers' definitions.
    fn score64(m: ScoreFn, h: &[f64], r: &[f64], t: &[f64]) -> f64 {
        match m {
            ScoreFn::DistMult => (0..h.len()).map(|j| h[j] * r[j] * t[j]).sum(),
            ScoreFn::ComplEx => {
                let k = h.len() / 2;
                (0..k)
                    .map(|j| {
                        let (hr, hi, rr, ri, tr, ti) =
                            (h[j], h[k + j], r[j], r[k + j], t[j], t[k + j]);
                        // Re((hr + i hi)(rr + i ri)(tr − i ti))
                        hr * rr * tr + hi * rr * ti + hr * ri * ti - hi * ri * tr
                    })
                    .sum()
            }
        }
    }

    #[test]
    fn both_queries_give_the_reference_score() {
        let mut seed = 1;
        for m in [ScoreFn::DistMult, ScoreFn::ComplEx] {
            let v = vecs(&mut seed, 3, 8);
            let (h, r, t) = (&v[0], &v[1], &v[2]);
            let want = score64(m, &to64(h), &to64(r), &to64(t));
            let mut p = vec![0.0; 8];
            m.head_query(r, t, &mut p);
            assert!((m.score(h, r, t) as f64 - want).abs() < 1e-5, "{m:?}");
            assert!((dot(h, &p) as f64 - want).abs() < 1e-5, "{m:?}");
        }
        // ComplEx is not symmetric in h and t; DistMult is.
        let v = vecs(&mut seed, 3, 8);
        assert!(
            (ScoreFn::ComplEx.score(&v[0], &v[1], &v[2])
                - ScoreFn::ComplEx.score(&v[2], &v[1], &v[0]))
            .abs()
                > 1e-3
        );
    }

    fn to64(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// The whole chain a training step uses: loss(q·t_pos, q·t_neg…) for the tail side and
    /// loss(h_pos·p, h_neg·p…) for the head side, gradients w.r.t. h, r and every tail/head.
    #[test]
    fn gradients_match_finite_differences() {
        let mut seed = 7;
        let dim = 6;
        for m in [ScoreFn::DistMult, ScoreFn::ComplEx] {
            for loss in [Loss::Softmax, Loss::Logistic] {
                let v = vecs(&mut seed, 5, dim);
                // v[0]=h, v[1]=r, v[2]=t (positive), v[3], v[4] = negative tails / heads.
                let loss64 = |x: &[f64], side: bool| -> f64 {
                    let e: Vec<&[f64]> = x.chunks(dim).collect();
                    let s: Vec<f64> = [2, 3, 4]
                        .iter()
                        .map(|&c| {
                            if side {
                                score64(m, e[0], e[1], e[c])
                            } else {
                                score64(m, e[c], e[1], e[0])
                            }
                        })
                        .collect();
                    match loss {
                        Loss::Softmax => -s[0] + s.iter().map(|x| x.exp()).sum::<f64>().ln(),
                        Loss::Logistic => {
                            let sp = |x: f64| (1.0 + x.exp()).ln();
                            sp(-s[0]) + (sp(s[1]) + sp(s[2])) / 2.0
                        }
                    }
                };
                let flat: Vec<f32> = v.concat();
                for side in [true, false] {
                    let want = numeric_grad(&flat, |x| loss64(x, side));
                    // Analytic: side=true is tail corruption with (h=v0, r=v1), candidates v2..v4;
                    // side=false is head corruption with (r=v1, t=v0), candidates v2..v4.
                    let mut query = vec![0.0; dim];
                    if side {
                        m.tail_query(&v[0], &v[1], &mut query);
                    } else {
                        m.head_query(&v[1], &v[0], &mut query);
                    }
                    let scores: Vec<f32> = (2..5).map(|c| dot(&query, &v[c])).collect();
                    let mut g = [0.0; 3];
                    let l = loss.loss_and_grad(&scores, &mut g);
                    assert!((l as f64 - loss64(&to64(&flat), side)).abs() < 1e-4);
                    let mut grad = vec![vec![0.0f32; dim]; 5];
                    let mut dq = vec![0.0; dim];
                    for (c, gc) in (2..5).zip(g) {
                        for j in 0..dim {
                            dq[j] += gc * v[c][j];
                            grad[c][j] += gc * query[j];
                        }
                    }
                    let (g0, rest) = grad.split_at_mut(1);
                    if side {
                        m.tail_query_backward(&v[0], &v[1], &dq, &mut g0[0], &mut rest[0]);
                    } else {
                        m.head_query_backward(&v[1], &v[0], &dq, &mut rest[0], &mut g0[0]);
                    }
                    for (i, (a, w)) in grad.concat().iter().zip(&want).enumerate() {
                        assert!(
                            (*a as f64 - w).abs() < 2e-3,
                            "{m:?} {loss:?} side {side} coord {i}: analytic {a} numeric {w}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn losses_are_stable_for_large_scores() {
        let mut g = [0.0; 3];
        let l = Loss::Softmax.loss_and_grad(&[1000.0, 0.0, -1000.0], &mut g);
        assert!(l.is_finite() && l.abs() < 1e-3, "{l}");
        let l = Loss::Logistic.loss_and_grad(&[-100.0, 100.0, 0.0], &mut g);
        assert!(l.is_finite() && (l - (100.0 + 50.0 + 0.5 * 2f32.ln())).abs() < 1e-2, "{l}");
        assert_eq!(
            ScoreFn::ComplEx.check_dim(5),
            Err(DimError { model: ScoreFn::ComplEx, dim: 5 })
        );
        assert!(ScoreFn::DistMult.check_dim(5).is_ok());
    }
}
