//! SplitMix64: the one tiny, fixed, portable generator of the crate's trainers (KGE shuffles,
//! negatives and initial embeddings; SGD shuffles and initial weights), so a seed means the same
//! numbers everywhere and in every crate version.

/// SplitMix64 (Steele, Lea & Flood 2014). The field is the raw state.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// A generator for `(seed, stream)`: the state is `seed ^ stream · odd constant`, advanced
    /// once.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut g = SplitMix64(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        g.next_u64();
        g
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; multiply-shift, bias below 2⁻³²·n).
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * n as u64) >> 32) as u32
    }

    /// Uniform in `[-1, 1)`, on a grid of 2⁻²³ (exact in f32).
    pub fn symmetric(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` values uniform in `[-a, a)`.
    pub fn uniform(&mut self, n: usize, a: f32) -> impl Iterator<Item = f32> + '_ {
        (0..n).map(move |_| a * self.symmetric())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_ranges() {
        // The reference sequence of SplitMix64 from state 0.
        let mut g = SplitMix64(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        let mut g = SplitMix64::new(7, 3);
        for _ in 0..1000 {
            assert!(g.below(10) < 10);
            let x = g.symmetric();
            assert!((-1.0..1.0).contains(&x));
        }
    }
}
