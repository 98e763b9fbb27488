//! `Phi`: the join of several control-flow paths.

use crate::mutation::{self, Mutant};

use crate::node::prelude::*;

/// Forward: passes a message from any input to the output, recording the input it came from
/// keyed by its state. Backward: sends the gradient to exactly that recorded input and forgets
/// the record — so every forward through a `Phi` gets its one backward on the edge it came from.
#[derive(Debug)]
pub struct Phi {
    inputs: usize,
    origin: Recorded<usize>,
    latest: usize,
}

impl Phi {
    /// A join of `inputs` paths.
    ///
    /// ```
    /// assert_eq!(ordo_mp::IrNode::inputs(&ordo_mp::nodes::Phi::new(2)), 2);
    /// ```
    pub fn new(inputs: usize) -> Phi {
        Phi { inputs, origin: Recorded::new("Phi"), latest: 0 }
    }
}

impl IrNode for Phi {
    fn signature(&self) -> Signature {
        Signature { kind: "Phi", inputs: self.inputs, outputs: 1 }
    }
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        if e.train {
            self.origin.insert(state.clone(), port);
        }
        self.latest = port;
        e.forward(0, state, x);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let origin = self.origin.take(&state)?;
        let to = if mutation::active(Mutant::AmpPhiForgetsOrigin) { self.latest } else { origin };
        e.backward(to, state, g);
        Ok(())
    }
    fn pending(&self) -> usize {
        self.origin.len()
    }
}
