//! A multi-layer perceptron `dim → hidden (ReLU) → 10 (softmax)` with cross-entropy loss, as a
//! [`GradientModel`] for the SGD runtime.

use super::idx::Split;
use ordo::sgd::GradientModel;
use thiserror::Error;

/// Classes of Fashion-MNIST.
pub const CLASSES: usize = 10;

/// A bad MLP shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MlpError {
    /// Zero hidden units.
    #[error("the hidden layer needs at least one unit")]
    NoHidden,
    /// Zero examples per minibatch.
    #[error("the batch size must be at least 1")]
    NoBatch,
    /// No training examples.
    #[error("the training split is empty")]
    NoData,
}

/// An MLP bound to its training split.
///
/// Parameters, flat: `W1` (`hidden × dim`, row-major), `b1` (`hidden`), `W2` (`10 × hidden`),
/// `b2` (`10`). Pixels are scaled to `[0, 1]`. Minibatch `b` holds the examples
/// `order[(b·B + k) mod n]` for `k < B`, where `order` is a fixed shuffle of the split.
#[derive(Debug)]
pub struct Mlp<'d> {
    data: &'d Split,
    hidden: usize,
    batch: usize,
    order: Vec<u32>,
}

/// Per-worker buffers of the MLP.
#[derive(Debug, Clone)]
pub struct MlpScratch {
    x: Vec<f32>,
    h: Vec<f32>,
    dh: Vec<f32>,
    o: [f32; CLASSES],
}

/// A small deterministic generator (SplitMix64) for shuffles and initial weights.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[-1, 1)`.
    pub fn symmetric(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

impl<'d> Mlp<'d> {
    /// An MLP with `hidden` units, minibatches of `batch`, over `data` shuffled by `seed`.
    pub fn new(data: &'d Split, hidden: usize, batch: usize, seed: u64) -> Result<Self, MlpError> {
        if hidden == 0 {
            return Err(MlpError::NoHidden);
        }
        if batch == 0 {
            return Err(MlpError::NoBatch);
        }
        if data.n == 0 {
            return Err(MlpError::NoData);
        }
        let mut order: Vec<u32> = (0..data.n as u32).collect();
        let mut rng = SplitMix(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        Ok(Self { data, hidden, batch, order })
    }

    /// Glorot-uniform weights, zero biases.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let (d, h) = (self.data.dim, self.hidden);
        let mut rng = SplitMix(seed ^ 0x5EED);
        let mut p = Vec::with_capacity(self.num_params());
        let a1 = (6.0 / (d + h) as f32).sqrt();
        p.extend((0..h * d).map(|_| a1 * rng.symmetric()));
        p.extend(std::iter::repeat_n(0.0, h));
        let a2 = (6.0 / (h + CLASSES) as f32).sqrt();
        p.extend((0..CLASSES * h).map(|_| a2 * rng.symmetric()));
        p.extend(std::iter::repeat_n(0.0, CLASSES));
        p
    }

    fn split<'p>(&self, p: &'p [f32]) -> (&'p [f32], &'p [f32], &'p [f32], &'p [f32]) {
        let (w1, rest) = p.split_at(self.hidden * self.data.dim);
        let (b1, rest) = rest.split_at(self.hidden);
        let (w2, b2) = rest.split_at(CLASSES * self.hidden);
        (w1, b1, w2, b2)
    }

    /// Forward pass of `image` into `s` (`s.h` hidden activations, `s.o` class probabilities).
    fn forward(&self, p: &[f32], image: &[u8], s: &mut MlpScratch) {
        let (w1, b1, w2, b2) = self.split(p);
        let d = self.data.dim;
        s.x.iter_mut().zip(image).for_each(|(x, &px)| *x = f32::from(px) / 255.0);
        for (j, h) in s.h.iter_mut().enumerate() {
            *h = (dot(&w1[j * d..(j + 1) * d], &s.x) + b1[j]).max(0.0);
        }
        for (c, o) in s.o.iter_mut().enumerate() {
            *o = dot(&w2[c * self.hidden..(c + 1) * self.hidden], &s.h) + b2[c];
        }
        let max = s.o.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        s.o.iter_mut().for_each(|o| *o = (*o - max).exp());
        let z: f32 = s.o.iter().sum();
        s.o.iter_mut().for_each(|o| *o /= z);
    }

    /// Mean cross-entropy and accuracy of `params` on the first `limit` examples of `split`
    /// (all if `None`).
    pub fn evaluate(&self, params: &[f32], split: &Split, limit: Option<usize>) -> (f64, f64) {
        let n = limit.map_or(split.n, |l| l.min(split.n));
        let mut s = self.scratch();
        let (mut loss, mut correct) = (0.0f64, 0usize);
        for i in 0..n {
            self.forward(params, split.image(i), &mut s);
            let y = usize::from(split.labels[i]);
            loss -= f64::from(s.o[y].max(1e-30)).ln();
            let best = (0..CLASSES).max_by(|&a, &b| s.o[a].total_cmp(&s.o[b])).unwrap_or(0);
            correct += usize::from(best == y);
        }
        let n = n.max(1) as f64;
        (loss / n, correct as f64 / n)
    }
}

/// Dot product with eight independent accumulators (so it vectorizes without fast-math).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

impl GradientModel for Mlp<'_> {
    type Scratch = MlpScratch;

    fn num_params(&self) -> usize {
        self.hidden * self.data.dim + self.hidden + CLASSES * self.hidden + CLASSES
    }

    fn scratch(&self) -> MlpScratch {
        MlpScratch {
            x: vec![0.0; self.data.dim],
            h: vec![0.0; self.hidden],
            dh: vec![0.0; self.hidden],
            o: [0.0; CLASSES],
        }
    }

    /// Mean cross-entropy of the minibatch and its gradient (backpropagation).
    fn gradient(&self, p: &[f32], batch: u64, s: &mut MlpScratch, grad: &mut [f32]) -> f32 {
        grad.fill(0.0);
        let (d, hid) = (self.data.dim, self.hidden);
        let (_, _, w2, _) = self.split(p);
        let (gw1, rest) = grad.split_at_mut(hid * d);
        let (gb1, rest) = rest.split_at_mut(hid);
        let (gw2, gb2) = rest.split_at_mut(CLASSES * hid);
        let inv = 1.0 / self.batch as f32;
        let n = self.order.len() as u64;
        let mut loss = 0.0f32;
        for k in 0..self.batch as u64 {
            let pos = (batch.wrapping_mul(self.batch as u64).wrapping_add(k) % n) as usize;
            let i = self.order[pos] as usize;
            self.forward(p, self.data.image(i), s);
            let y = usize::from(self.data.labels[i]);
            loss -= s.o[y].max(1e-30).ln();
            // dL/dlogits = softmax − onehot, averaged over the batch.
            s.o[y] -= 1.0;
            s.o.iter_mut().for_each(|o| *o *= inv);
            s.dh.fill(0.0);
            for (c, (&dc, gb)) in s.o.iter().zip(gb2.iter_mut()).enumerate() {
                *gb += dc;
                let row = c * hid..(c + 1) * hid;
                gw2[row.clone()].iter_mut().zip(&s.h).for_each(|(g, h)| *g += dc * h);
                s.dh.iter_mut().zip(&w2[row]).for_each(|(g, w)| *g += dc * w);
            }
            for j in 0..hid {
                if s.h[j] <= 0.0 {
                    continue; // ReLU is flat here: no gradient reaches W1's row j.
                }
                let dj = s.dh[j];
                gb1[j] += dj;
                gw1[j * d..(j + 1) * d].iter_mut().zip(&s.x).for_each(|(g, x)| *g += dj * x);
            }
        }
        loss * inv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Split {
        let mut rng = SplitMix(7);
        let (n, dim) = (5, 6);
        Split {
            n,
            dim,
            pixels: (0..n * dim).map(|_| (rng.next_u64() % 256) as u8).collect(),
            labels: (0..n).map(|i| (i * 3 % CLASSES) as u8).collect(),
        }
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let data = tiny();
        let mlp = Mlp::new(&data, 4, 3, 1).unwrap();
        let mut p = mlp.init_params(3);
        // Non-zero biases so every parameter group is exercised away from zero.
        let mut rng = SplitMix(11);
        p.iter_mut().for_each(|x| *x += 0.1 * rng.symmetric());
        let mut s = mlp.scratch();
        let mut g = vec![0.0; p.len()];
        let mut scratch_g = vec![0.0; p.len()];
        for batch in [0u64, 1, 4] {
            mlp.gradient(&p, batch, &mut s, &mut g);
            let eps = 1e-2f32;
            for k in 0..p.len() {
                let mut q = p.clone();
                q[k] = p[k] + eps;
                let up = mlp.gradient(&q, batch, &mut s, &mut scratch_g);
                q[k] = p[k] - eps;
                let down = mlp.gradient(&q, batch, &mut s, &mut scratch_g);
                let fd = (up - down) / (2.0 * eps);
                assert!(
                    (fd - g[k]).abs() <= 2e-3 + 2e-2 * g[k].abs(),
                    "batch {batch}, param {k}: backprop {} vs finite difference {fd}",
                    g[k]
                );
            }
            assert!(g.iter().any(|x| x.abs() > 1e-3), "a zero gradient checks nothing");
        }
    }

    #[test]
    fn loss_is_the_mean_cross_entropy_of_the_batch() {
        let data = tiny();
        let mlp = Mlp::new(&data, 4, data.n, 1).unwrap();
        let p = mlp.init_params(3);
        let mut g = vec![0.0; p.len()];
        // One batch of all n examples: the batch loss is the evaluation loss.
        let loss = mlp.gradient(&p, 0, &mut mlp.scratch(), &mut g);
        let (eval_loss, acc) = mlp.evaluate(&p, &data, None);
        assert!((f64::from(loss) - eval_loss).abs() < 1e-5, "{loss} vs {eval_loss}");
        assert!((0.0..=1.0).contains(&acc));
    }

    #[test]
    fn bad_shapes_are_errors() {
        let data = tiny();
        assert_eq!(Mlp::new(&data, 0, 1, 0).unwrap_err(), MlpError::NoHidden);
        assert_eq!(Mlp::new(&data, 1, 0, 0).unwrap_err(), MlpError::NoBatch);
        let empty = Split { n: 0, dim: 6, pixels: vec![], labels: vec![] };
        assert_eq!(Mlp::new(&empty, 1, 1, 0).unwrap_err(), MlpError::NoData);
    }
}
