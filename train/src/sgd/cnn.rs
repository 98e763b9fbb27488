//! A small LeNet-like CNN for 28×28 images: conv 5×5 (1→6) → ReLU → max-pool 2 → conv 5×5
//! (6→12) → ReLU → max-pool 2 → dense 192→64 (ReLU) → dense 64→10 (softmax), cross-entropy
//! loss. The layer sequence of paper 001's LeNet5-like model (Conv → Pool → Conv → Pool →
//! Dense → Dense), narrowed so that a step stays a few milliseconds on one core.

use super::idx::Split;
use super::net::{
    Batches, CLASSES, Classifier, DenseHead, NetError, axpy, dot, minibatch_gradient,
};
use crate::rng::SplitMix64;
use ordo::sgd::{GradientModel, LayeredModel};

const SIDE: usize = 28;
const K: usize = 5;
const C1: usize = 6;
const S1: usize = SIDE - K + 1; // 24
const P1: usize = S1 / 2; // 12
const C2: usize = 12;
const S2: usize = P1 - K + 1; // 8
const P2: usize = S2 / 2; // 4
const FLAT: usize = C2 * P2 * P2; // 192
const HID: usize = 64;

// Parameter layout (offsets into the flat vector).
const K1: usize = 0;
const B1: usize = K1 + C1 * K * K;
const K2: usize = B1 + C1;
const B2: usize = K2 + C2 * C1 * K * K;
const W3: usize = B2 + C2;
const B3: usize = W3 + HID * FLAT;
const W4: usize = B3 + HID;
const B4: usize = W4 + CLASSES * HID;
const NPARAMS: usize = B4 + CLASSES;
/// Dense 192 → 64 (ReLU) → 10 (softmax): the parameters from `W3` on.
const HEAD: DenseHead = DenseHead { inputs: FLAT, hidden: HID };

/// The CNN bound to its training split. Parameters, flat: conv1 kernels `[6][5·5]`, biases,
/// conv2 kernels `[12][6][5·5]`, biases, dense `[64][192]`, biases, dense `[10][64]`, biases.
#[derive(Debug)]
pub struct Cnn<'d> {
    data: &'d Split,
    batches: Batches,
}

/// Per-worker activations of the CNN.
#[derive(Debug, Clone)]
pub struct CnnScratch {
    x: Vec<f32>,
    /// Pooled conv1 output after ReLU, `[6][12][12]`, and the flat index (in `[6][24][24]`) of
    /// each pooled maximum.
    p1: Vec<f32>,
    arg1: Vec<usize>,
    a1: Vec<f32>,
    a2: Vec<f32>,
    /// Pooled conv2 output after ReLU, flattened `[12][4][4]`, and argmax indices.
    p2: Vec<f32>,
    arg2: Vec<usize>,
    h: Vec<f32>,
    dh: Vec<f32>,
    dp2: Vec<f32>,
    dp1: Vec<f32>,
    d2: Vec<f32>,
    d1: Vec<f32>,
}

/// Feature maps `[channels][side][side]`.
#[derive(Clone, Copy)]
struct Planes<'a> {
    data: &'a [f32],
    channels: usize,
    side: usize,
}

/// Valid 5×5 convolution of `input` with `kernels` (`[cout][cin][5][5]`) plus `bias`, into
/// `out` (`[cout][side−4][side−4]`).
fn conv(input: Planes<'_>, kernels: &[f32], bias: &[f32], out: &mut [f32]) {
    let Planes { data: input, channels: cin, side } = input;
    let o_side = side - K + 1;
    for (co, plane) in out.chunks_exact_mut(o_side * o_side).enumerate() {
        plane.fill(bias[co]);
        for ci in 0..cin {
            let src = &input[ci * side * side..(ci + 1) * side * side];
            let ker = &kernels[(co * cin + ci) * K * K..(co * cin + ci + 1) * K * K];
            for ky in 0..K {
                for kx in 0..K {
                    let w = ker[ky * K + kx];
                    for y in 0..o_side {
                        let row = &src[(y + ky) * side + kx..(y + ky) * side + kx + o_side];
                        axpy(&mut plane[y * o_side..(y + 1) * o_side], w, row);
                    }
                }
            }
        }
    }
}

/// Backward of [`conv`]: given `dout`, add the kernel and bias gradients, and (if `dinput` is
/// given) the input gradient.
fn conv_back(
    input: Planes<'_>,
    kernels: &[f32],
    dout: &[f32],
    gk: &mut [f32],
    gb: &mut [f32],
    mut dinput: Option<&mut [f32]>,
) {
    let Planes { data: input, channels: cin, side } = input;
    let o_side = side - K + 1;
    for (co, plane) in dout.chunks_exact(o_side * o_side).enumerate() {
        gb[co] += plane.iter().sum::<f32>();
        for ci in 0..cin {
            let src = &input[ci * side * side..(ci + 1) * side * side];
            let base = (co * cin + ci) * K * K;
            for ky in 0..K {
                for kx in 0..K {
                    let mut acc = 0.0;
                    for y in 0..o_side {
                        let row = &src[(y + ky) * side + kx..(y + ky) * side + kx + o_side];
                        acc += dot(&plane[y * o_side..(y + 1) * o_side], row);
                    }
                    gk[base + ky * K + kx] += acc;
                    if let Some(din) = dinput.as_deref_mut() {
                        let w = kernels[base + ky * K + kx];
                        let dsrc = &mut din[ci * side * side..(ci + 1) * side * side];
                        for y in 0..o_side {
                            let at = (y + ky) * side + kx;
                            axpy(
                                &mut dsrc[at..at + o_side],
                                w,
                                &plane[y * o_side..(y + 1) * o_side],
                            );
                        }
                    }
                }
            }
        }
    }
}

/// ReLU then 2×2 max-pool of `a` (`[c][side][side]`) into `p`, remembering the argmax.
fn relu_pool(a: &[f32], c: usize, side: usize, p: &mut [f32], arg: &mut [usize]) {
    let half = side / 2;
    for ch in 0..c {
        for y in 0..half {
            for x in 0..half {
                let mut best = (f32::NEG_INFINITY, 0);
                for (dy, dx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                    let i = ch * side * side + (2 * y + dy) * side + 2 * x + dx;
                    if a[i] > best.0 {
                        best = (a[i], i);
                    }
                }
                let o = ch * half * half + y * half + x;
                p[o] = best.0.max(0.0);
                arg[o] = best.1;
            }
        }
    }
}

/// Backward of [`relu_pool`]: route `dp` to the argmax where the pooled value was positive.
fn relu_pool_back(p: &[f32], arg: &[usize], dp: &[f32], da: &mut [f32]) {
    da.fill(0.0);
    for ((&v, &i), &g) in p.iter().zip(arg).zip(dp) {
        if v > 0.0 {
            da[i] += g;
        }
    }
}

impl<'d> Cnn<'d> {
    /// A CNN over `data` (28×28 images), minibatches of `batch`, shuffled by `seed`.
    pub fn new(data: &'d Split, batch: usize, seed: u64) -> Result<Self, NetError> {
        if data.dim != SIDE * SIDE {
            return Err(NetError::ImageSize(data.dim));
        }
        Ok(Self { data, batches: Batches::new(data.n, batch, seed)? })
    }

    /// He-uniform kernels and weights, zero biases.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut rng = SplitMix64(seed ^ 0xC0DE);
        let mut p = Vec::with_capacity(NPARAMS);
        let he = |fan_in: usize| (6.0 / fan_in as f32).sqrt();
        p.extend(rng.uniform(C1 * K * K, he(K * K)));
        p.extend(std::iter::repeat_n(0.0, C1));
        p.extend(rng.uniform(C2 * C1 * K * K, he(C1 * K * K)));
        p.extend(std::iter::repeat_n(0.0, C2));
        p.extend(rng.uniform(HID * FLAT, he(FLAT)));
        p.extend(std::iter::repeat_n(0.0, HID));
        p.extend(rng.uniform(CLASSES * HID, (6.0 / (HID + CLASSES) as f32).sqrt()));
        p.extend(std::iter::repeat_n(0.0, CLASSES));
        p
    }
}

impl Classifier for Cnn<'_> {
    fn probs(&self, p: &[f32], image: &[u8], s: &mut CnnScratch) -> [f32; CLASSES] {
        s.x.iter_mut().zip(image).for_each(|(x, &px)| *x = f32::from(px) / 255.0);
        conv(Planes { data: &s.x, channels: 1, side: SIDE }, &p[K1..B1], &p[B1..K2], &mut s.a1);
        relu_pool(&s.a1, C1, S1, &mut s.p1, &mut s.arg1);
        conv(Planes { data: &s.p1, channels: C1, side: P1 }, &p[K2..B2], &p[B2..W3], &mut s.a2);
        relu_pool(&s.a2, C2, S2, &mut s.p2, &mut s.arg2);
        HEAD.forward(&p[W3..], &s.p2, &mut s.h)
    }
}

impl GradientModel for Cnn<'_> {
    type Scratch = CnnScratch;

    fn num_params(&self) -> usize {
        NPARAMS
    }

    fn scratch(&self) -> CnnScratch {
        let z = |n| vec![0.0f32; n];
        CnnScratch {
            x: z(SIDE * SIDE),
            a1: z(C1 * S1 * S1),
            p1: z(C1 * P1 * P1),
            arg1: vec![0; C1 * P1 * P1],
            a2: z(C2 * S2 * S2),
            p2: z(FLAT),
            arg2: vec![0; FLAT],
            h: z(HID),
            dh: z(HID),
            dp2: z(FLAT),
            dp1: z(C1 * P1 * P1),
            d2: z(C2 * S2 * S2),
            d1: z(C1 * S1 * S1),
        }
    }

    /// Mean cross-entropy of the minibatch and its gradient (backpropagation).
    fn gradient(&self, p: &[f32], batch: u64, s: &mut CnnScratch, grad: &mut [f32]) -> f32 {
        self.restricted_gradient(p, batch, 0, s, grad)
    }
}

impl LayeredModel for Cnn<'_> {
    /// `[conv 1, conv 2, dense 192→64, dense 64→10]`, kernels/weights and biases each.
    fn layer_sizes(&self) -> Vec<usize> {
        vec![K2 - K1, W3 - K2, W4 - W3, NPARAMS - W4]
    }

    /// Backpropagation from the loss down to layer `lowest` only: each layer below is skipped,
    /// and so is the input gradient of layer `lowest` (nothing below needs it).
    fn restricted_gradient(
        &self,
        p: &[f32],
        batch: u64,
        lowest: usize,
        s: &mut CnnScratch,
        grad: &mut [f32],
    ) -> f32 {
        minibatch_gradient(self, p, self.data, &self.batches, batch, s, grad, |s, o, grad| {
            // Dense 192 → 64 (ReLU) → 10.
            if lowest >= 3 {
                HEAD.backward_top(&s.h, o, &mut grad[W3..]);
                return;
            }
            let dp2 = (lowest < 2).then_some(&mut s.dp2[..]);
            HEAD.backward(&p[W3..], &s.p2, &s.h, o, &mut grad[W3..], &mut s.dh, dp2);
            if lowest == 2 {
                return;
            }
            // Pool 2 and conv 2.
            relu_pool_back(&s.p2, &s.arg2, &s.dp2, &mut s.d2);
            s.dp1.fill(0.0);
            let (gk2, rest) = grad[K2..W3].split_at_mut(C2 * C1 * K * K);
            conv_back(
                Planes { data: &s.p1, channels: C1, side: P1 },
                &p[K2..B2],
                &s.d2,
                gk2,
                rest,
                (lowest == 0).then_some(&mut s.dp1[..]),
            );
            if lowest == 1 {
                return;
            }
            // Pool 1 and conv 1.
            relu_pool_back(&s.p1, &s.arg1, &s.dp1, &mut s.d1);
            let (gk1, rest) = grad[K1..K2].split_at_mut(C1 * K * K);
            conv_back(
                Planes { data: &s.x, channels: 1, side: SIDE },
                &p[K1..B1],
                &s.d1,
                gk1,
                rest,
                None,
            );
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgd::net::testing::{check_gradient, random_split};

    #[test]
    fn gradient_matches_finite_differences() {
        let data = random_split(4, SIDE * SIDE, 5);
        let cnn = Cnn::new(&data, 2, 1).unwrap();
        let mut p = cnn.init_params(2);
        let mut rng = SplitMix64(3);
        p.iter_mut().for_each(|x| *x += 0.05 * rng.symmetric());
        // Every 29th weight and every bias of each layer (the test stays ~1 s). Small steps:
        // max-pooling and ReLU kinks are close together in a CNN.
        let some: Vec<usize> = (0..NPARAMS)
            .step_by(29)
            .chain(B1..K2)
            .chain(B2..W3)
            .chain(B3..W4)
            .chain(B4..NPARAMS)
            .collect();
        check_gradient(&cnn, &p, &some, 1e-3);
    }

    #[test]
    fn restricted_gradient_is_the_slice_of_the_full_gradient_bit_for_bit() {
        let data = random_split(3, SIDE * SIDE, 9);
        let cnn = Cnn::new(&data, 2, 1).unwrap();
        let mut p = cnn.init_params(4);
        let mut rng = SplitMix64(6);
        p.iter_mut().for_each(|x| *x += 0.05 * rng.symmetric());
        let sizes = cnn.layer_sizes();
        assert_eq!(sizes.iter().sum::<usize>(), NPARAMS);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut s = cnn.scratch();
        let (mut full, mut part) = (vec![0.0; NPARAMS], vec![1.0; NPARAMS]);
        for batch in 0..2 {
            let l_full = cnn.gradient(&p, batch, &mut s, &mut full);
            assert!(full[..K2].iter().any(|&x| x != 0.0), "the full gradient reaches conv 1");
            for lowest in 1..4 {
                let from: usize = sizes[..lowest].iter().sum();
                let l = cnn.restricted_gradient(&p, batch, lowest, &mut s, &mut part);
                assert_eq!(l.to_bits(), l_full.to_bits());
                assert_eq!(bits(&part[from..]), bits(&full[from..]), "lowest {lowest}");
                assert!(part[..from].iter().all(|&x| x == 0.0), "zeros below layer {lowest}");
            }
        }
    }

    #[test]
    fn wrong_image_size_is_an_error() {
        let data = random_split(2, 10, 5);
        assert_eq!(Cnn::new(&data, 1, 0).unwrap_err(), NetError::ImageSize(10));
    }
}
