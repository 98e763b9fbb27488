//! Typed errors of the parameter manager's public API.

use thiserror::Error;

/// What can go wrong when a caller hands the parameter manager bad input or the transport fails.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PmError {
    /// A key outside `0..keys`.
    #[error("key {key} out of range (the table has {keys} keys)")]
    KeyOutOfRange {
        /// The key asked for.
        key: u64,
        /// Number of keys.
        keys: u64,
    },
    /// A value or update of the wrong length.
    #[error("row of length {got}, the table's width is {width}")]
    WrongWidth {
        /// Length given.
        got: usize,
        /// Floats per key.
        width: usize,
    },
    /// `push(keys, updates)` with `updates.len() != keys.len() * width`.
    #[error("{keys} keys but {updates} update floats (width {width})")]
    UpdateLength {
        /// Number of keys.
        keys: usize,
        /// Number of update floats.
        updates: usize,
        /// Floats per key.
        width: usize,
    },
    /// An intent whose end clock is not after its start clock.
    #[error("intent [{start}, {end}) is empty")]
    EmptyIntent {
        /// Start clock (inclusive).
        start: u64,
        /// End clock (exclusive).
        end: u64,
    },
    /// A cluster needs at least one node.
    #[error("a cluster needs at least one node")]
    NoNodes,
    /// A node id outside `0..nodes`.
    #[error("node {node} out of range ({nodes} nodes)")]
    NodeOutOfRange {
        /// The node asked for.
        node: usize,
        /// Number of nodes.
        nodes: usize,
    },
    /// A remote request got no answer in time.
    #[error("no answer from the owner within {0:?}")]
    NoAnswer(std::time::Duration),
    /// The transport is closed (a peer went away).
    #[error("transport closed: {0}")]
    Transport(String),
}
