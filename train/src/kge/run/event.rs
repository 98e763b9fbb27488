//! What the training loop tells its observer.

use super::results::EpochStats;

/// What the loop tells its observer.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An epoch of `batches` batches starts.
    EpochStart {
        /// 1-based epoch.
        epoch: usize,
        /// Batches in it.
        batches: usize,
    },
    /// This many more batches were stepped.
    Batches(usize),
    /// An epoch ended and was evaluated.
    EpochEnd(&'a EpochStats),
}
