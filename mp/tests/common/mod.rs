//! Deterministic weights and data for the ordo-mp tests.
#![allow(dead_code)]

use ordo_mp::models::rnn::{RnnSpec, rnn};
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{Graph, Payload, State};

/// A deterministic pseudo-random matrix in `[-a, a)` (SplitMix64 of `seed` and the index).
pub fn matrix(rows: usize, cols: usize, a: f32, seed: u64) -> Payload {
    Payload::from_shape_fn((rows, cols), |(i, j)| {
        let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ ((i * cols + j) as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 30)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        a * ((z >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
    })
}

/// An initializer for the model builders: layer `k` gets seed `seed + k`.
pub fn init(seed: u64) -> impl FnMut(usize, usize) -> Payload {
    let mut k = 0;
    move |din, dout| {
        k += 1;
        matrix(din, dout, (6.0 / (din + dout) as f32).sqrt(), seed + k)
    }
}

/// `n` classification instances of `b` examples with `d` features and `c` classes: the label is
/// the argmax of a fixed random projection, so the task is learnable.
pub fn dense_instances(
    n: usize,
    b: usize,
    d: usize,
    c: usize,
    seed: u64,
) -> Vec<(State, Vec<Payload>)> {
    let proj = matrix(d, c, 1.0, seed ^ 0xABCD);
    (0..n)
        .map(|i| {
            let x = matrix(b, d, 1.0, seed * 1000 + i as u64);
            let scores = x.dot(&proj);
            let y = Payload::from_shape_fn((b, 1), |(r, _)| {
                let row = scores.row(r);
                row.iter().enumerate().fold(0, |a, (k, &v)| if v > row[a] { k } else { a }) as f32
            });
            (State::new(i as u64), vec![x, y])
        })
        .collect()
}

/// `n` sequence instances (`b` sequences of length 2..=5 each, one-hot over `vocab`); the label
/// is the first token's index mod `classes` plus the last's, mod `classes`.
pub fn sequence_instances(
    n: usize,
    b: usize,
    vocab: usize,
    hidden: usize,
    classes: usize,
    seed: u64,
) -> Vec<(State, Vec<Payload>)> {
    (0..n)
        .map(|i| {
            let len = 2 + (i * 7 + seed as usize) % 4;
            let toks = matrix(len, b, 1.0, seed + 77 * i as u64)
                .mapv(|v| (((v + 1.0) * 0.5 * vocab as f32) as usize).min(vocab - 1));
            let mut x = Payload::zeros((len * b, vocab));
            for t in 0..len {
                for s in 0..b {
                    x[[t * b + s, toks[[t, s]]]] = 1.0;
                }
            }
            let y = Payload::from_shape_fn((b, 1), |(s, _)| {
                ((toks[[0, s]] + toks[[len - 1, s]]) % classes) as f32
            });
            (State::new(i as u64).with_len(len as u32), vec![x, Payload::zeros((b, hidden)), y])
        })
        .collect()
}

/// The tests' small RNN: a vocabulary of 6, hidden size 16, 3 classes (the shapes
/// [`rnn_instances`] feeds it), `replicas` cells, every layer with `opt` and
/// `min_update_interval`, weights from [`init`]`(4)`, on 3 workers.
pub fn small_rnn(replicas: usize, opt: Optimizer, min_update_interval: usize) -> Graph {
    let spec = RnnSpec { vocab: 6, hidden: 16, classes: 3, replicas, opt, min_update_interval };
    rnn(spec, &mut init(4), 3).unwrap().0
}

/// `n` instances for [`small_rnn`]: 3 sequences each ([`sequence_instances`] with seed 2).
pub fn rnn_instances(n: usize) -> Vec<(State, Vec<Payload>)> {
    sequence_instances(n, 3, 6, 16, 3, 2)
}

/// Bit patterns of every parameter, for exact comparison.
pub fn bits(params: &[Vec<Payload>]) -> Vec<Vec<Vec<u32>>> {
    params
        .iter()
        .map(|ps| ps.iter().map(|p| p.iter().map(|v| v.to_bits()).collect()).collect())
        .collect()
}
