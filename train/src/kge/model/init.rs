//! Initial embeddings: `--init uniform|normal|xavier` with `--init-scale s`.
//!
//! Every value is drawn from the seeded [`SplitMix64`] in row order, so a seed fixes the initial
//! tables bit for bit (the checkpoint and replay tests rely on it).

use crate::kge::data::batch::SplitMix64;
use ordo::precision::Precision;
use ordo::row_store::{RowStore, StoreError};
use std::f32::consts::PI;

/// The initial distribution of embedding values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Uniform in `[−s, s)`.
    #[default]
    Uniform,
    /// Normal with mean 0 and standard deviation `s` (PyKEEN's ComplEx default with `s = 1`).
    Normal,
    /// Glorot/Xavier uniform for a `dim`-wide row: `[−b, b)` with `b = s·√(6 / (dim + dim))`.
    Xavier,
}

impl Init {
    /// `n` values for rows `dim` wide, from `g`.
    pub fn sample(self, g: &mut SplitMix64, n: usize, dim: usize, scale: f32) -> Vec<f32> {
        match self {
            Init::Uniform => g.uniform(n, scale).collect(),
            Init::Xavier => {
                let bound = scale * (6.0 / (2 * dim.max(1)) as f32).sqrt();
                g.uniform(n, bound).collect()
            }
            Init::Normal => (0..n).map(|_| scale * standard_normal(g)).collect(),
        }
    }
}

/// One standard normal value (Box–Muller, the cosine branch).
fn standard_normal(g: &mut SplitMix64) -> f32 {
    // u1 in (0, 1]: never 0, so ln is finite.
    let u1 = ((g.next_u64() >> 40) as f32 + 1.0) / (1u64 << 24) as f32;
    let u2 = (g.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
    (-2.0 * u1.ln()).sqrt() * (2.0 * PI * u2).cos()
}

/// The initial embeddings of the entities, one `dim`-wide vector per entity in entity order,
/// each drawn from one seeded stream: the one order both [`init_entities`] and
/// [`entity_store`] lay out.
fn entity_embeddings(
    dim: usize,
    (init, scale): (Init, f32),
    seed: u64,
) -> impl Iterator<Item = Vec<f32>> {
    let mut g = SplitMix64::new(seed, 0xE7);
    std::iter::repeat_with(move || init.sample(&mut g, dim, dim, scale))
}

/// Initial entity rows: the embedding (`dim`) from `init` and `seed`, the optimizer state
/// (`row - dim` floats) zero.
pub fn init_entities(
    entities: usize,
    dim: usize,
    row: usize,
    init: (Init, f32),
    seed: u64,
) -> Vec<f32> {
    let mut rows = vec![0.0; entities * row];
    for (r, e) in rows.chunks_mut(row).zip(entity_embeddings(dim, init, seed)) {
        r[..dim].copy_from_slice(&e);
    }
    rows
}

/// The rows of [`init_entities`] written straight into a [`RowStore`], one row sampled at a
/// time: no `entities × row` staging table beside the store (on a 1M-entity graph that table
/// alone is as large as the store). A table the allocator cannot reserve is
/// [`StoreError::TooLarge`], not an abort.
pub fn entity_store(
    entities: usize,
    dim: usize,
    row: usize,
    init: (Init, f32),
    seed: u64,
) -> Result<RowStore, StoreError> {
    entity_store_in(Precision::F32, entities, dim, row, init, seed)
}

/// [`entity_store`] in a given [`Precision`]: with bf16 each initial value is kept as its
/// nearest bf16 (the step's stochastic rounding starts with the first write).
pub fn entity_store_in(
    precision: Precision,
    entities: usize,
    dim: usize,
    row: usize,
    init: (Init, f32),
    seed: u64,
) -> Result<RowStore, StoreError> {
    let mut embeddings = entity_embeddings(dim, init, seed);
    // The row sampled last; `from_fn` asks for rows in order, so each is sampled once, in
    // entity order.
    let mut current: Option<(usize, Vec<f32>)> = None;
    RowStore::try_from_fn_in(precision, entities, row, |r, c| {
        if current.as_ref().is_none_or(|(cr, _)| *cr != r) {
            debug_assert!(current.as_ref().is_none_or(|(cr, _)| *cr + 1 == r), "rows in order");
            current = Some((r, embeddings.next().expect("an endless stream")));
        }
        let values = &current.as_ref().expect("sampled above").1;
        if c < dim { values[c] } else { 0.0 }
    })
}

/// Initial relation parameters, `relations × rdim`. RotatE's phases are uniform in `[−π, π)`
/// whatever the init (Sun et al. 2019).
pub fn init_relations(
    relations: usize,
    rdim: usize,
    (init, scale): (Init, f32),
    phases: bool,
    seed: u64,
) -> Vec<f32> {
    let mut g = SplitMix64::new(seed, 0x7E1);
    if phases {
        g.uniform(relations * rdim, PI).collect()
    } else {
        init.sample(&mut g, relations * rdim, rdim, scale)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_holds_the_staged_rows() {
        for init in [(Init::Normal, 0.3), (Init::Uniform, 0.1)] {
            let rows = init_entities(7, 3, 5, init, 11);
            assert_eq!(entity_store(7, 3, 5, init, 11).unwrap().snapshot(), rows);
            assert_ne!(entity_store(7, 3, 5, init, 12).unwrap().snapshot(), rows);
        }
    }

    #[test]
    fn samples_have_the_requested_spread() {
        let mut g = SplitMix64::new(1, 2);
        let n = 20_000;
        let v = Init::Normal.sample(&mut g, n, 10, 0.5);
        let mean = v.iter().sum::<f32>() / n as f32;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n as f32;
        assert!(mean.abs() < 0.02 && (var.sqrt() - 0.5).abs() < 0.02, "{mean} {var}");
        // Xavier for dim 6: b = √(6 / 12).
        let (u, b) = (Init::Xavier.sample(&mut g, n, 6, 1.0), 0.5f32.sqrt());
        assert!(u.iter().all(|x| x.abs() <= b) && u.iter().any(|x| x.abs() > 0.95 * b));
        let u = Init::Uniform.sample(&mut g, n, 6, 0.1);
        assert!(u.iter().all(|x| x.abs() <= 0.1) && u.iter().any(|x| x.abs() > 0.095));
    }
}
