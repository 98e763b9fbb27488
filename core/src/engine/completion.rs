//! A batch the writers are done with, as a session hands it back.

/// A batch the writers are done with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The batch's id.
    pub batch_id: u64,
    /// The store version its rows were written with (`ts_base + ts`).
    pub version: u64,
    /// Whether every row write landed (`false`: the pipeline stopped while writing it; the
    /// error returned by [`Session::finish`](crate::engine::Session::finish) lists it as
    /// unwritten).
    pub written: bool,
}
