//! The multi-parent cache (§3): a node with several parents (or, backward, several children)
//! holds each payload keyed by state and port until all ports' payloads for that state arrived.

use std::collections::HashMap;

use crate::error::MpError;
use crate::message::Payload;
use crate::state::State;

/// Payloads waiting for their siblings. An entry exists exactly while some but not all of a
/// state's `n` ports have arrived; completing it removes it, so a run in which every expected
/// message arrives ends with the cache empty (the *no cache entry leaks* invariant).
#[derive(Debug, Default)]
pub struct Gather {
    waiting: HashMap<State, Vec<Option<Payload>>>,
}

impl Gather {
    /// Add the payload of `port` (of `n`) for `state`; all `n` payloads in port order once the
    /// last arrives. A port arriving twice for one state is an error.
    ///
    /// ```
    /// use ordo_mp::{State, gather::Gather};
    /// let mut g = Gather::default();
    /// let z = ndarray::Array2::<f32>::zeros((1, 1));
    /// assert!(g.add("t", State::new(0), 1, 2, z.clone()).unwrap().is_none());
    /// assert_eq!(g.add("t", State::new(0), 0, 2, z).unwrap().unwrap().len(), 2);
    /// assert_eq!(g.len(), 0);
    /// ```
    pub fn add(
        &mut self,
        kind: &'static str,
        state: State,
        port: usize,
        n: usize,
        payload: Payload,
    ) -> Result<Option<Vec<Payload>>, MpError> {
        if n == 1 {
            return Ok(Some(vec![payload]));
        }
        let slots = self.waiting.entry(state.clone()).or_insert_with(|| vec![None; n]);
        if port >= slots.len() || slots[port].is_some() {
            return Err(MpError::Unexpected { kind, what: "second message on one port", state });
        }
        slots[port] = Some(payload);
        if slots.iter().all(Option::is_some) {
            let slots = self.waiting.remove(&state).unwrap_or_default();
            Ok(Some(slots.into_iter().flatten().collect()))
        } else {
            Ok(None)
        }
    }

    /// States waiting now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}
