//! The KGE training step: what the engine's device stage runs for each batch.
//!
//! Entity rows (in the engine's row store) are `[embedding (dim) | optimizer state]` (see
//! [`super::optim`]), so the optimizer state travels with the row. Relation parameters and their
//! optimizer state are dense parameters in [`EmbeddingModel`], updated inside [`Model::step`] in
//! computation order. With `reciprocal`, relation `r + R` is the inverse of `r` (Lacroix et al.
//! 2018): the head side asks the tail query `(t, r⁻¹, ?)` instead of a head query.
//!
//! **Determinism:** chunks may be computed two at a time on rayon's threads, but each chunk
//! reads only the batch's starting rows and every reduction runs in a fixed order (chunks in
//! batch order; positives and negatives in index order; ndarray's matrix products and the
//! lane-wise sums of the distances and the softmax are deterministic for fixed shapes), so the
//! same batch on the same rows gives the same bits (stated at `EmbeddingModel::gradients_with`, which
//! keeps it).

use super::matmul::mat_mul_into;
use super::optim::Optimizer;
use super::precision::Precision;
use super::score::{Interaction, Loss, Regularizer, ScoreFn};
use super::step_threads::{StepThreads, Threads};
use crate::kge::data::batch::TripleBatch;
use ndarray::{ArrayView2, ArrayViewMut2, ShapeBuilder, s};
use ordo::engine::{BatchRows, Model};
use rayon::prelude::*;
use thiserror::Error;

pub use super::init::init_entities;
pub use super::optim::ADAGRAD_EPS;

/// The loss became NaN or infinite: training diverged.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
#[error(
    "loss is {loss} in batch {batch}: training diverged (try a smaller --lr or a different --init)"
)]
pub struct NonFiniteLoss {
    /// The batch id.
    pub batch: u64,
    /// The loss value.
    pub loss: f32,
}

/// Hyper-parameters of the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepConfig {
    /// Scoring function.
    pub score: ScoreFn,
    /// Loss over a positive and its negatives.
    pub loss: Loss,
    /// Embedding floats per entity.
    pub dim: usize,
    /// Learning rate.
    pub lr: f32,
    /// Regularizer weight on the embeddings a positive uses (0 = off).
    pub reg: f32,
    /// The regularizer `reg` weighs.
    pub regularizer: Regularizer,
    /// Optimizer of entity rows and relations.
    pub optimizer: Optimizer,
    /// γ of [`Loss::Margin`].
    pub margin: f32,
    /// Inverse relations: the head side is a tail query with relation `r + R`.
    pub reciprocal: bool,
    /// How the entity rows are stored: with [`Precision::Bf16`] the step rounds each row it
    /// writes to bf16s ([`super::bf16_rounding`], keyed by `seed`, the row and the batch id).
    pub precision: Precision,
    /// The run's seed: the key of bf16's stochastic rounding.
    pub seed: u64,
}

impl Default for StepConfig {
    fn default() -> Self {
        StepConfig {
            score: ScoreFn::ComplEx,
            loss: Loss::Softmax,
            dim: 100,
            lr: 0.1,
            reg: 0.0,
            regularizer: Regularizer::L2,
            optimizer: Optimizer::Adagrad,
            margin: 1.0,
            reciprocal: false,
            precision: Precision::F32,
            seed: 0,
        }
    }
}

impl StepConfig {
    /// Floats per entity row: the embedding and its optimizer state.
    pub fn row_width(&self) -> usize {
        self.dim + self.optimizer.state_width(self.dim)
    }

    /// Floats per relation parameter row.
    pub fn relation_dim(&self) -> usize {
        self.score.relation_dim(self.dim)
    }

    /// Relation rows the model holds for `relations` dataset relations (twice as many with
    /// inverses).
    pub fn relation_rows(&self, relations: usize) -> usize {
        if self.reciprocal { 2 * relations } else { relations }
    }
}

/// A KGE scoring function with its optimizer, as an [`ordo::engine::Model`].
#[derive(Debug, Clone)]
pub struct EmbeddingModel {
    cfg: StepConfig,
    /// Dataset relations `R` (the model holds `2R` rows with inverses).
    relations: usize,
    /// Relation parameters, `relation_rows × rdim`.
    rel: Vec<f32>,
    /// Optimizer state of `rel`, `relation_rows × state_width(rdim)`.
    rel_state: Vec<f32>,
    /// Loss summed over the positives stepped since the last [`take_loss`](Self::take_loss), in
    /// computation order.
    loss_sum: f64,
    positives: u64,
    /// Scratch: relation gradients (`relation_rows × rdim`) and which relations were touched.
    rel_grad: Vec<f32>,
    rel_touched: Vec<bool>,
    /// Scratch: the batch's entity-row gradients (`rows × dim`), kept across batches so a step
    /// allocates and page-faults no new megabytes.
    ///
    /// **Invariant: all zeros between steps.** The optimizer's pass zeroes each row's gradient
    /// right after it reads it (the row is in cache then), and a failed step zeroes it all, so
    /// a step adds into zeros without a separate pass over megabytes first.
    grad: Vec<f32>,
    /// Scratch: the chunk matrices of [`gradients`](Self::gradients), one set per chunk of the
    /// pair being computed and of the pair being added beside it (boxed: four sets of 22
    /// buffers would make the model, moved by value, large).
    scratch: Box<[[StepScratch; 2]; 2]>,
    /// Whether the next step runs on one thread or two, from what the steps so far measured:
    /// one choice for batches whose stages the engine's threads run, one for batches it runs
    /// inline ([`TripleBatch::inline`]), since what the second thread is worth depends on whether
    /// the reader and writer compete with it for the cores.
    threads: [StepThreads; 2],
    /// Whether the last batch stepped ran inline ([`TripleBatch::inline`]): a batch of the other
    /// way pauses that way's timing.
    inline: bool,
    /// Whether chunks copy their rows between the batch's layout and their own (always, but
    /// for [`measure_without_layout_copies`](Self::measure_without_layout_copies)).
    layout_copies: bool,
}

impl EmbeddingModel {
    /// A model with the given relation parameters (`relation_rows(relations) × relation_dim`,
    /// see [`super::init::init_relations`]) and zero optimizer state.
    pub fn with_relations(cfg: StepConfig, relations: usize, rel: Vec<f32>) -> Self {
        let rows = cfg.relation_rows(relations);
        let rdim = cfg.relation_dim();
        assert_eq!(rel.len(), rows * rdim, "relation parameters are relation_rows × rdim");
        EmbeddingModel {
            cfg,
            relations,
            rel,
            rel_state: vec![0.0; rows * cfg.optimizer.for_relations().state_width(rdim)],
            loss_sum: 0.0,
            positives: 0,
            rel_grad: vec![0.0; rows * rdim],
            rel_touched: vec![false; rows],
            grad: Vec::new(),
            scratch: Box::default(),
            threads: Default::default(),
            inline: false,
            layout_copies: true,
        }
    }

    /// A model with relation parameters uniform in `[-init, init)` from `seed`.
    pub fn new(cfg: StepConfig, relations: usize, init: f32, seed: u64) -> Self {
        let rel = super::init::init_relations(
            cfg.relation_rows(relations),
            cfg.relation_dim(),
            (super::init::Init::Uniform, init),
            cfg.score == ScoreFn::RotatE,
            seed,
        );
        Self::with_relations(cfg, relations, rel)
    }

    /// **For measurement only: the step computes wrong values after this.** Chunks stop
    /// copying their rows between the batch's layout and their own: each chunk matrix keeps
    /// the rows it was first gathered with (the products, the loss and the update run on the
    /// same shapes), and no chunk adds its gradients to the batch's rows. What a step saves
    /// then bounds what a layout in which the engine reads each row where the products read it,
    /// and writes it back from there, could save (issue 34, item 1); `kge_roofline` prints it.
    #[doc(hidden)]
    pub fn measure_without_layout_copies(&mut self) {
        self.layout_copies = false;
    }

    /// The step's hyper-parameters.
    pub fn config(&self) -> &StepConfig {
        &self.cfg
    }

    /// Relation parameters, `relation_rows × relation_dim`, row-major.
    pub fn relations(&self) -> &[f32] {
        &self.rel
    }

    /// Replace the relation parameters (e.g. loaded from a file); `false` if the length differs.
    pub fn set_relations(&mut self, rel: &[f32]) -> bool {
        if rel.len() != self.rel.len() {
            return false;
        }
        self.rel.copy_from_slice(rel);
        true
    }

    /// Replace the whole dense state (as [`Model::dense`] returns it: parameters, then optimizer
    /// state), e.g. from a checkpoint; `false` if the length differs.
    pub fn set_dense(&mut self, dense: &[f32]) -> bool {
        if dense.len() != self.rel.len() + self.rel_state.len() {
            return false;
        }
        let (p, st) = dense.split_at(self.rel.len());
        self.rel.copy_from_slice(p);
        self.rel_state.copy_from_slice(st);
        true
    }

    /// Mean loss per positive since the last call, and reset.
    pub fn take_loss(&mut self) -> f64 {
        let (sum, positives) = self.take_loss_sum();
        sum / positives.max(1) as f64
    }

    /// The loss summed over the positives stepped since the last call, and their number; resets
    /// both (what [`take_loss`](Self::take_loss) averages).
    pub fn take_loss_sum(&mut self) -> (f64, u64) {
        let taken = (self.loss_sum, self.positives);
        (self.loss_sum, self.positives) = (0.0, 0);
        taken
    }

    /// The batch's summed (unscaled) loss and the gradient of the batch objective w.r.t. each
    /// batch row's embedding (`rows × dim`); relation gradients go to `self.rel_grad` (touched
    /// ones flagged in `self.rel_touched`).
    /// `grad` holds zeros in its first `rows × dim` floats or is shorter (then it is grown with
    /// zeros): [`EmbeddingModel::grad`]'s invariant, or a fresh `Vec`. With `two` threads, chunks are
    /// computed two at a time on rayon's threads when a chunk is at least
    /// [`PARALLEL_CHUNK_WORK`].
    fn gradients(
        &mut self,
        b: &TripleBatch,
        rows: &BatchRows<'_>,
        grad: &mut Vec<f32>,
        two: bool,
    ) -> f32 {
        let work = b.chunk.max(1) * (b.negatives + 1) * self.cfg.dim;
        let parallel = two && work >= PARALLEL_CHUNK_WORK;
        let mut sc = std::mem::take(&mut self.scratch);
        let loss = self.gradients_with(b, rows, grad, &mut sc, parallel);
        self.scratch = sc;
        loss
    }

    /// [`gradients`](Self::gradients) with the chunk matrices in `sc`.
    ///
    /// **Same bits at any parallelism:** a chunk's gradients depend only on the rows and
    /// relations as the batch started, so chunks may be computed in any order or at once; they
    /// are added into `grad`, `rel_grad` and the loss strictly in chunk order
    /// ([`Params::add_chunk`]), which is the only order-dependent part.
    ///
    /// Chunks run a pair at a time (pair `k` in `sc[k % 2]`), and pair `k`'s adds run in the
    /// first task of pair `k + 1`, beside its second chunk. Added after each pair, they kept
    /// the thread that took the second chunk idle long enough for rayon to put it to sleep,
    /// and waking it took so long that in a quarter of the pairs the first thread ran both
    /// chunks (timed per pair over a replay of two WordNet epochs; an eighth now).
    fn gradients_with(
        &mut self,
        b: &TripleBatch,
        rows: &BatchRows<'_>,
        grad: &mut Vec<f32>,
        sc: &mut [[StepScratch; 2]; 2],
        parallel: bool,
    ) -> f32 {
        // Zeros already (see `EmbeddingModel::grad`): only a longer batch's tail is written here.
        if grad.len() < rows.len() * self.cfg.dim {
            grad.resize(rows.len() * self.cfg.dim, 0.0);
        }
        self.rel_grad.iter_mut().for_each(|g| *g = 0.0);
        self.rel_touched.iter_mut().for_each(|t| *t = false);
        // Mean-reduced losses average over the batch's positives and both sides.
        let scale = if self.cfg.loss.mean_reduced() { 0.5 / b.pos.len() as f32 } else { 1.0 };
        let params = Params {
            cfg: self.cfg,
            relations: self.relations,
            rel: &self.rel,
            copies: self.layout_copies,
        };
        let mut rg = RelGrads { grad: &mut self.rel_grad, touched: &mut self.rel_touched };
        let mut batch_loss = 0.0f32;
        let chunks: Vec<_> = b.pos.chunks(b.chunk.max(1)).enumerate().collect();
        let pairs: Vec<_> = chunks.chunks(2).collect();
        // A laid-out batch's own negatives take their gradients in place: chunk `ci`'s own
        // corrupted tails and heads have the gradient rows after the positives' and those of
        // the chunks before, and nothing else writes them.
        let (dim, layout) = (self.cfg.dim, laid_out(b, rows));
        let own = |ci: usize| {
            layout.map_or([0, 0], |l| {
                [(l[2 * ci + 1] - l[2 * ci]) as usize, (l[2 * ci + 2] - l[2 * ci + 1]) as usize]
            })
        };
        let first = layout.map_or(rows.len(), |l| l[0] as usize);
        let (grad, mut in_place) = grad[..rows.len() * dim].split_at_mut(first * dim);
        let [even, odd] = sc;
        // One pass more than there are pairs: the last one only adds the last pair.
        for k in 0..=pairs.len() {
            let (cur, prev) = if k % 2 == 0 { (&mut *even, &*odd) } else { (&mut *odd, &*even) };
            let earlier = k.checked_sub(1).map_or(&[][..], |j| pairs[j]);
            let (rg, grad, loss) = (&mut rg, &mut *grad, &mut batch_loss);
            let mut add_earlier = move || {
                for ((ci, pos), s) in earlier.iter().zip(prev) {
                    params.add_chunk(rg, b, *ci, pos, grad, loss, s, own(*ci));
                }
            };
            let [sa, sb] = cur;
            let pair = pairs.get(k).copied().unwrap_or(&[]);
            let mut own_grads = pair.iter().map(|(ci, _)| {
                let [t, h] = own(*ci);
                let (g, rest) = std::mem::take(&mut in_place).split_at_mut((t + h) * dim);
                in_place = rest;
                g
            });
            let mut own_grad = || own_grads.next().unwrap_or_default();
            let (ga, gb) = (own_grad(), own_grad());
            match pair {
                [(ca, pa), (cb, pb)] if parallel => {
                    rayon::join(
                        || {
                            add_earlier();
                            params.chunk(b, rows, *ca, pa, scale, sa, own(*ca), ga)
                        },
                        || params.chunk(b, rows, *cb, pb, scale, sb, own(*cb), gb),
                    );
                }
                pair => {
                    add_earlier();
                    for (((ci, pos), s), g) in pair.iter().zip([sa, sb]).zip([ga, gb]) {
                        params.chunk(b, rows, *ci, pos, scale, s, own(*ci), g);
                    }
                }
            }
        }
        batch_loss
    }
}

/// What a chunk reads of the model: the step's hyper-parameters and the relation parameters as
/// the batch started. Chunks never write them, so any number of chunks may run at once.
#[derive(Debug, Clone, Copy)]
struct Params<'a> {
    cfg: StepConfig,
    /// Dataset relations `R` (the model holds `2R` rows with inverses).
    relations: usize,
    /// Relation parameters, `relation_rows × rdim`.
    rel: &'a [f32],
    /// [`EmbeddingModel::layout_copies`].
    copies: bool,
}

/// Where [`Params::add_chunk`] adds relation gradients: the model's `rel_grad` and `rel_touched`.
struct RelGrads<'a> {
    grad: &'a mut [f32],
    touched: &'a mut [bool],
}

impl Params<'_> {
    /// One side of one chunk: `queries` (`c × dim`) scored against their own positives
    /// (`targets`, `c × dim`) and the chunk's shared negatives, in two parts: the `own` rows
    /// (a laid-out batch's, read in place) and the `gathered` ones, in that order. Returns the
    /// summed (unscaled) loss; writes `out`'s `dq` (`c × dim`), `d_targets` (`c × dim`), the
    /// own negatives' gradients into `own_grad` (`own rows × dim` zeros: their rows of the
    /// batch's gradient) and the gathered ones' into `out.d_negs`, gradients of `scale ×` the
    /// loss. A batch that is not laid out has no own rows: then this is the plain chunk side.
    #[allow(clippy::too_many_arguments)]
    fn side(
        &self,
        queries: ArrayView2<'_, f32>,
        targets: ArrayView2<'_, f32>,
        own: ArrayView2<'_, f32>,
        gathered: ArrayView2<'_, f32>,
        scale: f32,
        tmp: &mut SideScratch,
        out: &mut SideGrads,
        own_grad: &mut [f32],
    ) -> f32 {
        let (c, dim) = (queries.nrows(), queries.ncols());
        let (k, n) = (own.nrows(), own.nrows() + gathered.nrows());
        let inter = self.cfg.score.interaction();
        let dot = inter == Interaction::Dot;
        // The parts' columns of the scores. A part with no rows is left out, but for a side
        // with no negatives at all, whose one empty product zeroes what it writes.
        let parts = match (k, n - k) {
            (0, _) => &[Part::Gathered][..],
            (_, 0) => &[Part::Own][..],
            _ => &[Part::Own, Part::Gathered][..],
        };
        let cols = |p: Part| match p {
            Part::Own => 0..k,
            Part::Gathered => k..n,
        };
        let negs = |p: Part| match p {
            Part::Own => own,
            Part::Gathered => gathered,
        };
        // Every entry of `neg_scores` and `grads`, with `Dot` of `dq` and `d_negs`, and with
        // `L2` of `d_negs`, is written below before it is read (the products that write them
        // overwrite their outputs: β = 0).
        let mut neg_scores = tmp.neg_scores.shaped(c, n);
        for &p in parts {
            inter.score_pairs_into(queries, negs(p), neg_scores.slice_mut(s![.., cols(p)]));
        }
        let mut grads = tmp.grads.shaped(c, n);
        let mut d_targets = out.d_targets.zeroed(c, dim);
        let mut dq = if dot { out.dq.shaped(c, dim) } else { out.dq.zeroed(c, dim) };
        let mut loss = 0.0;
        let (scores, g, g0) = (&mut tmp.scores, &mut tmp.g, &mut tmp.g0);
        for v in [&mut *scores, &mut *g] {
            v.clear();
            v.resize(n + 1, 0.0);
        }
        g0.clear();
        g0.resize(c, 0.0);
        for (i, g0i) in g0.iter_mut().enumerate() {
            let q = r_of(queries, i);
            let target = r_of(targets, i);
            scores[0] = inter.score(q, target);
            scores[1..].copy_from_slice(r_of(neg_scores.view(), i));
            loss += self.cfg.loss.loss_and_grad(scores, g, self.cfg.margin);
            if scale != 1.0 {
                g.iter_mut().for_each(|x| *x *= scale);
            }
            *g0i = g[0];
            match inter {
                Interaction::Dot => d_targets.row_mut(i).scaled_add(g[0], &queries.row(i)),
                _ => {
                    let dqi = dq.row_mut(i).into_slice().expect("row-major");
                    let dti = d_targets.row_mut(i).into_slice().expect("row-major");
                    inter.backward(q, target, g[0], dqi, dti);
                }
            }
            grads.row_mut(i).as_slice_mut().expect("row-major").copy_from_slice(&g[1..]);
        }
        // Zeros already (see `EmbeddingModel::grad`), as `L1`'s accumulation needs.
        let mut d_own = ArrayViewMut2::from_shape((k, dim), &mut own_grad[..k * dim])
            .expect("the own negatives' gradient rows");
        let mut d_gathered = match inter {
            Interaction::L1 => out.d_negs.zeroed(n - k, dim),
            _ => out.d_negs.shaped(n - k, dim),
        };
        match inter {
            Interaction::Dot => {
                // dQ = G·N, then the positives' terms; dN = Gᵀ·Q. The first product overwrites
                // its output (no accumulate), which is why `dq` and `d_negs` are only shaped.
                for (j, &p) in parts.iter().enumerate() {
                    let gp = grads.slice(s![.., cols(p)]);
                    mat_mul_into(gp, negs(p), j > 0, dq.view_mut());
                }
                for (i, &gi) in g0.iter().enumerate() {
                    dq.row_mut(i).scaled_add(gi, &targets.row(i));
                }
                for &p in parts {
                    let dp = p.pick(&mut d_own, &mut d_gathered);
                    mat_mul_into(grads.slice(s![.., cols(p)]).t(), queries, false, dp);
                }
            }
            Interaction::L2 => {
                // s = −‖q − c‖, so g·∂s/∂q = −w (q − c) and g·∂s/∂c = w (q − c) with
                // w = g / ‖q − c‖ (0 where the distance is 0, as `Interaction::backward` has
                // it). Summed over the negatives that is two products and two rank-one terms:
                // dQ += W·N − rowsum(W) ∘ Q and dN = Wᵀ·Q − colsum(W) ∘ N, with each
                // distance taken from the scores (the same values a per-pair backward would
                // recompute).
                for (w, s) in grads.iter_mut().zip(neg_scores.iter()) {
                    let d = -s;
                    *w = if d > 0.0 { *w / d } else { 0.0 };
                }
                for &p in parts {
                    mat_mul_into(grads.slice(s![.., cols(p)]), negs(p), true, dq.view_mut());
                }
                for (i, w) in grads.rows().into_iter().enumerate() {
                    dq.row_mut(i).scaled_add(-w.sum(), &queries.row(i));
                }
                for &p in parts {
                    let (wp, np) = (grads.slice(s![.., cols(p)]), negs(p));
                    let mut dp = p.pick(&mut d_own, &mut d_gathered);
                    mat_mul_into(wp.t(), queries, false, dp.view_mut());
                    for (j, w) in wp.columns().into_iter().enumerate() {
                        dp.row_mut(j).scaled_add(-w.sum(), &np.row(j));
                    }
                }
            }
            Interaction::L1 => {
                for i in 0..c {
                    let q = r_of(queries, i);
                    let dqi = dq.row_mut(i).into_slice().expect("row-major");
                    for &p in parts {
                        let (np, mut dp) = (negs(p), p.pick(&mut d_own, &mut d_gathered));
                        for (j, &gij) in grads.row(i).slice(s![cols(p)]).iter().enumerate() {
                            let dn = dp.row_mut(j).into_slice().expect("row-major");
                            inter.backward(q, r_of(np, j), gij, dqi, dn);
                        }
                    }
                }
            }
        }
        loss
    }

    /// Chunk `ci` (positives `pos`): its loss terms (in the order they are summed) and its
    /// gradients w.r.t. its rows and relations, into `sc`. Reads the model, writes only `sc`
    /// and, in a laid-out batch, its `own` negatives' gradients (`own[0]` tails' rows, then
    /// `own[1]` heads', [`TripleBatch::laid_out`]) into `own_grad`, their rows of the batch's
    /// gradient (zeros).
    #[allow(clippy::too_many_arguments)]
    fn chunk(
        &self,
        b: &TripleBatch,
        rows: &BatchRows<'_>,
        ci: usize,
        pos: &[(u32, u32, u32)],
        scale: f32,
        sc: &mut StepScratch,
        own: [usize; 2],
        own_grad: &mut [f32],
    ) {
        let dim = self.cfg.dim;
        let rdim = self.cfg.relation_dim();
        let score = self.cfg.score;
        let relations = self.relations;
        let inverse = |r: u32| r as usize + relations;
        let entity = |l: u32| &rows.row(l as usize)[..dim];
        let c = pos.len();
        sc.loss_terms.clear();
        let kept = !self.copies;
        let heads = sc.heads.gather(dim, pos.iter().map(|p| entity(p.0)), kept);
        let tails = sc.tails.gather(dim, pos.iter().map(|p| entity(p.2)), kept);
        let rel = |r: usize| &self.rel[r * rdim..(r + 1) * rdim];
        let rels = sc.rels.gather(rdim, pos.iter().map(|p| rel(p.1 as usize)), false);
        let inv = if self.cfg.reciprocal { pos } else { &[] };
        let rels_inv = sc.rels_inv.gather(rdim, inv.iter().map(|p| rel(inverse(p.1))), false);
        // Every entry is written by the query functions below.
        let mut tq = sc.tq.shaped(c, dim);
        let mut hq = sc.hq.shaped(c, dim);
        let (tq_rows, hq_rows) = (rows_of_mut(&mut tq, dim), rows_of_mut(&mut hq, dim));
        for (i, (q, p)) in tq_rows.zip(hq_rows).enumerate() {
            let (h, r, t) = (r_of(heads, i), r_of(rels, i), r_of(tails, i));
            score.tail_query(h, r, q);
            if self.cfg.reciprocal {
                score.tail_query(t, r_of(rels_inv, i), p);
            } else {
                score.head_query(r, t, p);
            }
        }
        // Each side's own negatives are multiplied where the engine read them (their list
        // begins with their rows, in order); the rest are gathered.
        let (nt_idx, nh_idx) = b.chunk_negatives(ci);
        let [kt, kh] = own;
        let at = |idx: &[u32]| idx.first().map_or(0, |&l| l as usize);
        let (own_t, own_h) =
            (rows_at(rows, at(nt_idx), kt, dim), rows_at(rows, at(nh_idx), kh, dim));
        let neg_t = sc.neg_t.gather(dim, nt_idx[kt..].iter().map(|&l| entity(l)), kept);
        let neg_h = sc.neg_h.gather(dim, nh_idx[kh..].iter().map(|&l| entity(l)), kept);
        let (gt, gh) = own_grad.split_at_mut(kt * dim);
        // Tail side: candidates are tails; head side: candidates are heads.
        let (side, tail, head) = (&mut sc.side, &mut sc.tail, &mut sc.head);
        let lt = self.side(tq.view(), tails, own_t, neg_t, scale, side, tail, gt);
        let lh = self.side(hq.view(), heads, own_h, neg_h, scale, side, head, gh);
        sc.loss_terms.push(lt + lh);
        let (dtq, mut dt) = (sc.tail.dq.view(c, dim), sc.tail.d_targets.view_mut(c, dim));
        let (dhq, mut dh) = (sc.head.dq.view(c, dim), sc.head.d_targets.view_mut(c, dim));
        let mut dr = sc.dr.zeroed(c, rdim);
        let mut dr_inv = sc.dr_inv.zeroed(rels_inv.nrows(), rdim);
        for i in 0..c {
            let (h, r, t) = (r_of(heads, i), r_of(rels, i), r_of(tails, i));
            let dhi = dh.row_mut(i).into_slice().expect("row-major");
            let dri = dr.row_mut(i).into_slice().expect("row-major");
            score.tail_query_backward(h, r, r_of(dtq, i), dhi, dri);
            let dti = dt.row_mut(i).into_slice().expect("row-major");
            if self.cfg.reciprocal {
                let dri = dr_inv.row_mut(i).into_slice().expect("row-major");
                score.tail_query_backward(t, r_of(rels_inv, i), r_of(dhq, i), dti, dri);
            } else {
                score.head_query_backward(r, t, r_of(dhq, i), dri, dti);
            }
        }
        if self.cfg.reg > 0.0 {
            let (reg, w) = (self.cfg.regularizer, self.cfg.reg);
            for (x, dx) in
                [(heads, &mut dh), (tails, &mut dt), (rels, &mut dr), (rels_inv, &mut dr_inv)]
            {
                let (x, dx) =
                    (x.to_slice().expect("standard"), dx.as_slice_mut().expect("standard"));
                sc.loss_terms.push(reg.apply(w, scale, x, dx));
            }
        }
    }

    /// Add chunk `ci`'s loss terms and gradients (computed into `sc` by
    /// [`chunk`](Self::chunk)) to the batch's, in the order the sequential step adds them.
    /// The chunk wrote the gradients of its `own` negatives ([`chunk`](Self::chunk)) in place;
    /// those of the rest are added here.
    #[allow(clippy::too_many_arguments)]
    fn add_chunk(
        &self,
        rg: &mut RelGrads<'_>,
        b: &TripleBatch,
        ci: usize,
        pos: &[(u32, u32, u32)],
        grad: &mut [f32],
        batch_loss: &mut f32,
        sc: &StepScratch,
        own: [usize; 2],
    ) {
        let (dim, rdim, n, c) = (self.cfg.dim, self.cfg.relation_dim(), b.negatives, pos.len());
        sc.loss_terms.iter().for_each(|l| *batch_loss += l);
        if self.copies {
            scatter_add(grad, pos.iter().map(|p| p.0), sc.head.d_targets.view(c, dim), dim);
            scatter_add(grad, pos.iter().map(|p| p.2), sc.tail.d_targets.view(c, dim), dim);
            let ((nt_idx, nh_idx), [kt, kh]) = (b.chunk_negatives(ci), own);
            scatter_add(grad, nt_idx[kt..].iter().copied(), sc.tail.d_negs.view(n - kt, dim), dim);
            scatter_add(grad, nh_idx[kh..].iter().copied(), sc.head.d_negs.view(n - kh, dim), dim);
        }
        let inverses = if self.cfg.reciprocal { c } else { 0 };
        let (dr, dr_inv) = (sc.dr.view(c, rdim), sc.dr_inv.view(inverses, rdim));
        let relations = self.relations;
        for (i, p) in pos.iter().enumerate() {
            let mut add = |r: usize, d: &[f32]| {
                rg.touched[r] = true;
                for (a, g) in rg.grad[r * rdim..(r + 1) * rdim].iter_mut().zip(d) {
                    *a += g;
                }
            };
            add(p.1 as usize, r_of(dr, i));
            if self.cfg.reciprocal {
                add(p.1 as usize + relations, r_of(dr_inv, i));
            }
        }
    }
}

/// Multiply-adds of one side of one chunk's scores (`chunk × (negatives + 1) × dim`) from
/// which chunks are computed two at a time: below it (e.g. one positive with 16 negatives) a
/// chunk takes a few microseconds, about what offering it to another thread costs. With the
/// step on the pool's own thread (`crate::pool`), `2¹⁴` (the main job's old setting, 16 × 65 ×
/// 32 = 33,280) gave sync 1.15× the throughput of `2¹⁶` and `2¹²` 1.09× (BENCHMARKS.md,
/// "The step on the pool's own thread").
const PARALLEL_CHUNK_WORK: usize = 1 << 14;

/// The two parts of a chunk side's negatives ([`Params::side`]): the rows a laid-out batch
/// gave them of their own, multiplied in place, and those gathered into a chunk matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Own,
    Gathered,
}

impl Part {
    /// This part's one of the two gradient matrices.
    fn pick<'a>(
        self,
        own: &'a mut ArrayViewMut2<'_, f32>,
        gathered: &'a mut ArrayViewMut2<'_, f32>,
    ) -> ArrayViewMut2<'a, f32> {
        match self {
            Part::Own => own.view_mut(),
            Part::Gathered => gathered.view_mut(),
        }
    }
}

/// A row-major matrix buffer reused across chunks and batches: its storage only grows, so
/// shaping it for a chunk allocates nothing once the largest chunk has been seen (the step's
/// matrices were fresh `Array2`s per chunk before, ≈ 8% of an `oac` run's CPU in copies and
/// zeroing of new memory).
#[derive(Debug, Clone, Default)]
struct Mat(Vec<f32>);

impl Mat {
    /// Shaped `rows × cols`, every entry zero.
    fn zeroed(&mut self, rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
        self.0.clear();
        self.0.resize(rows * cols, 0.0);
        self.view_mut(rows, cols)
    }

    /// Shaped `rows × cols`, entries left over from earlier use: the caller writes every one
    /// before reading it.
    fn shaped(&mut self, rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
        self.0.resize(rows * cols, 0.0);
        self.view_mut(rows, cols)
    }

    /// Shaped `len × w`, row `i` a copy of the `i`-th slice of `src` (each `w` floats). With
    /// `kept`, a buffer already of that size keeps the rows it holds (no copy: see
    /// [`EmbeddingModel::measure_without_layout_copies`]).
    fn gather<'s>(
        &mut self,
        w: usize,
        src: impl ExactSizeIterator<Item = &'s [f32]>,
        kept: bool,
    ) -> ArrayView2<'_, f32> {
        let len = src.len();
        if !(kept && self.0.len() == len * w) {
            self.0.clear();
            src.for_each(|r| self.0.extend_from_slice(r));
        }
        self.view(len, w)
    }

    /// The first `rows × cols` floats, as last shaped by [`zeroed`](Self::zeroed) or
    /// [`gather`](Self::gather).
    fn view(&self, rows: usize, cols: usize) -> ArrayView2<'_, f32> {
        ArrayView2::from_shape((rows, cols), &self.0[..rows * cols]).expect("shaped before")
    }

    /// [`view`](Self::view), mutable.
    fn view_mut(&mut self, rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
        ArrayViewMut2::from_shape((rows, cols), &mut self.0[..rows * cols]).expect("shaped before")
    }
}

/// What one side of a chunk writes: the gradients w.r.t. its queries, own targets and shared
/// negatives.
#[derive(Debug, Clone, Default)]
struct SideGrads {
    dq: Mat,
    d_targets: Mat,
    d_negs: Mat,
}

/// Working memory of [`Params::side`].
#[derive(Debug, Clone, Default)]
struct SideScratch {
    neg_scores: Mat,
    grads: Mat,
    scores: Vec<f32>,
    g: Vec<f32>,
    g0: Vec<f32>,
}

/// The chunk matrices of [`EmbeddingModel::gradients`], owned by the model (the device stage's step)
/// and reused for every chunk of every batch. Each is fully rewritten (gathered or zeroed)
/// (or, where the code says so, overwritten) before a chunk reads it, so nothing carries over
/// from one chunk to the next.
#[derive(Debug, Clone, Default)]
struct StepScratch {
    heads: Mat,
    tails: Mat,
    rels: Mat,
    rels_inv: Mat,
    tq: Mat,
    hq: Mat,
    neg_t: Mat,
    neg_h: Mat,
    dr: Mat,
    dr_inv: Mat,
    side: SideScratch,
    tail: SideGrads,
    head: SideGrads,
    /// The chunk's loss terms, in the order they are summed.
    loss_terms: Vec<f32>,
}

/// Row `i` of a standard-layout matrix as a slice.
fn r_of<'a>(m: ArrayView2<'a, f32>, i: usize) -> &'a [f32] {
    m.index_axis_move(ndarray::Axis(0), i)
        .to_slice()
        .expect("rows of a standard-layout matrix are contiguous")
}

/// The rows (`w` floats each) of a standard-layout matrix as mutable slices.
fn rows_of_mut<'a>(m: &'a mut ArrayViewMut2<'_, f32>, w: usize) -> std::slice::ChunksMut<'a, f32> {
    m.as_slice_mut().expect("standard layout").chunks_mut(w.max(1))
}

/// A batch's layout ([`TripleBatch::laid_out`]), if it is as it says: its bounds rise from the
/// positives' rows to the batch's last row, two sides per chunk; every positive names a row
/// below the first bound; each side's list of negatives begins with its own rows, in order,
/// and names only positives' rows after them. A batch that says so wrongly is stepped as a
/// sorted one would be: by gathering every reference.
fn laid_out<'b>(b: &'b TripleBatch, rows: &BatchRows<'_>) -> Option<&'b [u32]> {
    let bounds = b.laid_out.as_deref()?;
    let (n, chunks) = (b.negatives, b.pos.len().div_ceil(b.chunk.max(1)));
    let first = *bounds.first()?;
    let fits = bounds.len() == 2 * chunks + 1
        && bounds.windows(2).all(|w| w[0] <= w[1] && (w[1] - w[0]) as usize <= n)
        && bounds.last().is_some_and(|&l| l as usize == rows.len())
        && b.neg_tails.len() == chunks * n
        && b.neg_heads.len() == chunks * n
        && b.pos.iter().all(|p| p.0 < first && p.2 < first)
        && (0..2 * chunks).all(|j| {
            let list = if j % 2 == 0 { &b.neg_tails } else { &b.neg_heads };
            let list = &list[j / 2 * n..(j / 2 + 1) * n];
            let own = (bounds[j]..bounds[j + 1]).count();
            list[..own].iter().copied().eq(bounds[j]..bounds[j + 1])
                && list[own..].iter().all(|&l| l < first)
        });
    fits.then_some(bounds)
}

/// Rows `at .. at + n` of the batch, their first `dim` floats (the embeddings), as an
/// `n × dim` view with the batch's row stride: a laid-out chunk side's own negatives.
fn rows_at<'a>(rows: &'a BatchRows<'_>, at: usize, n: usize, dim: usize) -> ArrayView2<'a, f32> {
    if n == 0 {
        return ArrayView2::from_shape((0, dim), &[]).expect("an empty view");
    }
    let w = rows.width();
    let values = &rows.values()[at * w..(at + n) * w];
    ArrayView2::from_shape((n, dim).strides((w, 1)), &values[..values.len() - (w - dim)])
        .expect("n rows of width w ≥ dim")
}

/// Add each row of `d` to row `idx[i]` of `grad` (`rows × dim`), in order.
fn scatter_add(
    grad: &mut [f32],
    idx: impl Iterator<Item = u32>,
    d: ArrayView2<'_, f32>,
    dim: usize,
) {
    let d = d.to_slice().expect("standard layout");
    for (l, row) in idx.zip(d.chunks(dim.max(1))) {
        let dst = &mut grad[l as usize * dim..(l as usize + 1) * dim];
        for (a, b) in dst.iter_mut().zip(row) {
            *a += b;
        }
    }
}

impl Model for EmbeddingModel {
    type Data = TripleBatch;
    type Error = NonFiniteLoss;

    fn row_width(&self) -> usize {
        self.cfg.row_width()
    }

    /// Runs on one thread or two as [`StepThreads`] chooses (the same bits either way), and
    /// times itself for that choice (its cycle is known when the next step starts).
    fn step(&mut self, b: &TripleBatch, rows: &mut BatchRows<'_>) -> Result<(), NonFiniteLoss> {
        if rayon::current_num_threads() == 1 {
            return self.step_on(b, rows, false);
        }
        self.follow_way(b.inline);
        let start = std::time::Instant::now();
        let chooser = usize::from(b.inline);
        let threads = self.threads[chooser].start(start);
        let stepped = match threads {
            // On one of rayon's threads, so the step's joins hand work to the other without a
            // round trip through the pool's injector each. From the pool's own thread (the
            // binaries', `crate::pool`) the scope runs in place; from any other thread (the
            // Python package's) it is one hand-off to a worker per step.
            Threads::Two => rayon::scope(|_| self.step_on(b, rows, true)),
            Threads::One => self.step_on(b, rows, false),
        };
        self.threads[chooser].stepped(start.elapsed(), b.pos.len());
        stepped
    }

    fn dense(&self) -> Vec<f32> {
        [self.rel.as_slice(), &self.rel_state].concat()
    }
}

impl EmbeddingModel {
    /// The coming batch runs inline or not ([`TripleBatch::inline`]): where that differs from the
    /// last batch, the way left pauses its timing. The bits do not depend on it.
    fn follow_way(&mut self, inline: bool) {
        if inline != self.inline {
            // The steps of the way left resume later: their last cycle did not end now.
            self.threads[usize::from(self.inline)].pause();
        }
        self.inline = inline;
    }

    /// [`Model::step`] from the calling thread: on it alone, or with a second of rayon's if
    /// `two`.
    fn step_on(
        &mut self,
        b: &TripleBatch,
        rows: &mut BatchRows<'_>,
        two: bool,
    ) -> Result<(), NonFiniteLoss> {
        let dim = self.cfg.dim;
        let mut grad = std::mem::take(&mut self.grad);
        let batch_loss = self.gradients(b, rows, &mut grad, two);
        if !batch_loss.is_finite() {
            grad.fill(0.0);
            self.grad = grad;
            return Err(NonFiniteLoss { batch: b.id, loss: batch_loss });
        }
        let (lr, opt) = (self.cfg.lr, self.cfg.optimizer);
        // Each row's update reads only its own gradient and state: any split gives the same bits.
        // Each gradient row is zeroed once read (the invariant of `EmbeddingModel::grad`).
        let width = rows.width();
        let update = |(row, g): (&mut [f32], &mut [f32])| {
            let (w, state) = row.split_at_mut(dim);
            opt.update(w, state, g, lr);
            g.fill(0.0);
        };
        if self.cfg.precision == Precision::Bf16 {
            // Rounded right after its update, keyed by the row and the batch: the same bits
            // on any thread and in any mode.
            let (seed, batch) = (self.cfg.seed, b.id);
            let ids = rows.ids().to_vec();
            let values = rows.values_mut();
            let round = |((row, g), &id): ((&mut [f32], &mut [f32]), &u64)| {
                update((&mut *row, g));
                super::bf16_rounding::round_row(seed, id, batch, row);
            };
            if two {
                values
                    .par_chunks_mut(width)
                    .zip(grad.par_chunks_mut(dim))
                    .zip(ids.par_iter())
                    .with_min_len(64)
                    .for_each(round);
            } else {
                values.chunks_mut(width).zip(grad.chunks_mut(dim)).zip(&ids).for_each(round);
            }
        } else {
            let (values, grads) = (rows.values_mut(), &mut grad[..]);
            if two {
                values
                    .par_chunks_mut(width)
                    .zip(grads.par_chunks_mut(dim))
                    .with_min_len(64)
                    .for_each(update);
            } else {
                values.chunks_mut(width).zip(grads.chunks_mut(dim)).for_each(update);
            }
        }
        self.grad = grad;
        self.loss_sum += batch_loss as f64;
        self.positives += b.pos.len() as u64;
        let (rdim, ropt) = (self.cfg.relation_dim(), opt.for_relations());
        let sw = ropt.state_width(rdim);
        for r in 0..self.rel_touched.len() {
            if self.rel_touched[r] {
                let s = r * rdim..(r + 1) * rdim;
                let st = &mut self.rel_state[r * sw..(r + 1) * sw];
                ropt.update(&mut self.rel[s.clone()], st, &self.rel_grad[s], lr);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::data::batch::Sampling;
    use crate::kge::data::dataset::Triple;
    use crate::kge::model::init::Init;
    use ordo::engine::Batch;

    fn setup(
        score: ScoreFn,
        loss: Loss,
        chunk: usize,
    ) -> (EmbeddingModel, Batch<TripleBatch>, Vec<f32>) {
        let cfg = StepConfig { score, loss, dim: 4, reg: 0.01, ..StepConfig::default() };
        setup_with(cfg, chunk)
    }

    fn setup_with(cfg: StepConfig, chunk: usize) -> (EmbeddingModel, Batch<TripleBatch>, Vec<f32>) {
        let dim = cfg.dim;
        let w = cfg.row_width();
        let model = EmbeddingModel::new(cfg, 3, 0.5, 9);
        let train: Vec<Triple> =
            (0..5).map(|i| Triple { h: i, r: i % 3, t: (i * 3 + 1) % 8 }).collect();
        let s = Sampling {
            seed: 1,
            batch_size: 5,
            negatives: 3,
            chunk,
            entities: 8,
            neg_sampling: Default::default(),
            batch_negatives: 0,
        };
        let batch = s.epoch_batches(&train, 0).remove(0);
        let all = init_entities(8, dim, w, (Init::Uniform, 0.5), 2);
        let values = batch
            .rows
            .iter()
            .flat_map(|&r| all[r as usize * w..(r as usize + 1) * w].to_vec())
            .collect();
        (model, batch, values)
    }

    /// A laid-out batch ([`TripleBatch::laid_out`]: own negatives multiplied where the engine
    /// read them, their gradients written in place, the others gathered) steps to the values
    /// of the same batch with every reference gathered, for each interaction (a product, L2,
    /// L1), on one thread and with chunks two at a time: equal up to the rounding of products
    /// split in two parts. A batch whose layout does not fit its references is stepped by
    /// gathering, to the same bits.
    #[test]
    fn laid_out_negatives_step_as_gathered_ones() {
        use crate::kge::data::batch::NegSampling;
        for score in [ScoreFn::ComplEx, ScoreFn::TransEL2, ScoreFn::TransEL1] {
            let cfg = StepConfig { score, dim: 104, reg: 0.01, ..StepConfig::default() };
            let (w, entities) = (cfg.row_width(), 300u32);
            let s = Sampling {
                seed: 4,
                batch_size: 9,
                negatives: 40,
                chunk: 4,
                entities,
                neg_sampling: NegSampling::Distinct,
                batch_negatives: 0,
            };
            assert!(s.chunk * (s.negatives + 1) * cfg.dim >= PARALLEL_CHUNK_WORK);
            let train: Vec<Triple> =
                (0..9).map(|i| Triple { h: i, r: i % 3, t: (i * 5 + 2) % 20 }).collect();
            let b = s.batch(7, &train);
            let bounds = b.data.laid_out.clone().expect("a distinct batch is laid out");
            let own = |j: usize| (bounds[j + 1] - bounds[j]) as usize;
            // Both parts occur: own rows, and negatives that are positives' entities.
            assert!((0..6).all(|j| own(j) > 0) && (0..6).any(|j| own(j) < s.negatives));
            let table = init_entities(entities as usize, cfg.dim, w, (Init::Uniform, 0.5), 2);
            let start: Vec<f32> = (b.rows.iter())
                .flat_map(|&r| table[r as usize * w..(r as usize + 1) * w].to_vec())
                .collect();
            for two in [false, true] {
                let run = |data: &TripleBatch| {
                    let mut model = EmbeddingModel::new(cfg, 3, 0.5, 9);
                    let mut values = start.clone();
                    let mut rows = BatchRows::new(&b.rows, w, &mut values).unwrap();
                    model.step_on(data, &mut rows, two).unwrap();
                    let loss = model.take_loss() as f32;
                    [values, model.relations().to_vec(), vec![loss]].concat()
                };
                let laid = run(&b.data);
                let gathered = run(&TripleBatch { laid_out: None, ..b.data.clone() });
                let off =
                    laid.iter().zip(&gathered).map(|(a, g)| (a - g).abs()).fold(0.0, f32::max);
                assert!(off < 1e-5, "{score:?}, two threads {two}: off by {off}");
                let negatives = bounds[0] as usize * w..;
                assert_ne!(laid[negatives.clone()], start[negatives], "the negatives moved");
                let mut wrong = bounds.clone();
                wrong[1] += 1;
                let wrong = run(&TripleBatch { laid_out: Some(wrong), ..b.data.clone() });
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&wrong), bits(&gathered), "{score:?}: a wrong layout is gathered");
            }
        }
    }

    /// Steps on one thread, on two, in any mix, or as [`StepThreads`] chooses give the same
    /// bits (entity rows, relations, loss): what lets the choice be made from wall-clock times.
    /// The batches are large enough that two threads do split chunks ([`PARALLEL_CHUNK_WORK`])
    /// and the rows' update.
    #[test]
    fn steps_give_the_same_bits_on_one_thread_or_two_in_any_mix() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let cfg = StepConfig { dim: 104, reg: 0.01, ..StepConfig::default() };
        let (w, entities) = (cfg.row_width(), 500u32);
        let s = Sampling {
            seed: 3,
            batch_size: 200,
            negatives: 63,
            chunk: 10,
            entities,
            neg_sampling: Default::default(),
            batch_negatives: 0,
        };
        assert!(s.chunk * (s.negatives + 1) * cfg.dim >= PARALLEL_CHUNK_WORK);
        let train: Vec<Triple> = (0..400)
            .map(|i| Triple { h: i % entities, r: i % 3, t: (i * 7 + 1) % entities })
            .collect();
        let batches: Vec<_> = (0..2).flat_map(|e| s.epoch_batches(&train, e)).collect();
        // `None`: the model's own choice through `Model::step`.
        let run = |threads: &(dyn Fn(usize) -> Option<bool> + Sync)| {
            let mut m = EmbeddingModel::new(cfg, 3, 0.5, 9);
            let mut table = init_entities(entities as usize, cfg.dim, w, (Init::Uniform, 0.5), 2);
            let mut losses = Vec::new();
            for (i, b) in batches.iter().enumerate() {
                let mut values: Vec<f32> = b
                    .rows
                    .iter()
                    .flat_map(|&r| table[r as usize * w..(r as usize + 1) * w].to_vec())
                    .collect();
                let mut rows = BatchRows::new(&b.rows, w, &mut values).unwrap();
                pool.install(|| match threads(i) {
                    Some(two) => m.step_on(&b.data, &mut rows, two),
                    None => m.step(&b.data, &mut rows),
                })
                .unwrap();
                for (k, &r) in b.rows.iter().enumerate() {
                    table[r as usize * w..(r as usize + 1) * w]
                        .copy_from_slice(&values[k * w..(k + 1) * w]);
                }
                losses.push(m.take_loss().to_bits());
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            (bits(&table), bits(m.relations()), losses)
        };
        let one = run(&|_| Some(false));
        assert!(batches.len() >= 4 && batches[0].rows.len() > 128, "batches big enough to split");
        assert_eq!(run(&|_| Some(true)), one, "two threads");
        assert_eq!(run(&|i| Some(i % 3 == 1)), one, "a mix");
        // Through `Model::step` (its scope and its timing); over these 4 batches, all within
        // `COLD_STEPS`, the model's choice is two threads throughout.
        assert_eq!(run(&|_| None), one, "the model's own choice");
    }

    /// Each batch's own flag picks the timing it counts in: a batch run inline times the inline
    /// choice, and the first one pauses the pipelined choice (its last cycle did not end with
    /// the inline batch's start), and back. The flag travels with the batch, so batches still in
    /// the pipeline when the trainer switches to inline are timed as the pipelined batches they
    /// are (before, a flag set on the model ahead of `submit_inline` mislabelled up to a
    /// pipeline's depth of them at every switch).
    #[test]
    fn each_batch_is_timed_by_the_way_it_runs() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (mut m, batch, values) = setup(ScoreFn::ComplEx, Loss::Softmax, 2);
        let w = m.row_width();
        let step = |m: &mut EmbeddingModel, inline: bool| {
            let mut data = batch.data.clone();
            data.inline = inline;
            let mut v = values.clone();
            let mut rows = BatchRows::new(&batch.rows, w, &mut v).unwrap();
            pool.install(|| m.step(&data, &mut rows)).unwrap();
            (m.threads[0].cycle_open(), m.threads[1].cycle_open())
        };
        assert_eq!(step(&mut m, false), (true, false), "a pipelined batch times the pipeline");
        assert_eq!(step(&mut m, false), (true, false));
        assert_eq!(step(&mut m, true), (false, true), "inline: the pipeline's cycle paused");
        assert_eq!(step(&mut m, true), (false, true));
        assert_eq!(step(&mut m, false), (true, false), "back: the inline cycle paused");
    }

    /// Without layout copies (the roofline's measurement), a chunk of an earlier chunk's shape
    /// multiplies the rows that chunk gathered, so the loss differs from the true step's, and no
    /// gradient reaches an entity row, so the update leaves every embedding as it was.
    #[test]
    fn without_layout_copies_no_chunk_gathers_again_or_adds_back() {
        // Chunks of one positive: chunk 4 reuses chunk 0's matrices (pairs alternate sets).
        let (mut true_step, b, values) = setup(ScoreFn::ComplEx, Loss::Softmax, 1);
        let mut bare = true_step.clone();
        bare.measure_without_layout_copies();
        let (w, dim) = (true_step.row_width(), true_step.config().dim);
        let step = |m: &mut EmbeddingModel| {
            let mut v = values.clone();
            m.step(&b.data, &mut BatchRows::new(&b.rows, w, &mut v).unwrap()).unwrap();
            (v, m.take_loss())
        };
        let (stepped, loss) = step(&mut true_step);
        let (bare_stepped, bare_loss) = step(&mut bare);
        let embeddings =
            |v: &[f32]| v.chunks(w).flat_map(|r| r[..dim].to_vec()).collect::<Vec<_>>();
        assert_ne!(embeddings(&stepped), embeddings(&values), "the true step moves embeddings");
        assert_eq!(embeddings(&bare_stepped), embeddings(&values), "no gradient added back");
        assert_ne!(bare_loss.to_bits(), loss.to_bits(), "the second chunk kept the first's rows");
        assert_ne!(bare.relations(), EmbeddingModel::new(*bare.config(), 3, 0.5, 9).relations());
    }

    /// Chunks computed two at a time on rayon's threads give the bits of the sequential step:
    /// gradients, relation gradients and loss (an odd chunk count leaves one chunk alone).
    #[test]
    fn parallel_chunks_give_the_sequential_bits() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for score in [ScoreFn::ComplEx, ScoreFn::TransEL2, ScoreFn::RotatE] {
            for (chunk, reciprocal) in [(1, false), (2, true), (5, false)] {
                let cfg = StepConfig { score, dim: 4, reg: 0.01, reciprocal, ..Default::default() };
                let (mut m, b, mut values) = setup_with(cfg, chunk);
                let ids = b.rows.clone();
                let rows = BatchRows::new(&ids, cfg.row_width(), &mut values).unwrap();
                let mut run = |parallel: bool| {
                    let (mut grad, mut sc) = (Vec::new(), Box::<[[StepScratch; 2]; 2]>::default());
                    let loss = pool
                        .install(|| m.gradients_with(&b.data, &rows, &mut grad, &mut sc, parallel));
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    (loss.to_bits(), bits(&grad), bits(&m.rel_grad), m.rel_touched.clone())
                };
                let sequential = run(false);
                assert!(sequential.1.iter().any(|&g| g != 0), "a gradient to compare");
                assert_eq!(run(true), sequential, "{score:?} chunk {chunk}");
            }
        }
    }

    /// The batch gradient (chunks, shared negatives, scatter of repeated entities, relations,
    /// inverse relations, regularization, mean reduction) against central finite differences
    /// of the batch objective. TransE-L1's kinks are too close for f32 differences here; its
    /// gradient is checked in f64 in `score`'s tests.
    #[test]
    fn batch_gradients_match_finite_differences() {
        let scores = [ScoreFn::DistMult, ScoreFn::ComplEx, ScoreFn::TransEL2, ScoreFn::RotatE];
        let losses = [Loss::Softmax, Loss::Logistic, Loss::Softplus, Loss::Margin];
        for (score, loss) in scores.into_iter().flat_map(|s| losses.map(|l| (s, l))) {
            for (chunk, reciprocal) in [(1, false), (2, false), (2, true)] {
                for regularizer in [Regularizer::L2, Regularizer::N3] {
                    let cfg = StepConfig {
                        score,
                        loss,
                        dim: 4,
                        reg: 0.01,
                        regularizer,
                        reciprocal,
                        ..StepConfig::default()
                    };
                    let (mut m, b, mut values) = setup_with(cfg, chunk);
                    let ids = b.rows.clone();
                    let dim = m.cfg.dim;
                    // The objective the gradients are of: the loss times the reduction scale.
                    let scale =
                        if loss.mean_reduced() { 0.5 / b.data.pos.len() as f64 } else { 1.0 };
                    let lossf = |m: &mut EmbeddingModel, v: &mut [f32]| {
                        let rows = BatchRows::new(&ids, 2 * dim, v).unwrap();
                        m.gradients(&b.data, &rows, &mut Vec::new(), false) as f64 * scale
                    };
                    let mut grad = Vec::new();
                    let rows = BatchRows::new(&ids, 2 * dim, &mut values).unwrap();
                    m.gradients(&b.data, &rows, &mut grad, false);
                    let rel_grad = m.rel_grad.clone();
                    let eps = 1e-2f32;
                    for i in 0..ids.len() {
                        for j in 0..dim {
                            let k = i * 2 * dim + j;
                            let x = values[k];
                            values[k] = x + eps;
                            let up = lossf(&mut m, &mut values);
                            values[k] = x - eps;
                            let down = lossf(&mut m, &mut values);
                            values[k] = x;
                            let num = (up - down) / (2.0 * eps as f64);
                            let a = grad[i * dim + j] as f64;
                            assert!(
                                (a - num).abs() < 2e-3 + 1e-2 * num.abs(),
                                "{cfg:?} chunk {chunk} row {i} coord {j}: {a} vs {num}"
                            );
                        }
                    }
                    for (k, &a) in rel_grad.iter().enumerate() {
                        let x = m.rel[k];
                        m.rel[k] = x + eps;
                        let up = lossf(&mut m, &mut values);
                        m.rel[k] = x - eps;
                        let down = lossf(&mut m, &mut values);
                        m.rel[k] = x;
                        let num = (up - down) / (2.0 * eps as f64);
                        let a = a as f64;
                        assert!(
                            (a - num).abs() < 2e-3 + 1e-2 * num.abs(),
                            "{cfg:?} relation coord {k}: {a} vs {num}"
                        );
                    }
                }
            }
        }
    }

    /// The batch loss is every chunk's: each positive scored against its own chunk's shared
    /// negatives on both sides with `ScoreFn::score` and the loss directly (no chunk matrices),
    /// summed. With the finite-difference test (the gradients are the loss's), this ties the
    /// gradients to every chunk, which comparing the step with itself cannot: a chunk dropped
    /// from both the loss and the gradients passes that test.
    #[test]
    fn batch_loss_counts_every_chunk_once() {
        for score in [ScoreFn::ComplEx, ScoreFn::TransEL2] {
            for chunk in [1, 2, 5] {
                let cfg = StepConfig { score, dim: 4, reg: 0.0, ..StepConfig::default() };
                let (mut m, b, mut values) = setup_with(cfg, chunk);
                let ids = b.rows.clone();
                let rows = BatchRows::new(&ids, cfg.row_width(), &mut values).unwrap();
                let got = m.gradients(&b.data, &rows, &mut Vec::new(), false) as f64;
                let entity = |l: u32| &rows.row(l as usize)[..cfg.dim];
                let rdim = cfg.relation_dim();
                let rel = |r: u32| &m.relations()[r as usize * rdim..(r as usize + 1) * rdim];
                let mut want = 0.0f64;
                for (ci, pos) in b.data.pos.chunks(chunk).enumerate() {
                    let (nt, nh) = b.data.chunk_negatives(ci);
                    for &(h, r, t) in pos {
                        let (h, r, t) = (entity(h), rel(r), entity(t));
                        let own = score.score(h, r, t);
                        let tails = nt.iter().map(|&l| score.score(h, r, entity(l)));
                        let heads = nh.iter().map(|&l| score.score(entity(l), r, t));
                        for side in [
                            std::iter::once(own).chain(tails).collect::<Vec<_>>(),
                            std::iter::once(own).chain(heads).collect(),
                        ] {
                            let mut g = vec![0.0; side.len()];
                            want += cfg.loss.loss_and_grad(&side, &mut g, cfg.margin) as f64;
                        }
                    }
                }
                assert!(
                    (got - want).abs() < 1e-4 * want.abs().max(1.0),
                    "{score:?} chunk {chunk}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn step_is_deterministic_lowers_the_loss_and_stops_on_nan() {
        let (mut m, b, values) = setup(ScoreFn::ComplEx, Loss::Softmax, 2);
        let w = m.row_width();
        let run = |m: &mut EmbeddingModel, v: &mut Vec<f32>, steps: usize| {
            let mut losses = Vec::new();
            for _ in 0..steps {
                m.step(&b.data, &mut BatchRows::new(&b.rows, w, v).unwrap()).unwrap();
                losses.push(m.take_loss());
            }
            losses
        };
        let (mut m2, mut v1, mut v2) = (m.clone(), values.clone(), values.clone());
        let l1 = run(&mut m, &mut v1, 20);
        let l2 = run(&mut m2, &mut v2, 20);
        assert_eq!(
            v1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            v2.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(m.dense(), m2.dense());
        assert!(l1[19] < 0.8 * l1[0], "loss did not fall: {l1:?}");
        assert_eq!(l1, l2);
        let mut bad = values.clone();
        bad[0] = f32::NAN;
        let err = m.step(&b.data, &mut BatchRows::new(&b.rows, w, &mut bad).unwrap()).unwrap_err();
        assert!(err.to_string().contains("loss is NaN in batch 0"), "{err}");
    }
}
