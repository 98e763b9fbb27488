//! What one batch of the chunked step sends to the device: its ids only, packed in one `u32`
//! buffer of a fixed layout ([`ChunkedIds`]), sized once for the largest batch
//! ([`ChunkLimits`]). Built on the host by the loader or a reader (kilobytes per batch), never
//! on the device thread; the step's buffers are sized from the same limits, so a batch that
//! fits them never allocates.
//!
//! The contribution lists fix the order of every gradient sum (see `src/kernels/kge_chunked.cu`):
//! the canonical order is chunk, side, then per positive its query's entity and its target,
//! then the side's negatives; each entity row's and each relation's list keeps that order (a
//! stable counting sort).

use super::{ChunkedBatch, KgeError, KgeShape};
use crate::blas::ChunkShape;

/// The contribution kinds of an entity row's list (the low 2 bits of an item; the slot above).
pub(crate) const KIND_QUERY: u32 = 0;
/// See [`KIND_QUERY`]: the target of a row slot.
pub(crate) const KIND_TARGET: u32 = 1;
/// See [`KIND_QUERY`]: a negative slot.
pub(crate) const KIND_NEGATIVE: u32 = 2;

/// The fixed shape the device step is sized for: every batch up to these sizes runs in the same
/// buffers and through the same cuBLAS calls (a smaller batch is padded with zero rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLimits {
    /// Positives per batch at most.
    pub max_positives: usize,
    /// Positives per chunk (`P`).
    pub chunk: usize,
    /// Shared negatives per chunk and side (`n`).
    pub negatives: usize,
    /// Entity rows per batch at most.
    pub max_rows: usize,
    /// Relations (all of them; their rows stay on the device).
    pub relations: usize,
}

impl ChunkLimits {
    /// Exactly `batch`'s sizes (the host port's shape).
    pub fn of(batch: &ChunkedBatch, relations: usize) -> Self {
        ChunkLimits {
            max_positives: batch.positives.len(),
            chunk: batch.chunk,
            negatives: batch.negatives,
            max_rows: batch.rows,
            relations,
        }
    }

    /// Chunks of the largest batch (`Cmax`).
    pub fn chunks(&self) -> usize {
        self.max_positives.div_ceil(self.chunk.max(1))
    }

    /// Row slots: `2 · Cmax · P` (per side-chunk, one per positive).
    pub fn slot_rows(&self) -> usize {
        2 * self.chunks() * self.chunk
    }

    /// Negative slots: `2 · Cmax · n`.
    pub fn negative_slots(&self) -> usize {
        2 * self.chunks() * self.negatives
    }

    /// The cuBLAS shape: both sides of every chunk as one strided batch of `2 · Cmax`.
    pub fn blas_shape(&self, dim: usize) -> ChunkShape {
        ChunkShape {
            chunks: 2 * self.chunks(),
            positives: self.chunk,
            negatives: self.negatives,
            dim,
        }
    }

    /// Offsets of the packed id buffer's parts: positives, negatives, entity offsets, entity
    /// items, relation offsets, relation items, and the end (its length).
    pub(crate) fn layout(&self) -> [usize; 7] {
        let parts = [
            3 * self.max_positives,
            self.negative_slots(),
            self.max_rows + 1,
            4 * self.max_positives + self.negative_slots(),
            self.relations + 1,
            2 * self.max_positives,
        ];
        let mut at = [0; 7];
        for (i, len) in parts.iter().enumerate() {
            at[i + 1] = at[i] + len;
        }
        at
    }

    /// `u32` words of a batch's packed ids.
    pub fn id_words(&self) -> usize {
        self.layout()[6]
    }

    /// Device bytes [`ChunkedKernels`](super::ChunkedKernels) allocates for these limits at
    /// embedding size `dim`, besides the relation rows: the slot buffers (Q, T, dQ, EC, RC;
    /// N, dN; S; g0; the losses), the ids and the cuBLAS workspace. What a run adds to its
    /// estimate before it allocates.
    pub fn device_bytes(&self, dim: usize) -> u64 {
        let [lq, ln, ls] = self.blas_shape(dim).lens();
        let floats = 5 * lq + 2 * ln + ls + 3 * self.slot_rows();
        ((floats + self.id_words()) * 4 + crate::blas::WORKSPACE_BYTES) as u64
    }

    /// The limits themselves are usable: a chunk of at least one positive, and slots whose
    /// items (`slot << 2`) fit a `u32`.
    pub fn check(&self) -> Result<(), KgeError> {
        let slots = self.slot_rows().max(self.negative_slots());
        if self.chunk == 0 || slots >= 1 << 30 || self.id_words() > u32::MAX as usize {
            return Err(KgeError::TooManyTriples(slots));
        }
        Ok(())
    }

    /// `batch` fits: its chunk and negatives are these, its positives and rows at most these.
    fn admit(&self, batch: &ChunkedBatch) -> Result<(), KgeError> {
        let over = [
            ("positives per chunk", batch.chunk, self.chunk, batch.chunk != self.chunk),
            ("negatives", batch.negatives, self.negatives, batch.negatives != self.negatives),
            (
                "positives",
                batch.positives.len(),
                self.max_positives,
                batch.positives.len() > self.max_positives,
            ),
            ("entity rows", batch.rows, self.max_rows, batch.rows > self.max_rows),
        ];
        match over.into_iter().find(|o| o.3) {
            Some((what, got, limit, _)) => Err(KgeError::OverLimits { what, got, limit }),
            None => Ok(()),
        }
    }
}

/// One batch's ids in the packed layout its [`ChunkLimits`] fix, with the sizes the kernels
/// take as arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedIds {
    limits: ChunkLimits,
    positives: usize,
    side_chunks: usize,
    rows: usize,
    words: Vec<u32>,
}

impl ChunkedIds {
    /// Check `batch` against `shape` and `limits`, and pack its ids and contribution lists.
    pub fn build(
        batch: &ChunkedBatch,
        shape: &KgeShape,
        limits: &ChunkLimits,
    ) -> Result<Self, KgeError> {
        batch.check(shape)?;
        limits.check()?;
        limits.admit(batch)?;
        if limits.relations != shape.relations {
            let (got, limit) = (shape.relations, limits.relations);
            return Err(KgeError::OverLimits { what: "relations", got, limit });
        }
        let at = limits.layout();
        let mut words = vec![0u32; at[6]];
        let (p, n) = (batch.chunk, batch.negatives);
        for (k, &[h, r, t]) in batch.positives.iter().enumerate() {
            words[at[0] + 3 * k..][..3].copy_from_slice(&[h, r, t]);
        }
        words[at[1]..][..batch.chunk_negatives.len()].copy_from_slice(&batch.chunk_negatives);
        let side_chunks = 2 * batch.chunks();
        // The canonical order (module docs), as (owner, item) pairs.
        let mut ent = Vec::with_capacity(4 * batch.positives.len() + side_chunks * n);
        let mut rel = Vec::with_capacity(2 * batch.positives.len());
        for (c, pos) in batch.positives.chunks(p).enumerate() {
            for side in 0..2 {
                let sc = 2 * c + side;
                for (i, &[h, r, t]) in pos.iter().enumerate() {
                    let slot = (sc * p + i) as u32;
                    let (e, target) = if side == 0 { (h, t) } else { (t, h) };
                    ent.push((e, slot << 2 | KIND_QUERY));
                    ent.push((target, slot << 2 | KIND_TARGET));
                    rel.push((r, slot));
                }
                for j in 0..n {
                    let slot = (sc * n + j) as u32;
                    ent.push((batch.chunk_negatives[slot as usize], slot << 2 | KIND_NEGATIVE));
                }
            }
        }
        for (owners, list, off, items) in
            [(batch.rows, &ent, at[2], at[3]), (shape.relations, &rel, at[4], at[5])]
        {
            let (offsets, sorted) = super::csr(owners, list.iter().copied());
            words[off..][..offsets.len()].copy_from_slice(&offsets);
            words[items..][..sorted.len()].copy_from_slice(&sorted);
        }
        Ok(ChunkedIds {
            limits: *limits,
            positives: batch.positives.len(),
            side_chunks,
            rows: batch.rows,
            words,
        })
    }

    /// The limits the ids are packed for.
    pub fn limits(&self) -> &ChunkLimits {
        &self.limits
    }

    /// The packed words (what is uploaded).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The batch's positives.
    pub fn positives(&self) -> usize {
        self.positives
    }

    /// The batch's side-chunks (`2 ×` its chunks).
    pub fn side_chunks(&self) -> usize {
        self.side_chunks
    }

    /// The batch's entity rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    fn part(&self, i: usize) -> &[u32] {
        let at = self.limits.layout();
        &self.words[at[i]..at[i + 1]]
    }

    /// `(head row, relation, tail row)` of positive `k`.
    pub(crate) fn positive(&self, k: usize) -> [u32; 3] {
        let p = self.part(0);
        [p[3 * k], p[3 * k + 1], p[3 * k + 2]]
    }

    /// The entity row at negative slot `slot`.
    pub(crate) fn negative(&self, slot: usize) -> u32 {
        self.part(1)[slot]
    }

    /// Entity row `row`'s contribution items, in order.
    pub(crate) fn entity_items(&self, row: usize) -> &[u32] {
        let off = self.part(2);
        &self.part(3)[off[row] as usize..off[row + 1] as usize]
    }

    /// Relation `r`'s contributions (row slots), in order.
    pub(crate) fn relation_items(&self, r: usize) -> &[u32] {
        let off = self.part(4);
        &self.part(5)[off[r] as usize..off[r + 1] as usize]
    }

    /// The positive at row slot `row`, if the slot holds one: `(side, [h, r, t])`.
    pub(crate) fn slot_positive(&self, row: usize) -> Option<(usize, [u32; 3])> {
        let p = self.limits.chunk;
        let (sc, i) = (row / p, row % p);
        let k = sc / 2 * p + i;
        (k < self.positives && sc < self.side_chunks).then(|| (sc % 2, self.positive(k)))
    }

    /// The batch's loss from the rows' `(loss, L2 term)` pairs (`2 ×` row slots floats), summed
    /// in f64 in row-slot order (chunk, side, positive): the host port's and the device's.
    pub fn total_loss(&self, losses: &[f32]) -> f64 {
        (0..self.limits.slot_rows())
            .filter(|&row| self.slot_positive(row).is_some())
            .fold(0.0, |acc, row| {
                acc + (f64::from(losses[2 * row]) + f64::from(losses[2 * row + 1]))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::KgeModel;

    fn shape() -> KgeShape {
        KgeShape { model: KgeModel::DistMult, dim: 2, relations: 2 }
    }

    /// 3 positives in chunks of 2 (the last chunk short), 1 negative per side.
    fn batch() -> ChunkedBatch {
        ChunkedBatch {
            rows: 4,
            positives: vec![[0, 1, 1], [2, 0, 0], [3, 1, 2]],
            chunk: 2,
            negatives: 1,
            chunk_negatives: vec![3, 0, 1, 1],
        }
    }

    #[test]
    fn the_lists_follow_the_canonical_order() {
        let b = batch();
        let ids = ChunkedIds::build(&b, &shape(), &ChunkLimits::of(&b, 2)).unwrap();
        let item = |slot: u32, kind: u32| slot << 2 | kind;
        // Row slots: chunk 0 tail side 0, 1; head side 2, 3; chunk 1 tail 4 (5 empty), head 6.
        // Row 0: query of slot 0 (h), target of slot 1 (t of [2, 0, 0]), target of slot 2
        // (head side: h of [0, 1, 1]), query of slot 3 (head side: t of [2, 0, 0]), then
        // negative slot 1 (chunk 0's head negative).
        assert_eq!(
            ids.entity_items(0),
            [item(0, 0), item(1, 1), item(2, 1), item(3, 0), item(1, 2)]
        );
        assert_eq!(ids.entity_items(3), [item(0, 2), item(4, 0), item(6, 1)]);
        assert_eq!(ids.relation_items(0), [1, 3]);
        assert_eq!(ids.relation_items(1), [0, 2, 4, 6]);
        assert_eq!((ids.side_chunks(), ids.slot_positive(5)), (4, None));
        assert_eq!(ids.slot_positive(6), Some((1, [3, 1, 2])));
    }

    #[test]
    fn a_batch_over_the_limits_is_refused() {
        let b = batch();
        let mut limits = ChunkLimits::of(&b, 2);
        limits.max_positives = 2;
        assert_eq!(
            ChunkedIds::build(&b, &shape(), &limits),
            Err(KgeError::OverLimits { what: "positives", got: 3, limit: 2 })
        );
        let limits = ChunkLimits { chunk: 3, ..ChunkLimits::of(&b, 2) };
        assert!(matches!(
            ChunkedIds::build(&b, &shape(), &limits),
            Err(KgeError::OverLimits { what: "positives per chunk", .. })
        ));
        let limits = ChunkLimits { relations: 3, ..ChunkLimits::of(&b, 2) };
        assert!(ChunkedIds::build(&b, &shape(), &limits).is_err());
    }

    /// The throughput config (ComplEx dim 100, batches of 1,000 positives in chunks of 50, 100
    /// negatives a side, ≤ 6,000 rows, 18 relations): 2,000 row slots and 4,000 negative slots
    /// of 100 floats, 200,000 scores, 23,020 id words, 32 MiB of cuBLAS workspace: ≈ 40 MiB.
    #[test]
    fn the_device_bytes_of_the_throughput_config() {
        let limits = ChunkLimits {
            max_positives: 1_000,
            chunk: 50,
            negatives: 100,
            max_rows: 6_000,
            relations: 18,
        };
        assert_eq!((limits.slot_rows(), limits.negative_slots()), (2_000, 4_000));
        assert_eq!(limits.id_words(), 3_000 + 4_000 + 6_001 + 8_000 + 19 + 2_000);
        let floats = 5 * 200_000 + 2 * 400_000 + 200_000 + 3 * 2_000;
        assert_eq!(limits.device_bytes(100), ((floats + 23_020) * 4 + (32 << 20)) as u64);
        assert_eq!(limits.device_bytes(100) >> 20, 39);
    }

    /// A smaller batch packs into the larger limits' layout, the same length.
    #[test]
    fn a_short_batch_packs_into_the_full_layout() {
        let b = batch();
        let limits = ChunkLimits { max_positives: 8, max_rows: 10, ..ChunkLimits::of(&b, 2) };
        let ids = ChunkedIds::build(&b, &shape(), &limits).unwrap();
        assert_eq!(ids.words().len(), limits.id_words());
        assert_eq!(limits.slot_rows(), 16);
        assert_eq!(ids.relation_items(1), [0, 2, 4, 6]);
    }
}
