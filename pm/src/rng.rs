//! The seeded random numbers of a run: the generator and the integer sampling, both fixed here so
//! that a seed means the same run after any dependency update.
//!
//! `rand::rngs::StdRng` may change algorithm between rand versions and `random_range`'s values
//! are not promised stable, so a run defined by a seed draws from [`RunRng`] (ChaCha8, from the
//! `chacha20` crate at a fixed major version), is seeded by [`seeded`] (the seed's bytes are the
//! key, no seed-expansion function of a dependency in between), and draws integers with
//! [`below`] (Lemire's multiply-shift, written once here). `tests/rng_fixture.rs` records the
//! first values of these streams; a change of any of them fails it.

use rand::Rng;
use rand::SeedableRng;

/// The generator of every seeded run: ChaCha with 8 rounds (Bernstein 2008), as the `chacha20`
/// crate's `ChaCha8Rng` defines its output.
pub type RunRng = chacha20::ChaCha8Rng;

/// The generator for `seed`: the 256-bit ChaCha key is `seed` in little-endian bytes followed by
/// zeros (stream 0, position 0).
///
/// ```
/// use ordo_pm::rng::{below, seeded};
/// let (mut a, mut b) = (seeded(7), seeded(7));
/// assert_eq!(below(&mut a, 1000), below(&mut b, 1000)); // a seed means one stream
/// ```
pub fn seeded(seed: u64) -> RunRng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    RunRng::from_seed(key)
}

/// Uniform in `0..n` by Lemire's multiply-shift: the high 64 bits of `x · n` for one 64-bit draw
/// `x`. One draw per value, no rejection; the bias is below `n / 2⁶⁴`. `n = 0` gives 0, so
/// callers draw only from non-empty ranges.
pub fn below<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// Uniform index into a slice of `len` elements (`len > 0`): [`below`] over `usize`.
pub fn index<R: Rng + ?Sized>(rng: &mut R, len: usize) -> usize {
    below(rng, len as u64) as usize
}

/// Uniform in `lo..hi` (`lo < hi`): `lo` plus [`below`] of the width.
pub fn between<R: Rng + ?Sized>(rng: &mut R, lo: i64, hi: i64) -> i64 {
    lo.wrapping_add(below(rng, hi.wrapping_sub(lo) as u64) as i64)
}
