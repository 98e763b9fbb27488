//! The one word every part of the crate shares: which node of a graph.

/// A node's index in its graph (the builder hands them out in order of `add`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);
