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
    /// charges the time) drop it. A step that leaves a parameter NaN or infinite fails the run
    /// there ([`MpError::NonFiniteParam`]): a diverged run stops, where a ReLU's `max(x, 0)`
    /// would hide the NaN from the loss.
    pub fn update(
        &mut self,
        kind: &'static str,
        state: State,
        params: &mut [&mut Payload],
        step: bool,
    ) -> Result<(), MpError> {
        let update = state.instance + 1;
        let means = self.acc.take_mean(kind, state)?;
        if step {
            self.opt.step(params, &means);
            if params.iter().any(|p| p.iter().any(|v| !v.is_finite())) {
                return Err(MpError::NonFiniteParam { kind, update });
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An update that leaves a parameter NaN or infinite fails the run, naming the node's kind
    /// and the update; a finite one, and an emulated one, do not.
    #[test]
    fn an_update_to_a_non_finite_parameter_fails_the_run() {
        let update = |lr: f32, step: bool| {
            let mut w = ndarray::arr2(&[[1.0f32, 2.0]]);
            let mut l = PptLearner::new(&[&w], Optimizer::sgd(lr), 1).unwrap();
            l.sums_mut()[0].fill(-4.0);
            let mut e = Emit::new(true);
            l.added(0, &mut e);
            l.update("Linear", State::new(0), &mut [&mut w], step)
        };
        assert_eq!(update(0.5, true), Ok(()));
        assert_eq!(update(f32::MAX, false), Ok(()));
        assert_eq!(
            update(f32::MAX, true),
            Err(MpError::NonFiniteParam { kind: "Linear", update: 1 })
        );
    }
}
