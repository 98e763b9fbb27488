//! Deterministic random inputs shared by the tests and the GPU bench: a small seeded generator,
//! KGE batches, and batch streams for the validation cache. (Not a statistical RNG; it only has
//! to be reproducible and spread out.)

use crate::kge::{ChunkLimits, ChunkedBatch, ChunkedIds, KgeBatch, KgeError, KgeShape};

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

/// `count` batches of the chunked step over a table of `entities` rows, packed for `limits`:
/// each its sorted distinct rows (2 to `limits.max_rows`, overlapping between batches) and its
/// ids, positives and shared negatives by position in the batch, 1 to `limits.max_positives`
/// positives (so some chunks are short).
pub fn random_chunked_batches(
    rng: &mut Rng,
    count: usize,
    entities: usize,
    shape: &KgeShape,
    limits: &ChunkLimits,
) -> Result<ChunkedBatches, KgeError> {
    (0..count)
        .map(|_| {
            let n = 2 + rng.below(limits.max_rows.saturating_sub(1).max(1) as u64) as usize;
            let n = n.min(entities).min(limits.max_rows);
            let rows = rng.distinct_rows(n, entities as u64);
            let local = |rng: &mut Rng| rng.below(n as u64) as u32;
            let relations = shape.relations as u64;
            let positives: Vec<[u32; 3]> = (0..1 + rng.below(limits.max_positives as u64))
                .map(|_| [local(rng), rng.below(relations) as u32, local(rng)])
                .collect();
            let chunks = positives.len().div_ceil(limits.chunk);
            let chunk_negatives = (0..chunks * 2 * limits.negatives).map(|_| local(rng)).collect();
            let b = ChunkedBatch {
                rows: n,
                positives,
                chunk: limits.chunk,
                negatives: limits.negatives,
                chunk_negatives,
            };
            Ok((rows, ChunkedIds::build(&b, shape, limits)?))
        })
        .collect()
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

/// Knowledge-graph triples read from a TSV file (`head<TAB>relation<TAB>tail` per line), with
/// entity and relation names mapped to dense ids in order of first appearance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triples {
    /// `(head, relation, tail)` ids.
    pub triples: Vec<[u32; 3]>,
    /// Number of distinct entities.
    pub entities: usize,
    /// Number of distinct relations.
    pub relations: usize,
}

/// Read a TSV triple file (e.g. `datasets/wordnet30/train.txt`).
pub fn load_tsv_triples(path: &std::path::Path) -> std::io::Result<Triples> {
    use std::collections::HashMap;
    let text = std::fs::read_to_string(path)?;
    let (mut ents, mut rels) = (HashMap::new(), HashMap::new());
    let mut triples = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let [h, r, t] = f[..] else {
            let msg = format!("{}:{}: expected 3 tab-separated fields", path.display(), n + 1);
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, msg));
        };
        let id = |m: &mut HashMap<String, u32>, k: &str| {
            let next = m.len() as u32;
            *m.entry(k.to_owned()).or_insert(next)
        };
        triples.push([id(&mut ents, h), id(&mut rels, r), id(&mut ents, t)]);
    }
    Ok(Triples { triples, entities: ents.len(), relations: rels.len() })
}

/// Cut `kg` into batches of `positives` shuffled triples with `negatives` uniformly sampled
/// corruptions each (tails for even groups, heads for odd): per batch, the sorted distinct
/// entity ids it touches and its [`KgeBatch`] over them.
pub fn kge_batches(
    kg: &Triples,
    positives: usize,
    negatives: usize,
    seed: u64,
) -> Vec<(Vec<u64>, KgeBatch)> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..kg.triples.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
        .chunks(positives.max(1))
        .map(|chunk| {
            let mut global = Vec::with_capacity(chunk.len() * (1 + negatives));
            for (g, &i) in chunk.iter().enumerate() {
                let [h, r, t] = kg.triples[i];
                global.push([h, r, t]);
                for _ in 0..negatives {
                    let x = rng.below(kg.entities as u64) as u32;
                    global.push(if g % 2 == 0 { [h, r, x] } else { [x, r, t] });
                }
            }
            let mut rows: Vec<u64> =
                global.iter().flat_map(|&[h, _, t]| [u64::from(h), u64::from(t)]).collect();
            rows.sort_unstable();
            rows.dedup();
            let local = |e: u32| rows.binary_search(&u64::from(e)).unwrap_or(0) as u32;
            let triples = global.iter().map(|&[h, r, t]| [local(h), r, local(t)]).collect();
            let batch = KgeBatch { rows: rows.len(), triples, group: 1 + negatives };
            (rows, batch)
        })
        .collect()
}

/// Batches of the chunked step: each its sorted distinct rows and its packed ids.
pub type ChunkedBatches = Vec<(Vec<u64>, ChunkedIds)>;

/// Cut `kg` into batches of the chunked step: `positives` shuffled triples a batch in chunks of
/// `chunk`, each chunk side with `negatives` uniformly sampled entities shared by its
/// positives; per batch the sorted distinct entity ids it touches and its packed ids over
/// them. Returns the limits every batch fits (their largest row count) and the batches.
pub fn chunked_kge_batches(
    kg: &Triples,
    shape: &KgeShape,
    (positives, chunk, negatives): (usize, usize, usize),
    seed: u64,
) -> Result<(ChunkLimits, ChunkedBatches), KgeError> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..kg.triples.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let batches: Vec<(Vec<u64>, ChunkedBatch)> = order
        .chunks(positives.max(1))
        .map(|part| {
            let global: Vec<[u32; 3]> = part.iter().map(|&i| kg.triples[i]).collect();
            let sides = 2 * global.len().div_ceil(chunk.max(1)) * negatives;
            let negs: Vec<u32> = (0..sides).map(|_| rng.below(kg.entities as u64) as u32).collect();
            let mut rows: Vec<u64> = global
                .iter()
                .flat_map(|&[h, _, t]| [h, t])
                .chain(negs.iter().copied())
                .map(u64::from)
                .collect();
            rows.sort_unstable();
            rows.dedup();
            let local = |e: u32| rows.binary_search(&u64::from(e)).unwrap_or(0) as u32;
            let batch = ChunkedBatch {
                rows: rows.len(),
                positives: global.iter().map(|&[h, r, t]| [local(h), r, local(t)]).collect(),
                chunk,
                negatives,
                chunk_negatives: negs.iter().map(|&e| local(e)).collect(),
            };
            (rows, batch)
        })
        .collect();
    let limits = ChunkLimits {
        max_positives: positives,
        chunk,
        negatives,
        max_rows: batches.iter().map(|b| b.0.len()).max().unwrap_or(1),
        relations: shape.relations,
    };
    let packed = batches
        .into_iter()
        .map(|(rows, b)| Ok((rows, ChunkedIds::build(&b, shape, &limits)?)))
        .collect::<Result<_, KgeError>>()?;
    Ok((limits, packed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::KgeModel;

    /// Every packed batch fits the returned limits and its positives map back, through its
    /// rows, to triples of the graph.
    #[test]
    fn chunked_batches_fit_their_limits_and_map_back_to_the_triples() {
        let mut rng = Rng::new(4);
        let triples: Vec<[u32; 3]> = (0..23)
            .map(|_| [rng.below(30) as u32, rng.below(3) as u32, rng.below(30) as u32])
            .collect();
        let kg = Triples { triples: triples.clone(), entities: 30, relations: 3 };
        let shape = KgeShape { model: KgeModel::DistMult, dim: 2, relations: 3 };
        let (limits, batches) = chunked_kge_batches(&kg, &shape, (10, 4, 3), 1).unwrap();
        assert_eq!(batches.len(), 3, "23 triples in batches of 10: 10, 10, 3");
        let mut seen = Vec::new();
        for (rows, ids) in &batches {
            assert!(rows.windows(2).all(|w| w[0] < w[1]) && ids.rows() == rows.len());
            assert!(rows.len() <= limits.max_rows);
            for k in 0..ids.positives() {
                let [h, r, t] = ids.positive(k);
                seen.push([rows[h as usize] as u32, r, rows[t as usize] as u32]);
            }
        }
        seen.sort_unstable();
        let mut want = triples;
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn kge_batches_map_local_rows_back_to_the_triples() {
        let kg =
            Triples { triples: vec![[5, 0, 9], [2, 1, 5], [9, 0, 2]], entities: 12, relations: 2 };
        let batches = kge_batches(&kg, 2, 3, 1);
        assert_eq!(batches.len(), 2);
        let mut positives = Vec::new();
        for (rows, b) in &batches {
            b.check(&crate::kge::KgeShape {
                model: crate::kge::KgeModel::DistMult,
                dim: 2,
                relations: 2,
            })
            .unwrap();
            assert!(rows.windows(2).all(|w| w[0] < w[1]));
            for g in b.triples.chunks(b.group) {
                let [h, r, t] = g[0];
                positives.push([rows[h as usize] as u32, r, rows[t as usize] as u32]);
            }
        }
        positives.sort_unstable();
        let mut want = kg.triples.clone();
        want.sort_unstable();
        assert_eq!(positives, want);
    }

    #[test]
    fn tsv_triples_load_with_dense_ids() {
        let dir = std::env::temp_dir().join(format!("ordo-gpu-tsv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.txt");
        std::fs::write(&path, "a\tr\tb\nb\ts\tc\n\na\tr\tc\n").unwrap();
        let kg = load_tsv_triples(&path).unwrap();
        assert_eq!(kg.triples, [[0, 0, 1], [1, 1, 2], [0, 0, 2]]);
        assert_eq!((kg.entities, kg.relations), (3, 2));
        std::fs::write(&path, "a\tr\n").unwrap();
        assert!(load_tsv_triples(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
