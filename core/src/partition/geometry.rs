//! How rows split into partitions, and the bytes each takes on disk.

/// `rows` rows of `width` floats in `partitions` contiguous partitions of (nearly) equal size:
/// partition `p` holds rows `⌊p·rows/P⌋ .. ⌊(p+1)·rows/P⌋`. On disk a row is its version word
/// (8 bytes) and its floats (4 bytes each): values and optimizer state live in one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Rows of the table.
    pub rows: usize,
    /// Floats per row.
    pub width: usize,
    /// Partitions.
    pub partitions: usize,
}

impl Geometry {
    /// The first row of partition `p` (`p = P`: the number of rows).
    pub fn start(&self, p: usize) -> usize {
        ((p as u128 * self.rows as u128) / self.partitions as u128) as usize
    }

    /// Rows in partition `p`.
    pub fn len(&self, p: usize) -> usize {
        self.start(p + 1) - self.start(p)
    }

    /// The partition of `row` (`row < rows`).
    pub fn partition_of(&self, row: usize) -> usize {
        let mut p = ((row as u128 * self.partitions as u128) / self.rows as u128) as usize;
        while self.start(p + 1) <= row {
            p += 1;
        }
        while self.start(p) > row {
            p -= 1;
        }
        p
    }

    /// Bytes of one row on disk.
    pub fn row_bytes(&self) -> usize {
        8 + 4 * self.width
    }

    /// Bytes of partition `p`'s file.
    pub fn file_len(&self, p: usize) -> u64 {
        (self.len(p) * self.row_bytes()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_in_exactly_the_partition_that_covers_it() {
        for rows in 1..40 {
            for partitions in 1..=rows.min(9) {
                let g = Geometry { rows, width: 3, partitions };
                assert_eq!(g.start(partitions), rows);
                for row in 0..rows {
                    let p = g.partition_of(row);
                    assert!(g.start(p) <= row && row < g.start(p + 1), "{g:?} row {row}");
                }
                assert!((0..partitions).all(|p| g.len(p) >= 1));
            }
        }
    }
}
