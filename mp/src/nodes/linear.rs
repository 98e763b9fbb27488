//! `Linear`: the parameterized payload transform (PPT) of a fully connected layer, `y = x W + b`.

use std::time::Duration;

use crate::node::prelude::*;
use crate::optimizer::{OptState, Optimizer};
use crate::ppt::PptLearner;
use crate::staleness::StalenessHistogram;

/// A fully connected layer. It records each forward input keyed by the message state, so
/// forward and backward messages of different instances may interleave in any order (§4).
///
/// Gradients accumulate; once `min_update_interval` of them have accumulated since the last
/// update the node sends itself one update message, which applies their mean.
///
/// ```
/// use ordo_mp::{nodes::Linear, optimizer::Optimizer};
/// let l = Linear::new(ndarray::Array2::zeros((3, 2)), Optimizer::sgd(0.1), 1).unwrap();
/// assert_eq!(ordo_mp::IrNode::params(&l)[0].dim(), (3, 2));
/// ```
#[derive(Debug)]
pub struct Linear {
    w: Payload,
    b: Payload,
    learner: PptLearner,
    /// Forward inputs and the parameter version they read, by state.
    acts: Recorded<(Payload, u64)>,
    emulate: Option<f64>,
    /// Whether the backward computes the input gradient `g Wᵀ` (see
    /// [`Linear::without_input_gradient`]).
    input_gradient: bool,
}

impl Linear {
    /// A layer with weights `w` (`d_in × d_out`), zero bias, optimizer `opt`, and
    /// `min_update_interval` ≥ 1.
    pub fn new(w: Payload, opt: Optimizer, min_update_interval: usize) -> Result<Linear, MpError> {
        let b = Payload::zeros((1, w.ncols()));
        let learner = PptLearner::new(&[&w, &b], opt, min_update_interval)?;
        Ok(Linear {
            w,
            b,
            learner,
            acts: Recorded::new("Linear"),
            emulate: None,
            input_gradient: true,
        })
    }

    /// The same layer for an input nobody differentiates (the controller's data, the first
    /// layer of an MLP): its backward skips the product `g Wᵀ` — a third of its work — and
    /// sends an empty (`0 × 0`) gradient back, which only completes the instance's
    /// bookkeeping. The emulated device still charges the full backward of Appendix C, which
    /// charges every layer alike.
    ///
    /// ```
    /// use ordo_mp::{nodes::Linear, optimizer::Optimizer};
    /// let l = Linear::new(ndarray::Array2::zeros((3, 2)), Optimizer::sgd(0.1), 1).unwrap();
    /// let _first_layer = l.without_input_gradient();
    /// ```
    pub fn without_input_gradient(mut self) -> Linear {
        self.input_gradient = false;
        self
    }

    /// The gradients accumulated since the last update (sums, for `W` and `b`).
    pub fn accumulated(&self) -> (&Payload, &Payload, usize) {
        let acc = self.learner.accumulator();
        (&acc.sums()[0], &acc.sums()[1], acc.accumulated())
    }

    /// Updates applied so far.
    pub fn updates(&self) -> u64 {
        self.learner.accumulator().updates()
    }

    /// Charge `flops` to the emulated device (Appendix C), if emulating.
    fn charge(&self, flops: f64, e: &mut Emit) {
        if let Some(f) = self.emulate {
            e.device += Duration::from_secs_f64(flops / f);
        }
    }
}

impl IrNode for Linear {
    fn signature(&self) -> Signature {
        Signature { kind: "Linear", inputs: 1, outputs: 1 }
    }

    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let (din, dout) = self.w.dim();
        if x.ncols() != din {
            return Err(MpError::Shape {
                kind: self.kind(),
                detail: format!("input has {} columns, W has {din} rows", x.ncols()),
            });
        }
        let y = if self.emulate.is_some() {
            self.charge(2.0 * (x.nrows() * din * dout) as f64, e);
            Payload::zeros((x.nrows(), dout))
        } else {
            x.dot(&self.w) + &self.b
        };
        e.forward_keeping(&mut self.acts, state, (x, self.learner.version()), y);
        Ok(())
    }

    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let (x, read) = self.acts.take_for(&state, &g, |(x, _)| (x.nrows(), self.w.ncols()))?;
        let dx = if self.emulate.is_some() {
            // Backward and gradient accumulation: two products of the forward's size.
            self.charge(4.0 * (x.nrows() * self.w.nrows() * self.w.ncols()) as f64, e);
            Payload::zeros(x.raw_dim())
        } else {
            let sums = self.learner.sums_mut();
            // `sums[0] += xᵀ g` in place: no temporary of W's size per gradient.
            ndarray::linalg::general_mat_mul(1.0, &x.t(), &g, 1.0, &mut sums[0]);
            sums[1] += &g.sum_axis(ndarray::Axis(0)).insert_axis(ndarray::Axis(0));
            if self.input_gradient { g.dot(&self.w.t()) } else { Payload::zeros((0, 0)) }
        };
        self.learner.added(read, e);
        e.backward(0, state, dx);
        Ok(())
    }

    fn update(&mut self, state: State, e: &mut Emit) -> Result<(), MpError> {
        if self.emulate.is_some() {
            // Clipping adds the norm's multiply-add per weight to the update's one flop.
            let per_weight = if self.learner.opt_state().clip_norm().is_some() { 3.0 } else { 1.0 };
            self.charge(per_weight * (self.w.nrows() * self.w.ncols()) as f64, e);
        }
        let step = self.emulate.is_none();
        self.learner.update("Linear", state, &mut [&mut self.w, &mut self.b], step)
    }

    fn pending(&self) -> usize {
        self.acts.len()
    }
    fn staleness(&self) -> Option<&StalenessHistogram> {
        Some(self.learner.staleness())
    }
    fn params(&self) -> Vec<&Payload> {
        vec![&self.w, &self.b]
    }
    fn params_mut(&mut self) -> Vec<&mut Payload> {
        vec![&mut self.w, &mut self.b]
    }
    fn emulate(&mut self, flops: Option<f64>) {
        self.emulate = flops;
    }
    fn opt_state_mut(&mut self) -> Option<&mut OptState> {
        Some(self.learner.opt_state_mut())
    }
}
