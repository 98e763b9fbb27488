//! The block partition of paper 003 (§4, "Block Partitioned Subgradients"): the model's layers
//! assigned to `c` blocks by roughly equal *division of weights*, each block a run of whole
//! consecutive layers (layer-aligned), so block `b`'s restricted backpropagation stops at the
//! lowest layer of block `b`.

use super::SgdError;
use std::ops::Range;

/// `c` blocks of consecutive layers covering the parameter vector.
///
/// Invariant: the blocks are non-empty runs of whole layers, in layer order, and together they
/// cover every parameter exactly once (block `b`'s words are [`range(b)`](Self::range)). Layer
/// `l`'s parameters are the words `offset(l)..offset(l + 1)` (the layout of
/// [`LayeredModel`](super::LayeredModel)).
///
/// ```
/// use ordo::sgd::Blocks;
/// // An MLP 784-128-10: layer 0 has 100,480 weights, layer 1 has 1,290.
/// let b = Blocks::by_weight(&[100_480, 1_290], 2)?;
/// assert_eq!(b.range(0), 0..100_480);
/// assert_eq!(b.lowest_layer(1), 1);
/// # Ok::<(), ordo::sgd::SgdError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// `offsets[l]` = first word of layer `l`; `offsets[layers]` = number of parameters.
    offsets: Vec<usize>,
    /// `first_layer[b]` = lowest layer of block `b`; `first_layer[c]` = number of layers.
    first_layer: Vec<usize>,
}

impl Blocks {
    /// Partition layers of `layer_sizes` parameters (input layer first) into `c` blocks whose
    /// weights are as close as the layer boundaries allow to `total / c` each: boundary `k` is
    /// put at the layer boundary nearest to `k · total / c`, keeping at least one layer per block.
    pub fn by_weight(layer_sizes: &[usize], c: usize) -> Result<Self, SgdError> {
        if c == 0 {
            return Err(SgdError::NoWorkers);
        }
        if c > layer_sizes.len() {
            return Err(SgdError::TooManyBlocks { blocks: c, layers: layer_sizes.len() });
        }
        let mut offsets = vec![0usize];
        for &s in layer_sizes {
            offsets.push(offsets[offsets.len() - 1] + s);
        }
        let layers = layer_sizes.len();
        let total = offsets[layers] as f64;
        let mut first_layer = vec![0usize];
        for k in 1..c {
            let prev = first_layer[k - 1];
            let target = total * k as f64 / c as f64;
            // Boundary l: blocks so far end before layer l; leave c − k layers for the rest.
            let best = (prev + 1..=layers - (c - k))
                .min_by(|&a, &b| {
                    let da = (offsets[a] as f64 - target).abs();
                    let db = (offsets[b] as f64 - target).abs();
                    da.total_cmp(&db)
                })
                .unwrap_or(prev + 1);
            first_layer.push(best);
        }
        first_layer.push(layers);
        Ok(Self { offsets, first_layer })
    }

    /// One block of one layer of `n` parameters: the whole vector, as paper 001's Hogwild
    /// store holds it.
    pub fn whole(n: usize) -> Self {
        Self { offsets: vec![0, n], first_layer: vec![0, 1] }
    }

    /// Number of blocks `c`.
    pub fn len(&self) -> usize {
        self.first_layer.len() - 1
    }

    /// `true` when there are no blocks (never, for a partition built by [`by_weight`](Self::by_weight)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.offsets[self.layers()]
    }

    /// The words of block `b`.
    pub fn range(&self, b: usize) -> Range<usize> {
        self.offsets[self.first_layer[b]]..self.offsets[self.first_layer[b + 1]]
    }

    /// The lowest layer of block `b`: where its restricted backpropagation stops.
    pub fn lowest_layer(&self, b: usize) -> usize {
        self.first_layer[b]
    }

    /// The first word of layer `l` (`l = layers()` gives the number of parameters).
    pub fn offset(&self, l: usize) -> usize {
        self.offsets[l]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_layer_aligned_and_cover_every_word() {
        // The CNN of ordo-train: conv1 156, conv2 1812, dense 12352, dense 650.
        let b = Blocks::by_weight(&[156, 1812, 12352, 650], 2).unwrap();
        assert_eq!((b.range(0), b.range(1)), (0..1968, 1968..14970));
        assert_eq!((b.lowest_layer(0), b.lowest_layer(1)), (0, 2));
        let b = Blocks::by_weight(&[10, 10, 10, 10], 4).unwrap();
        assert_eq!((0..4).map(|k| b.range(k)).collect::<Vec<_>>(), [0..10, 10..20, 20..30, 30..40]);
        let b = Blocks::by_weight(&[1, 1, 100], 3).unwrap();
        assert_eq!(b.lowest_layer(2), 2, "every block keeps at least one layer");
        assert_eq!(b.num_params(), 102);
    }

    #[test]
    fn more_blocks_than_layers_is_an_error() {
        assert_eq!(
            Blocks::by_weight(&[5, 5], 3),
            Err(SgdError::TooManyBlocks { blocks: 3, layers: 2 })
        );
        assert_eq!(Blocks::by_weight(&[5], 0), Err(SgdError::NoWorkers));
    }
}
