//! `Concat`: joins the payloads of several parents with the same state, column-wise.

use crate::node::prelude::*;

/// Forward: waits for all inputs' payloads for a state, then emits `[x₀ | x₁ | …]` and records
/// the widths. Backward: splits the gradient by those widths, one backward per input.
#[derive(Debug)]
pub struct Concat {
    inputs: usize,
    cache: Gather,
    widths: Recorded<Vec<usize>>,
}

impl Concat {
    /// A concatenation of `inputs` parents.
    ///
    /// ```
    /// assert_eq!(ordo_mp::IrNode::inputs(&ordo_mp::nodes::Concat::new(2)), 2);
    /// ```
    pub fn new(inputs: usize) -> Concat {
        Concat { inputs, cache: Gather::default(), widths: Recorded::new("Concat") }
    }
}

impl IrNode for Concat {
    fn signature(&self) -> Signature {
        Signature { kind: "Concat", inputs: self.inputs, outputs: 1 }
    }
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let Some(parts) = self.cache.add("Concat", state.clone(), port, self.inputs, x)? else {
            return Ok(());
        };
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        let y = ndarray::concatenate(ndarray::Axis(1), &views)
            .map_err(|err| MpError::Shape { kind: "Concat", detail: err.to_string() })?;
        e.forward_keeping(&mut self.widths, state, parts.iter().map(|p| p.ncols()).collect(), y);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        // Any number of rows: only the columns are split.
        let widths = self.widths.take_for(&state, &g, |w| (g.nrows(), w.iter().sum()))?;
        let starts = widths.iter().scan(0, |at, w| {
            *at += w;
            Some(*at - w)
        });
        let parts =
            starts.zip(&widths).map(|(at, w)| g.slice(ndarray::s![.., at..at + w]).to_owned());
        e.backward_each(&state, parts);
        Ok(())
    }
    fn pending(&self) -> usize {
        self.cache.len() + self.widths.len()
    }
}
