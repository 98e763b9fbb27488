//! Filtered ranking over an entity table read one part at a time (the partitions of a table
//! larger than memory): the metrics of [`evaluate`](super::ranking::evaluate) and
//! [`evaluate_sampled`](super::ranking::evaluate_sampled) without a copy of the whole table.
//!
//! **Same ranks as the in-memory evaluators.** A query's realistic rank is `1 + #better +
//! #tied / 2` over the entities that are neither the target nor a known answer; both counts
//! are sums over entities, so they add up part by part, in any order. Each score is computed
//! as the in-memory evaluator computes it: full ranking scores a block of queries against a
//! chunk of candidates with
//! [`Interaction::score_all`](crate::kge::model::score::Interaction::score_all), whose element `(i,
//! j)` depends only on query `i` and candidate `j` (one `sgemm`, one accumulator per element, for
//! the dot product), and the target's score is the same product of the query with the target's row
//! alone; sampled ranking scores pairs with
//! [`Interaction::score`](crate::kge::model::score::Interaction::score) and draws each triple's
//! sample from the same seeded stream. So the ranks, and the metrics averaged in triple order, are
//! equal bit for bit (checked below and in `partitioned`'s tests).
//!
//! **Memory:** one part's embeddings, the queries' own rows and query vectors (`2 × triples ×
//! dim`), and per worker one block of scores (`BLOCK` triples × `CHUNK` candidates); never the
//! table, never the optimizer state.

use super::ranking::{BLOCK, Filter, Metrics};
use crate::kge::data::dataset::Triple;
use crate::kge::model::score::ScoreFn;
use ndarray::{Array2, ArrayView2, s};
use rayon::prelude::*;

/// Candidates scored per matrix product.
const CHUNK: usize = 4096;

/// Entity embeddings read one part at a time. The parts cover entities `0..entities()`, each
/// exactly once.
pub trait EntityParts {
    /// Why reading a part failed.
    type Error;
    /// Entities in all parts together.
    fn entities(&self) -> usize;
    /// Floats per embedding.
    fn dim(&self) -> usize;
    /// Number of parts.
    fn parts(&self) -> usize;
    /// Part `k`: its first entity and its rows' embeddings (`len × dim`, row-major).
    fn part(&self, k: usize) -> Result<(usize, Vec<f32>), Self::Error>;

    /// The embeddings of entities `ids` (ascending, distinct), `ids.len() × dim` row-major.
    /// By default one pass over the parts; a source that can read single rows (a partition
    /// file) reads only these, so an evaluation streams each part once, in the ranking pass.
    fn rows(&self, ids: &[u32]) -> Result<Vec<f32>, Self::Error> {
        let dim = self.dim();
        let mut rows = vec![0.0; ids.len() * dim];
        for k in 0..self.parts() {
            let (first, part) = self.part(k)?;
            let end = first + part.len() / dim.max(1);
            let lo = ids.partition_point(|&e| (e as usize) < first);
            for (i, &e) in ids.iter().enumerate().skip(lo) {
                if e as usize >= end {
                    break;
                }
                let at = (e as usize - first) * dim;
                rows[i * dim..(i + 1) * dim].copy_from_slice(&part[at..at + dim]);
            }
        }
        Ok(rows)
    }
}

/// Each triple's two queries (`2i`: `(h, r, ?)` with target `t`; `2i + 1`: `(?, r, t)` with
/// target `h`, asked as `(t, r + R, ?)` with `reciprocal`), built from the rows of the triples'
/// own entities, gathered in one pass over the parts.
struct Queries {
    /// `2·triples × dim`.
    vectors: Array2<f32>,
    /// Per query, its target's embedding (`2·triples × dim`).
    targets: Array2<f32>,
}

fn gather<S: EntityParts>(
    (score, reciprocal): (ScoreFn, bool),
    parts: &S,
    relations: ArrayView2<'_, f32>,
    triples: &[Triple],
) -> Result<Queries, S::Error> {
    let dim = parts.dim();
    let mut needed: Vec<u32> = triples.iter().flat_map(|t| [t.h, t.t]).collect();
    needed.sort_unstable();
    needed.dedup();
    let rows = Array2::from_shape_vec((needed.len(), dim), parts.rows(&needed)?)
        .expect("rows() returns ids × dim");
    let row = |e: u32| rows.row(needed.binary_search(&e).expect("gathered")).to_vec();
    let inverse = relations.nrows() / 2;
    let mut vectors = Array2::<f32>::zeros((2 * triples.len(), dim));
    let mut targets = Array2::<f32>::zeros((2 * triples.len(), dim));
    for (i, t) in triples.iter().enumerate() {
        let (h, r, tl) = (row(t.h), relations.row(t.r as usize).to_vec(), row(t.t));
        score.tail_query(&h, &r, vectors.row_mut(2 * i).as_slice_mut().expect("row-major"));
        let p = vectors.row_mut(2 * i + 1).into_slice().expect("row-major");
        if reciprocal {
            score.tail_query(&tl, &relations.row(t.r as usize + inverse).to_vec(), p);
        } else {
            score.head_query(&r, &tl, p);
        }
        targets.row_mut(2 * i).assign(&ndarray::ArrayView1::from(&tl));
        targets.row_mut(2 * i + 1).assign(&ndarray::ArrayView1::from(&h));
    }
    Ok(Queries { vectors, targets })
}

/// [`evaluate_parts`] of several sets of triples (validation and test) in one pass over the
/// parts: each set's metrics, equal bit for bit to its own `evaluate_parts` (a query's ranks
/// depend only on its own scores; a sampled triple's candidates are drawn by its index in its
/// own set).
pub fn evaluate_parts_sets<S: EntityParts>(
    model: (ScoreFn, bool),
    parts: &S,
    relations: ArrayView2<'_, f32>,
    sets: &[&[Triple]],
    filter: &Filter,
    sample: Option<(usize, u64)>,
) -> Result<Vec<Metrics>, S::Error> {
    let triples: Vec<Triple> = sets.iter().flat_map(|s| s.iter().copied()).collect();
    let ranks = ranks_of(model, parts, relations, &triples, sets, filter, sample)?;
    let mut at = 0;
    Ok(sets
        .iter()
        .map(|set| {
            let r = &ranks[2 * at..2 * (at + set.len())];
            at += set.len();
            Metrics::from_ranks(r)
        })
        .collect())
}

/// Per query, how many counted candidates score above and equal to its target.
#[derive(Clone, Copy, Default)]
struct Counts {
    better: usize,
    tied: usize,
}

/// The target and known answers of query `q` (`2i` or `2i + 1`) of `triples`.
fn answer<'f>(triples: &[Triple], filter: &'f Filter, q: usize) -> (u32, &'f [u32]) {
    let t = triples[q / 2];
    if q.is_multiple_of(2) {
        (t.t, filter.tails_of(t.h, t.r))
    } else {
        (t.h, filter.heads_of(t.r, t.t))
    }
}

/// [`evaluate`](super::ranking::evaluate) (`sample: None`) or
/// [`evaluate_sampled`](super::ranking::evaluate_sampled) (`sample: Some((k, seed))`) of
/// `triples` with the entity embeddings read part by part from `parts`: the same metrics, bit
/// for bit, in the memory of one part (module docs).
pub fn evaluate_parts<S: EntityParts>(
    model: (ScoreFn, bool),
    parts: &S,
    relations: ArrayView2<'_, f32>,
    triples: &[Triple],
    filter: &Filter,
    sample: Option<(usize, u64)>,
) -> Result<Metrics, S::Error> {
    let ranks = ranks_of(model, parts, relations, triples, &[triples], filter, sample)?;
    Ok(Metrics::from_ranks(&ranks))
}

/// Each query's realistic rank (`2i`, `2i + 1` for triple `i`) of `triples`, the
/// concatenation of `sets` (a sampled triple draws its candidates by its index in its set).
fn ranks_of<S: EntityParts>(
    model: (ScoreFn, bool),
    parts: &S,
    relations: ArrayView2<'_, f32>,
    triples: &[Triple],
    sets: &[&[Triple]],
    filter: &Filter,
    sample: Option<(usize, u64)>,
) -> Result<Vec<f64>, S::Error> {
    // Per triple, its index in its own set.
    let local: Vec<usize> = sets.iter().flat_map(|s| 0..s.len()).collect();
    let inter = model.0.interaction();
    let Queries { vectors, targets } = gather(model, parts, relations, triples)?;
    let n = 2 * triples.len();
    // The target's score exactly as the in-memory evaluator finds it.
    let target_score: Vec<f32> = (0..n)
        .into_par_iter()
        .map(|q| {
            let (v, t) = (vectors.slice(s![q..q + 1, ..]), targets.slice(s![q..q + 1, ..]));
            match sample {
                None => inter.score_all(v, t)[[0, 0]],
                Some(_) => inter.score(
                    vectors.row(q).as_slice().expect("row-major"),
                    targets.row(q).as_slice().expect("row-major"),
                ),
            }
        })
        .collect();
    let mut counts = vec![Counts::default(); n];
    let dim = parts.dim();
    let entities = parts.entities();
    for k in 0..parts.parts() {
        let (first, part) = parts.part(k)?;
        let len = part.len() / dim.max(1);
        let part = ArrayView2::from_shape((len, dim), &part).expect("parts are dim wide");
        match sample {
            None => counts.par_chunks_mut(2 * BLOCK).enumerate().for_each(|(b, block)| {
                let q0 = b * 2 * BLOCK;
                let qs = vectors.slice(s![q0..q0 + block.len(), ..]);
                for c0 in (0..len).step_by(CHUNK) {
                    let c1 = (c0 + CHUNK).min(len);
                    let scores = inter.score_all(qs, part.slice(s![c0..c1, ..]));
                    for (i, c) in block.iter_mut().enumerate() {
                        let s = target_score[q0 + i];
                        let row = scores.row(i);
                        let (mut better, mut tied) = (0usize, 0usize);
                        for &x in row {
                            better += usize::from(x > s);
                            tied += usize::from(x == s);
                        }
                        let (target, known) = answer(triples, filter, q0 + i);
                        let (lo, hi) = ((first + c0) as u32, (first + c1) as u32);
                        let from = known.partition_point(|&e| e < lo);
                        let to = known.partition_point(|&e| e < hi);
                        let left_out = known[from..to].iter().filter(|&&e| e != target);
                        for &e in left_out.chain((lo..hi).contains(&target).then_some(&target)) {
                            let x = row[(e - lo) as usize];
                            better -= usize::from(x > s);
                            tied -= usize::from(x == s);
                        }
                        c.better += better;
                        c.tied += tied;
                    }
                }
            }),
            Some((size, seed)) => {
                counts.par_chunks_mut(2).enumerate().for_each(|(i, pair)| {
                    let mut g =
                        crate::rng::SplitMix64::new(seed, 0x5A3F_0000_0000 ^ local[i] as u64);
                    let range = first as u32..(first + len) as u32;
                    for _ in 0..size {
                        let e = g.below(entities as u32);
                        if !range.contains(&e) {
                            continue;
                        }
                        let cand = part.row((e - range.start) as usize);
                        let cand = cand.as_slice().expect("row-major");
                        for (side, c) in pair.iter_mut().enumerate() {
                            let q = 2 * i + side;
                            let (target, known) = answer(triples, filter, q);
                            if e == target || known.binary_search(&e).is_ok() {
                                continue;
                            }
                            let s = target_score[q];
                            let x =
                                inter.score(vectors.row(q).as_slice().expect("row-major"), cand);
                            c.better += usize::from(x > s);
                            c.tied += usize::from(x == s);
                        }
                    }
                });
            }
        }
    }
    let nan_rank = match sample {
        None => entities,
        Some((size, _)) => size + 1,
    };
    let ranks: Vec<f64> =
        counts
            .iter()
            .zip(&target_score)
            .map(|(c, s)| {
                if s.is_nan() {
                    nan_rank as f64
                } else {
                    1.0 + c.better as f64 + c.tied as f64 / 2.0
                }
            })
            .collect();
    Ok(ranks)
}

/// A dense `N × dim` table read in parts of `part` rows: the in-memory source, for tests and
/// for checking a streamed source against it.
pub struct DenseParts<'a> {
    /// The embeddings, row-major.
    pub table: &'a [f32],
    /// Floats per embedding.
    pub dim: usize,
    /// Rows per part (the last may be shorter).
    pub part: usize,
}

impl EntityParts for DenseParts<'_> {
    type Error = std::convert::Infallible;

    fn entities(&self) -> usize {
        self.table.len() / self.dim.max(1)
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn parts(&self) -> usize {
        self.entities().div_ceil(self.part.max(1))
    }

    fn part(&self, k: usize) -> Result<(usize, Vec<f32>), Self::Error> {
        let first = k * self.part.max(1);
        let end = (first + self.part.max(1)).min(self.entities());
        Ok((first, self.table[first * self.dim..end * self.dim].to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::data::dataset::Dataset;
    use crate::kge::eval::ranking::{evaluate, evaluate_sampled};

    /// Every score function, full and sampled ranking, parts of several sizes (one entity,
    /// uneven, the whole table): the same metrics as the in-memory evaluators, bit for bit.
    #[test]
    fn streamed_ranks_equal_the_in_memory_ranks() {
        let d = Dataset::load("umls").unwrap();
        let n = d.entities.len();
        let dim = 8;
        let mut g = crate::rng::SplitMix64::new(11, 1);
        let mut val = || (g.below(2001) as f32 - 1000.0) / 500.0;
        // A few tied entities, so ties are counted across parts.
        let mut table: Vec<f32> = (0..n * dim).map(|_| val()).collect();
        for e in [3, 70, 130] {
            let row = table[..dim].to_vec();
            table[e * dim..(e + 1) * dim].copy_from_slice(&row);
        }
        let triples = &d.test[..150];
        let filter = Filter::for_queries(&d, triples);
        for score in [ScoreFn::ComplEx, ScoreFn::DistMult, ScoreFn::TransEL1, ScoreFn::TransEL2] {
            for reciprocal in [false, true] {
                let rows = if reciprocal { 2 * d.relations.len() } else { d.relations.len() };
                let rel: Vec<f32> = (0..rows * dim).map(|_| val()).collect();
                let rel = ArrayView2::from_shape((rows, dim), &rel).unwrap();
                let ents = ArrayView2::from_shape((n, dim), &table).unwrap();
                let m = (score, reciprocal);
                let full = evaluate(m, ents, rel, triples, &filter);
                let sampled = evaluate_sampled(m, ents, rel, triples, &filter, (40, 5));
                assert!(full.mrr > 0.0 && sampled.mrr > full.mrr, "{full:?} {sampled:?}");
                for part in [1, 17, 40, n] {
                    let parts = DenseParts { table: &table, dim, part };
                    let streamed = evaluate_parts(m, &parts, rel, triples, &filter, None);
                    assert_eq!(streamed.unwrap(), full, "{m:?} parts of {part}");
                    let streamed = evaluate_parts(m, &parts, rel, triples, &filter, Some((40, 5)));
                    assert_eq!(streamed.unwrap(), sampled, "{m:?} sampled, parts of {part}");
                }
                // Two sets in one pass: each set's own metrics, full and sampled.
                let (a, b) = triples.split_at(60);
                let parts = DenseParts { table: &table, dim, part: 17 };
                for sample in [None, Some((40, 5))] {
                    let both = evaluate_parts_sets(m, &parts, rel, &[a, b], &filter, sample);
                    let one = |t| evaluate_parts(m, &parts, rel, t, &filter, sample).unwrap();
                    assert_eq!(both.unwrap(), [one(a), one(b)], "{m:?} {sample:?}");
                }
            }
        }
    }
}
