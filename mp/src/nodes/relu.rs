//! `Relu`: a non-parameterized payload transform.

use crate::node::prelude::*;

/// `y = max(x, 0)`; keeps the input keyed by state for the backward `g ⊙ [x > 0]`. The state
/// passes through unchanged in both directions.
#[derive(Debug)]
pub struct Relu {
    acts: Recorded<Payload>,
}

impl Relu {
    /// A ReLU node.
    pub fn new() -> Relu {
        Relu { acts: Recorded::new("Relu") }
    }
}

impl Default for Relu {
    fn default() -> Relu {
        Relu::new()
    }
}

impl IrNode for Relu {
    fn signature(&self) -> Signature {
        Signature { kind: "Relu", inputs: 1, outputs: 1 }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let y = x.mapv(|v| v.max(0.0));
        e.forward_keeping(&mut self.acts, state, x, y);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        mut g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let x = self.acts.take_for(&state, &g, |x| x.dim())?;
        g.zip_mut_with(&x, |g, &x| {
            if x <= 0.0 {
                *g = 0.0;
            }
        });
        e.backward(0, state, g);
        Ok(())
    }
    fn pending(&self) -> usize {
        self.acts.len()
    }
}
