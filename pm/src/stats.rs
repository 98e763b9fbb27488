//! Counters a node keeps about its traffic and actions.

use std::ops::AddAssign;

/// Per-node counters (summed over nodes for the `pm:` line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmStats {
    /// Pulls served from the node's own main copy or replica.
    pub local_pulls: u64,
    /// Pulls that had to ask the owner.
    pub remote_pulls: u64,
    /// Pushes applied to the node's own main copy or replica.
    pub local_pushes: u64,
    /// Pushes sent to the owner.
    pub remote_pushes: u64,
    /// Messages sent.
    pub messages: u64,
    /// Bytes sent ([`crate::Message::wire_bytes`]).
    pub bytes_sent: u64,
    /// Relocations this node initiated (as owner).
    pub relocations: u64,
    /// Replicas this node created (as owner).
    pub replications: u64,
    /// Routed messages this node forwarded because it was not the owner.
    pub forwards: u64,
}

impl PmStats {
    /// Fraction of pulls and pushes served remotely.
    pub fn remote_share(&self) -> f64 {
        let remote = self.remote_pulls + self.remote_pushes;
        let all = remote + self.local_pulls + self.local_pushes;
        if all == 0 { 0.0 } else { remote as f64 / all as f64 }
    }
}

impl AddAssign for PmStats {
    fn add_assign(&mut self, o: Self) {
        self.local_pulls += o.local_pulls;
        self.remote_pulls += o.remote_pulls;
        self.local_pushes += o.local_pushes;
        self.remote_pushes += o.remote_pushes;
        self.messages += o.messages;
        self.bytes_sent += o.bytes_sent;
        self.relocations += o.relocations;
        self.replications += o.replications;
        self.forwards += o.forwards;
    }
}
