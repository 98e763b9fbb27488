//! The learning half of a parameterized payload transform (PPT, paper 004 §3): its gradient
//! accumulator and its optimizer, and the update tail every PPT node shares.

use crate::accumulate::Accumulator;
use crate::error::MpError;
use crate::message::Payload;
use crate::node::Emit;
use crate::optimizer::{OptState, Optimizer};
use crate::staleness::StalenessHistogram;
use crate::state::State;

/// A PPT node's accumulator and optimizer. The node adds each gradient into
/// [`sums_mut`](Self::sums_mut) and calls [`added`](Self::added); on its update message it
/// calls [`update`](Self::update). The *min_update_interval* invariant is the
/// [`Accumulator`]'s.
#[derive(Debug)]
pub struct PptLearner {
    acc: Accumulator,
    opt: OptState,
}

impl PptLearner {
    /// Zero sums and a fresh optimizer for parameters shaped like `params`.
    ///
    /// ```
    /// use ordo_mp::{optimizer::Optimizer, ppt::PptLearner};
    /// let w = ndarray::Array2::<f32>::zeros((2, 2));
    /// let l = PptLearner::new(&[&w], Optimizer::sgd(0.1), 1).unwrap();
    /// assert_eq!(l.accumulator().accumulated(), 0);
    /// ```
    pub fn new(
        params: &[&Payload],
        opt: Optimizer,
        min_update_interval: usize,
    ) -> Result<PptLearner, MpError> {
        let acc = Accumulator::new(params, min_update_interval)?;
        Ok(PptLearner { acc, opt: OptState::new(opt, params) })
    }

    /// The accumulator (sums, counts, staleness).
    pub fn accumulator(&self) -> &Accumulator {
        &self.acc
    }

    /// The parameter version a forward reads now.
    pub fn version(&self) -> u64 {
        self.acc.version()
    }

    /// The gradient sums, one per parameter array, to add a gradient into.
    pub fn sums_mut(&mut self) -> &mut [Payload] {
        self.acc.sums_mut()
    }

    /// A gradient whose forward read version `read` was added: count it, and emit the node's
    /// update message once `min_update_interval` gradients are in.
    pub fn added(&mut self, read: u64, e: &mut Emit) {
        e.out.extend(self.acc.added(read));
    }

    /// The update message `state`: take the mean of the accumulated gradients and let the
    /// optimizer step `params` with it, or (`step == false`, an emulated device that only
    /// charges the time) drop it.
    pub fn update(
        &mut self,
        kind: &'static str,
        state: State,
        params: &mut [&mut Payload],
        step: bool,
    ) -> Result<(), MpError> {
        let means = self.acc.take_mean(kind, state)?;
        if step {
            self.opt.step(params, &means);
        }
        Ok(())
    }

    /// The staleness of the gradients applied so far.
    pub fn staleness(&self) -> &StalenessHistogram {
        self.acc.staleness()
    }

    /// The optimizer's state.
    pub fn opt_state(&self) -> &OptState {
        &self.opt
    }

    /// The optimizer's state, mutably (replica synchronization, schedules).
    pub fn opt_state_mut(&mut self) -> &mut OptState {
        &mut self.opt
    }
}
