//! A KGE batch as ids only ([`ChunkedBatch`]): what the chunked step
//! ([`chunked_step`](super::chunked_step)) computes on and what [`ChunkedIds`](super::ChunkedIds)
//! packs for the device, in its own module so that the packing and the step both depend on it
//! and not on each other.

use super::{KgeBatch, KgeError, KgeShape};

/// A batch as ids only: positives `(head, relation, tail)` by row position, in chunks of
/// `chunk` (the last may be shorter), each chunk with `negatives` corrupted tails and
/// `negatives` corrupted heads shared by its positives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedBatch {
    /// Entity rows of the batch.
    pub rows: usize,
    /// `(head row, relation, tail row)` per positive.
    pub positives: Vec<[u32; 3]>,
    /// Positives per chunk (the last chunk may hold fewer).
    pub chunk: usize,
    /// Shared negatives per chunk and side.
    pub negatives: usize,
    /// Per chunk: its `negatives` tail rows, then its `negatives` head rows.
    pub chunk_negatives: Vec<u32>,
}

impl ChunkedBatch {
    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.positives.len().div_ceil(self.chunk.max(1))
    }

    /// Chunk `c`'s negatives of `side` (0: tails, 1: heads).
    fn side_negatives(&self, c: usize, side: usize) -> &[u32] {
        let n = self.negatives;
        &self.chunk_negatives[(2 * c + side) * n..(2 * c + side + 1) * n]
    }

    /// Check the ids against `shape` and the row count.
    pub fn check(&self, shape: &KgeShape) -> Result<(), KgeError> {
        let bad = || KgeError::BadGroup { triples: self.chunk_negatives.len(), group: self.chunk };
        if self.chunk == 0 || self.chunk_negatives.len() != self.chunks() * 2 * self.negatives {
            return Err(bad());
        }
        let rows = self.rows as u64;
        let row_ok = |i: u32| u64::from(i) < rows;
        let pos_ok = self
            .positives
            .iter()
            .all(|&[h, r, t]| row_ok(h) && row_ok(t) && (r as usize) < shape.relations);
        if !pos_ok || !self.chunk_negatives.iter().all(|&i| row_ok(i)) {
            return Err(bad());
        }
        Ok(())
    }

    /// The same batch as scored-triple groups: per positive, its tail group (the positive,
    /// then its chunk's corrupted tails), then its head group. The f64 reference and the
    /// present kernels take this form.
    pub fn groups(&self) -> KgeBatch {
        let mut triples = Vec::with_capacity(self.positives.len() * 2 * (self.negatives + 1));
        for (c, pos) in self.positives.chunks(self.chunk.max(1)).enumerate() {
            let (tails, heads) = (self.side_negatives(c, 0), self.side_negatives(c, 1));
            for &[h, r, t] in pos {
                triples.push([h, r, t]);
                triples.extend(tails.iter().map(|&e| [h, r, e]));
                triples.push([h, r, t]);
                triples.extend(heads.iter().map(|&e| [e, r, t]));
            }
        }
        KgeBatch { rows: self.rows, triples, group: self.negatives + 1 }
    }
}
