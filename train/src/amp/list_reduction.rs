//! The list-reduction task (Appendix B.2): a sequence of at most 10 tokens, the first one of 4
//! reductions, the rest digits; the answer is the reduction rounded, modulo 10.

use crate::rng::SplitMix64;

/// Tokens: the 4 reductions, then the digits 0–9.
pub const VOCAB: usize = 14;
/// Answers 0–9.
pub const CLASSES: usize = 10;

/// One example: its tokens (first the reduction) and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// Token ids: `tokens[0] < 4` names the reduction, the rest are `4 + digit`.
    pub tokens: Vec<usize>,
    /// The answer in `0..10`.
    pub answer: usize,
}

fn mean(l: &[f64]) -> f64 {
    if l.is_empty() { 0.0 } else { l.iter().sum::<f64>() / l.len() as f64 }
}

/// The answer to reduction `op` on the list `l`, in Python's terms: `mean(L)`,
/// `mean(L[0::2]) − mean(L[1::2])` (an empty slice's mean taken as 0), `max(L) − min(L)`,
/// `len(L)`; rounded half away from zero, modulo 10.
///
/// ```
/// use ordo_train::amp::list_reduction::answer;
/// assert_eq!(answer(0, &[1, 2, 6]), 3);
/// assert_eq!(answer(1, &[1, 7, 2]), 4); // 1.5 − 7 = −5.5 → −6 → 4 (mod 10)
/// assert_eq!(answer(2, &[3, 9]), 6);
/// assert_eq!(answer(3, &[0; 9]), 9);
/// ```
pub fn answer(op: usize, l: &[u8]) -> usize {
    let v: Vec<f64> = l.iter().map(|&d| d as f64).collect();
    let x = match op {
        0 => mean(&v),
        1 => {
            let even: Vec<f64> = v.iter().step_by(2).copied().collect();
            let odd: Vec<f64> = v.iter().skip(1).step_by(2).copied().collect();
            mean(&even) - mean(&odd)
        }
        2 => {
            v.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
                - v.iter().cloned().fold(f64::INFINITY, f64::min)
        }
        _ => v.len() as f64,
    };
    (x.round() as i64).rem_euclid(10) as usize
}

/// `n` examples from `seed` (stream `stream`): a uniform reduction and 1–9 uniform digits.
pub fn generate(n: usize, seed: u64, stream: u64) -> Vec<Example> {
    let mut g = SplitMix64::new(seed, stream);
    (0..n)
        .map(|_| {
            let op = g.below(4) as usize;
            let len = 1 + g.below(9) as usize;
            let digits: Vec<u8> = (0..len).map(|_| g.below(10) as u8).collect();
            let mut tokens = vec![op];
            tokens.extend(digits.iter().map(|&d| 4 + d as usize));
            Example { tokens, answer: answer(op, &digits) }
        })
        .collect()
}
