//! `SoftmaxLoss`: the loss node, which turns the forward pass around.

use crate::node::prelude::*;

/// Softmax cross-entropy. Input 0: logits (`B × C`); input 1: labels (`B × 1`, class indices as
/// `f32`, from the controller). Forward, once both arrived: emits `[Σ loss, correct, B]` to its
/// output (the controller) and, when training, the gradient of the *mean* loss back on input 0.
/// Labels get no gradient.
#[derive(Debug, Default)]
pub struct SoftmaxLoss {
    cache: Gather,
}

impl SoftmaxLoss {
    /// A loss node.
    pub fn new() -> SoftmaxLoss {
        SoftmaxLoss::default()
    }
}

/// Loss sum, correct count and gradient of the mean loss for `logits` and class `labels`.
pub fn softmax_xent(logits: &Payload, labels: &Payload) -> Result<(f32, f32, Payload), MpError> {
    let (b, c) = logits.dim();
    if labels.dim() != (b, 1) {
        return Err(MpError::Shape {
            kind: "SoftmaxLoss",
            detail: format!("labels {:?} for logits {:?}", labels.dim(), logits.dim()),
        });
    }
    let mut grad = Payload::zeros((b, c));
    let (mut loss, mut correct) = (0.0f32, 0.0f32);
    for r in 0..b {
        let row = logits.row(r);
        let y = labels[[r, 0]] as usize;
        if y >= c {
            return Err(MpError::Shape {
                kind: "SoftmaxLoss",
                detail: format!("label {y} of {c} classes"),
            });
        }
        let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let z: f32 = row.iter().map(|&v| (v - max).exp()).sum();
        loss += z.ln() - (row[y] - max);
        let arg = row.iter().enumerate().fold(0, |a, (i, &v)| if v > row[a] { i } else { a });
        if arg == y {
            correct += 1.0;
        }
        for k in 0..c {
            let p = (row[k] - max).exp() / z;
            grad[[r, k]] = (p - if k == y { 1.0 } else { 0.0 }) / b as f32;
        }
    }
    Ok((loss, correct, grad))
}

impl IrNode for SoftmaxLoss {
    fn signature(&self) -> Signature {
        Signature { kind: "SoftmaxLoss", inputs: 2, outputs: 1 }
    }
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let Some(parts) = self.cache.add("SoftmaxLoss", state.clone(), port, 2, x)? else {
            return Ok(());
        };
        let (loss, correct, grad) = softmax_xent(&parts[0], &parts[1])?;
        let b = parts[0].nrows() as f32;
        e.forward(0, state.clone(), ndarray::arr2(&[[loss, correct, b]]));
        if e.train {
            e.backward(0, state, grad);
        }
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        _g: Payload,
        _e: &mut Emit,
    ) -> Result<(), MpError> {
        // The controller sends nothing back on the result edge.
        Err(MpError::Unexpected { kind: "SoftmaxLoss", what: "backward", state })
    }
    fn pending(&self) -> usize {
        self.cache.len()
    }
}
