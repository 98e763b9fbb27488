//! `Isu f f⁻¹`: an invertible state update (loop counters).

use crate::node::prelude::*;

/// A state function of an [`Isu`]; `None` where it is undefined.
pub type StateFn = Box<dyn Fn(&State) -> Option<State> + Send>;

/// Forward applies `f` to the state, backward applies `f⁻¹`; the payload passes unchanged.
/// The caller promises `f⁻¹(f(s)) = s`.
pub struct Isu {
    f: StateFn,
    f_inv: StateFn,
}

impl Isu {
    /// An `Isu` with `f` and its inverse `f_inv`.
    pub fn new(
        f: impl Fn(&State) -> Option<State> + Send + 'static,
        f_inv: impl Fn(&State) -> Option<State> + Send + 'static,
    ) -> Isu {
        Isu { f: Box::new(f), f_inv: Box::new(f_inv) }
    }

    /// Increment the innermost loop counter (forward) / decrement it (backward).
    ///
    /// ```
    /// use ordo_mp::{State, nodes::Isu};
    /// let mut e = ordo_mp::Emit::new(true);
    /// let mut isu = Isu::increment();
    /// ordo_mp::IrNode::forward(&mut isu, 0, State::new(1).push(4), ndarray::Array2::zeros((1, 1)), &mut e).unwrap();
    /// ```
    pub fn increment() -> Isu {
        Isu::new(
            |s| {
                let mut s = s.clone();
                let c = s.counters.last_mut()?;
                *c = c.checked_add(1)?;
                Some(s)
            },
            |s| {
                let mut s = s.clone();
                let c = s.counters.last_mut()?;
                *c = c.checked_sub(1)?;
                Some(s)
            },
        )
    }
}

impl IrNode for Isu {
    fn signature(&self) -> Signature {
        Signature { kind: "Isu", inputs: 1, outputs: 1 }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let s = (self.f)(&state).ok_or(MpError::BadState { kind: "Isu", state })?;
        e.forward(0, s, x);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let s = (self.f_inv)(&state).ok_or(MpError::BadState { kind: "Isu", state })?;
        e.backward(0, s, g);
        Ok(())
    }
}
