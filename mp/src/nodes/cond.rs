//! `Cond f`: routes a message by its state (not its payload).

use crate::node::prelude::*;

/// The routing function of a [`Cond`]: an output port for a state.
pub type Route = Box<dyn Fn(&State) -> usize + Send>;

/// Forward: sends the message to output `f(state)`. Backward: a gradient arriving on any output
/// goes back to the single input unchanged (the state already says which instance it is).
pub struct Cond {
    outputs: usize,
    f: Route,
}

impl Cond {
    /// A condition node with `outputs` successors routing by `f`.
    ///
    /// ```
    /// use ordo_mp::nodes::Cond;
    /// let replicas = Cond::new(2, |s| (s.instance % 2) as usize);
    /// assert_eq!(ordo_mp::IrNode::outputs(&replicas), 2);
    /// ```
    pub fn new(outputs: usize, f: impl Fn(&State) -> usize + Send + 'static) -> Cond {
        Cond { outputs, f: Box::new(f) }
    }
}

impl IrNode for Cond {
    fn signature(&self) -> Signature {
        Signature { kind: "Cond", inputs: 1, outputs: self.outputs }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let to = (self.f)(&state);
        if to >= self.outputs {
            return Err(MpError::BadState { kind: self.kind(), state });
        }
        e.forward(to, state, x);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        e.backward(0, state, g);
        Ok(())
    }
}
