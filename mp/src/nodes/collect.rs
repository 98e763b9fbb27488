//! `Collect`: the inverse of `Distribute`, regrouping parts into one payload.

use crate::node::prelude::*;
use crate::nodes::distribute::{Assign, merge, partition};

/// Forward: waits for all parts of a state and merges their rows back by the assignment.
/// Backward: partitions the gradient the same way, one backward per input.
pub struct Collect {
    parts: usize,
    assign: Assign,
    cache: Gather,
}

impl Collect {
    /// A collect node over `parts` inputs with row assignment `assign` (the `Distribute`'s).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let c = ordo_mp::nodes::Collect::new(2, Arc::new(|_s: &ordo_mp::State, r: usize| r % 2));
    /// assert_eq!(ordo_mp::IrNode::inputs(&c), 2);
    /// ```
    pub fn new(parts: usize, assign: Assign) -> Collect {
        Collect { parts, assign, cache: Gather::default() }
    }
}

impl IrNode for Collect {
    fn signature(&self) -> Signature {
        Signature { kind: "Collect", inputs: self.parts, outputs: 1 }
    }
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        if let Some(parts) = self.cache.add("Collect", state.clone(), port, self.parts, x)? {
            let merged = merge("Collect", &parts, &state, &self.assign)?;
            e.forward(0, state, merged);
        }
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        e.backward_each(&state, partition("Collect", &g, &state, &self.assign, self.parts)?);
        Ok(())
    }
    fn pending(&self) -> usize {
        self.cache.len()
    }
}
