//! How nodes' messages travel: one trait, implemented in-process by channels
//! ([`InProcessTransport`], threads as nodes) and across processes by MPI (the `mpi` module, feature
//! `mpi`). The deterministic [`crate::sim::Simulation`] drives nodes without threads and keeps its
//! own FIFO channel per ordered pair of nodes, chosen by a seeded RNG.
//!
//! Contract: messages from one node to another arrive in the order they were sent (FIFO per
//! ordered pair), none is lost or duplicated. Routing's termination rests on it
//! ([`crate::routing`]).

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};

use crate::error::PmError;
use crate::message::{Message, NodeId};

/// A node's endpoint of the network. Used only by the node's communication thread (not `Send`:
/// an MPI communicator stays on the thread that initialized MPI).
pub trait Transport {
    /// This node's id.
    fn rank(&self) -> NodeId;
    /// Number of nodes.
    fn nodes(&self) -> usize;
    /// Send `msg` to node `to`, or queue it for the next [`Transport::flush`].
    fn send(&self, to: NodeId, msg: Message) -> Result<(), PmError>;
    /// Send every queued message (the communication thread calls it after each burst of
    /// `send`s). A transport that sends at once has nothing to do.
    fn flush(&self) -> Result<(), PmError> {
        Ok(())
    }
    /// The next message for this node, waiting at most `timeout`; `None` on timeout.
    fn recv_timeout(&self, timeout: Duration) -> Result<Option<(NodeId, Message)>, PmError>;
}

/// Channels between threads of one process: one unbounded channel per receiving node (FIFO per
/// sender, as crossbeam-channel keeps a sender's order).
///
/// ```
/// use std::time::Duration;
/// use ordo_pm::{InProcessTransport, Transport, Message, ToOwner};
/// let net = InProcessTransport::mesh(2);
/// let msg = Message::Routed { key: 3, hops: 0, body: ToOwner::Pull { node: 0, req: 7 } };
/// net[0].send(1, msg.clone()).unwrap();
/// assert_eq!(net[1].recv_timeout(Duration::from_secs(1)).unwrap(), Some((0, msg)));
/// ```
#[derive(Debug)]
pub struct InProcessTransport {
    me: NodeId,
    peers: Vec<Sender<(NodeId, Message)>>,
    inbox: Receiver<(NodeId, Message)>,
}

impl InProcessTransport {
    /// Endpoints for `n` nodes, connected all to all.
    pub fn mesh(n: usize) -> Vec<InProcessTransport> {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| unbounded()).unzip();
        rxs.into_iter()
            .enumerate()
            .map(|(me, inbox)| InProcessTransport { me, peers: txs.clone(), inbox })
            .collect()
    }
}

impl Transport for InProcessTransport {
    fn rank(&self) -> NodeId {
        self.me
    }
    fn nodes(&self) -> usize {
        self.peers.len()
    }
    fn send(&self, to: NodeId, msg: Message) -> Result<(), PmError> {
        let peer = self
            .peers
            .get(to)
            .ok_or(PmError::NodeOutOfRange { node: to, nodes: self.peers.len() })?;
        peer.send((self.me, msg)).map_err(|e| PmError::Transport(e.to_string()))
    }
    fn recv_timeout(&self, timeout: Duration) -> Result<Option<(NodeId, Message)>, PmError> {
        match self.inbox.recv_timeout(timeout) {
            Ok(m) => Ok(Some(m)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(e) => Err(PmError::Transport(e.to_string())),
        }
    }
}
