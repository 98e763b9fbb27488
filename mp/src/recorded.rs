//! What a node's forward keeps for its backward, keyed by the message state (§4: a PPT "records
//! the activation keyed by state"; `Phi` remembers the origin, `Concat` the widths).

use std::collections::HashMap;

use crate::error::MpError;
use crate::message::Payload;
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

    /// Take the record of `state`'s forward for the backward of gradient `g`: the opening of
    /// every backward that reads what its forward saved. `g` must have the shape `dim` computes
    /// from the record (the forward's output shape), or [`MpError::Shape`] names both.
    ///
    /// ```
    /// use ordo_mp::{State, recorded::Recorded};
    /// let mut r = Recorded::new("Relu");
    /// r.insert(State::new(1), ndarray::Array2::<f32>::zeros((2, 3)));
    /// let g = ndarray::Array2::<f32>::zeros((3, 2));
    /// assert!(r.take_for(&State::new(1), &g, |x| x.dim()).is_err());
    /// ```
    pub fn take_for(
        &mut self,
        state: &State,
        g: &Payload,
        dim: impl FnOnce(&T) -> (usize, usize),
    ) -> Result<T, MpError> {
        let record = self.take(state)?;
        let want = dim(&record);
        if g.dim() != want {
            return Err(MpError::Shape {
                kind: self.kind,
                detail: format!("gradient {:?}, its forward's output {want:?}", g.dim()),
            });
        }
        Ok(record)
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
