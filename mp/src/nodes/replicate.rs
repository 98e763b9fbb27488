//! `Replicate`: the simple variant of `Ungroup` (§4).

use crate::node::prelude::*;
use crate::nodes::bcast::sum;

/// Forward: `copies` copies of the message, copy `i` with loop counter `i` pushed. Backward:
/// waits for all copies' gradients and sends their sum with the counter popped.
#[derive(Debug)]
pub struct Replicate {
    copies: usize,
    cache: Gather,
}

impl Replicate {
    /// A replicate node making `copies` copies.
    ///
    /// ```
    /// let r = ordo_mp::nodes::Replicate::new(3);
    /// assert_eq!(ordo_mp::IrNode::outputs(&r), 1);
    /// ```
    pub fn new(copies: usize) -> Replicate {
        Replicate { copies, cache: Gather::default() }
    }
}

impl IrNode for Replicate {
    fn signature(&self) -> Signature {
        Signature { kind: "Replicate", inputs: 1, outputs: 1 }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        for i in 0..self.copies {
            e.forward(0, state.clone().push(i as u32), x.clone());
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
        let i = state
            .counter()
            .ok_or_else(|| MpError::BadState { kind: "Replicate", state: state.clone() })?
            as usize;
        let base = state.pop();
        if i >= self.copies {
            return Err(MpError::BadState { kind: "Replicate", state: base });
        }
        if let Some(parts) = self.cache.add("Replicate", base.clone(), i, self.copies, g)? {
            e.backward(0, base, sum("Replicate", parts)?);
        }
        Ok(())
    }
    fn pending(&self) -> usize {
        self.cache.len()
    }
}
