//! Deterministic random inputs shared by the tests and the GPU bench: a small seeded generator,
//! KGE batches, and batch streams for the validation cache. (Not a statistical RNG; it only has
//! to be reproducible and spread out.)

use crate::kge::KgeBatch;

/// splitmix64: a seeded, reproducible generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::cache::hash(self.0.wrapping_sub(0x9e37_79b9_7f4a_7c15))
    }

    /// Uniform in `0..n` (`n > 0`; slightly biased, fine for test data).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// `rows` parameter rows of `2·dim` floats: embedding in `[-0.5, 0.5)`, Adagrad sums in
    /// `[0.1, 1)` (mid-training values, so Adagrad's step is smooth in the gradient).
    pub fn params(&mut self, rows: usize, dim: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(rows * 2 * dim);
        for _ in 0..rows {
            out.extend((0..dim).map(|_| self.uniform(-0.5, 0.5)));
            out.extend((0..dim).map(|_| self.uniform(0.1, 1.0)));
        }
        out
    }

    /// `n` distinct sorted row ids below `universe` (`n ≤ universe`).
    pub fn distinct_rows(&mut self, n: usize, universe: u64) -> Vec<u64> {
        let mut rows = std::collections::BTreeSet::new();
        while rows.len() < n.min(universe as usize) {
            rows.insert(self.below(universe));
        }
        rows.into_iter().collect()
    }
}

/// A KGE batch over `rows` entity rows: `positives` groups of one positive and `negatives`
/// corrupted tails (half the groups corrupt heads instead), relations below `relations`.
pub fn random_kge_batch(
    rng: &mut Rng,
    positives: usize,
    negatives: usize,
    rows: usize,
    relations: usize,
) -> KgeBatch {
    let mut triples = Vec::with_capacity(positives * (1 + negatives));
    for g in 0..positives {
        let h = rng.below(rows as u64) as u32;
        let r = rng.below(relations as u64) as u32;
        let t = rng.below(rows as u64) as u32;
        triples.push([h, r, t]);
        for _ in 0..negatives {
            let x = rng.below(rows as u64) as u32;
            triples.push(if g % 2 == 0 { [h, r, x] } else { [x, r, t] });
        }
    }
    KgeBatch { rows, triples, group: 1 + negatives }
}

/// One device-stage step of a random stream over a small universe of rows (so batches
/// overlap): the rows, the versions the batch "read" (some stale), and the STE to evict with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStep {
    /// Sorted distinct row ids.
    pub rows: Vec<u64>,
    /// Version word read per row.
    pub read_versions: Vec<u64>,
    /// STE (prefix units) handed to the device with this batch.
    pub ste: u64,
}

/// `steps` batches of up to `max_rows` rows over `universe` rows, with read versions and STEs
/// lagging by at most `max_lag` batches — the shape of an OAC run with that many in flight.
pub fn random_stream(
    rng: &mut Rng,
    steps: usize,
    max_rows: usize,
    universe: u64,
    max_lag: u64,
) -> Vec<StreamStep> {
    (0..steps as u64)
        .map(|ts| {
            let n = 1 + rng.below(max_rows as u64) as usize;
            let rows = rng.distinct_rows(n, universe);
            let ste = ts.saturating_sub(max_lag);
            // A read version is a write the batch could have seen: any ts in [ste, ts) (version
            // ts + 1), or the initial value.
            let read_versions = rows
                .iter()
                .map(|_| match rng.below(ts - ste + 1) {
                    0 => 0,
                    k => ste + k,
                })
                .collect();
            StreamStep { rows, read_versions, ste }
        })
        .collect()
}
