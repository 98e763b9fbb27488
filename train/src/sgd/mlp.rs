//! A multi-layer perceptron `dim → hidden (ReLU) → 10 (softmax)` with cross-entropy loss, as a
//! [`GradientModel`] for the SGD runtime.

use super::idx::Split;
use super::net::{Batches, CLASSES, Classifier, DenseHead, NetError, minibatch_gradient};
use crate::rng::SplitMix64;
use ordo::sgd::{GradientModel, LayeredModel};

/// An MLP bound to its training split.
///
/// Parameters, flat: `W1` (`hidden × dim`, row-major), `b1` (`hidden`), `W2` (`10 × hidden`),
/// `b2` (`10`). Pixels are scaled to `[0, 1]`. Minibatches as in [`Batches`].
#[derive(Debug)]
pub struct Mlp<'d> {
    data: &'d Split,
    hidden: usize,
    batches: Batches,
}

/// Per-worker buffers of the MLP.
#[derive(Debug, Clone)]
pub struct MlpScratch {
    x: Vec<f32>,
    h: Vec<f32>,
    dh: Vec<f32>,
}

impl<'d> Mlp<'d> {
    /// An MLP with `hidden` units, minibatches of `batch`, over `data` shuffled by `seed`.
    pub fn new(data: &'d Split, hidden: usize, batch: usize, seed: u64) -> Result<Self, NetError> {
        if hidden == 0 {
            return Err(NetError::NoHidden);
        }
        Ok(Self { data, hidden, batches: Batches::new(data.n, batch, seed)? })
    }

    /// Glorot-uniform weights, zero biases.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let (d, h) = (self.data.dim, self.hidden);
        let mut rng = SplitMix64(seed ^ 0x5EED);
        let mut p = Vec::with_capacity(self.num_params());
        let a1 = (6.0 / (d + h) as f32).sqrt();
        p.extend(rng.uniform(h * d, a1));
        p.extend(std::iter::repeat_n(0.0, h));
        let a2 = (6.0 / (h + CLASSES) as f32).sqrt();
        p.extend(rng.uniform(CLASSES * h, a2));
        p.extend(std::iter::repeat_n(0.0, CLASSES));
        p
    }

    fn head(&self) -> DenseHead {
        DenseHead { inputs: self.data.dim, hidden: self.hidden }
    }
}

impl Classifier for Mlp<'_> {
    fn probs(&self, p: &[f32], image: &[u8], s: &mut MlpScratch) -> [f32; CLASSES] {
        s.x.iter_mut().zip(image).for_each(|(x, &px)| *x = f32::from(px) / 255.0);
        self.head().forward(p, &s.x, &mut s.h)
    }
}

impl GradientModel for Mlp<'_> {
    type Scratch = MlpScratch;

    fn num_params(&self) -> usize {
        self.head().len()
    }

    fn scratch(&self) -> MlpScratch {
        MlpScratch {
            x: vec![0.0; self.data.dim],
            h: vec![0.0; self.hidden],
            dh: vec![0.0; self.hidden],
        }
    }

    /// Mean cross-entropy of the minibatch and its gradient (backpropagation).
    fn gradient(&self, p: &[f32], batch: u64, s: &mut MlpScratch, grad: &mut [f32]) -> f32 {
        self.restricted_gradient(p, batch, 0, s, grad)
    }
}

impl LayeredModel for Mlp<'_> {
    /// `[W1 and b1, W2 and b2]`.
    fn layer_sizes(&self) -> Vec<usize> {
        self.head().layer_sizes().to_vec()
    }

    /// `lowest = 1` stops backpropagation at the output layer: `W1`'s gradient (the bulk of
    /// the backward work, `hidden × dim` multiply-adds per example) is skipped.
    fn restricted_gradient(
        &self,
        p: &[f32],
        batch: u64,
        lowest: usize,
        s: &mut MlpScratch,
        grad: &mut [f32],
    ) -> f32 {
        minibatch_gradient(self, p, self.data, &self.batches, batch, s, grad, |s, o, grad| {
            if lowest == 0 {
                self.head().backward(p, &s.x, &s.h, o, grad, &mut s.dh, None);
            } else {
                self.head().backward_top(&s.h, o, grad);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgd::net::testing::{check_gradient, random_split};

    #[test]
    fn gradient_matches_finite_differences() {
        let data = random_split(5, 6, 7);
        let mlp = Mlp::new(&data, 4, 3, 1).unwrap();
        let mut p = mlp.init_params(3);
        // Non-zero biases so every parameter group is exercised away from zero.
        let mut rng = SplitMix64(11);
        p.iter_mut().for_each(|x| *x += 0.1 * rng.symmetric());
        let all: Vec<usize> = (0..p.len()).collect();
        check_gradient(&mlp, &p, &all, 1e-2);
    }

    #[test]
    fn loss_is_the_mean_cross_entropy_of_the_batch() {
        let data = random_split(5, 6, 7);
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
    fn restricted_gradient_is_the_slice_of_the_full_gradient_bit_for_bit() {
        let data = random_split(7, 6, 7);
        let mlp = Mlp::new(&data, 5, 3, 1).unwrap();
        let mut p = mlp.init_params(3);
        let mut rng = SplitMix64(5);
        p.iter_mut().for_each(|x| *x += 0.1 * rng.symmetric());
        let from = mlp.layer_sizes()[0];
        assert_eq!(mlp.layer_sizes().iter().sum::<usize>(), mlp.num_params());
        let (mut full, mut top) = (vec![0.0; p.len()], vec![1.0; p.len()]);
        let mut s = mlp.scratch();
        for batch in 0..4 {
            let l_full = mlp.gradient(&p, batch, &mut s, &mut full);
            let l_top = mlp.restricted_gradient(&p, batch, 1, &mut s, &mut top);
            assert_eq!(l_full.to_bits(), l_top.to_bits());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&top[from..]), bits(&full[from..]), "batch {batch}");
            assert!(top[..from].iter().all(|&x| x == 0.0), "zeros below the lowest layer");
            assert!(full[..from].iter().any(|&x| x != 0.0), "the full gradient reaches W1");
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let data = random_split(5, 6, 7);
        assert_eq!(Mlp::new(&data, 0, 1, 0).unwrap_err(), NetError::NoHidden);
        assert_eq!(Mlp::new(&data, 1, 0, 0).unwrap_err(), NetError::NoBatch);
        let empty = Split { n: 0, dim: 6, pixels: vec![], labels: vec![] };
        assert_eq!(Mlp::new(&empty, 1, 1, 0).unwrap_err(), NetError::NoData);
    }
}
