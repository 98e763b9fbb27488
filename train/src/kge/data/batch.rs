//! Training batches: positives, their uniformly corrupted negatives, and the entity rows they
//! touch.
//!
//! **Replay invariant:** a batch is a pure function of `(seed, epoch, index)`: the epoch's
//! shuffle comes from `(seed, epoch)` and the negatives from `(seed, batch id)`. So a recorded
//! computation order (a list of batch ids) can be replayed exactly, without storing batches.

use super::dataset::Triple;
use ordo::engine::Batch;

pub use crate::rng::SplitMix64;

/// The payload of one KGE batch. Entity references are *local*: positions in the batch's row
/// ids (what [`ordo::engine::BatchRows`] hands the step), which are sorted unless
/// [`laid_out`](Self::laid_out) says otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct TripleBatch {
    /// The batch id (for error messages).
    pub id: u64,
    /// Positives as `(head row, relation id, tail row)`.
    pub pos: Vec<(u32, u32, u32)>,
    /// Positives per negative-sharing chunk (the last chunk may be shorter).
    pub chunk: usize,
    /// Negatives per chunk and side: [`Sampling::negatives`] drawn as
    /// [`Sampling::neg_sampling`] says, then [`Sampling::batch_negatives`] in-batch ones.
    pub negatives: usize,
    /// Corrupted tails: `negatives` rows per chunk.
    pub neg_tails: Vec<u32>,
    /// Corrupted heads: `negatives` rows per chunk.
    pub neg_heads: Vec<u32>,
    /// Whether the engine runs this batch's stages on the device thread
    /// (`Session::submit_inline`, [`crate::kge::training::stage_choice`]) rather than through its reader
    /// and writer threads: the step times its thread choice for each case apart. Set by the trainer
    /// when it submits the batch, so a step knows how *its own* batch runs, also while a switch
    /// empties the pipeline of batches submitted the other way. The bits do not depend on it.
    pub inline: bool,
    /// Where [`NegSampling::Distinct`] laid the negatives' rows out, as row bounds (`2 ×
    /// chunks + 1` of them; the first is the positives' row count): chunk `ci`'s corrupted
    /// tails own the rows `bounds[2ci]..bounds[2ci + 1]` and its corrupted heads the rows
    /// `bounds[2ci + 1]..bounds[2ci + 2]`. Each side's list of negatives names its own rows
    /// first, in order, then the negatives that are positives' entities (rows below
    /// `bounds[0]`); no other reference of the batch names a negative's own row. The step
    /// multiplies the own rows where the engine read them and writes their gradients in
    /// place; only the positives' entities are gathered and added back. `None`: the rows are
    /// sorted and every reference is gathered.
    pub laid_out: Option<Vec<u32>>,
}

impl TripleBatch {
    /// Chunk `ci`'s corrupted tails and corrupted heads (`negatives` rows each).
    pub fn chunk_negatives(&self, ci: usize) -> (&[u32], &[u32]) {
        let span = ci * self.negatives..(ci + 1) * self.negatives;
        (&self.neg_tails[span.clone()], &self.neg_heads[span])
    }
}

/// Where a chunk's negatives come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NegSampling {
    /// Uniformly from all entities.
    #[default]
    Uniform,
    /// In-batch: drawn (seeded, with replacement) from the heads (head side) or tails (tail side)
    /// of the batch's own positives, so negatives cost no extra row reads (PyTorch-BigGraph's
    /// batch negatives). A draw may hit the positive's own entity: a false negative, as in PBG.
    Batch,
    /// Uniformly from all entities, without replacement within the batch: a draw that repeats
    /// an earlier negative of the batch is drawn again (a positive's entity may be drawn, as
    /// with `uniform`). The negatives that are not positives' entities then have rows of their
    /// own, which the batch lays out side by side per chunk and side ([`TripleBatch::laid_out`])
    /// so that the step multiplies them where the engine read them. The dataset needs at least
    /// as many entities as a batch has negatives (refused before training if not).
    Distinct,
}

/// A batch of [`NegSampling::Distinct`] has more negatives than the dataset has entities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "negative sampling `distinct` draws a batch's negatives without replacement: a full batch \
     has {needed} (2 × negatives × chunks), the dataset {entities} entities"
)]
pub struct SamplingError {
    /// Negatives of a full batch.
    pub needed: usize,
    /// Entities in the dataset.
    pub entities: usize,
}

/// How batches are cut and corrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// Master seed.
    pub seed: u64,
    /// Positives per batch.
    pub batch_size: usize,
    /// Negatives per positive and side (head and tail).
    pub negatives: usize,
    /// Positives that share one set of negatives (1 = every positive has its own).
    pub chunk: usize,
    /// Number of entities negatives are drawn from.
    pub entities: u32,
    /// Where the `negatives` come from.
    pub neg_sampling: NegSampling,
    /// In-batch negatives per chunk and side, drawn *besides* the `negatives` (PyTorch-BigGraph's
    /// `num_batch_negs` beside its `num_uniform_negs`): each is drawn (seeded, with replacement)
    /// from the tails (tail side) or heads (head side) of the batch's own positives, after all
    /// of the batch's other draws, and follows its chunk's other negatives in the chunk's list.
    /// They name rows the batch reads anyway, so they cost no row reads. 0 (the default) draws
    /// nothing more: the batches are bit for bit those of `neg_sampling` alone.
    pub batch_negatives: usize,
}

impl Sampling {
    /// Batches per epoch for `n` training triples.
    pub fn batches_per_epoch(&self, n: usize) -> usize {
        n.div_ceil(self.batch_size.max(1))
    }

    /// The epoch's training order: a Fisher–Yates shuffle seeded by `(seed, epoch)`.
    pub fn epoch_order(&self, train: &[Triple], epoch: usize) -> Vec<Triple> {
        self.epoch_permutation(train.len(), epoch).iter().map(|&i| train[i as usize]).collect()
    }

    /// The epoch's training order as positions into the `n` training triples: the same
    /// Fisher–Yates swaps as [`epoch_order`](Self::epoch_order), applied to indices, so
    /// `epoch_order(train, e)[i] == train[epoch_permutation(n, e)[i]]` at 4 bytes per triple
    /// instead of 12.
    pub fn epoch_permutation(&self, n: usize, epoch: usize) -> Vec<u32> {
        let n = u32::try_from(n).expect("at most u32::MAX training triples");
        let mut order: Vec<u32> = (0..n).collect();
        let mut g = SplitMix64::new(self.seed, 0x5EED_0000_0000 ^ epoch as u64);
        for i in (1..order.len()).rev() {
            order.swap(i, g.below(i as u32 + 1) as usize);
        }
        order
    }

    /// The batches of `epoch`, built one at a time as they are taken (see [`EpochBatches`]).
    pub fn epoch<'a>(&self, train: &'a [Triple], epoch: usize) -> EpochBatches<'a> {
        EpochBatches {
            sampling: *self,
            train,
            epoch,
            order: self.epoch_permutation(train.len(), epoch),
            next: 0,
            positives: Vec::with_capacity(self.batch_size.max(1)),
        }
    }

    /// The id of batch `index` of `epoch`.
    pub fn batch_id(&self, n_train: usize, epoch: usize, index: usize) -> u64 {
        (epoch * self.batches_per_epoch(n_train) + index) as u64
    }

    /// Build batch `id` from its positives (a slice of the epoch order).
    ///
    /// # Panics
    ///
    /// With [`NegSampling::Distinct`], if [`check`](Self::check) refuses the sampling (more
    /// negatives than entities, which no draw without replacement can serve): call `check`
    /// first, as the trainers do before any batch is built.
    pub fn batch(&self, id: u64, positives: &[Triple]) -> Batch<TripleBatch> {
        let chunk = self.chunk.max(1);
        let chunks = positives.len().div_ceil(chunk);
        let mut g = SplitMix64::new(self.seed, id);
        let n = self.negatives;
        let (neg_t, neg_h): (Vec<u32>, Vec<u32>) = match self.neg_sampling {
            NegSampling::Distinct => {
                return self.assemble_laid_out(id, positives, &mut g);
            }
            NegSampling::Uniform => (
                (0..chunks * n).map(|_| g.below(self.entities)).collect(),
                (0..chunks * n).map(|_| g.below(self.entities)).collect(),
            ),
            NegSampling::Batch => {
                let [t, h] = in_batch_draws(&mut g, positives.len(), chunks * n);
                (
                    t.into_iter().map(|p| positives[p].t).collect(),
                    h.into_iter().map(|p| positives[p].h).collect(),
                )
            }
        };
        if self.batch_negatives == 0 {
            return self.assemble(id, positives, neg_t, neg_h);
        }
        let b = self.batch_negatives;
        let [bt, bh] = in_batch_draws(&mut g, positives.len(), chunks * b);
        let entity = |side: &[usize], tail: bool| -> Vec<u32> {
            side.iter().map(|&p| if tail { positives[p].t } else { positives[p].h }).collect()
        };
        let neg_t = append_by_chunk(&neg_t, n, &entity(&bt, true), b);
        let neg_h = append_by_chunk(&neg_h, n, &entity(&bh, false), b);
        self.assemble_with(id, positives, neg_t, neg_h, n + b)
    }

    /// Negatives per chunk and side of every batch: [`negatives`](Self::negatives) and
    /// [`batch_negatives`](Self::batch_negatives) together ([`TripleBatch::negatives`]).
    pub fn negatives_per_chunk(&self) -> usize {
        self.negatives + self.batch_negatives
    }

    /// Batch `id` from its positives and the global entity ids of its negatives (`negatives`
    /// per chunk and side): the rows are the positives' and negatives' entities, sorted.
    /// [`Sampling::batch`] draws the negatives itself; a caller that draws them elsewhere (e.g.
    /// among a parameter-manager node's local keys) builds the batch with this.
    ///
    /// ```
    /// use ordo_train::kge::data::batch::{NegSampling, Sampling};
    /// use ordo_train::kge::data::dataset::Triple;
    /// let s = Sampling { seed: 0, batch_size: 2, negatives: 1, chunk: 2, entities: 9,
    ///     neg_sampling: NegSampling::Uniform, batch_negatives: 0 };
    /// let b = s.assemble(0, &[Triple { h: 1, r: 0, t: 5 }], vec![7], vec![3]);
    /// assert_eq!(b.rows, vec![1, 3, 5, 7]);
    /// assert_eq!((b.data.neg_tails[0], b.data.neg_heads[0]), (3, 1)); // rows 7 and 3
    /// ```
    pub fn assemble(
        &self,
        id: u64,
        positives: &[Triple],
        neg_t: Vec<u32>,
        neg_h: Vec<u32>,
    ) -> Batch<TripleBatch> {
        self.assemble_with(id, positives, neg_t, neg_h, self.negatives)
    }

    /// [`assemble`](Self::assemble) with `per_chunk` negatives per chunk and side.
    fn assemble_with(
        &self,
        id: u64,
        positives: &[Triple],
        neg_t: Vec<u32>,
        neg_h: Vec<u32>,
        per_chunk: usize,
    ) -> Batch<TripleBatch> {
        // Every entity reference in its place: heads and tails interleaved, then the negatives.
        let refs: Vec<u32> = positives
            .iter()
            .flat_map(|t| [t.h, t.t])
            .chain(neg_t.iter().copied())
            .chain(neg_h.iter().copied())
            .collect();
        let (rows, local) = number_entities(&refs);
        let (pos_local, negs) = local.split_at(2 * positives.len());
        let (nt_local, nh_local) = negs.split_at(neg_t.len());
        let negatives = [nt_local.to_vec(), nh_local.to_vec()];
        let data = self.payload(id, positives, pos_local, negatives, per_chunk, None);
        Batch { id, rows, data }
    }

    /// Batch `id`'s payload: its positives with their heads and tails as the local ids
    /// `pos_local` (two per positive), its corrupted tails and heads (local ids, `negatives`
    /// per chunk), and their layout ([`TripleBatch::laid_out`]).
    fn payload(
        &self,
        id: u64,
        positives: &[Triple],
        pos_local: &[u32],
        [neg_tails, neg_heads]: [Vec<u32>; 2],
        negatives: usize,
        laid_out: Option<Vec<u32>>,
    ) -> TripleBatch {
        TripleBatch {
            id,
            pos: positives
                .iter()
                .zip(pos_local.chunks_exact(2))
                .map(|(t, l)| (l[0], t.r, l[1]))
                .collect(),
            chunk: self.chunk.max(1),
            negatives,
            neg_tails,
            neg_heads,
            inline: false,
            laid_out,
        }
    }

    /// Batch `id` of [`NegSampling::Distinct`]: its negatives drawn from `g` (every corrupted
    /// tail, then every corrupted head, none twice), and its rows laid out as
    /// [`TripleBatch::laid_out`] says: the positives' entities, sorted, then for each chunk and
    /// side the negatives that are not positives' entities, in the order drawn. Each side's
    /// list of negatives keeps those in the order drawn, then the positives' entities it drew.
    fn assemble_laid_out(
        &self,
        id: u64,
        positives: &[Triple],
        g: &mut SplitMix64,
    ) -> Batch<TripleBatch> {
        // Without it the draws below would never end.
        if let Err(e) = self.check() {
            panic!("{e}: Sampling::check refuses this sampling");
        }
        let chunk = self.chunk.max(1);
        let n = self.negatives;
        let chunks = positives.len().div_ceil(chunk);
        let per_side = chunks * n;
        let refs: Vec<u32> = positives.iter().flat_map(|t| [t.h, t.t]).collect();
        let (mut rows, local) = number_entities(&refs);
        let first = rows.len();
        // One bit per entity: the negatives drawn so far (a repeat is drawn again), and the
        // positives' entities (a negative among them is not given a row of its own).
        let words = (self.entities as usize).div_ceil(64);
        let mut drawn = vec![0u64; words];
        let mut positive = vec![0u64; words];
        let bit = |e: u32| (e as usize / 64, 1u64 << (e % 64));
        for &e in &rows {
            let (w, b) = bit(e as u32);
            positive[w] |= b;
        }
        let mut draw = |count: usize| -> Vec<u32> {
            (0..count)
                .map(|_| {
                    loop {
                        let e = g.below(self.entities);
                        let (w, b) = bit(e);
                        if drawn[w] & b == 0 {
                            drawn[w] |= b;
                            break e;
                        }
                    }
                })
                .collect()
        };
        let (neg_t, neg_h) = (draw(per_side), draw(per_side));
        let b = self.batch_negatives;
        // In-batch negatives name positives' rows (`local`: head, tail per positive).
        let [bt, bh] = in_batch_draws(g, positives.len(), chunks * b);
        let in_batch = [
            bt.iter().map(|&p| local[2 * p + 1]).collect::<Vec<u32>>(),
            bh.iter().map(|&p| local[2 * p]).collect::<Vec<u32>>(),
        ];
        let mut bounds = Vec::with_capacity(2 * chunks + 1);
        bounds.push(first as u32);
        let (mut tails, mut heads) = (Vec::with_capacity(per_side), Vec::with_capacity(per_side));
        let mut theirs = Vec::new();
        for ci in 0..chunks {
            let span = ci * n..(ci + 1) * n;
            let sides = [(&neg_t[span.clone()], &mut tails, 0), (&neg_h[span], &mut heads, 1)];
            for (drawn, list, side) in sides {
                theirs.clear();
                for &e in drawn {
                    let (w, b) = bit(e);
                    if positive[w] & b == 0 {
                        list.push(rows.len() as u32);
                        rows.push(u64::from(e));
                    } else {
                        let at = rows[..first].binary_search(&u64::from(e));
                        theirs
                            .push(at.expect("a positive's entity is among the first rows") as u32);
                    }
                }
                list.extend_from_slice(&theirs);
                list.extend_from_slice(&in_batch[side][ci * b..(ci + 1) * b]);
                bounds.push(rows.len() as u32);
            }
        }
        let data = self.payload(id, positives, &local, [tails, heads], n + b, Some(bounds));
        Batch { id, rows, data }
    }

    /// Refuse a sampling that cannot serve its batches, before any is built: with
    /// [`NegSampling::Distinct`], each negative of a full batch (two sides per chunk) must find
    /// an entity of its own.
    ///
    /// ```
    /// use ordo_train::kge::data::batch::{NegSampling, Sampling};
    /// let s = Sampling { seed: 0, batch_size: 10, negatives: 4, chunk: 5, entities: 16,
    ///     neg_sampling: NegSampling::Distinct, batch_negatives: 0 };
    /// assert!(s.check().is_ok()); // 2 sides × 2 chunks × 4 negatives = 16
    /// let e = Sampling { entities: 15, ..s }.check().unwrap_err();
    /// assert_eq!((e.needed, e.entities), (16, 15));
    /// ```
    pub fn check(&self) -> Result<(), SamplingError> {
        if self.neg_sampling != NegSampling::Distinct {
            return Ok(());
        }
        let needed = (self.batch_size.max(1).div_ceil(self.chunk.max(1)))
            .checked_mul(self.negatives)
            .and_then(|per_side| per_side.checked_mul(2))
            .unwrap_or(usize::MAX);
        let entities = self.entities as usize;
        if needed <= entities { Ok(()) } else { Err(SamplingError { needed, entities }) }
    }

    /// All batches of `epoch`, in id order (collected; a trainer streams [`epoch`](Self::epoch)
    /// instead).
    pub fn epoch_batches(&self, train: &[Triple], epoch: usize) -> Vec<Batch<TripleBatch>> {
        self.epoch(train, epoch).collect()
    }
}

/// In-batch draws for a batch of `positives` positives: `count` positions among them for the
/// tail side, then `count` for the head side, from `g`.
fn in_batch_draws(g: &mut SplitMix64, positives: usize, count: usize) -> [Vec<usize>; 2] {
    let b = positives as u32;
    let mut side = || (0..count).map(|_| g.below(b) as usize).collect::<Vec<_>>();
    let tails = side();
    [tails, side()]
}

/// Per chunk, `a`'s `n` entries then `extra`'s `m` entries (both lists hold the same number of
/// chunks).
fn append_by_chunk(a: &[u32], n: usize, extra: &[u32], m: usize) -> Vec<u32> {
    let chunks = extra.len().checked_div(m).unwrap_or(0);
    let mut out = Vec::with_capacity(a.len() + extra.len());
    for ci in 0..chunks {
        out.extend_from_slice(&a[ci * n..(ci + 1) * n]);
        out.extend_from_slice(&extra[ci * m..(ci + 1) * m]);
    }
    out
}

/// The distinct entities of `refs` in increasing order (a batch's rows), and each reference's
/// local id: its entity's position among them.
///
/// Where the entities span at most 64 per reference (every batch of a graph of up to a few
/// hundred thousand entities), it marks them in a bitmap and counts bits, in time linear in
/// the references; their sort was about 3 % of an oac run's device thread on the main job's
/// batches (BENCHMARKS.md, issue 34, seventh pass). Wider spans sort the references. Both give the same
/// rows and ids (`tests::both_numberings_agree`).
fn number_entities(refs: &[u32]) -> (Vec<u64>, Vec<u32>) {
    let words = refs.iter().max().map_or(0, |&m| m as usize / 64 + 1);
    if words <= refs.len() { number_by_bitmap(refs, words) } else { number_by_sort(refs) }
}

/// [`number_entities`] by a sort of `(entity, place)`: one pass over the sorted references
/// numbers the distinct entities and writes each place's id, with no search per reference.
fn number_by_sort(refs: &[u32]) -> (Vec<u64>, Vec<u32>) {
    let mut by_entity: Vec<(u32, u32)> =
        refs.iter().enumerate().map(|(p, &e)| (e, p as u32)).collect();
    by_entity.sort_unstable();
    let (mut rows, mut local) = (Vec::new(), vec![0u32; refs.len()]);
    for &(e, place) in &by_entity {
        if rows.last() != Some(&u64::from(e)) {
            rows.push(u64::from(e));
        }
        local[place as usize] = (rows.len() - 1) as u32;
    }
    (rows, local)
}

/// [`number_entities`] by a bitmap of `words` 64-bit words (covering every reference): an
/// entity's id is the number of marked entities below it, the marked bits of the words before
/// its own (a running count per word) plus those below it in its word.
fn number_by_bitmap(refs: &[u32], words: usize) -> (Vec<u64>, Vec<u32>) {
    let mut bits = vec![0u64; words];
    refs.iter().for_each(|&e| bits[e as usize / 64] |= 1 << (e % 64));
    let (mut below, mut rows) = (Vec::with_capacity(words), Vec::new());
    for (w, &word) in bits.iter().enumerate() {
        below.push(rows.len() as u32);
        let mut rest = word;
        while rest != 0 {
            rows.push((w * 64) as u64 + u64::from(rest.trailing_zeros()));
            rest &= rest - 1;
        }
    }
    let local = refs
        .iter()
        .map(|&e| {
            let (w, bit) = (e as usize / 64, e % 64);
            below[w] + (bits[w] & ((1u64 << bit) - 1)).count_ones()
        })
        .collect();
    (rows, local)
}

/// One epoch's batches as a data loader: each batch is built when it is taken, so an epoch
/// holds its shuffled positions (4 bytes per training triple) and one batch's positives, never
/// the epoch's batches. Yields exactly what [`Sampling::epoch_batches`] holds, in id order.
///
/// ```
/// use ordo_train::kge::data::{batch::{NegSampling, Sampling}, dataset::Triple};
/// let s = Sampling { seed: 1, batch_size: 2, negatives: 3, chunk: 1, entities: 9, neg_sampling: NegSampling::Uniform, batch_negatives: 0 };
/// let train: Vec<Triple> = (0..5).map(|i| Triple { h: i, r: 0, t: 8 - i }).collect();
/// let mut loader = s.epoch(&train, 1);
/// assert_eq!(loader.len(), 3);
/// assert_eq!(loader.get(2), s.epoch_batches(&train, 1).pop());
/// assert_eq!(loader.map(|b| b.id).collect::<Vec<_>>(), [3, 4, 5]);
/// ```
#[derive(Debug, Clone)]
pub struct EpochBatches<'a> {
    sampling: Sampling,
    train: &'a [Triple],
    epoch: usize,
    /// The epoch's order, as positions into `train`.
    order: Vec<u32>,
    /// The next batch index the iterator yields.
    next: usize,
    /// Scratch: the positives of the batch being built (reused, batch-size long).
    positives: Vec<Triple>,
}

impl EpochBatches<'_> {
    /// Batch `index` of the epoch (`None` past the end), whatever the iterator has yielded.
    pub fn get(&mut self, index: usize) -> Option<Batch<TripleBatch>> {
        let size = self.sampling.batch_size.max(1);
        let start = index.checked_mul(size).filter(|&s| s < self.order.len())?;
        let end = (start + size).min(self.order.len());
        self.positives.clear();
        self.positives.extend(self.order[start..end].iter().map(|&i| self.train[i as usize]));
        let id = self.sampling.batch_id(self.train.len(), self.epoch, index);
        Some(self.sampling.batch(id, &self.positives))
    }

    /// The id of the epoch's first batch.
    pub fn first_id(&self) -> u64 {
        self.sampling.batch_id(self.train.len(), self.epoch, 0)
    }
}

impl Iterator for EpochBatches<'_> {
    type Item = Batch<TripleBatch>;

    fn next(&mut self) -> Option<Batch<TripleBatch>> {
        let b = self.get(self.next)?;
        self.next += 1;
        Some(b)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.sampling.batches_per_epoch(self.order.len()) - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for EpochBatches<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A `Distinct` batch is what [`TripleBatch::laid_out`] promises: its rows are distinct
        /// (the engine accepts them); the positives' entities come first, sorted; each chunk
        /// side's list of negatives begins with its own rows, in order, then names positives'
        /// rows; no negative entity repeats in the batch; an own row is never a positive's
        /// entity and the rest always are; the same id gives the same batch. Down to graphs
        /// with exactly as many entities as a batch has negatives.
        #[test]
        fn distinct_negatives_are_laid_out_by_chunk_and_side(
            (size, chunk, n) in (1usize..40, 1usize..9, 0usize..9),
            spare in prop_oneof![Just(0usize), 1usize..2_000],
            id in 0u64..1_000,
        ) {
            let chunks = size.div_ceil(chunk);
            let needed = 2 * chunks * n;
            let entities = (needed + spare).max(1) as u32;
            let s = Sampling { seed: 5, batch_size: size, negatives: n, chunk, entities,
                neg_sampling: NegSampling::Distinct, batch_negatives: 0 };
            prop_assert!(s.check().is_ok());
            if needed > 0 {
                let short = Sampling { entities: needed as u32 - 1, ..s };
                prop_assert!(short.check().is_err());
            }
            let positives: Vec<Triple> = (0..size as u32)
                .map(|i| Triple { h: (i * 7) % entities, r: i % 3, t: (i * 13 + 1) % entities })
                .collect();
            let b = s.batch(id, &positives);
            prop_assert_eq!(&b, &s.batch(id, &positives));
            ordo::engine::validate_batch::<_, ordo::engine::StepError>(0, &b, entities as usize)
                .unwrap();
            let bounds = b.data.laid_out.clone().expect("laid out");
            let first = bounds[0] as usize;
            let refs: Vec<u32> = positives.iter().flat_map(|t| [t.h, t.t]).collect();
            prop_assert_eq!(&b.rows[..first], &number_entities(&refs).0[..]);
            prop_assert_eq!(bounds.len(), 2 * chunks + 1);
            prop_assert_eq!(*bounds.last().unwrap() as usize, b.rows.len());
            for (t, &(h, r, tl)) in positives.iter().zip(&b.data.pos) {
                prop_assert_eq!((b.rows[h as usize], r, b.rows[tl as usize]),
                    (u64::from(t.h), t.r, u64::from(t.t)));
            }
            let mut seen = std::collections::HashSet::new();
            for j in 0..2 * chunks {
                let (tails, heads) = b.data.chunk_negatives(j / 2);
                let list = if j % 2 == 0 { tails } else { heads };
                let own = (bounds[j]..bounds[j + 1]).collect::<Vec<_>>();
                prop_assert_eq!(&list[..own.len()], &own[..]);
                prop_assert!(list[own.len()..].iter().all(|&l| (l as usize) < first));
                for &l in list {
                    prop_assert!(seen.insert(b.rows[l as usize]), "negative {} twice", b.rows[l as usize]);
                }
            }
        }
    }

    /// A `Distinct` sampling with more negatives than entities panics with `check`'s error
    /// instead of drawing forever.
    #[test]
    #[should_panic(expected = "Sampling::check refuses this sampling")]
    fn distinct_negatives_beyond_the_entities_panic_rather_than_hang() {
        let s = Sampling {
            seed: 2,
            batch_size: 4,
            negatives: 3,
            chunk: 2,
            entities: 11,
            neg_sampling: NegSampling::Distinct,
            batch_negatives: 0,
        };
        s.batch(0, &[Triple { h: 0, r: 0, t: 1 }; 4]);
    }

    /// `Distinct` draws are uniform over all entities, positives' included: over many batches
    /// of a small graph, every entity is drawn about equally often.
    #[test]
    fn distinct_negatives_cover_every_entity() {
        let s = Sampling {
            seed: 2,
            batch_size: 4,
            negatives: 3,
            chunk: 2,
            entities: 40,
            neg_sampling: NegSampling::Distinct,
            batch_negatives: 0,
        };
        let positives: Vec<Triple> = (0..4).map(|i| Triple { h: i, r: 0, t: i + 4 }).collect();
        let mut seen = [0u32; 40];
        for id in 0..2_000 {
            let b = s.batch(id, &positives);
            for l in b.data.neg_tails.iter().chain(&b.data.neg_heads) {
                seen[b.rows[*l as usize] as usize] += 1;
            }
        }
        // 2,000 batches × 12 draws over 40 entities: 600 each on average.
        assert!(seen.iter().all(|&c| (480..720).contains(&c)), "{seen:?}");
    }

    proptest! {
        /// The bitmap and the sort number a batch's entities alike, and as defined: the rows are
        /// the distinct references in increasing order, and each reference's id points at its
        /// own entity. Spans from a few entities (many repeats) to ids past any bitmap's reach.
        #[test]
        fn both_numberings_agree(
            span in prop_oneof![Just(8u32), Just(5_000), Just(u32::MAX)],
            picks in prop::collection::vec(any::<u32>(), 0..400),
        ) {
            let refs: Vec<u32> = picks.iter().map(|&p| p % span).collect();
            let (rows, local) = number_by_sort(&refs);
            let mut want: Vec<u64> = refs.iter().map(|&e| u64::from(e)).collect();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(&rows, &want);
            for (&e, &l) in refs.iter().zip(&local) {
                prop_assert_eq!(rows[l as usize], u64::from(e));
            }
            let words = refs.iter().max().map_or(0, |&m| m as usize / 64 + 1);
            if words <= 1 << 20 {
                prop_assert_eq!(number_by_bitmap(&refs, words), (rows, local));
            }
        }
    }

    /// Batches like the main job's (40,943 entities: the bitmap) and like a wide table's (the
    /// sort) are numbered as the sort numbers them.
    #[test]
    fn number_entities_is_the_sorted_numbering_on_narrow_and_wide_spans() {
        let narrow: Vec<u32> = (0..2_560).map(|i| (i * 16) % 40_943).collect();
        let wide: Vec<u32> = (0..2_560).map(|i| i * 1_500).collect();
        let words = |r: &[u32]| r.iter().max().map_or(0, |&m| m as usize / 64 + 1);
        assert!(words(&narrow) <= narrow.len() && words(&wide) > wide.len(), "one of each way");
        for refs in [narrow, wide] {
            assert_eq!(number_entities(&refs), number_by_sort(&refs));
        }
    }

    fn sampling() -> Sampling {
        Sampling {
            seed: 3,
            batch_size: 4,
            negatives: 5,
            chunk: 2,
            entities: 50,
            neg_sampling: NegSampling::Uniform,
            batch_negatives: 0,
        }
    }

    fn train() -> Vec<Triple> {
        (0..10).map(|i| Triple { h: i, r: i % 3, t: 49 - i }).collect()
    }

    #[test]
    fn batches_are_a_pure_function_of_seed_and_id() {
        let s = sampling();
        let a = s.epoch_batches(&train(), 1);
        assert_eq!(a, s.epoch_batches(&train(), 1));
        assert_ne!(a, s.epoch_batches(&train(), 2));
        assert_eq!(a.len(), 3);
        assert_eq!(a.iter().map(|b| b.id).collect::<Vec<_>>(), [3, 4, 5]);
        let other_seed = Sampling { seed: 4, ..s }.epoch_batches(&train(), 1);
        assert_ne!(a[0].data.neg_tails, other_seed[0].data.neg_tails);
    }

    #[test]
    fn rows_are_sorted_unique_and_cover_every_entity_used() {
        let s = sampling();
        let epoch = s.epoch_order(&train(), 0);
        let mut seen = epoch.clone();
        seen.sort();
        assert_eq!(seen, train(), "an epoch is a permutation of train");
        for b in s.epoch_batches(&train(), 0) {
            assert!(b.rows.windows(2).all(|w| w[0] < w[1]));
            let global = |l: u32| b.rows[l as usize] as u32;
            let pos = &b.data.pos;
            assert_eq!(b.data.neg_tails.len(), pos.len().div_ceil(2) * 5);
            let mut used: Vec<u64> = pos
                .iter()
                .flat_map(|&(h, _, t)| [global(h), global(t)])
                .chain(b.data.neg_tails.iter().chain(&b.data.neg_heads).map(|&l| global(l)))
                .map(u64::from)
                .collect();
            used.sort();
            used.dedup();
            assert_eq!(used, b.rows);
            let first = b.id as usize % 3 * 4;
            assert!(
                pos.iter()
                    .zip(&epoch[first..])
                    .all(|(&(h, r, t), tr)| { (global(h), r, global(t)) == (tr.h, tr.r, tr.t) })
            );
        }
    }

    #[test]
    fn the_streamed_epoch_is_the_collected_one() {
        let s = sampling();
        let train = train();
        for epoch in 0..3 {
            let order = s.epoch_order(&train, epoch);
            let perm = s.epoch_permutation(train.len(), epoch);
            assert!(perm.iter().zip(&order).all(|(&i, t)| train[i as usize] == *t));
            let mut loader = s.epoch(&train, epoch);
            assert_eq!((loader.len(), loader.first_id()), (3, 3 * epoch as u64));
            let by_index: Vec<_> = (0..4).map(|i| loader.get(i)).collect();
            let streamed: Vec<_> = loader.collect();
            // Built from the order, not from file order: a loader that skipped the shuffle
            // would differ here.
            let by_hand: Vec<_> = order
                .chunks(4)
                .enumerate()
                .map(|(i, p)| s.batch(s.batch_id(train.len(), epoch, i), p))
                .collect();
            assert_eq!(streamed, by_hand);
            assert_eq!(
                by_index[..3].iter().cloned().map(Option::unwrap).collect::<Vec<_>>(),
                by_hand
            );
            assert_eq!(by_index[3], None);
        }
    }

    #[test]
    fn batch_negatives_come_from_the_batch_own_positives() {
        let s = Sampling { neg_sampling: NegSampling::Batch, ..sampling() };
        for b in s.epoch_batches(&train(), 0) {
            let global = |l: &u32| b.rows[*l as usize] as u32;
            let tails: Vec<u32> = b.data.pos.iter().map(|p| global(&p.2)).collect();
            let heads: Vec<u32> = b.data.pos.iter().map(|p| global(&p.0)).collect();
            assert!(b.data.neg_tails.iter().all(|l| tails.contains(&global(l))));
            assert!(b.data.neg_heads.iter().all(|l| heads.contains(&global(l))));
            // No row beyond the positives' own: the negatives cost no extra reads.
            assert_eq!(b.rows.len(), 2 * b.data.pos.len());
        }
    }

    /// Each chunk side lists its `sampling`'s negatives, exactly those drawn without in-batch
    /// ones, then `b` in-batch ones among the batch's positives' entities of that side; every
    /// row is one the batch reads without them.
    fn check_in_batch_negatives(base: Sampling, b: usize) {
        let s = Sampling { batch_negatives: b, ..base };
        assert_eq!(s.negatives_per_chunk(), base.negatives + b);
        for (with, without) in
            s.epoch_batches(&train(), 0).iter().zip(base.epoch_batches(&train(), 0))
        {
            assert_eq!(with.rows, without.rows, "in-batch negatives read no rows of their own");
            assert_eq!(with.data.negatives, base.negatives + b);
            assert_eq!(with.data.laid_out, without.data.laid_out);
            let global = |batch: &Batch<TripleBatch>, l: u32| batch.rows[l as usize];
            let ends: Vec<[u64; 2]> =
                with.data.pos.iter().map(|p| [global(with, p.0), global(with, p.2)]).collect();
            for ci in 0..with.data.pos.len().div_ceil(base.chunk) {
                let (wt, wh) = with.data.chunk_negatives(ci);
                let (ot, oh) = without.data.chunk_negatives(ci);
                for (side, w, o) in [(1, wt, ot), (0, wh, oh)] {
                    assert_eq!(w.len(), base.negatives + b);
                    let (first, rest) = w.split_at(base.negatives);
                    assert_eq!(first, o, "the other negatives are drawn as before");
                    for &l in rest {
                        assert!(ends.iter().any(|e| e[side] == global(with, l)), "not in batch");
                    }
                }
            }
        }
        // The in-batch draws are seeded: some chunk of some batch draws two different entities.
        let varied = s.epoch_batches(&train(), 0).iter().any(|batch| {
            let tail = &batch.data.chunk_negatives(0).0[base.negatives..];
            tail.iter().any(|&l| l != tail[0])
        });
        assert!(varied, "in-batch negatives all alike");
    }

    #[test]
    fn uniform_and_in_batch_negatives_share_a_batch() {
        check_in_batch_negatives(sampling(), 3);
        check_in_batch_negatives(Sampling { neg_sampling: NegSampling::Batch, ..sampling() }, 4);
    }

    #[test]
    fn laid_out_negatives_take_in_batch_ones_after_their_own() {
        let laid = Sampling { neg_sampling: NegSampling::Distinct, negatives: 2, ..sampling() };
        check_in_batch_negatives(laid, 3);
    }
}
