//! What a node's forward keeps for its backward, keyed by the message state (§4: a PPT "records
//! the activation keyed by state"; `Phi` remembers the origin, `Concat` the widths).

use std::collections::HashMap;

use crate::error::MpError;
use crate::state::State;

/// Records of one node, by state.
///
/// Invariant: each record is taken exactly once, by the backward of the forward that made it
/// (states are unique per run), so a complete run leaves none — which
/// [`IrNode::pending`](crate::IrNode::pending) reports and the runtime's leak check enforces.
///
/// ```
/// use ordo_mp::{State, recorded::Recorded};
/// let mut r = Recorded::new("Relu");
/// r.insert(State::new(1), 5);
/// assert_eq!(r.take(&State::new(1)).unwrap(), 5);
/// assert!(r.take(&State::new(1)).is_err());
/// assert!(r.is_empty());
/// ```
#[derive(Debug)]
pub struct Recorded<T> {
    kind: &'static str,
    map: HashMap<State, T>,
}

impl<T> Recorded<T> {
    /// No records yet, for a node of kind `kind` (named in errors).
    pub fn new(kind: &'static str) -> Recorded<T> {
        Recorded { kind, map: HashMap::new() }
    }

    /// Record `v` for the forward with state `state`.
    pub fn insert(&mut self, state: State, v: T) {
        self.map.insert(state, v);
    }

    /// Take the record of `state`'s forward, or [`MpError::NoForward`] if there is none.
    pub fn take(&mut self, state: &State) -> Result<T, MpError> {
        self.map
            .remove(state)
            .ok_or_else(|| MpError::NoForward { kind: self.kind, state: state.clone() })
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
