//! `Bcast`: sends one message to several successors.

use crate::node::prelude::*;

/// Forward: a copy on every output. Backward: waits for the gradients of all outputs for a
/// state (the multi-child cache) and sends their sum, in output order, to the input.
#[derive(Debug)]
pub struct Bcast {
    outputs: usize,
    cache: Gather,
}

impl Bcast {
    /// A broadcast to `outputs` successors.
    ///
    /// ```
    /// assert_eq!(ordo_mp::IrNode::outputs(&ordo_mp::nodes::Bcast::new(3)), 3);
    /// ```
    pub fn new(outputs: usize) -> Bcast {
        Bcast { outputs, cache: Gather::default() }
    }
}

/// The sum of equally shaped payloads, in order.
pub(crate) fn sum(kind: &'static str, parts: Vec<Payload>) -> Result<Payload, MpError> {
    let mut it = parts.into_iter();
    let mut acc = it.next().ok_or(MpError::Shape { kind, detail: "nothing to sum".into() })?;
    for p in it {
        if p.dim() != acc.dim() {
            return Err(MpError::Shape {
                kind,
                detail: format!("{:?} vs {:?}", p.dim(), acc.dim()),
            });
        }
        acc += &p;
    }
    Ok(acc)
}

impl IrNode for Bcast {
    fn signature(&self) -> Signature {
        Signature { kind: "Bcast", inputs: 1, outputs: self.outputs }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        e.forward_each(&state, (0..self.outputs).map(|_| x.clone()));
        Ok(())
    }
    fn backward(
        &mut self,
        port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        if let Some(parts) = self.cache.add("Bcast", state.clone(), port, self.outputs, g)? {
            e.backward(0, state, sum("Bcast", parts)?);
        }
        Ok(())
    }
    fn pending(&self) -> usize {
        self.cache.len()
    }
}
