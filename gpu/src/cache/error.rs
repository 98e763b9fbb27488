//! The validation cache's typed errors (its own module, so that the cache's parts can name
//! them without importing the cache).

use thiserror::Error;

/// A bad argument to a validation cache, or a full cache. The cache is unchanged when one is
/// returned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The insert would hold more live entries than the cache was sized for.
    #[error(
        "validation cache overflow: {live} live entries + {incoming} new rows exceed the capacity \
         of {capacity} (size the cache from a larger in-flight bound)"
    )]
    Overflow {
        /// Live entries before the insert.
        live: usize,
        /// Rows of the batch not already in the cache.
        incoming: usize,
        /// Maximum number of live entries.
        capacity: usize,
    },
    /// The sizing arguments overflow `usize` or are zero.
    #[error("validation cache sizing: {0}")]
    BadSize(&'static str),
    /// Batch rows must be strictly increasing (sorted, no duplicates).
    #[error("batch rows are not strictly increasing at index {index}")]
    RowsNotSorted {
        /// First index whose row is not above the previous one.
        index: usize,
    },
    /// A row id above [`MAX_ROW`](super::MAX_ROW).
    #[error("row id {row} is above the largest cacheable row id")]
    RowIdTooLarge {
        /// The offending row id.
        row: u64,
    },
    /// Insert timestamps must strictly increase (the computation order).
    #[error("insert timestamp {ts} is not above the previous insert's {last}")]
    TsNotIncreasing {
        /// The rejected timestamp.
        ts: u64,
        /// The previous insert's timestamp.
        last: u64,
    },
    /// A timestamp above [`MAX_TS`](super::MAX_TS).
    #[error("timestamp {ts} is too large for a version word")]
    TsTooLarge {
        /// The offending timestamp.
        ts: u64,
    },
    /// A batch buffer has the wrong length.
    #[error("{what} holds {got} elements, expected {expected}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
}
