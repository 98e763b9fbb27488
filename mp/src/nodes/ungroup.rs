//! `Ungroup`: splits a payload into a stream of messages tagged with a new loop counter.

use std::collections::HashMap;

use crate::node::prelude::*;

/// Forward: splits the payload's rows into `state.len` equal chunks and emits chunk `t` with
/// the loop counter `t` pushed onto the state (e.g. the token embeddings of a sequence, time
/// major). Backward: waits for the gradients of all chunks of the instance and emits them
/// stacked back in order with the counter popped.
#[derive(Debug, Default)]
pub struct Ungroup {
    chunks: HashMap<State, usize>,
    cache: Gather,
}

impl Ungroup {
    /// An ungroup node.
    pub fn new() -> Ungroup {
        Ungroup::default()
    }
}

/// Stack equally wide payloads row-wise.
pub(crate) fn stack(kind: &'static str, parts: &[Payload]) -> Result<Payload, MpError> {
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    ndarray::concatenate(ndarray::Axis(0), &views)
        .map_err(|err| MpError::Shape { kind, detail: err.to_string() })
}

impl IrNode for Ungroup {
    fn signature(&self) -> Signature {
        Signature { kind: "Ungroup", inputs: 1, outputs: 1 }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let n = state.len as usize;
        if n == 0 || !x.nrows().is_multiple_of(n) {
            return Err(MpError::Shape {
                kind: "Ungroup",
                detail: format!("{} rows in {n} chunks", x.nrows()),
            });
        }
        let k = x.nrows() / n;
        if e.train {
            self.chunks.insert(state.clone(), n);
        }
        for t in 0..n {
            e.forward(
                0,
                state.clone().push(t as u32),
                x.slice(ndarray::s![t * k..(t + 1) * k, ..]).to_owned(),
            );
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
        let t = state
            .counter()
            .ok_or_else(|| MpError::BadState { kind: "Ungroup", state: state.clone() })?
            as usize;
        let base = state.pop();
        let n = *self
            .chunks
            .get(&base)
            .ok_or_else(|| MpError::NoForward { kind: "Ungroup", state: base.clone() })?;
        if let Some(parts) = self.cache.add("Ungroup", base.clone(), t, n, g)? {
            self.chunks.remove(&base);
            e.backward(0, base, stack("Ungroup", &parts)?);
        }
        Ok(())
    }
    fn pending(&self) -> usize {
        self.chunks.len() + self.cache.len()
    }
}
