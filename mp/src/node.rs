//! The IR node interface: every node has a forward and a backward semantics (paper §4).

use crate::error::MpError;
use crate::message::{Direction, Payload};
use crate::state::State;

/// What an [`IrNode`] implementation names, in one import (`use ordo_mp::node::prelude::*`):
/// the trait and its [`Signature`], the [`Emit`] a handler writes to, [`Payload`], [`State`]
/// and [`MpError`], and the two helpers most nodes keep their per-state records in,
/// [`Gather`](crate::gather::Gather) and [`Recorded`](crate::recorded::Recorded).
pub mod prelude {
    pub use crate::error::MpError;
    pub use crate::gather::Gather;
    pub use crate::message::Payload;
    pub use crate::node::{Emit, IrNode, Signature};
    pub use crate::recorded::Recorded;
    pub use crate::state::State;
}

/// A message a node emits, before routing: forward messages leave on an output port, backward
/// messages on an input port, updates go to the node itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Forward on output port `port`.
    Forward {
        /// Output port.
        port: usize,
        /// State of the message.
        state: State,
        /// Payload.
        payload: Payload,
    },
    /// Backward on input port `port`.
    Backward {
        /// Input port.
        port: usize,
        /// State of the message.
        state: State,
        /// Payload.
        payload: Payload,
    },
    /// An update message to the node itself, with a state unique among its updates.
    Update(State),
}

/// What a node handler is given besides the message: the run's mode and the place to emit.
#[derive(Debug, Default)]
pub struct Emit {
    /// Training (record activations, send gradients) or evaluation (forward only).
    pub train: bool,
    /// Messages emitted, in order.
    pub out: Vec<Out>,
    /// Time the emulated device would spend on this operation (Appendix C; zero when
    /// computing): the runtime's [`DeviceClock`](crate::device_clock::DeviceClock) waits it out.
    pub device: std::time::Duration,
}

impl Emit {
    /// An empty emitter for a run in mode `train`.
    pub fn new(train: bool) -> Emit {
        Emit { train, out: Vec::new(), device: std::time::Duration::ZERO }
    }

    /// Emit a forward message on output `port`.
    pub fn forward(&mut self, port: usize, state: State, payload: Payload) {
        self.out.push(Out::Forward { port, state, payload });
    }

    /// The end of a forward whose backward reads what it saved: in training, record `saved`
    /// for `state` in `records` (for the backward's
    /// [`Recorded::take_for`](crate::recorded::Recorded::take_for)); then emit `y` on output 0.
    pub fn forward_keeping<T>(
        &mut self,
        records: &mut crate::recorded::Recorded<T>,
        state: State,
        saved: T,
        y: Payload,
    ) {
        if self.train {
            records.insert(state.clone(), saved);
        }
        self.forward(0, state, y);
    }

    /// Emit a backward message on input `port`.
    pub fn backward(&mut self, port: usize, state: State, payload: Payload) {
        self.out.push(Out::Backward { port, state, payload });
    }

    /// Emit `parts` forward, the `o`-th on output `o`, all with `state` (a fan-out).
    pub fn forward_each(&mut self, state: &State, parts: impl IntoIterator<Item = Payload>) {
        for (port, p) in parts.into_iter().enumerate() {
            self.forward(port, state.clone(), p);
        }
    }

    /// Emit `parts` backward, the `i`-th on input `i`, all with `state` (a fan-in's gradient).
    pub fn backward_each(&mut self, state: &State, parts: impl IntoIterator<Item = Payload>) {
        for (port, p) in parts.into_iter().enumerate() {
            self.backward(port, state.clone(), p);
        }
    }
}

/// A node's kind and port counts, as data: the graph checks every edge against them when it
/// is built, and every message against them before a handler sees it, so no node checks its
/// own ports.
///
/// ```
/// use ordo_mp::node::Signature;
/// let relu = Signature { kind: "Relu", inputs: 1, outputs: 1 };
/// assert!(relu.check(ordo_mp::Direction::Forward, 0).is_ok());
/// assert!(relu.check(ordo_mp::Direction::Backward, 1).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// The node's kind, for errors and traces.
    pub kind: &'static str,
    /// Number of input ports.
    pub inputs: usize,
    /// Number of output ports.
    pub outputs: usize,
}

impl Signature {
    /// Whether a message in direction `dir` may arrive on `port`: forward messages arrive on an
    /// input port, backward messages on an output port, updates on none in particular.
    pub fn check(&self, dir: Direction, port: usize) -> Result<(), MpError> {
        match dir {
            Direction::Forward => check_port(self.kind, "input", port, self.inputs),
            Direction::Backward => check_port(self.kind, "output", port, self.outputs),
            Direction::Update => Ok(()),
        }
    }
}

/// An IR node. Handlers must be deterministic functions of the node's own state and the
/// message: the runtime's replay guarantee rests on it.
pub trait IrNode: Send {
    /// The node's kind and port counts.
    fn signature(&self) -> Signature;
    /// The node's kind, for errors and traces.
    fn kind(&self) -> &'static str {
        self.signature().kind
    }
    /// Number of input ports.
    fn inputs(&self) -> usize {
        self.signature().inputs
    }
    /// Number of output ports.
    fn outputs(&self) -> usize {
        self.signature().outputs
    }
    /// Handle a forward message on input `port`; the caller has checked `port` against the
    /// [`signature`](Self::signature) (a [`Graph`](crate::Graph) does for every message).
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError>;
    /// Handle a backward message on output `port`, checked like [`forward`](Self::forward)'s.
    fn backward(
        &mut self,
        port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError>;
    /// Handle an update message (only parameterized nodes take them).
    fn update(&mut self, state: State, _e: &mut Emit) -> Result<(), MpError> {
        Err(MpError::Unexpected { kind: self.kind(), what: "update", state })
    }
    /// Cache entries held now (payloads waiting for siblings, recorded activations, origins):
    /// zero at the end of every complete run.
    fn pending(&self) -> usize {
        0
    }
    /// Staleness of the gradients this node applied (parameterized nodes only).
    fn staleness(&self) -> Option<&crate::staleness::StalenessHistogram> {
        None
    }
    /// The node's parameters (empty for non-parameterized nodes).
    fn params(&self) -> Vec<&Payload> {
        Vec::new()
    }
    /// The node's parameters, mutably (replica averaging).
    fn params_mut(&mut self) -> Vec<&mut Payload> {
        Vec::new()
    }
    /// The optimizer's memory (parameterized nodes only; replica synchronization).
    fn opt_state_mut(&mut self) -> Option<&mut crate::optimizer::OptState> {
        None
    }
    /// Replace computation by sleeping as long as a device of `flops` flop/s would take
    /// (Appendix C); `None` computes. Nodes without a compute cost ignore it.
    fn emulate(&mut self, _flops: Option<f64>) {}
}

/// Check that `port` is below `n`, or name the port in an error.
pub(crate) fn check_port(
    kind: &'static str,
    side: &'static str,
    port: usize,
    n: usize,
) -> Result<(), MpError> {
    if port < n {
        Ok(())
    } else {
        Err(MpError::NoSuchPort { node: crate::node_id::NodeId(usize::MAX), kind, side, port })
    }
}
