//! Scoring functions of the KGE models and their gradients.
//!
//! Every model scores a triple through a *query*: `score(h, r, t) = s(q(h, r), t) = s(p(r, t), h)`
//! where `q` is the *tail query*, `p` the *head query* and `s` the model's [`Interaction`]:
//!
//! - the bilinear models (DistMult, ComplEx) use the dot product, so ranking all tails (or all
//!   heads) is one matrix product with the entity table, and shared negatives turn training into
//!   dense products too;
//! - the translational models use a negated distance: TransE (Bordes et al. 2013)
//!   `−‖h + r − t‖` (L1 or L2) with `q = h + r`, `p = t − r`; RotatE (Sun et al. 2019)
//!   `−‖h ∘ r − t‖₂` with `|rⱼ| = 1`, `q = h ∘ r`, `p = t ∘ conj(r)` (a rotation preserves the
//!   norm, so `‖h ∘ r − t‖ = ‖h − t ∘ conj(r)‖`).
//!
//! Embeddings are `dim` floats. ComplEx and RotatE read them as `dim / 2` complex numbers: real
//! parts first, imaginary parts second (so `dim` must be even). A RotatE relation is `dim / 2`
//! phases θ (`r = e^{iθ}`, so the unit modulus holds by construction): see
//! [`ScoreFn::relation_dim`].

use super::matmul::mat_mul_into;
use super::softmax_exp::softmax_exps;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use thiserror::Error;

/// The scoring function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
pub enum ScoreFn {
    /// DistMult (Yang et al. 2015): `Σ h∘r∘t`.
    #[value(name = "distmult")]
    #[serde(rename = "distmult")]
    DistMult,
    /// ComplEx (Trouillon et al. 2016): `Re Σ h∘r∘conj(t)`.
    #[value(name = "complex")]
    #[serde(rename = "complex")]
    ComplEx,
    /// TransE (Bordes et al. 2013) with the L1 distance: `−‖h + r − t‖₁`.
    #[value(name = "transe-l1")]
    #[serde(rename = "transe-l1")]
    TransEL1,
    /// TransE with the L2 distance: `−‖h + r − t‖₂`.
    #[value(name = "transe-l2")]
    #[serde(rename = "transe-l2")]
    TransEL2,
    /// RotatE (Sun et al. 2019): `−‖h ∘ e^{iθ} − t‖₂`.
    #[value(name = "rotate")]
    #[serde(rename = "rotate")]
    RotatE,
}

/// How a query meets a candidate entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interaction {
    /// `q · c`.
    Dot,
    /// `−‖q − c‖₁`.
    L1,
    /// `−‖q − c‖₂`.
    L2,
}

/// A dimension the scoring function cannot use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{model:?} needs a positive{} embedding dimension, got {dim}", if .model.complex() { " even" } else { "" })]
pub struct DimError {
    /// The scoring function.
    pub model: ScoreFn,
    /// The rejected dimension.
    pub dim: usize,
}

impl ScoreFn {
    /// Whether embeddings are complex (real parts, then imaginary parts).
    pub fn complex(self) -> bool {
        matches!(self, ScoreFn::ComplEx | ScoreFn::RotatE)
    }

    /// `Ok` if `dim` suits this scoring function.
    pub fn check_dim(self, dim: usize) -> Result<(), DimError> {
        let ok = dim > 0 && (!self.complex() || dim.is_multiple_of(2));
        if ok { Ok(()) } else { Err(DimError { model: self, dim }) }
    }

    /// Floats per relation for entity dimension `dim`: `dim`, except RotatE's `dim / 2` phases.
    pub fn relation_dim(self, dim: usize) -> usize {
        if self == ScoreFn::RotatE { dim / 2 } else { dim }
    }

    /// How queries meet candidates.
    pub fn interaction(self) -> Interaction {
        match self {
            ScoreFn::DistMult | ScoreFn::ComplEx => Interaction::Dot,
            ScoreFn::TransEL1 => Interaction::L1,
            ScoreFn::TransEL2 | ScoreFn::RotatE => Interaction::L2,
        }
    }

    /// Tail query `q` with `score(h, r, t) = s(q, t)`, written into `q`.
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
            ScoreFn::TransEL1 | ScoreFn::TransEL2 => {
                for ((q, h), r) in q.iter_mut().zip(h).zip(r) {
                    *q = h + r;
                }
            }
            ScoreFn::RotatE => rotate(h, r, 1.0, q),
        }
    }

    /// Head query `p` with `score(h, r, t) = s(p, h)`, written into `p`.
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
            ScoreFn::TransEL1 | ScoreFn::TransEL2 => {
                for ((p, t), r) in p.iter_mut().zip(t).zip(r) {
                    *p = t - r;
                }
            }
            ScoreFn::RotatE => rotate(t, r, -1.0, p),
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
            ScoreFn::TransEL1 | ScoreFn::TransEL2 => {
                for j in 0..h.len() {
                    dh[j] += dq[j];
                    dr[j] += dq[j];
                }
            }
            ScoreFn::RotatE => rotate_backward(h, r, 1.0, dq, dh, dr),
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
            ScoreFn::TransEL1 | ScoreFn::TransEL2 => {
                for j in 0..t.len() {
                    dt[j] += dp[j];
                    dr[j] -= dp[j];
                }
            }
            ScoreFn::RotatE => rotate_backward(t, r, -1.0, dp, dt, dr),
        }
    }

    /// `score(h, r, t)`.
    pub fn score(self, h: &[f32], r: &[f32], t: &[f32]) -> f32 {
        let mut q = vec![0.0; h.len()];
        self.tail_query(h, r, &mut q);
        self.interaction().score(&q, t)
    }
}

/// `out = x ∘ e^{i·sign·θ}` for complex `x` (real parts, then imaginary) and phases `theta`.
fn rotate(x: &[f32], theta: &[f32], sign: f32, out: &mut [f32]) {
    let k = x.len() / 2;
    for j in 0..k {
        let (s, c) = (sign * theta[j]).sin_cos();
        let (xr, xi) = (x[j], x[k + j]);
        out[j] = xr * c - xi * s;
        out[k + j] = xr * s + xi * c;
    }
}

/// The gradient of [`rotate`]: `dout` back to `dx` (rotated back) and `dtheta` (added).
fn rotate_backward(
    x: &[f32],
    theta: &[f32],
    sign: f32,
    dout: &[f32],
    dx: &mut [f32],
    dt: &mut [f32],
) {
    let k = x.len() / 2;
    for j in 0..k {
        let (s, c) = (sign * theta[j]).sin_cos();
        let (xr, xi) = (x[j], x[k + j]);
        let (gr, gi) = (dout[j], dout[k + j]);
        dx[j] += gr * c + gi * s;
        dx[k + j] += -gr * s + gi * c;
        // ∂out/∂θ = sign · i · out.
        let (or, oi) = (xr * c - xi * s, xr * s + xi * c);
        dt[j] += sign * (-gr * oi + gi * or);
    }
}

impl Interaction {
    /// `s(q, c)`.
    pub fn score(self, q: &[f32], c: &[f32]) -> f32 {
        match self {
            Interaction::Dot => dot(q, c),
            Interaction::L1 => -lane_sum(q, c, |a, b| (a - b).abs()),
            Interaction::L2 => -lane_sum(q, c, |a, b| (a - b) * (a - b)).sqrt(),
        }
    }

    /// Add `g · ∂s/∂q` to `dq` and `g · ∂s/∂c` to `dc`. At `q = c` the L2 distance has no
    /// gradient; it counts as 0 there (as does `sign(0)` for L1).
    pub fn backward(self, q: &[f32], c: &[f32], g: f32, dq: &mut [f32], dc: &mut [f32]) {
        match self {
            Interaction::Dot => {
                for j in 0..q.len() {
                    dq[j] += g * c[j];
                    dc[j] += g * q[j];
                }
            }
            Interaction::L1 => {
                for j in 0..q.len() {
                    let d = q[j] - c[j];
                    let s = if d > 0.0 {
                        g
                    } else if d < 0.0 {
                        -g
                    } else {
                        0.0
                    };
                    dq[j] -= s;
                    dc[j] += s;
                }
            }
            Interaction::L2 => {
                let norm = -self.score(q, c);
                if norm > 0.0 {
                    let k = g / norm;
                    for j in 0..q.len() {
                        let d = k * (q[j] - c[j]);
                        dq[j] -= d;
                        dc[j] += d;
                    }
                }
            }
        }
    }

    /// `s(qᵢ, cⱼ)` for every query row `i` and candidate row `j`, each exactly as
    /// [`score`](Self::score) computes it (training: the gradients are of these values).
    pub fn score_pairs(self, q: ArrayView2<'_, f32>, cands: ArrayView2<'_, f32>) -> Array2<f32> {
        let mut out = Array2::zeros((q.nrows(), cands.nrows()));
        self.score_pairs_into(q, cands, out.view_mut());
        out
    }

    /// [`score_pairs`](Self::score_pairs) written into `out` (`queries × candidates`,
    /// row-major), so a caller can reuse one matrix across calls. The product for
    /// [`Interaction::Dot`] runs the same `sgemm` as `q.dot(&cands.t())` into a row-major
    /// result (for any `q` whose rows are longer than one float), so the bits are the same.
    pub fn score_pairs_into(
        self,
        q: ArrayView2<'_, f32>,
        cands: ArrayView2<'_, f32>,
        mut out: ArrayViewMut2<'_, f32>,
    ) {
        match self {
            Interaction::Dot => mat_mul_into(q, cands.t(), false, out),
            _ => {
                for (i, mut row) in out.rows_mut().into_iter().enumerate() {
                    let a = q.row(i);
                    let a = a.as_slice().expect("standard layout");
                    for (j, o) in row.iter_mut().enumerate() {
                        let b = cands.row(j);
                        *o = self.score(a, b.as_slice().expect("standard layout"));
                    }
                }
            }
        }
    }

    /// `s(qᵢ, cⱼ)` for every query row `i` and candidate row `j` (`queries × candidates`): one
    /// matrix product for [`Interaction::Dot`] and L2 (`‖q − c‖² = ‖q‖² − 2 q·c + ‖c‖²`), a
    /// direct loop for L1.
    pub fn score_all(self, q: ArrayView2<'_, f32>, cands: ArrayView2<'_, f32>) -> Array2<f32> {
        match self {
            Interaction::Dot => q.dot(&cands.t()),
            Interaction::L2 => {
                let mut s = q.dot(&cands.t());
                let qn: Vec<f32> = q.rows().into_iter().map(|r| r.dot(&r)).collect();
                let cn: Vec<f32> = cands.rows().into_iter().map(|r| r.dot(&r)).collect();
                for (mut row, qn) in s.rows_mut().into_iter().zip(qn) {
                    for (x, cn) in row.iter_mut().zip(&cn) {
                        *x = -(qn - 2.0 * *x + cn).max(0.0).sqrt();
                    }
                }
                s
            }
            Interaction::L1 => {
                // Rows as slices, so each pair is `score`'s vectorized distance.
                let (q, cands) = (q.as_standard_layout(), cands.as_standard_layout());
                let (wq, wc) = (q.ncols(), cands.ncols());
                let qs = q.as_slice().expect("standard layout");
                let cs = cands.as_slice().expect("standard layout");
                Array2::from_shape_fn((q.nrows(), cands.nrows()), |(i, j)| {
                    self.score(&qs[i * wq..(i + 1) * wq], &cs[j * wc..(j + 1) * wc])
                })
            }
        }
    }
}

/// Partial sums [`dot`] keeps: one SIMD register of `f32` on AVX (8 lanes).
const DOT_LANES: usize = 8;

/// `a · b` (over the shorter length) in a fixed order: element `j` of each full chunk of
/// `DOT_LANES` (8) goes to partial sum `j`, the partial sums are added left to right, then the
/// remainder. Independent partial sums let the compiler vectorize the loop (a single running sum
/// cannot be reordered), and the fixed order keeps the result deterministic.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    lane_sum(a, b, |x, y| x * y)
}

/// `Σⱼ f(aⱼ, bⱼ)` (over the shorter length) in [`dot`]'s fixed order; also the L1 and L2
/// distances of TransE and RotatE.
#[inline]
fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (a[..n].chunks_exact(DOT_LANES), b[..n].chunks_exact(DOT_LANES));
    let tail: f32 = a.remainder().iter().zip(b.remainder()).map(|(x, y)| f(*x, *y)).sum();
    let mut acc = [0.0f32; DOT_LANES];
    for (x, y) in a.zip(b) {
        for l in 0..DOT_LANES {
            acc[l] += f(x[l], y[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The training loss over one positive's scores and its negatives'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Softmax cross-entropy: `−s₀ + log Σᵢ exp sᵢ` over the positive (index 0) and negatives.
    #[value(name = "softmax")]
    Softmax,
    /// Logistic: `softplus(−s₀) + mean over negatives of softplus(sᵢ)`.
    #[value(name = "logistic")]
    Logistic,
    /// Binary cross-entropy with logits, PyKEEN's `SoftplusLoss`/`BCEWithLogitsLoss`:
    /// `softplus(−s₀) + Σᵢ softplus(sᵢ)`, averaged over all `1 + k` scores here and over the
    /// batch's positives and sides by the step ([`Loss::mean_reduced`]), so the objective is the
    /// mean over all `B·(1+k)` scores of each side.
    #[value(name = "softplus")]
    Softplus,
    /// Pairwise margin ranking (TransE's): the mean over negatives of `max(0, γ − s₀ + sᵢ)`,
    /// with `γ` = `--margin`; averaged over positives and sides by the step.
    #[value(name = "margin")]
    Margin,
}

/// The softplus loss of a positive (`scores[0]`, divided by `positive_n`) and its negatives
/// (each divided by `n`), its gradient written into `grad`.
fn softplus_terms(scores: &[f32], grad: &mut [f32], positive_n: f32, n: f32) -> f32 {
    let mut loss = softplus(-scores[0]) / positive_n;
    grad[0] = -sigmoid(-scores[0]) / positive_n;
    for (g, s) in grad[1..].iter_mut().zip(&scores[1..]) {
        loss += softplus(*s) / n;
        *g = sigmoid(*s) / n;
    }
    loss
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
    /// Whether the batch objective is the mean over positives and sides (PyKEEN's convention
    /// for softplus and margin) rather than the sum (softmax and logistic, as the GPU kernels
    /// compute them).
    pub fn mean_reduced(self) -> bool {
        matches!(self, Loss::Softplus | Loss::Margin)
    }

    /// The loss of `scores` (the positive first) and its gradient w.r.t. each score, written to
    /// `grad` (same length). `margin` is γ of [`Loss::Margin`] (ignored by the others).
    pub fn loss_and_grad(self, scores: &[f32], grad: &mut [f32], margin: f32) -> f32 {
        match self {
            Loss::Softmax => {
                let (max, sum) = softmax_exps(scores, grad);
                for g in grad.iter_mut() {
                    *g /= sum;
                }
                grad[0] -= 1.0;
                max + sum.ln() - scores[0]
            }
            // Dividing by 1 leaves every float as it is: the logistic loss keeps its bits.
            Loss::Logistic => softplus_terms(scores, grad, 1.0, (scores.len() - 1).max(1) as f32),
            Loss::Softplus => {
                let n = scores.len() as f32;
                softplus_terms(scores, grad, n, n)
            }
            Loss::Margin => {
                let n = (scores.len() - 1).max(1) as f32;
                let (mut loss, mut g0) = (0.0, 0.0);
                for (g, s) in grad[1..].iter_mut().zip(&scores[1..]) {
                    let v = margin - scores[0] + s;
                    *g = if v > 0.0 { 1.0 / n } else { 0.0 };
                    loss += v.max(0.0) / n;
                    g0 -= *g;
                }
                grad[0] = g0;
                loss
            }
        }
    }
}

/// A penalty on the embeddings each positive uses (per use, so frequent entities weigh more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Regularizer {
    /// Squared L2: `w · Σ x²`.
    L2,
    /// The N3 norm of Lacroix et al. (2018), coordinate-wise on the real layout: `w · Σ |x|³`.
    N3,
}

impl Regularizer {
    /// Add `scale · w · ∂/∂x` of the penalty of `x` to `dx`; return the (unscaled) penalty.
    pub fn apply(self, w: f32, scale: f32, x: &[f32], dx: &mut [f32]) -> f32 {
        let mut pen = 0.0;
        for (x, d) in x.iter().zip(dx) {
            match self {
                Regularizer::L2 => {
                    pen += x * x;
                    *d += scale * 2.0 * w * x;
                }
                Regularizer::N3 => {
                    pen += x.abs() * x * x;
                    *d += scale * 3.0 * w * x * x.abs();
                }
            }
        }
        w * pen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARGIN: f64 = 1.0;

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

    const ALL: [ScoreFn; 5] = [
        ScoreFn::DistMult,
        ScoreFn::ComplEx,
        ScoreFn::TransEL1,
        ScoreFn::TransEL2,
        ScoreFn::RotatE,
    ];
    const LOSSES: [Loss; 4] = [Loss::Softmax, Loss::Logistic, Loss::Softplus, Loss::Margin];

    /// Reference scores in f64, straight from the papers' definitions.
    fn score64(m: ScoreFn, h: &[f64], r: &[f64], t: &[f64]) -> f64 {
        match m {
            ScoreFn::TransEL1 => -(0..h.len()).map(|j| (h[j] + r[j] - t[j]).abs()).sum::<f64>(),
            ScoreFn::TransEL2 => {
                -(0..h.len()).map(|j| (h[j] + r[j] - t[j]).powi(2)).sum::<f64>().sqrt()
            }
            ScoreFn::RotatE => {
                // ‖h ∘ e^{iθ} − t‖₂ over complex coordinates; r holds the phases θ.
                let k = h.len() / 2;
                -(0..k)
                    .map(|j| {
                        let (c, s) = (r[j].cos(), r[j].sin());
                        let re = h[j] * c - h[k + j] * s - t[j];
                        let im = h[j] * s + h[k + j] * c - t[k + j];
                        re * re + im * im
                    })
                    .sum::<f64>()
                    .sqrt()
            }
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
        for m in ALL {
            let v = vecs(&mut seed, 3, 8);
            let (h, r, t) = (&v[0], &v[1], &v[2]);
            let want = score64(m, &to64(h), &to64(r), &to64(t));
            let mut p = vec![0.0; 8];
            m.head_query(r, t, &mut p);
            assert!((m.score(h, r, t) as f64 - want).abs() < 1e-5, "{m:?}");
            assert!((m.interaction().score(&p, h) as f64 - want).abs() < 1e-5, "{m:?}");
            // Ranking all candidates gives the same scores as one by one.
            let e = ndarray::Array2::from_shape_vec((3, 8), v.concat()).unwrap();
            let mut q = vec![0.0; 8];
            m.tail_query(h, r, &mut q);
            let q = ndarray::Array2::from_shape_vec((1, 8), q).unwrap();
            let all = m.interaction().score_all(q.view(), e.view());
            let pairs = m.interaction().score_pairs(q.view(), e.view());
            assert!((all[[0, 2]] as f64 - want).abs() < 1e-4, "{m:?}");
            assert!((pairs[[0, 2]] as f64 - want).abs() < 1e-5, "{m:?}");
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
        for m in ALL {
            for loss in LOSSES {
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
                    let sp = |x: f64| (1.0 + x.exp()).ln();
                    match loss {
                        Loss::Softmax => -s[0] + s.iter().map(|x| x.exp()).sum::<f64>().ln(),
                        Loss::Logistic => sp(-s[0]) + (sp(s[1]) + sp(s[2])) / 2.0,
                        Loss::Softplus => (sp(-s[0]) + sp(s[1]) + sp(s[2])) / 3.0,
                        Loss::Margin => {
                            let h = |x: f64| (MARGIN - s[0] + x).max(0.0);
                            (h(s[1]) + h(s[2])) / 2.0
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
                    let inter = m.interaction();
                    let scores: Vec<f32> = (2..5).map(|c| inter.score(&query, &v[c])).collect();
                    let mut g = [0.0; 3];
                    let l = loss.loss_and_grad(&scores, &mut g, MARGIN as f32);
                    assert!((l as f64 - loss64(&to64(&flat), side)).abs() < 1e-4);
                    let mut grad = vec![vec![0.0f32; dim]; 5];
                    let mut dq = vec![0.0; dim];
                    for (c, gc) in (2..5).zip(g) {
                        inter.backward(&query, &v[c], gc, &mut dq, &mut grad[c]);
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
    fn regularizers_match_finite_differences() {
        let mut seed = 3;
        let x = vecs(&mut seed, 1, 7).remove(0);
        for reg in [Regularizer::L2, Regularizer::N3] {
            let pen64 = |x: &[f64]| -> f64 {
                0.3 * match reg {
                    Regularizer::L2 => x.iter().map(|v| v * v).sum::<f64>(),
                    Regularizer::N3 => x.iter().map(|v| v.abs().powi(3)).sum::<f64>(),
                }
            };
            let mut dx = vec![0.0; 7];
            let pen = reg.apply(0.3, 0.5, &x, &mut dx);
            assert!((pen as f64 - pen64(&to64(&x))).abs() < 1e-5, "{reg:?}");
            for (a, w) in dx.iter().zip(numeric_grad(&x, pen64)) {
                assert!((*a as f64 - 0.5 * w).abs() < 1e-4, "{reg:?}: {a} vs {}", 0.5 * w);
            }
        }
    }

    #[test]
    fn losses_are_stable_for_large_scores() {
        let mut g = [0.0; 3];
        let l = Loss::Softmax.loss_and_grad(&[1000.0, 0.0, -1000.0], &mut g, 0.0);
        assert!(l.is_finite() && l.abs() < 1e-3, "{l}");
        let l = Loss::Logistic.loss_and_grad(&[-100.0, 100.0, 0.0], &mut g, 0.0);
        assert!(l.is_finite() && (l - (100.0 + 50.0 + 0.5 * 2f32.ln())).abs() < 1e-2, "{l}");
        let l = Loss::Softplus.loss_and_grad(&[-100.0, 100.0, 0.0], &mut g, 0.0);
        assert!(l.is_finite() && (l - (200.0 + 2f32.ln()) / 3.0).abs() < 1e-2, "{l}");
        assert_eq!(ScoreFn::RotatE.check_dim(5), Err(DimError { model: ScoreFn::RotatE, dim: 5 }));
        assert!(ScoreFn::TransEL1.check_dim(5).is_ok());
        assert_eq!(
            ScoreFn::ComplEx.check_dim(5),
            Err(DimError { model: ScoreFn::ComplEx, dim: 5 })
        );
        assert!(ScoreFn::DistMult.check_dim(5).is_ok());
    }

    /// The softmax's vectorized exps: the maximum exactly, each `exp(x − max)` within 4e-7
    /// relative of f64's (or 0 where f32's would be subnormal), the sum within 1e-6, at lengths
    /// with and without a scalar tail; a NaN in a full lane or in the tail makes the loss and
    /// every gradient NaN; the same input gives the same bits.
    #[test]
    fn softmax_exps_are_accurate_deterministic_and_keep_nan() {
        for n in [1, 7, 8, 9, 16, 101, 257] {
            let x: Vec<f32> = (0..n).map(|i| -90.0 + 95.0 * (i as f32 * 0.618).fract()).collect();
            let mut out = vec![0.0; n];
            let (m, sum) = softmax_exps(&x, &mut out);
            assert_eq!(m, x.iter().copied().fold(f32::NEG_INFINITY, f32::max), "n {n}");
            let mut want_sum = 0.0f64;
            for (o, x) in out.iter().zip(&x) {
                let want = f64::from(x - m).exp();
                want_sum += want;
                let ok = (f64::from(*o) - want).abs() <= 4e-7 * want || want < 1.2e-38;
                assert!(ok, "n {n}: exp({}) = {o}, want {want}", x - m);
            }
            assert!((f64::from(sum) - want_sum).abs() <= 1e-6 * want_sum, "n {n}: {sum}");
            let mut again = vec![0.0; n];
            assert_eq!(softmax_exps(&x, &mut again).1.to_bits(), sum.to_bits());
            assert_eq!(again, out);
        }
        for nan_at in [3, 9] {
            let (mut scores, mut g) = ([0.5f32; 10], [0.0; 10]);
            scores[nan_at] = f32::NAN;
            assert!(Loss::Softmax.loss_and_grad(&scores, &mut g, 0.0).is_nan(), "NaN at {nan_at}");
            assert!(g.iter().all(|g| g.is_nan()), "NaN at {nan_at}: {g:?}");
        }
    }
}
