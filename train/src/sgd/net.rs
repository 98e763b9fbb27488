//! What the classifiers (MLP, CNN) share: minibatch order, softmax, evaluation, errors.

use super::idx::Split;
use crate::rng::SplitMix64;
use ordo::sgd::GradientModel;
use thiserror::Error;

/// Classes of Fashion-MNIST.
pub const CLASSES: usize = 10;

/// A bad classifier shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NetError {
    /// Zero hidden units.
    #[error("the hidden layer needs at least one unit")]
    NoHidden,
    /// Zero examples per minibatch.
    #[error("the batch size must be at least 1")]
    NoBatch,
    /// No training examples.
    #[error("the training split is empty")]
    NoData,
    /// The CNN needs 28×28 images.
    #[error("the CNN needs 28×28 = 784-pixel images, got {0} pixels")]
    ImageSize(usize),
}

/// Which examples make minibatch `b`: `order[(b·B + k) mod n]` for `k < B`, where `order` is a
/// fixed shuffle of the split (so consecutive batches sweep epochs).
#[derive(Debug, Clone)]
pub struct Batches {
    order: Vec<u32>,
    batch: usize,
}

impl Batches {
    /// Batches of `batch` examples over `n`, shuffled by `seed`.
    pub fn new(n: usize, batch: usize, seed: u64) -> Result<Self, NetError> {
        if batch == 0 {
            return Err(NetError::NoBatch);
        }
        if n == 0 {
            return Err(NetError::NoData);
        }
        let mut order: Vec<u32> = (0..n as u32).collect();
        let mut rng = SplitMix64(seed);
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        Ok(Self { order, batch })
    }

    /// Examples per batch.
    pub fn size(&self) -> usize {
        self.batch
    }

    /// The examples of batch `b`.
    pub fn examples(&self, b: u64) -> impl Iterator<Item = usize> + '_ {
        let n = self.order.len() as u64;
        let start = b.wrapping_mul(self.batch as u64);
        (0..self.batch as u64)
            .map(move |k| self.order[(start.wrapping_add(k) % n) as usize] as usize)
    }
}

/// A classifier of 10 classes whose minibatch gradient the SGD runtime can ask for.
pub trait Classifier: GradientModel {
    /// Class probabilities of one image.
    fn probs(&self, params: &[f32], image: &[u8], scratch: &mut Self::Scratch) -> [f32; CLASSES];

    /// Mean cross-entropy and accuracy on the first `limit` examples of `split` (all if
    /// `None`).
    fn evaluate(&self, params: &[f32], split: &Split, limit: Option<usize>) -> (f64, f64) {
        let n = limit.map_or(split.n, |l| l.min(split.n));
        let mut s = self.scratch();
        let (mut loss, mut correct) = (0.0f64, 0usize);
        for i in 0..n {
            let p = self.probs(params, split.image(i), &mut s);
            let y = usize::from(split.labels[i]);
            loss -= f64::from(p[y].max(1e-30)).ln();
            let best = (0..CLASSES).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap_or(0);
            correct += usize::from(best == y);
        }
        let n = n.max(1) as f64;
        (loss / n, correct as f64 / n)
    }
}

/// The dense head of both classifiers: `h = ReLU(W1·x + b1)`, then `softmax(W2·h + b2)`.
/// Its parameters, flat: `W1` (`hidden × inputs`, row-major), `b1`, `W2` (`10 × hidden`), `b2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DenseHead {
    /// Inputs `x`.
    pub inputs: usize,
    /// Hidden units `h`.
    pub hidden: usize,
}

impl DenseHead {
    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.hidden * self.inputs + self.hidden + CLASSES * self.hidden + CLASSES
    }

    /// `true` for a head with no parameters (never, for a valid shape).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn w1(&self, j: usize) -> std::ops::Range<usize> {
        j * self.inputs..(j + 1) * self.inputs
    }
    fn b1(&self) -> usize {
        self.hidden * self.inputs
    }
    fn w2(&self, c: usize) -> std::ops::Range<usize> {
        let at = self.b1() + self.hidden;
        at + c * self.hidden..at + (c + 1) * self.hidden
    }
    fn b2(&self) -> usize {
        self.b1() + self.hidden + CLASSES * self.hidden
    }

    /// Forward: hidden activations into `h`, class probabilities returned.
    pub fn forward(&self, p: &[f32], x: &[f32], h: &mut [f32]) -> [f32; CLASSES] {
        for (j, hj) in h.iter_mut().enumerate() {
            *hj = (dot(&p[self.w1(j)], x) + p[self.b1() + j]).max(0.0);
        }
        let mut o = [0.0f32; CLASSES];
        for (c, oc) in o.iter_mut().enumerate() {
            *oc = dot(&p[self.w2(c)], h) + p[self.b2() + c];
        }
        softmax(&mut o);
        o
    }

    /// Parameters per layer: `[W1 and b1, W2 and b2]` (the order of the flat layout).
    pub fn layer_sizes(&self) -> [usize; 2] {
        [self.hidden * self.inputs + self.hidden, CLASSES * self.hidden + CLASSES]
    }

    /// Backward of the output layer only (restricted backpropagation stopping at it): add the
    /// gradients of `W2` and `b2` into `g`.
    pub fn backward_top(&self, h: &[f32], dlogits: &[f32; CLASSES], g: &mut [f32]) {
        for (c, &dc) in dlogits.iter().enumerate() {
            g[self.b2() + c] += dc;
            axpy(&mut g[self.w2(c)], dc, h);
        }
    }

    /// Backward from `dlogits`: add the parameter gradients into `g` (same layout as `p`),
    /// using `dh` as scratch; if `dx` is given, overwrite it with the input gradient.
    #[allow(clippy::too_many_arguments)] // the activations of one forward pass, kept apart
    pub fn backward(
        &self,
        p: &[f32],
        x: &[f32],
        h: &[f32],
        dlogits: &[f32; CLASSES],
        g: &mut [f32],
        dh: &mut [f32],
        mut dx: Option<&mut [f32]>,
    ) {
        self.backward_top(h, dlogits, g);
        dh.fill(0.0);
        for (c, &dc) in dlogits.iter().enumerate() {
            axpy(dh, dc, &p[self.w2(c)]);
        }
        if let Some(dx) = dx.as_deref_mut() {
            dx.fill(0.0);
        }
        for j in 0..self.hidden {
            if h[j] <= 0.0 {
                continue; // ReLU is flat here: no gradient reaches W1's row j.
            }
            g[self.b1() + j] += dh[j];
            axpy(&mut g[self.w1(j)], dh[j], x);
            if let Some(dx) = dx.as_deref_mut() {
                axpy(dx, dh[j], &p[self.w1(j)]);
            }
        }
    }
}

/// Softmax of logits, in place.
pub fn softmax(o: &mut [f32; CLASSES]) {
    let max = o.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    o.iter_mut().for_each(|x| *x = (*x - max).exp());
    let z: f32 = o.iter().sum();
    o.iter_mut().for_each(|x| *x /= z);
}

/// The mean cross-entropy of minibatch `batch` of `split` (its examples chosen by `batches`),
/// with its gradient: `grad` is zeroed, then for each example `back` backpropagates
/// `dL/dlogits` (scaled by `1/B`) into `grad` from what [`Classifier::probs`] left in the
/// scratch.
#[allow(clippy::too_many_arguments)]
pub fn minibatch_gradient<C: Classifier>(
    model: &C,
    p: &[f32],
    split: &Split,
    batches: &Batches,
    batch: u64,
    s: &mut C::Scratch,
    grad: &mut [f32],
    mut back: impl FnMut(&mut C::Scratch, &[f32; CLASSES], &mut [f32]),
) -> f32 {
    grad.fill(0.0);
    let inv = 1.0 / batches.size() as f32;
    let mut loss = 0.0f32;
    for i in batches.examples(batch) {
        let mut o = model.probs(p, split.image(i), s);
        loss += cross_entropy_grad(&mut o, usize::from(split.labels[i]), inv);
        back(s, &o, grad);
    }
    loss * inv
}

/// Turn probabilities into `dL/dlogits` of the cross-entropy of `label`, scaled by `scale`
/// (`1/B` for a batch mean); returns the example's loss.
pub fn cross_entropy_grad(p: &mut [f32; CLASSES], label: usize, scale: f32) -> f32 {
    let loss = -p[label].max(1e-30).ln();
    p[label] -= 1.0;
    p.iter_mut().for_each(|x| *x *= scale);
    loss
}

/// Dot product with eight independent accumulators (so it vectorizes without fast-math).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// `y += a · x`.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

#[cfg(test)]
pub(crate) mod testing {
    //! Finite-difference check shared by the classifiers' tests.
    use super::*;

    /// A split of `n` random images of `dim` pixels.
    pub fn random_split(n: usize, dim: usize, seed: u64) -> Split {
        let mut rng = SplitMix64(seed);
        Split {
            n,
            dim,
            pixels: (0..n * dim).map(|_| (rng.next_u64() % 256) as u8).collect(),
            labels: (0..n).map(|i| (i * 3 % CLASSES) as u8).collect(),
        }
    }

    /// Check `model`'s gradient at `p` against central differences on the parameters
    /// `indices`, for a few batches. A parameter passes if the difference
    /// quotient of step `eps`, `eps/3` or `eps/10` matches: a ReLU or max-pool kink inside the
    /// step spoils the larger steps only, while a wrong gradient mismatches at every step.
    pub fn check_gradient<M: GradientModel>(model: &M, p: &[f32], indices: &[usize], eps: f32) {
        let mut s = model.scratch();
        let (mut g, mut spare) = (vec![0.0; p.len()], vec![0.0; p.len()]);
        for batch in [0u64, 1, 4] {
            model.gradient(p, batch, &mut s, &mut g);
            let mut q = p.to_vec();
            for &k in indices {
                let mut fds = Vec::new();
                for h in [eps, eps / 3.0, eps / 10.0] {
                    q[k] = p[k] + h;
                    let up = model.gradient(&q, batch, &mut s, &mut spare);
                    q[k] = p[k] - h;
                    let down = model.gradient(&q, batch, &mut s, &mut spare);
                    q[k] = p[k];
                    fds.push((up - down) / (2.0 * h));
                    if (fds[fds.len() - 1] - g[k]).abs() <= 2e-3 + 2e-2 * g[k].abs() {
                        break;
                    }
                }
                assert!(
                    fds.iter().any(|fd| (fd - g[k]).abs() <= 2e-3 + 2e-2 * g[k].abs()),
                    "batch {batch}, param {k}: backprop {} vs finite differences {fds:?}",
                    g[k]
                );
            }
            assert!(g.iter().any(|x| x.abs() > 1e-3), "a zero gradient checks nothing");
        }
    }
}
