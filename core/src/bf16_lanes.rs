//! A bf16 [`RowStore`](crate::row_store::RowStore)'s row copies: its value words widened to
//! `f32`s and `f32`s narrowed into them, on the widest vectors the CPU has, with the same bits on
//! every path.
//!
//! The conversions are written once, as branch-free integer operations per value, and compiled
//! three times ([`Lanes`]): for AVX-512, for AVX2 and for the baseline x86-64 (SSE2), the widest
//! one the CPU has chosen at run time. Integer operations give the same
//! bits at any width, so every path copies the same bits: `half`'s conversions (nearest, ties to
//! even; NaNs quieted), which `row_store`'s test `bf16_conversions_are_halfs` checks, and the
//! test `every_path_copies_the_same_bits` compares each path the CPU has with the baseline.
//!
//! Each word is still loaded and stored as one atomic access (`Relaxed`: the store's protocol
//! orders the copy); only the conversions between a staging buffer on the stack and the caller's
//! `f32`s are vectorized.

use crate::lanes::Lanes;
use crate::sync::{AtomicU64, Ordering};

/// Words a copy moves per staging round: the words' bf16s go through a buffer on the stack, so
/// the conversions are one flat loop and only the atomic loads and stores are per word.
pub(crate) const STAGE: usize = 16;

/// An `f32`'s nearest bf16 (ties to even; a NaN stays a NaN, its top mantissa bit set): `half`'s
/// conversion bit for bit, without branches.
#[inline(always)]
pub(crate) fn bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    // Adding 0x7FFF plus the kept part's lowest bit carries into the kept bits exactly when
    // the dropped half is above the midpoint, or at it with an odd kept part. No finite value
    // or infinity wraps; a NaN's wrapped sum is not used.
    let nearest = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let nan = (x >> 16) | 0x40;
    (if x & 0x7FFF_FFFF > 0x7F80_0000 { nan } else { nearest }) as u16
}

/// The `f32` a bf16 widens to: exact, a NaN quieted (`half`'s conversion bit for bit, without
/// branches).
#[inline(always)]
pub(crate) fn bf16_value(b: u16) -> f32 {
    let quiet = if b & 0x7FFF > 0x7F80 { 0x40 } else { 0 };
    f32::from_bits(u32::from(b | quiet) << 16)
}

/// A row's value words (`cells.len() == ⌈out.len() / 4⌉`, four bf16s each) widened into `out`.
#[inline]
pub(crate) fn load(cells: &[AtomicU64], out: &mut [f32]) {
    load_on(Lanes::detected(), cells, out)
}

/// `values` narrowed into a row's value words (`cells.len() == ⌈values.len() / 4⌉`; the last
/// word's unused slots 0).
#[inline]
pub(crate) fn store(cells: &[AtomicU64], values: &[f32]) {
    store_on(Lanes::detected(), cells, values)
}

/// [`load`] on `lanes`, or on the baseline where this CPU lacks them.
#[inline]
fn load_on(lanes: Lanes, cells: &[AtomicU64], out: &mut [f32]) {
    lanes.run(
        #[inline(always)]
        || load_lanes(cells, out),
    )
}

/// [`store`] on `lanes`, or on the baseline where this CPU lacks them.
#[inline]
fn store_on(lanes: Lanes, cells: &[AtomicU64], values: &[f32]) {
    lanes.run(
        #[inline(always)]
        || store_lanes(cells, values),
    )
}

/// The body of every [`load`] path.
#[inline(always)]
fn load_lanes(cells: &[AtomicU64], out: &mut [f32]) {
    let mut bits = [0u16; 4 * STAGE];
    for (out, cells) in out.chunks_mut(4 * STAGE).zip(cells.chunks(STAGE)) {
        for (four, cell) in bits.chunks_exact_mut(4).zip(cells) {
            // Relaxed: the caller orders the copy (seqlock re-check, or Hogwild's nothing).
            let word = cell.load(Ordering::Relaxed);
            four.copy_from_slice(&std::array::from_fn::<_, 4, _>(|j| (word >> (16 * j)) as u16));
        }
        // The last word's unused slots (an odd width) are not copied out.
        for (o, &b) in out.iter_mut().zip(&bits) {
            *o = bf16_value(b);
        }
    }
}

/// The body of every [`store`] path.
#[inline(always)]
fn store_lanes(cells: &[AtomicU64], values: &[f32]) {
    let mut bits = [0u16; 4 * STAGE];
    for (values, cells) in values.chunks(4 * STAGE).zip(cells.chunks(STAGE)) {
        for (b, &v) in bits.iter_mut().zip(values) {
            *b = bf16_bits(v);
        }
        // The last word's unused slots are 0.
        bits[values.len()..values.len().next_multiple_of(4)].fill(0);
        for (four, cell) in bits.chunks_exact(4).zip(cells) {
            let word = four.iter().rev().fold(0, |w, &b| w << 16 | u64::from(b));
            // Relaxed: the caller publishes the row (Release unlock), or is Hogwild.
            cell.store(word, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(any(ordo_loom, ordo_shuttle))))]
mod tests {
    use super::*;

    /// Every path this CPU has copies the bits the baseline (the fallback) copies, both ways,
    /// for every row width up to three staging rounds: spread floats, ties, NaNs with payloads,
    /// infinities, zeros of both signs and subnormals.
    #[test]
    fn every_path_copies_the_same_bits() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let special = [0x7F80_0000u32, 0xFF80_0000, 0x7FC0_0001, 0xFF81_2345, 0, 0x8000_0000, 1];
        let paths: Vec<Lanes> = Lanes::ALL.into_iter().filter(|p| p.is_available()).collect();
        for width in 0..=3 * 4 * STAGE + 3 {
            let words = width.div_ceil(4);
            let values: Vec<f32> = (0..width)
                .map(|i| match next() % 4 {
                    0 => f32::from_bits(special[i % special.len()]),
                    1 => f32::from_bits((next() as u32) & 0xFFFF_0000 | 0x8000),
                    _ => f32::from_bits(next() as u32),
                })
                .collect();
            let stored = |lanes: Lanes| {
                let cells: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(!0)).collect();
                store_on(lanes, &cells, &values);
                cells.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<u64>>()
            };
            let raw: Vec<u64> = (0..words).map(|_| next()).collect();
            let loaded = |lanes: Lanes| {
                let cells: Vec<AtomicU64> = raw.iter().map(|&w| AtomicU64::new(w)).collect();
                let mut out = vec![0.0f32; width];
                load_on(lanes, &cells, &mut out);
                out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
            };
            let (want_stored, want_loaded) = (stored(Lanes::Baseline), loaded(Lanes::Baseline));
            for &p in &paths {
                assert_eq!(stored(p), want_stored, "{p:?} stores width {width}");
                assert_eq!(loaded(p), want_loaded, "{p:?} loads width {width}");
            }
        }
        assert!(paths.contains(&Lanes::detected()));
    }
}
