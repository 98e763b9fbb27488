//! Filtered link-prediction metrics: MRR and Hits@1/3/10 over head and tail prediction.
//!
//! Every test triple `(h, r, t)` is asked twice — `(h, r, ?)` and `(?, r, t)` — and the true
//! answer is ranked against all entities, leaving out the other answers known from
//! train+valid+test (the *filtered* setting of Bordes et al. 2013). Ties count with the mean of
//! the optimistic and pessimistic rank (PyKEEN's "realistic" rank), so a constant model gets the
//! rank of a random guess rather than rank 1.

use crate::kge::data::dataset::{Dataset, Triple};
use crate::kge::model::score::ScoreFn;
use ndarray::ArrayView2;
use rayon::prelude::*;
use std::collections::HashMap;

/// The known answers of every `(h, r, ?)` and `(?, r, t)` query, for filtering.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    tails: HashMap<(u32, u32), Vec<u32>>,
    heads: HashMap<(u32, u32), Vec<u32>>,
}

impl Filter {
    /// The filter of all triples in `triples` (typically train+valid+test).
    pub fn new<'a>(triples: impl IntoIterator<Item = &'a Triple>) -> Self {
        let mut f = Filter::default();
        for t in triples {
            f.tails.entry((t.h, t.r)).or_default().push(t.t);
            f.heads.entry((t.r, t.t)).or_default().push(t.h);
        }
        for v in f.tails.values_mut().chain(f.heads.values_mut()) {
            v.sort_unstable();
            v.dedup();
        }
        f
    }

    /// The filter of a dataset's three splits.
    pub fn of(d: &Dataset) -> Self {
        Self::new(d.train.iter().chain(&d.valid).chain(&d.test))
    }

    /// The part of [`Filter::of`] that ranking `queries` looks up: the known answers of the
    /// `(h, r, ?)` and `(?, r, t)` queries of these triples only, from all three splits. Ranks
    /// are the same as with the whole filter; memory is the evaluated queries and their
    /// answers, not two maps over every training triple (gigabytes on a 20M-triple graph).
    ///
    /// ```
    /// use ordo_train::kge::{data::dataset::{Dataset, Triple}, eval::ranking::Filter};
    /// let d = Dataset::load("nations").unwrap();
    /// let f = Filter::for_queries(&d, &d.test[..3]);
    /// assert!(f.len() <= 6 && f.len() < Filter::of(&d).len());
    /// ```
    pub fn for_queries(d: &Dataset, queries: &[Triple]) -> Self {
        let mut f = Filter::default();
        for t in queries {
            f.tails.entry((t.h, t.r)).or_default();
            f.heads.entry((t.r, t.t)).or_default();
        }
        for t in d.train.iter().chain(&d.valid).chain(&d.test) {
            if let Some(v) = f.tails.get_mut(&(t.h, t.r)) {
                v.push(t.t);
            }
            if let Some(v) = f.heads.get_mut(&(t.r, t.t)) {
                v.push(t.h);
            }
        }
        for v in f.tails.values_mut().chain(f.heads.values_mut()) {
            v.sort_unstable();
            v.dedup();
        }
        f
    }

    /// The known tails of `(h, r, ?)`, sorted (empty if none).
    pub fn tails_of(&self, h: u32, r: u32) -> &[u32] {
        self.tails.get(&(h, r)).map_or(&[], Vec::as_slice)
    }

    /// The known heads of `(?, r, t)`, sorted (empty if none).
    pub fn heads_of(&self, r: u32, t: u32) -> &[u32] {
        self.heads.get(&(r, t)).map_or(&[], Vec::as_slice)
    }

    /// Queries (head and tail) the filter knows answers for.
    pub fn len(&self) -> usize {
        self.tails.len() + self.heads.len()
    }

    /// Whether the filter holds no query.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Ranking metrics, averaged over head and tail queries.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Metrics {
    /// Mean reciprocal rank.
    pub mrr: f64,
    /// Fraction of queries with rank ≤ 1.
    pub hits1: f64,
    /// Fraction with rank ≤ 3.
    pub hits3: f64,
    /// Fraction with rank ≤ 10.
    pub hits10: f64,
    /// Number of queries (2 per triple).
    pub queries: usize,
}

impl Metrics {
    /// Metrics of a list of ranks (realistic ranks may be fractional).
    pub fn from_ranks(ranks: &[f64]) -> Self {
        let n = ranks.len().max(1) as f64;
        let frac = |k: f64| ranks.iter().filter(|&&r| r <= k).count() as f64 / n;
        Metrics {
            mrr: ranks.iter().map(|r| 1.0 / r).sum::<f64>() / n,
            hits1: frac(1.0),
            hits3: frac(3.0),
            hits10: frac(10.0),
            queries: ranks.len(),
        }
    }
}

/// The realistic filtered rank of `target` among `scores` (one per entity): `1 + #better +
/// #tied / 2`, counting only entities not in `known` (the target itself never counts). A NaN
/// target score ranks last.
pub fn realistic_rank(scores: &[f32], target: u32, known: &[u32]) -> f64 {
    let s = scores[target as usize];
    if s.is_nan() {
        return scores.len() as f64;
    }
    let (mut better, mut tied) = (0usize, 0usize);
    for &x in scores {
        better += usize::from(x > s);
        tied += usize::from(x == s);
    }
    tied -= 1; // the target itself
    for &k in known {
        if k != target {
            let x = scores[k as usize];
            better -= usize::from(x > s);
            tied -= usize::from(x == s);
        }
    }
    1.0 + better as f64 + tied as f64 / 2.0
}

/// Queries scored per matrix product.
pub(crate) const BLOCK: usize = 64;

/// Filtered metrics of `triples` for entity embeddings `entities` (`N × dim`) and relation
/// parameters `relations` (`R × rdim`, or `2R × rdim` with `reciprocal`: then a head query
/// `(?, r, t)` is asked as the tail query `(t, r + R, ?)`). Runs on rayon's pool, blocks of
/// queries at a time; the result does not depend on the thread count.
pub fn evaluate(
    (score, reciprocal): (ScoreFn, bool),
    entities: ArrayView2<'_, f32>,
    relations: ArrayView2<'_, f32>,
    triples: &[Triple],
    filter: &Filter,
) -> Metrics {
    let dim = entities.ncols();
    let empty = Vec::new();
    let inverse = relations.nrows() / 2;
    let ranks: Vec<f64> = triples
        .par_chunks(BLOCK)
        .flat_map_iter(|block| {
            let mut q = ndarray::Array2::<f32>::zeros((2 * block.len(), dim));
            for (i, t) in block.iter().enumerate() {
                let (h, r, tl) = (
                    entities.row(t.h as usize),
                    relations.row(t.r as usize),
                    entities.row(t.t as usize),
                );
                let (h, r, tl) = (h.to_vec(), r.to_vec(), tl.to_vec());
                score.tail_query(&h, &r, q.row_mut(2 * i).as_slice_mut().expect("row-major"));
                let p = q.row_mut(2 * i + 1).into_slice().expect("row-major");
                if reciprocal {
                    let r_inv = relations.row(t.r as usize + inverse).to_vec();
                    score.tail_query(&tl, &r_inv, p);
                } else {
                    score.head_query(&r, &tl, p);
                }
            }
            let all = score.interaction().score_all(q.view(), entities);
            let mut ranks = Vec::with_capacity(2 * block.len());
            for (i, t) in block.iter().enumerate() {
                let tail_scores = all.row(2 * i).to_vec();
                let head_scores = all.row(2 * i + 1).to_vec();
                let kt = filter.tails.get(&(t.h, t.r)).unwrap_or(&empty);
                let kh = filter.heads.get(&(t.r, t.t)).unwrap_or(&empty);
                ranks.push(realistic_rank(&tail_scores, t.t, kt));
                ranks.push(realistic_rank(&head_scores, t.h, kh));
            }
            ranks
        })
        .collect();
    Metrics::from_ranks(&ranks)
}

/// *Sampled* filtered metrics (DGL-KE's and PyTorch-BigGraph's evaluation for large graphs):
/// each query ranks its answer against `k` entities drawn uniformly (with replacement, seeded by
/// `seed` and the triple's index) instead of all entities, leaving out known answers as
/// [`evaluate`] does. Sampled ranks are optimistic: these metrics are not comparable with the
/// full ranking and are labelled "sampled" wherever printed.
pub fn evaluate_sampled(
    (score, reciprocal): (ScoreFn, bool),
    entities: ArrayView2<'_, f32>,
    relations: ArrayView2<'_, f32>,
    triples: &[Triple],
    filter: &Filter,
    (k, seed): (usize, u64),
) -> Metrics {
    let dim = entities.ncols();
    let n = entities.nrows() as u32;
    let inverse = relations.nrows() / 2;
    let inter = score.interaction();
    let empty = Vec::new();
    let ranks: Vec<f64> = triples
        .par_iter()
        .enumerate()
        .flat_map_iter(|(i, t)| {
            let mut g = crate::rng::SplitMix64::new(seed, 0x5A3F_0000_0000 ^ i as u64);
            let sample: Vec<u32> = (0..k).map(|_| g.below(n)).collect();
            let (h, r, tl) = (
                entities.row(t.h as usize).to_vec(),
                relations.row(t.r as usize).to_vec(),
                entities.row(t.t as usize).to_vec(),
            );
            let (mut q, mut p) = (vec![0.0; dim], vec![0.0; dim]);
            score.tail_query(&h, &r, &mut q);
            if reciprocal {
                score.tail_query(&tl, &relations.row(t.r as usize + inverse).to_vec(), &mut p);
            } else {
                score.head_query(&r, &tl, &mut p);
            }
            let rank = |query: &[f32], target: u32, known: &[u32]| {
                let s = inter.score(query, &entities.row(target as usize).to_vec());
                let (mut better, mut tied) = (0usize, 0usize);
                for &e in &sample {
                    if e == target || known.binary_search(&e).is_ok() {
                        continue;
                    }
                    let x = inter.score(query, &entities.row(e as usize).to_vec());
                    better += usize::from(x > s);
                    tied += usize::from(x == s);
                }
                if s.is_nan() { (k + 1) as f64 } else { 1.0 + better as f64 + tied as f64 / 2.0 }
            };
            let kt = filter.tails.get(&(t.h, t.r)).unwrap_or(&empty);
            let kh = filter.heads.get(&(t.r, t.t)).unwrap_or(&empty);
            [rank(&q, t.t, kt), rank(&p, t.h, kh)]
        })
        .collect();
    Metrics::from_ranks(&ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_take_the_mean_of_optimistic_and_pessimistic_rank() {
        // target 0 scores 2.0; entity 1 is better, 2 and 3 tie, 4 is worse.
        let s = [2.0, 3.0, 2.0, 2.0, 1.0];
        assert_eq!(realistic_rank(&s, 0, &[]), 1.0 + 1.0 + 1.0);
        // Filtering a tied and the better entity removes them; filtering the target is a no-op.
        assert_eq!(realistic_rank(&s, 0, &[0, 2]), 1.0 + 1.0 + 0.5);
        assert_eq!(realistic_rank(&s, 0, &[1]), 1.0 + 1.0);
        assert_eq!(realistic_rank(&s, 4, &[]), 5.0);
        // A constant model ranks in the middle, not first.
        assert_eq!(realistic_rank(&[0.5; 9], 3, &[]), 5.0);
        assert_eq!(realistic_rank(&[f32::NAN, 1.0], 0, &[]), 2.0);
    }

    #[test]
    fn sampled_ranking_is_optimistic_and_approaches_the_full_one() {
        // DistMult dim 1: entity i has value i + 1; the answer (tail 0) is the worst of 50.
        let e = ndarray::Array2::from_shape_fn((50, 1), |(i, _)| i as f32 + 1.0);
        let r = ndarray::arr2(&[[1.0f32]]);
        let t = [Triple { h: 0, r: 0, t: 0 }];
        let f = Filter::new(&[]);
        let full = evaluate((ScoreFn::DistMult, false), e.view(), r.view(), &t, &f);
        let few = evaluate_sampled((ScoreFn::DistMult, false), e.view(), r.view(), &t, &f, (5, 1));
        let many =
            evaluate_sampled((ScoreFn::DistMult, false), e.view(), r.view(), &t, &f, (5000, 1));
        // Full: rank 50 on both sides. 5 samples: rank ≤ 6. Many samples: rank ≈ 1 + 5000·49/50.
        assert_eq!(full.mrr, 1.0 / 50.0);
        assert!(few.mrr >= 1.0 / 6.0, "{few:?}");
        assert!(many.mrr < 1.0 / 4000.0, "{many:?}");
    }

    #[test]
    fn the_filter_of_the_evaluated_queries_ranks_as_the_whole_filter() {
        let d = Dataset::load("umls").unwrap();
        let (queries, whole) = (&d.test[..40], Filter::of(&d));
        let part = Filter::for_queries(&d, queries);
        for t in queries {
            assert_eq!(part.tails[&(t.h, t.r)], whole.tails[&(t.h, t.r)]);
            assert_eq!(part.heads[&(t.r, t.t)], whole.heads[&(t.r, t.t)]);
        }
        assert!(part.len() <= 2 * queries.len() && part.len() < whole.len());
        let e = ndarray::Array2::from_shape_fn((d.entities.len(), 4), |(i, j)| (i * 7 + j) as f32);
        let r = ndarray::Array2::from_shape_fn((d.relations.len(), 4), |(i, j)| (i + j) as f32);
        let m = |f: &Filter| evaluate((ScoreFn::DistMult, false), e.view(), r.view(), queries, f);
        assert_eq!(m(&part), m(&whole));
    }

    #[test]
    fn metrics_of_hand_made_ranks() {
        let m = Metrics::from_ranks(&[1.0, 2.0, 3.5, 10.0, 11.0]);
        let mrr = (1.0 + 0.5 + 1.0 / 3.5 + 0.1 + 1.0 / 11.0) / 5.0;
        assert!((m.mrr - mrr).abs() < 1e-12);
        assert_eq!((m.hits1, m.hits3, m.hits10, m.queries), (0.2, 0.4, 0.8, 5));
    }

    #[test]
    fn evaluate_ranks_both_sides_with_the_filter() {
        // DistMult, dim 1: score(h, r, t) = e_h · r · e_t. Entities 0..4 with values 1..4, r = 1.
        let e = ndarray::arr2(&[[1.0f32], [2.0], [3.0], [4.0]]);
        let r = ndarray::arr2(&[[1.0f32]]);
        let t = |h, t| Triple { h, r: 0, t };
        // Query (0, r, ?) with true tail 1: tail scores 1,2,3,4 → 2 and 3 beat it: rank 3.
        // Head query (?, r, 1): scores 2,4,6,8 → heads 1,2,3 beat 0: rank 4.
        let plain =
            evaluate((ScoreFn::DistMult, false), e.view(), r.view(), &[t(0, 1)], &Filter::new(&[]));
        assert_eq!(plain.mrr, (1.0 / 3.0 + 1.0 / 4.0) / 2.0);
        // Known triples (0, r, 3) and (2, r, 1) are filtered out of the two rankings.
        let f = Filter::new(&[t(0, 1), t(0, 3), t(2, 1)]);
        let filtered = evaluate((ScoreFn::DistMult, false), e.view(), r.view(), &[t(0, 1)], &f);
        assert_eq!(filtered.mrr, (1.0 / 2.0 + 1.0 / 3.0) / 2.0);
        assert_eq!((filtered.hits1, filtered.hits3, filtered.queries), (0.0, 1.0, 2));
    }
}
