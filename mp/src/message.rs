//! Messages, the only way workers talk (paper §3, Algorithm 1).

use crate::node_id::NodeId;
use crate::state::State;

/// A payload: a row-major `f32` matrix (rows are the examples of an instance).
pub type Payload = ndarray::Array2<f32>;

/// What the receiving node does with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Apply the node's forward operation.
    Forward,
    /// Apply the adjoint of the node's forward operation.
    Backward,
    /// Apply the accumulated gradients to the node's parameters (sent by a node to itself).
    Update,
}

impl Direction {
    /// Priority in a worker's local queue, smaller first: updates, then backward (so that
    /// instances finish and the controller can pump new ones, Appendix A), then forward.
    pub fn priority(self) -> u8 {
        match self {
            Direction::Update => 0,
            Direction::Backward => 1,
            Direction::Forward => 2,
        }
    }
}

/// A message addressed to one port of one node.
///
/// For a forward message `port` is the receiving node's input port; for a backward message it is
/// the receiving node's output port the gradient flows back through; for an update it is 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The receiving node.
    pub node: NodeId,
    /// The port (see above).
    pub port: usize,
    /// Forward, backward or update.
    pub dir: Direction,
    /// The message's state.
    pub state: State,
    /// The message's payload (empty for updates).
    pub payload: Payload,
}

/// The identity of a message within a run: its receiver, direction, port and state. Unique per
/// run because states are (the invariant every cache relies on).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageKey {
    /// The receiving node.
    pub node: NodeId,
    /// Forward, backward or update.
    pub dir: Direction,
    /// The port.
    pub port: usize,
    /// The state.
    pub state: State,
}

impl Message {
    /// The message's key.
    pub fn key(&self) -> MessageKey {
        MessageKey { node: self.node, dir: self.dir, port: self.port, state: self.state.clone() }
    }
}
