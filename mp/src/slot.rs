//! A graph's node as the graph holds it: its one controller by type, or any other node.

use crate::controller::Controller;
use crate::error::MpError;
use crate::message::{Direction, Payload};
use crate::node::{Emit, IrNode};
use crate::state::State;

/// One node of a built graph. The controller is held as itself, so the graph, the runtime and
/// the replay reach it without asking nodes what they are.
pub(crate) enum Slot {
    /// The graph's controller ([`GraphBuilder::controller`](crate::GraphBuilder::controller)).
    Controller(Controller),
    /// Any other node.
    IrNode(Box<dyn IrNode>),
}

impl Slot {
    /// The node's kind, for errors and traces.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Slot::Controller(_) => Controller::KIND,
            Slot::IrNode(n) => n.kind(),
        }
    }

    /// Cache entries held now (see [`IrNode::pending`]).
    pub(crate) fn pending(&self) -> usize {
        match self {
            Slot::Controller(c) => c.pending(),
            Slot::IrNode(n) => n.pending(),
        }
    }

    /// The node, unless it is the controller.
    pub(crate) fn node(&self) -> Option<&dyn IrNode> {
        match self {
            Slot::Controller(_) => None,
            Slot::IrNode(n) => Some(&**n),
        }
    }

    /// The node, mutably, unless it is the controller.
    pub(crate) fn node_mut(&mut self) -> Option<&mut dyn IrNode> {
        match self {
            Slot::Controller(_) => None,
            Slot::IrNode(n) => Some(&mut **n),
        }
    }

    /// The controller, if this slot holds it.
    pub(crate) fn controller(&mut self) -> Option<&mut Controller> {
        match self {
            Slot::Controller(c) => Some(c),
            Slot::IrNode(_) => None,
        }
    }

    /// Apply one message; an [`IrNode`]'s port is checked against its
    /// [`signature`](IrNode::signature) first, the controller checks its own.
    pub(crate) fn apply(
        &mut self,
        dir: Direction,
        port: usize,
        state: State,
        payload: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        if let Slot::IrNode(n) = self {
            n.signature().check(dir, port)?;
        }
        match (self, dir) {
            (Slot::IrNode(n), Direction::Forward) => n.forward(port, state, payload, e),
            (Slot::IrNode(n), Direction::Backward) => n.backward(port, state, payload, e),
            (Slot::IrNode(n), Direction::Update) => n.update(state, e),
            (Slot::Controller(c), Direction::Forward) => c.forward(port, state, payload, e),
            (Slot::Controller(c), Direction::Backward) => c.backward(port, state, payload, e),
            (Slot::Controller(_), Direction::Update) => {
                Err(MpError::Unexpected { kind: Controller::KIND, what: "update", state })
            }
        }
    }
}
