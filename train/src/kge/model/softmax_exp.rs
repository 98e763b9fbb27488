//! The softmax's exps: one `exp` per score, on the widest vectors the CPU has, with the same
//! bits on every instruction set.
//!
//! The exp is a polynomial after range reduction (Cephes' `expf`, as the `wide` crate's `f32x8`
//! computes it): within a few ulp of `f32::exp`, and 0 where `|x| ≥ 87.3` (below −87.3
//! `f32::exp` is subnormal or 0). It is written once as plain `f32` arithmetic per lane and
//! compiled three times ([`ExpPath`]): for AVX-512, for AVX2 and for the baseline x86-64 (SSE2),
//! the widest one the CPU has chosen at run time. Every path gives the same bits:
//!
//! - each lane runs the same IEEE-754 operations in the same order, and Rust never fuses a
//!   product and a sum into an FMA on its own, so the vector width changes nothing in a lane;
//! - rounding to an integer adds and subtracts 1.5·2²³ (round half to even, as SSE2's
//!   `cvtps2dq` that `wide` used) rather than a rounding instruction only some sets have;
//! - the sum keeps eight partial sums whatever the vector width (score `i` goes to partial sum
//!   `i mod 8`), added lane 0 to 7, then the scores past the last full eight.
//!
//! The bits are those of the earlier `wide` `f32x8` version on the baseline build, so no result
//! recorded before changed. One part stays outside this module's control: the up to seven scores
//! past the last full eight take `f32::exp`, the platform's `expf` (as before), which a C library
//! may compute differently on another CPU.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction set the softmax's exps can be compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpPath {
    /// Whatever the build targets (on x86-64 without `-C target-cpu`, SSE2: 4 lanes).
    Baseline,
    /// AVX2 (8 lanes), x86-64 only.
    Avx2,
    /// AVX-512F (16 lanes), x86-64 only.
    Avx512,
}

impl ExpPath {
    /// Every path, narrowest first.
    pub const ALL: [ExpPath; 3] = [ExpPath::Baseline, ExpPath::Avx2, ExpPath::Avx512];

    /// Whether this CPU runs the path.
    pub fn is_available(self) -> bool {
        match self {
            ExpPath::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            ExpPath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            ExpPath::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            ExpPath::Avx2 | ExpPath::Avx512 => false,
        }
    }

    /// The paths this CPU runs, narrowest first (the baseline always).
    pub fn available() -> Vec<ExpPath> {
        Self::ALL.into_iter().filter(|p| p.is_available()).collect()
    }

    /// The widest path this CPU runs.
    pub fn detected() -> ExpPath {
        Self::ALL.into_iter().rev().find(|p| p.is_available()).unwrap_or(ExpPath::Baseline)
    }

    /// The path the softmax takes now: the one [`force`]d, or else the widest this CPU runs.
    pub fn current() -> ExpPath {
        // Relaxed: the value is the whole message; no other memory is read on its strength.
        match FORCED.load(Ordering::Relaxed) {
            1 => ExpPath::Baseline,
            2 => ExpPath::Avx2,
            3 => ExpPath::Avx512,
            _ => Self::detected(),
        }
    }

    /// The path's name, as `kge_roofline` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ExpPath::Baseline => "baseline",
            ExpPath::Avx2 => "avx2",
            ExpPath::Avx512 => "avx512",
        }
    }
}

/// The path [`force`] set: 0 for none, else 1 + its index in [`ExpPath::ALL`].
static FORCED: AtomicU8 = AtomicU8::new(0);

/// Makes every later softmax in this process take `path` (`None`: the widest this CPU runs
/// again). Every path gives the same bits, so this changes only the speed: it is there to check
/// that and to measure it. A path this CPU lacks is not taken: forcing it returns `false` and
/// changes nothing.
pub fn force(path: Option<ExpPath>) -> bool {
    let code = match path {
        None => 0,
        Some(p) if !p.is_available() => return false,
        Some(p) => 1 + ExpPath::ALL.iter().position(|q| *q == p).expect("a path") as u8,
    };
    // Relaxed: see `ExpPath::current`.
    FORCED.store(code, Ordering::Relaxed);
    true
}

/// `(m, Σᵢ out[i])` with `out[i] = exp(x[i] − m)` and `m = max x`, on [`ExpPath::current`].
///
/// **Deterministic:** the same scores give the same bits on every path, thread and mode. A NaN
/// score makes `m` NaN, every `out[i]` 0 or NaN and the sum NaN or 0 (the loss and every
/// gradient are then NaN, and the step reports the divergence).
///
/// # Panics
///
/// If `out` is shorter than `x`: a caller's bug.
pub fn softmax_exps(x: &[f32], out: &mut [f32]) -> (f32, f32) {
    softmax_exps_on(ExpPath::current(), x, out)
}

/// [`softmax_exps`] on `path`, or on the baseline where this CPU lacks `path`.
pub fn softmax_exps_on(path: ExpPath, x: &[f32], out: &mut [f32]) -> (f32, f32) {
    let out = &mut out[..x.len()];
    #[cfg(target_arch = "x86_64")]
    match path {
        // SAFETY: the CPU has AVX-512F (checked at run time).
        ExpPath::Avx512 if path.is_available() => return unsafe { exps_avx512(x, out) },
        // SAFETY: the CPU has AVX2 (checked at run time).
        ExpPath::Avx2 if path.is_available() => return unsafe { exps_avx2(x, out) },
        _ => {}
    }
    let _ = path;
    exps_lanes(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn exps_avx512(x: &[f32], out: &mut [f32]) -> (f32, f32) {
    exps_lanes(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn exps_avx2(x: &[f32], out: &mut [f32]) -> (f32, f32) {
    exps_lanes(x, out)
}

/// Partial sums of the exps (and, before, `wide`'s `f32x8` lanes): fixed, whatever the path.
const SUM_LANES: usize = 8;

/// The body every path compiles: lane-wise loops the compiler vectorizes at the path's width.
#[inline(always)]
fn exps_lanes(x: &[f32], out: &mut [f32]) -> (f32, f32) {
    let m = max_or_nan(x);
    let full = x.len() - x.len() % SUM_LANES;
    for (o, v) in out[..full].iter_mut().zip(&x[..full]) {
        *o = exp_lane(v - m);
    }
    let mut acc = [0.0f32; SUM_LANES];
    for c in out[..full].chunks_exact(SUM_LANES) {
        for (a, e) in acc.iter_mut().zip(c) {
            *a += e;
        }
    }
    let mut sum = acc.into_iter().fold(0.0f32, |s, v| s + v);
    for (o, v) in out[full..].iter_mut().zip(&x[full..]) {
        *o = (v - m).exp();
        sum += *o;
    }
    (m, sum)
}

/// `max x`, or NaN if any `x` is NaN; −∞ for no `x`. The maximum is exact, so any order gives
/// it (a zero's sign aside, which changes no exp, sum or loss): sixteen lanes, then halving. The
/// last sixteen scores are taken once more in place of the scores past the last full sixteen
/// (taking a score twice leaves a maximum as it is). NaNs are counted beside it, off the
/// maximum's chain of dependent operations.
#[inline(always)]
fn max_or_nan(x: &[f32]) -> f32 {
    const W: usize = 16;
    let larger = |a: f32, b: f32| if b > a { b } else { a };
    let (mx, nan) = if x.len() < W {
        let nan = x.iter().any(|v| v.is_nan());
        (x.iter().fold(f32::NEG_INFINITY, |m, v| larger(m, *v)), nan)
    } else {
        let mut mx: [f32; W] = x[x.len() - W..].try_into().expect("sixteen scores");
        let mut nan = [0u32; W];
        for c in x.chunks_exact(W).chain([&x[x.len() - W..]]) {
            for l in 0..W {
                mx[l] = larger(mx[l], c[l]);
                nan[l] |= u32::from(c[l].is_nan());
            }
        }
        let mut w = W;
        while w > 1 {
            w /= 2;
            for l in 0..w {
                (mx[l], nan[l]) = (larger(mx[l], mx[l + w]), nan[l] | nan[l + w]);
            }
        }
        (mx[0], nan[0] != 0)
    };
    if nan { f32::NAN } else { mx }
}

/// `exp v` by Cephes' method, one lane: `v = r·ln 2 + x` with `r` an integer and `|x| ≤ ln 2 / 2`
/// (`ln 2` in two parts, so `x` is exact to f32), `exp x` by a degree-7 polynomial, times `2ʳ`
/// built in the exponent bits. The operations and their order are `wide` 0.7's `f32x8::exp`
/// without FMA, so the bits are its bits on the baseline build.
#[inline(always)]
fn exp_lane(v: f32) -> f32 {
    const P0: f32 = 1.0 / 2.0;
    const P1: f32 = 1.0 / 6.0;
    const P2: f32 = 1.0 / 24.0;
    const P3: f32 = 1.0 / 120.0;
    const P4: f32 = 1.0 / 720.0;
    const P5: f32 = 1.0 / 5040.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const MAX_X: f32 = 87.3;
    // 1.5·2²³: adding and subtracting it rounds any |t| < 2²² to an integer, half to even.
    const ROUND: f32 = 12_582_912.0;
    // 2²³ + 127: `r` plus it holds `r + 127`, the biased exponent of 2ʳ, in its low mantissa bits.
    const POW2_BIAS: f32 = 8_388_735.0;
    let r = (v * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let x = v - r * LN2_HI;
    let x = x - r * LN2_LO;
    let (x2, x4) = (x * x, (x * x) * (x * x));
    let z = (P3 * x + P2) * x2 + ((P5 * x + P4) * x4 + (P1 * x + P0));
    let z = z * x2 + x;
    let pow2 = f32::from_bits((r + POW2_BIAS).to_bits() << 23);
    let z = (z + 1.0) * pow2;
    // Outside ±87.3 (and for NaN) `r` was not rounded exactly and `pow2` is garbage: 0 there.
    if v.abs() < MAX_X { z } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference for the bits: the `wide` `f32x8` version this module replaced, as the
    /// baseline build compiles it. A build for a CPU with FMA (`-C target-cpu=native`) fuses its
    /// products and sums, so there the baseline path, the one that build cannot widen, stands
    /// in for it.
    fn wide_softmax_exps(x: &[f32], out: &mut [f32]) -> (f32, f32) {
        if cfg!(target_feature = "fma") {
            return softmax_exps_on(ExpPath::Baseline, x, out);
        }
        use wide::f32x8;
        let lanes = |c: &[f32]| f32x8::from(<[f32; 8]>::try_from(c).expect("a full chunk"));
        let (xs, tail) = (x.chunks_exact(8), x.chunks_exact(8).remainder());
        let wide_max = xs.clone().fold(f32x8::splat(f32::NEG_INFINITY), |m, c| m.max(lanes(c)));
        let nan = x.iter().fold(false, |nan, v| nan | v.is_nan());
        let m = if nan {
            f32::NAN
        } else {
            wide_max
                .to_array()
                .into_iter()
                .chain(tail.iter().copied())
                .fold(f32::NEG_INFINITY, f32::max)
        };
        let (shift, mut acc) = (f32x8::splat(m), f32x8::ZERO);
        for (c, o) in xs.zip(out.chunks_exact_mut(8)) {
            let e = (lanes(c) - shift).exp();
            acc += e;
            o.copy_from_slice(&e.to_array());
        }
        let full = x.len() - tail.len();
        let mut sum = acc.to_array().into_iter().fold(0.0f32, |s, v| s + v);
        for (o, v) in out[full..].iter_mut().zip(tail) {
            *o = (v - m).exp();
            sum += *o;
        }
        (m, sum)
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Scores that reach every branch of the exp: the range's edges (±87.3 and beyond, where it
    /// is 0), values rounding to half-integers of `log₂ e` (where rounding to even matters), ±0,
    /// subnormals, ±∞, and a spread of ordinary values.
    fn edge_scores() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            87.3,
            -87.3,
            87.299_99,
            -87.299_99,
            87.300_01,
            -87.300_01,
            -88.0,
            -103.0,
            -1e30,
            f32::MIN,
            f32::MAX,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1.0,
            -1.0,
        ];
        for k in -130..130 {
            let half = (k as f32 + 0.5) * std::f32::consts::LN_2;
            v.extend([
                half,
                f32::from_bits(half.to_bits() + 1),
                f32::from_bits(half.to_bits() - 1),
            ]);
        }
        v
    }

    /// Every path this CPU has gives the bits of the `wide` version it replaced (its maximum
    /// equal, its exps and sum bit for bit) on rows of every length from 0 to 70 cut from a
    /// million spread scores and from the edge cases, shifted by a maximum placed in the row;
    /// NaN and ±∞ rows included.
    #[test]
    fn every_path_gives_the_bits_of_the_wide_version() {
        let mut pool: Vec<f32> = edge_scores();
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..1_000_000 {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let u = (s >> 40) as f32 / (1u64 << 24) as f32;
            pool.push(-100.0 + 110.0 * u);
        }
        let paths = ExpPath::available();
        let (mut rows, mut start) = (0usize, 0usize);
        while start < pool.len() {
            let n = rows % 71;
            let row = &pool[start..(start + n).min(pool.len())];
            start += n.max(1);
            rows += 1;
            let mut want = vec![0.0; row.len()];
            let (wm, ws) = wide_softmax_exps(row, &mut want);
            for &p in &paths {
                let mut got = vec![0.0; row.len()];
                let (m, sum) = softmax_exps_on(p, row, &mut got);
                assert!(m == wm || (m.is_nan() && wm.is_nan()), "{p:?} max {m} {wm} of {row:?}");
                assert_eq!(sum.to_bits(), ws.to_bits(), "{p:?} sum of {row:?}");
                assert_eq!(bits(&got), bits(&want), "{p:?} exps of {row:?}");
            }
        }
        // One exp at a time, of each edge case and of every 2¹³th float.
        let singles =
            edge_scores().into_iter().chain((0..=u32::MAX).step_by(1 << 13).map(f32::from_bits));
        for v in singles {
            // A row of eight copies puts `v − m = 0`; eight of `v` behind a 0 puts `v` itself.
            let row = [0.0, v, v, v, v, v, v, v];
            let mut want = [0.0; 8];
            let (wm, ws) = wide_softmax_exps(&row, &mut want);
            for &p in &paths {
                let mut got = [0.0; 8];
                let (m, sum) = softmax_exps_on(p, &row, &mut got);
                assert!(m == wm || (m.is_nan() && wm.is_nan()), "{p:?} max of {v}");
                assert_eq!(sum.to_bits(), ws.to_bits(), "{p:?} sum of {v}");
                assert_eq!(bits(&got), bits(&want), "{p:?} exp of {v} − {m}");
            }
        }
        // The lanes' exp alone, on every 2¹¹th float through the whole range (not only
        // `v − max ≤ 0`), against the wide version's (on a build without FMA: see above).
        if !cfg!(target_feature = "fma") {
            for b in (0..=u32::MAX).step_by(1 << 11) {
                let (v, want) = (f32::from_bits(b), wide::f32x8::splat(f32::from_bits(b)).exp());
                assert_eq!(exp_lane(v).to_bits(), want.to_array()[0].to_bits(), "exp({v})");
            }
        }
    }

    /// Forcing a path sends [`softmax_exps`] there, and a path this CPU lacks is refused.
    #[test]
    fn forcing_a_path_takes_it_or_refuses_it() {
        assert!(force(Some(ExpPath::Baseline)));
        assert_eq!(ExpPath::current(), ExpPath::Baseline);
        for p in ExpPath::ALL {
            assert_eq!(force(Some(p)), p.is_available(), "{p:?}");
        }
        assert!(force(None));
        assert_eq!(ExpPath::current(), ExpPath::detected());
        assert_eq!(ExpPath::available().last(), Some(&ExpPath::detected()));
    }
}
