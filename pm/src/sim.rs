//! Deterministic simulation: all nodes in one thread, one FIFO channel per ordered pair of nodes,
//! and a seeded RNG choosing which channel delivers next. Tests drive it step by step and check
//! the protocol's invariants (see [`crate::node`]) against a single-node sequential store.

use std::collections::{BTreeMap, VecDeque};

use crate::rng::{RunRng, index, seeded};

use crate::error::PmError;
use crate::message::{Key, Message, NodeId};
use crate::mode::PmMode;
use crate::node::{Node, Outbox, PullOutcome};
use crate::stats::PmStats;

/// A violated invariant found by [`Simulation::check_quiescent`] or while sending.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Violation {
    /// A key with zero or several owners at quiescence.
    #[error("key {key} has {owners} owners")]
    Owners {
        /// The key.
        key: Key,
        /// How many nodes own it.
        owners: usize,
    },
    /// A key's main copy differs from the sequential store's value.
    #[error("key {key}: pm holds {pm:?}, the sequential store {seq:?}")]
    Conservation {
        /// The key.
        key: Key,
        /// The value in the parameter manager.
        pm: Vec<f32>,
        /// The value of the sequential store.
        seq: Vec<f32>,
    },
    /// Two nodes read different values of a key at quiescence.
    #[error("key {key}: node {node} reads {got:?}, the owner holds {owner:?}")]
    Disagree {
        /// The key.
        key: Key,
        /// The reading node.
        node: NodeId,
        /// What it read.
        got: Vec<f32>,
        /// The owner's value.
        owner: Vec<f32>,
    },
    /// A relocation was sent while the number of intent holders was not one.
    #[error("key {key} relocated with {holders} intent holders")]
    RelocationHolders {
        /// The key.
        key: Key,
        /// Holders recorded at the time.
        holders: usize,
    },
    /// A request was forwarded more often than relocations could explain.
    #[error("a request for key {key} was forwarded {hops} times")]
    Hops {
        /// The key.
        key: Key,
        /// Its hop count.
        hops: u32,
    },
    /// A remote pull got no answer once every message was delivered (routing lost it).
    #[error("node {node}'s pull of key {key} was never answered")]
    Unanswered {
        /// The key.
        key: Key,
        /// The reading node.
        node: NodeId,
    },
    /// Messages still in flight after the step budget.
    #[error("not quiescent after {0} deliveries")]
    NoQuiescence(u64),
    /// A version went backwards.
    #[error("key {key} at node {node}: version {now} after {before}")]
    VersionBackwards {
        /// The key.
        key: Key,
        /// The node.
        node: NodeId,
        /// The earlier version.
        before: u64,
        /// The later version.
        now: u64,
    },
}

/// A cluster of [`Node`]s driven deterministically.
///
/// ```
/// use ordo_pm::{PmMode, sim::Simulation};
/// let mut s = Simulation::new(3, 4, 1, PmMode::AdaPm, 7).unwrap();
/// s.intent(1, &[0], 0, 5).unwrap();   // node 1 will use key 0 (owned by node 0)
/// s.round_all().unwrap();
/// s.deliver_all().unwrap();
/// assert!(s.node(1).owns(0));         // relocated: node 1 is the only holder
/// s.push(1, 0, &[2.0]).unwrap();
/// s.check_quiescent().unwrap();
/// ```
#[derive(Debug)]
pub struct Simulation {
    nodes: Vec<Node>,
    channels: BTreeMap<(NodeId, NodeId), VecDeque<Message>>,
    rng: RunRng,
    sequential: Vec<Vec<f32>>,
    relocations: u64,
    versions: BTreeMap<(NodeId, Key), u64>,
}

impl Simulation {
    /// `nodes` nodes sharing `keys` keys of `width` floats, initial value of key `k` all `k`,
    /// delivery order from `seed`.
    pub fn new(
        nodes: usize,
        keys: u64,
        width: usize,
        mode: PmMode,
        seed: u64,
    ) -> Result<Self, PmError> {
        let init = |k: Key| vec![k as f32; width];
        Ok(Simulation {
            nodes: Node::all(nodes, keys, width, mode, init)?,
            channels: BTreeMap::new(),
            rng: seeded(seed),
            sequential: (0..keys).map(init).collect(),
            relocations: 0,
            versions: BTreeMap::new(),
        })
    }

    /// Node `n`.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n]
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never: [`Simulation::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Counters summed over nodes.
    pub fn stats(&self) -> PmStats {
        let mut s = PmStats::default();
        for n in &self.nodes {
            s += n.stats();
        }
        s
    }

    fn node_mut(&mut self, n: NodeId) -> Result<&mut Node, PmError> {
        let nodes = self.nodes.len();
        self.nodes.get_mut(n).ok_or(PmError::NodeOutOfRange { node: n, nodes })
    }

    fn post(&mut self, from: NodeId, out: Outbox) -> Result<(), Violation> {
        for (to, msg) in out {
            if let Message::Relocate { key, record } = &msg {
                self.relocations += 1;
                if record.holders.len() != 1 {
                    return Err(Violation::RelocationHolders {
                        key: *key,
                        holders: record.holders.len(),
                    });
                }
            }
            if let Message::Routed { key, hops, .. } = &msg {
                // Each forward follows a strictly later relocation (crate::routing), plus the
                // first send and one detour via the home node.
                if u64::from(*hops) > self.relocations + 2 {
                    return Err(Violation::Hops { key: *key, hops: *hops });
                }
            }
            self.channels.entry((from, to)).or_default().push_back(msg);
        }
        self.observe_versions(from)
    }

    fn observe_versions(&mut self, n: NodeId) -> Result<(), Violation> {
        let node = &self.nodes[n];
        for key in 0..node.keys() {
            let v =
                node.owned_record(key).map(|r| r.version).or(node.replica(key).map(|r| r.version));
            if let Some(now) = v {
                let before = self.versions.insert((n, key), now);
                if let Some(before) = before {
                    // A replica may start at an older version than a main copy the node once
                    // held; the invariant is per holding, so compare only while it holds it.
                    if now < before && node.owns(key) {
                        return Err(Violation::VersionBackwards { key, node: n, before, now });
                    }
                }
            } else {
                self.versions.remove(&(n, key));
            }
        }
        Ok(())
    }

    /// `intent` at node `n`.
    pub fn intent(&mut self, n: NodeId, keys: &[Key], start: u64, end: u64) -> Result<(), PmError> {
        self.node_mut(n)?.intent(keys, start, end)
    }

    /// `intent_now` at node `n` (intent from its clock until `end`, acted on at once).
    pub fn intent_now(&mut self, n: NodeId, keys: &[Key], end: u64) -> Result<(), PmError> {
        let mut out = Vec::new();
        self.node_mut(n)?.intent_now(keys, end, &mut out)?;
        self.post(n, out).map_err(|v| PmError::Transport(v.to_string()))
    }

    /// `advance_clock` at node `n`.
    pub fn advance_clock(&mut self, n: NodeId) -> Result<(), PmError> {
        self.node_mut(n)?.advance_clock();
        Ok(())
    }

    /// `push` at node `n`; the same update goes to the sequential store.
    pub fn push(&mut self, n: NodeId, key: Key, delta: &[f32]) -> Result<(), PmError> {
        let mut out = Vec::new();
        self.node_mut(n)?.push(key, delta, &mut out)?;
        for (x, d) in self.sequential[key as usize].iter_mut().zip(delta) {
            *x += d;
        }
        self.post(n, out).map_err(|v| PmError::Transport(v.to_string()))
    }

    /// A sync round at node `n`.
    pub fn sync_round(&mut self, n: NodeId) -> Result<(), Violation> {
        let mut out = Vec::new();
        self.nodes[n].sync_round(&mut out);
        self.post(n, out)
    }

    /// A sync round at every node.
    pub fn round_all(&mut self) -> Result<(), Violation> {
        (0..self.nodes.len()).try_for_each(|n| self.sync_round(n))
    }

    /// Deliver the head of one non-empty channel chosen by the RNG; false if none.
    pub fn deliver_one(&mut self) -> Result<bool, Violation> {
        let busy: Vec<(NodeId, NodeId)> =
            self.channels.iter().filter(|(_, q)| !q.is_empty()).map(|(&k, _)| k).collect();
        if busy.is_empty() {
            return Ok(false);
        }
        let (from, to) = busy[index(&mut self.rng, busy.len())];
        let msg = self.channels.get_mut(&(from, to)).and_then(VecDeque::pop_front).expect("busy");
        let mut out = Vec::new();
        self.nodes[to].handle(from, msg, &mut out);
        self.post(to, out)?;
        Ok(true)
    }

    /// Deliver until no message is in flight.
    pub fn deliver_all(&mut self) -> Result<(), Violation> {
        let mut steps = 0u64;
        while self.deliver_one()? {
            steps += 1;
            if steps > 10_000_000 {
                return Err(Violation::NoQuiescence(steps));
            }
        }
        Ok(())
    }

    /// Run every node past its last intent and deliver everything: afterwards no intent is
    /// active, no message in flight, and every replica refreshed.
    pub fn quiesce(&mut self) -> Result<(), Violation> {
        for n in 0..self.nodes.len() {
            while let Some(end) = self.nodes[n].last_intent_end() {
                if self.nodes[n].clock() < end {
                    self.nodes[n].advance_clock();
                }
                self.sync_round(n)?;
                self.deliver_all()?;
                if self.nodes[n].intents_done() {
                    break;
                }
            }
        }
        // Flush, then refresh with the flushed values.
        for _ in 0..2 {
            self.round_all()?;
            self.deliver_all()?;
        }
        Ok(())
    }

    /// Quiesce, then check: one owner per key, conservation against the sequential store, and
    /// every node's pull (local or remote) returns the owner's value.
    pub fn check_quiescent(&mut self) -> Result<(), Violation> {
        self.quiesce()?;
        let keys = self.nodes[0].keys();
        for key in 0..keys {
            let owners: Vec<NodeId> =
                (0..self.nodes.len()).filter(|&n| self.nodes[n].owns(key)).collect();
            if owners.len() != 1 {
                return Err(Violation::Owners { key, owners: owners.len() });
            }
            let owner = self.nodes[owners[0]].owned_record(key).expect("owner").value.clone();
            let seq = &self.sequential[key as usize];
            if owner != *seq {
                return Err(Violation::Conservation { key, pm: owner, seq: seq.clone() });
            }
            for n in 0..self.nodes.len() {
                let mut out = Vec::new();
                let got = match self.nodes[n].pull(key, &mut out).expect("key in range") {
                    PullOutcome::Local(v, _) => v,
                    PullOutcome::Remote(req) => {
                        self.post(n, out)?;
                        self.deliver_all()?;
                        self.nodes[n]
                            .take_reply(req)
                            .ok_or(Violation::Unanswered { key, node: n })?
                            .0
                    }
                };
                if got != owner {
                    return Err(Violation::Disagree { key, node: n, got, owner });
                }
            }
        }
        Ok(())
    }
}
