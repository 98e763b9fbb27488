//! Routing a request to a key's current owner while ownership moves.
//!
//! A node sends a request for a key it holds neither as owner nor as replica to its *location
//! guess* (the last owner it heard of; initially the key's home node `key % nodes`). A node that
//! receives a request for a key it does not own forwards it along its *forward pointer* (the node
//! it relocated the key to, set when the key left) or, if it never owned the key, to the home
//! node, which owned every key initially and so always has an owner's copy or a pointer.
//!
//! **Routing terminates** (invariant, kept by [`Routing::moved`] and [`Routing::acquired`]):
//! node `A`'s pointer is written when `A` sends the key away as its `m`-th relocation, and the
//! receiver `B` gets that `Relocate` before anything `A` forwards to it (FIFO per pair), so a
//! request at `B` finds `B` owner or a pointer written at a later relocation `> m`. Each forward
//! thus strictly increases the relocation count it follows, so a request is forwarded at most
//! `1 + (relocations of the key while it travels) + 1` times.

use std::collections::HashMap;

use crate::message::{Key, NodeId};

/// One node's routing state.
#[derive(Debug, Clone)]
pub struct Routing {
    nodes: usize,
    location: HashMap<Key, NodeId>,
    forward: HashMap<Key, NodeId>,
}

/// Hashes the pointers in key order (the hash of one protocol state, for model checking:
/// `Node::protocol_state`).
impl std::hash::Hash for Routing {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.nodes.hash(h);
        crate::intent::sorted(&self.location).hash(h);
        crate::intent::sorted(&self.forward).hash(h);
    }
}

impl Routing {
    /// No pointers; every guess is the home node.
    pub fn new(nodes: usize) -> Self {
        Routing { nodes, location: HashMap::new(), forward: HashMap::new() }
    }

    /// The node that owns `key` initially (and under the static partition always).
    pub fn home(&self, key: Key) -> NodeId {
        (key % self.nodes as u64) as NodeId
    }

    /// Where to send a new request for `key`.
    pub fn guess(&self, key: Key) -> NodeId {
        self.location.get(&key).copied().unwrap_or_else(|| self.home(key))
    }

    /// Where a non-owner passes on a request for `key`.
    pub fn next_hop(&self, key: Key) -> NodeId {
        self.forward.get(&key).copied().unwrap_or_else(|| self.home(key))
    }

    /// Whether this node has a forward pointer for `key` (it owned it and sent it away).
    pub fn has_pointer(&self, key: Key) -> bool {
        self.forward.contains_key(&key)
    }

    /// This node sent `key` to `to`.
    pub fn moved(&mut self, key: Key, to: NodeId) {
        self.forward.insert(key, to);
        self.location.insert(key, to);
    }

    /// This node became `key`'s owner: its pointer is void until it sends the key away again.
    pub fn acquired(&mut self, key: Key, me: NodeId) {
        self.forward.remove(&key);
        self.location.insert(key, me);
    }

    /// A message from `owner` showed it owned `key`.
    pub fn learned(&mut self, key: Key, owner: NodeId) {
        self.location.insert(key, owner);
    }
}
