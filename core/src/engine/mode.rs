//! The engine's modes: how asynchronous the pipeline is, and what each promises.

/// How asynchronous the pipeline is, and what it promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Mode {
    /// One batch in flight: read, step, write, then the next. Equals the sequential order.
    Sync,
    /// No validation and no timestamps: the lost-update baseline (Hogwild, Marius, DGL-KE).
    /// Promises nothing about the result.
    Async(AsyncWrite),
    /// Marius' staleness bound: at most `k` batches in flight, no validation. Equals the
    /// sequential order only for `k = 1`.
    Bounded(usize),
    /// Optimistic Asynchrony Control: full pipelining, and the result of the sequential order.
    Oac,
}

/// How `Async` writes a stepped row back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AsyncWrite {
    /// Overwrite the row (the last writer wins).
    Overwrite,
    /// Add the step's delta (`new − read`) float by float, like Marius' `indexAdd`.
    AddDelta,
}

impl Mode {
    /// Whether this mode promises the result of its recorded computation order.
    pub fn is_equivalent(self) -> bool {
        matches!(self, Mode::Sync | Mode::Oac | Mode::Bounded(1))
    }

    /// Whether batches register in the outstanding set and stamp their writes.
    pub(crate) fn timestamped(self) -> bool {
        !matches!(self, Mode::Async(_))
    }
}
