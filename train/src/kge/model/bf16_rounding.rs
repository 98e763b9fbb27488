//! Stochastic rounding of a row to bf16s, with its randomness from a counter-based generator
//! keyed by (seed, row, version): the same write rounds the same way in every mode, on any
//! thread and after a resume, so OAC's equality with the synchronous replay holds bit for bit
//! under `--precision bf16` too.
//!
//! **The generator** is ChaCha with 8 rounds as the `chacha20` crate's `ChaCha8Rng` defines its
//! output (the generator of `ordo_pm::rng`, fixed by the crate's name and major version): its
//! 256-bit key is the seed and the version in little-endian bytes (then zeros), its stream is
//! the row, and it starts at word 0. A row of `n` values takes its first `n` bytes, **one byte
//! (8 random bits) per value**, in order: up to 256 values are one refill of the generator's
//! buffer (four ChaCha blocks). The version is the batch that writes the row (its id, which
//! orders the batches of a run across epochs and resumes). The test `stream_is_fixed` records
//! the first draws: a change of the stream fails it.
//!
//! **The rounding** of `x` adds `256·u + 128` (the draw `u`, centred in its 1/256th of the
//! dropped range) to `x`'s bits and drops the low 16: `x` rounds away from zero (in magnitude)
//! with probability `(x's low 16 bits) / 2¹⁶` to within 2⁻⁹, so the rounded value's
//! expectation is `x` to within 2⁻⁹ of a bf16 step (Gupta et al. 2015 round with the full
//! dropped width; 8 bits keep the rounding's cost below the bytes it saves). A value that
//! already is a bf16 stays as it is; NaN and infinities round to the nearest (`half`'s
//! conversion). The loop has no branches, so it vectorizes.

use crate::kge::data::batch::SplitMix64;
use ordo::lanes::Lanes;
use rand::{Rng, SeedableRng};

/// Values rounded per refill of the generator's buffer (one random byte each).
const CHUNK: usize = 256;

/// `values` (one row's) rounded to bf16s in place, stochastically, keyed by `(seed, row,
/// version)`.
pub fn round_row(seed: u64, row: u64, version: u64, values: &mut [f32]) {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&version_key(version).to_le_bytes());
    let mut g = chacha20::ChaCha8Rng::from_seed(key);
    g.set_stream(row);
    let mut draws = [0u8; CHUNK];
    for chunk in values.chunks_mut(CHUNK) {
        let draws = &mut draws[..chunk.len()];
        g.fill_bytes(draws);
        round_with(Lanes::detected(), chunk, draws);
    }
}

/// Each `values[i]` rounded with `draws[i]`, on `lanes` (the baseline where this CPU lacks them).
#[inline]
fn round_with(lanes: Lanes, values: &mut [f32], draws: &[u8]) {
    lanes.run(
        #[inline(always)]
        || round_lanes(values, draws),
    )
}

/// The body of every path: no branches, so it vectorizes at the path's width.
#[inline(always)]
fn round_lanes(values: &mut [f32], draws: &[u8]) {
    for (x, &u) in values.iter_mut().zip(draws) {
        *x = round(*x, u);
    }
}

/// The version a write in batch `version` is keyed by: the batch, unless a seeded bug replaces
/// it.
#[inline]
fn version_key(version: u64) -> u64 {
    if crate::mutation::active(crate::mutation::Mutant::Bf16RoundingKeyedByThread) {
        // The bug: a per-thread count of the rows rounded so far instead of the write's
        // version (which thread rounds a row, and what it rounded before, is the schedule's).
        thread_local!(static ROUNDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
        return ROUNDED.with(|n| n.replace(n.get() + 1));
    }
    version
}

/// `x` rounded to a bf16 with the 8-bit draw `u` (no branches: a select).
#[inline(always)]
fn round(x: f32, u: u8) -> f32 {
    let bits = x.to_bits();
    // Adding below 2¹⁶ to the bits carries into the kept bits with probability ≈ low16 / 2¹⁶;
    // a carry out of the mantissa steps the exponent (the next binade's bf16), and from the
    // largest finite bf16 to infinity, as rounding up there must. The sum cannot wrap for a
    // finite value; for NaN and infinities it is not used.
    let up = bits.wrapping_add(u32::from(u) << 8 | 0x80) & 0xFFFF_0000;
    let finite = bits & 0x7F80_0000 != 0x7F80_0000;
    // Not finite: an infinity is a bf16 already; a NaN keeps its top bits, quieted (`half`).
    let nan = bits & 0x7FFF_FFFF > 0x7F80_0000;
    let other = (bits | if nan { 0x0040_0000 } else { 0 }) & 0xFFFF_0000;
    f32::from_bits(if finite { up } else { other })
}

/// `n` values drawn as a test row, for fixtures of the rounding.
#[doc(hidden)]
pub fn sample_row(seed: u64, n: usize) -> Vec<f32> {
    SplitMix64::new(seed, 0xB16).uniform(n, 1.0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator's first words for (seed 0, row 0, version 0) and (seed 7, row 3, version
    /// 9): the stream the rounding draws from. A change of the generator, its keying or its
    /// crate's output fails this test.
    #[test]
    fn stream_is_fixed() {
        let words = |seed: u64, row: u64, version: u64| {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&seed.to_le_bytes());
            key[8..16].copy_from_slice(&version.to_le_bytes());
            let mut g = chacha20::ChaCha8Rng::from_seed(key);
            g.set_stream(row);
            [g.next_u32(), g.next_u32(), g.next_u32(), g.next_u32()]
        };
        // Key, stream and position all zero: the published ChaCha8 test vector (keystream
        // 3e 00 ef 2f 89 5f 40 d6 7f 5b b8 e8 1f 09 a5 a1, as little-endian words).
        assert_eq!(words(0, 0, 0), FIXTURE_000);
        assert_eq!(words(7, 3, 9), FIXTURE_739);
        // And the rounding of a fixed row with their first bytes (0x43, 0xCE, 0xC0, 0x00): 0.1
        // up, -0.1 away from zero, 1 + 2⁻⁸ up, 3 (a bf16) kept.
        let mut row = [0.1f32, -0.1, 1.0 + 1.0 / 256.0, 3.0];
        round_row(7, 3, 9, &mut row);
        assert_eq!(row.map(f32::to_bits), FIXTURE_ROW);
    }

    /// Every path this CPU has rounds as the baseline (the fallback) does, bit for bit: spread
    /// values, ties, NaNs with payloads, infinities, zeros, subnormals and the largest bf16s,
    /// with every draw.
    #[test]
    fn every_path_rounds_the_same_bits() {
        let mut values = sample_row(3, 4096);
        let special = [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0xFF81_2345)];
        let edges = [0.0, -0.0, f32::from_bits(1), f32::from_bits(0x8000_7FFF), f32::MAX];
        let tops = [half::bf16::MAX.to_f32(), f32::from_bits(0x7F7F_8000), 1.0 + 1.0 / 512.0];
        values.extend(special.into_iter().chain(edges).chain(tops).cycle().take(256 * 12));
        let draws: Vec<u8> = (0..values.len()).map(|i| (i * 7 + i / 256) as u8).collect();
        let mut want = values.clone();
        round_with(Lanes::Baseline, &mut want, &draws);
        let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
        for lanes in [Lanes::Avx2, Lanes::Avx512].into_iter().filter(|l| l.is_available()) {
            for len in [0, 1, 15, 17, 63, values.len()] {
                let mut got = values[..len].to_vec();
                round_with(lanes, &mut got, &draws[..len]);
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want[..len], "{lanes:?}, {len} values");
            }
        }
        assert!(Lanes::detected().is_available());
    }

    const FIXTURE_000: [u32; 4] = [0x2FEF_003E, 0xD640_5F89, 0xE8B8_5B7F, 0xA1A5_091F];
    const FIXTURE_739: [u32; 4] = [0x00C0_CE43, 0x64F7_DEEB, 0x1DA4_9A43, 0x2B76_FD2E];
    const FIXTURE_ROW: [u32; 4] = [0x3DCD_0000, 0xBDCD_0000, 0x3F81_0000, 0x4040_0000];

    #[test]
    fn rounds_to_a_neighbouring_bf16_without_bias() {
        let x = 1.0f32 + 1.0 / 512.0; // a quarter of the way from 1 to the next bf16 (1 + 2⁻⁷)
        let (lo, hi) = (1.0f32, 1.0 + 1.0 / 128.0);
        let mut ups = 0u32;
        let n = 20_000u64;
        for row in 0..n {
            let mut v = [x];
            round_row(1, row, 5, &mut v);
            assert!(v[0] == lo || v[0] == hi, "{}", v[0]);
            ups += u32::from(v[0] == hi);
        }
        // P(up) = 1/4: 5000 ± 4σ (σ ≈ 61).
        assert!((4750..=5250).contains(&ups), "{ups} of {n} rounded up");
        // bf16s stay; the same key rounds the same way; another version differs somewhere.
        let mut exact = [1.0f32, -2.5, 0.0, f32::INFINITY];
        round_row(3, 4, 5, &mut exact);
        assert_eq!(exact, [1.0, -2.5, 0.0, f32::INFINITY]);
        let row = sample_row(1, 64);
        let (mut a, mut b, mut c) = (row.clone(), row.clone(), row.clone());
        round_row(2, 10, 7, &mut a);
        round_row(2, 10, 7, &mut b);
        round_row(2, 10, 8, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.iter().all(|v| v.to_bits() & 0xFFFF == 0), "every value a bf16");
        // Negative values round by magnitude the same way.
        let mut neg = [-x];
        round_row(1, 0, 5, &mut neg);
        assert!(neg[0] == -lo || neg[0] == -hi);
        // Past the largest finite bf16, rounding up reaches infinity.
        let max = half::bf16::MAX.to_f32();
        let above_max = f32::from_bits(max.to_bits() + 0x8000); // halfway to the next step
        assert_eq!(round(above_max, 0xFF), f32::INFINITY);
        assert_eq!(round(above_max, 0), max);
        // Not finite: rounded to the nearest, as `half` converts, whatever the draw.
        for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::from_bits(0xFF81_2345)] {
            let want = half::bf16::from_f32(x).to_f32().to_bits();
            assert_eq!(round(x, 0xFF).to_bits(), want, "{:#010x}", x.to_bits());
        }
    }
}
