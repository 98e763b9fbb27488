//! Typed errors of graph construction and of a run.

use thiserror::Error;

use crate::node_id::NodeId;
use crate::state::State;

/// Everything that can go wrong building or running an AMPNet graph.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum MpError {
    /// A node id that the builder did not hand out.
    #[error("unknown node {0:?}")]
    UnknownNode(NodeId),
    /// A port number beyond the node's ports.
    #[error("node {node:?} ({kind}) has no {side} port {port}")]
    NoSuchPort {
        /// The node.
        node: NodeId,
        /// Its kind.
        kind: &'static str,
        /// "input" or "output".
        side: &'static str,
        /// The port asked for.
        port: usize,
    },
    /// A port connected twice.
    #[error("node {node:?} {side} port {port} is connected twice")]
    PortTaken {
        /// The node.
        node: NodeId,
        /// "input" or "output".
        side: &'static str,
        /// The port.
        port: usize,
    },
    /// A port left unconnected.
    #[error("node {node:?} ({kind}) {side} port {port} is not connected")]
    Unconnected {
        /// The node.
        node: NodeId,
        /// Its kind.
        kind: &'static str,
        /// "input" or "output".
        side: &'static str,
        /// The port.
        port: usize,
    },
    /// The graph has no controller, or more than one.
    #[error("a graph needs exactly one controller, found {0}")]
    Controllers(usize),
    /// Placement on a worker that does not exist, or zero workers.
    #[error("bad placement: node {node:?} on worker {worker} of {workers}")]
    Placement {
        /// The node.
        node: NodeId,
        /// The worker asked for.
        worker: usize,
        /// Workers in the run.
        workers: usize,
    },
    /// A configuration value out of range.
    #[error("bad configuration: {0}")]
    Config(String),
    /// Payload shapes that do not fit the node.
    #[error("node {kind}: shape mismatch: {detail}")]
    Shape {
        /// The node kind.
        kind: &'static str,
        /// What did not fit.
        detail: String,
    },
    /// A backward message with no recorded forward for its state.
    #[error("node {kind}: backward for {state:?} without a recorded forward")]
    NoForward {
        /// The node kind.
        kind: &'static str,
        /// The state.
        state: State,
    },
    /// A message a node cannot take (e.g. an update for a node without parameters).
    #[error("node {kind}: unexpected {what} for {state:?}")]
    Unexpected {
        /// The node kind.
        kind: &'static str,
        /// What arrived.
        what: &'static str,
        /// Its state.
        state: State,
    },
    /// A state function (Cond, Isu) had no answer for a state.
    #[error("node {kind}: no result for state {state:?}")]
    BadState {
        /// The node kind.
        kind: &'static str,
        /// The state.
        state: State,
    },
    /// Cache entries left behind at the end of a run.
    #[error("node {node:?} ({kind}) left {entries} cache entries at the end of the run")]
    CacheLeak {
        /// The node.
        node: NodeId,
        /// Its kind.
        kind: &'static str,
        /// Entries left.
        entries: usize,
    },
    /// No worker made progress for the stall timeout (a graph that cannot complete).
    #[error("no message for {0:?} on a worker: the run stalled")]
    Stalled(std::time::Duration),
    /// A worker thread panicked.
    #[error("a worker panicked")]
    WorkerPanicked,
    /// The loss of an instance came back NaN or infinite (a diverged run): the controller
    /// stops the run there instead of training on.
    #[error("the loss of instance {instance} is {loss} (the run's step {step}): the run diverged")]
    NonFiniteLoss {
        /// The instance.
        instance: u64,
        /// Its summed loss.
        loss: f32,
        /// Its place among the run's completed instances, from 1.
        step: usize,
    },
    /// An update left a parameter NaN or infinite (a diverged run): the run stops there.
    #[error("node {kind}: its update {update} left a parameter NaN or infinite: the run diverged")]
    NonFiniteParam {
        /// The node kind.
        kind: &'static str,
        /// The node's update, counted from 1 since the graph was built.
        update: u64,
    },
    /// A replay whose recorded order cannot be followed.
    #[error("replay stuck: no node's next recorded message is available ({applied} applied)")]
    ReplayStuck {
        /// Messages applied before getting stuck.
        applied: usize,
    },
}
