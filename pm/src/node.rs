//! One node of the parameter manager: its store of owned keys and replicas, its intents, and the
//! protocol's reaction to API calls, sync rounds and messages. A `Node` is a single-threaded state
//! machine; drivers (the deterministic [`crate::sim::Simulation`], the threaded
//! [`crate::cluster::Cluster`]) move its outgoing messages through a [`crate::Transport`].
//!
//! **Exactly one owner per key** (invariant): a key's [`OwnerRecord`] exists in exactly one place
//! — in one node's `owned` map or inside the one `Relocate` message carrying it; only
//! `Node::relocate` takes it out of `owned`, and it puts it into that message.
//!
//! **Conservation** (invariant): every push is added exactly once to the main copy — directly at
//! the owner, or as part of a replica's delta that is flushed ([`ToOwner::Flush`]), handed over
//! at expiry ([`ToOwner::IntentOff`]) or merged on relocation ([`Node::on_relocate`]); a request
//! reaching a non-owner is forwarded, never dropped (`Node::on_routed`). So at quiescence every
//! key equals its initial value plus the sum of all pushes to it, whatever moved where.
//!
//! **Versions never go backwards** (invariant): the main copy's version only increments and
//! travels with the record; a replica takes a refresh only if it is newer
//! (`Node::on_refresh`).
//!
//! **Relocation only with a single intent holder** (invariant, `Node::decide`): the owner
//! relocates a key only when exactly one node — not itself — holds active intent for it.
//!
//! **No replica outlives its intents without flushing its delta** (invariant,
//! [`Node::sync_round`]): when a node's last active intent for a key expires it drops the
//! replica and sends the unflushed delta with its `IntentOff`; a replica arriving after the
//! intent ended is refused, never installed.
//!
//! **All nodes agree at quiescence** (invariant): once no intent is active and no message is in
//! flight, no intent-driven replica exists, every full-mode replica has been refreshed to its
//! owner's version after the last flush, and every node's routing reaches the one owner, so a
//! pull from any node returns the same value.
//!
//! Concurrency: a `Node` is owned by one thread at a time (a `Mutex` in the threaded cluster);
//! values are plain `Vec<f32>` copied out under that lock, so no reader ever holds a reference
//! to a dropped replica and neither epoch-based reclamation (crossbeam-epoch) nor per-float
//! atomics (`atomic::Atomic<f32>`) are needed. They would be if reads went lock-free against a
//! concurrently refreshed replica, which this version does not do.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use crate::mutation::{self, Mutant};

use crate::error::PmError;
use crate::intent::{Intent, IntentBook, Transition};
use crate::message::{Key, Message, NodeId, OwnerRecord, ToOwner};
use crate::mode::PmMode;
use crate::routing::Routing;
use crate::stats::PmStats;
use crate::timing::ActionTiming;

/// Messages produced by one step of a node: `(destination, message)`, in send order.
pub type Outbox = Vec<(NodeId, Message)>;

/// A replica of a key held by a non-owner.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica {
    /// The local view: the owner's value at `version` plus `delta`.
    pub value: Vec<f32>,
    /// Local pushes not yet sent to the owner.
    pub delta: Vec<f32>,
    /// Deltas flushed to the owner (with their sequence numbers) that no refresh has yet shown
    /// to be in the owner's value: `value` is the last refresh plus these plus `delta`, so a
    /// refresh that overtakes a flush does not erase the node's own recent pushes from its view.
    pub in_flight: Vec<(u64, Vec<f32>)>,
    /// The owner's version this replica was last refreshed to.
    pub version: u64,
}

/// The outcome of a pull at one node.
#[derive(Debug, Clone, PartialEq)]
pub enum PullOutcome {
    /// Served locally: value and version.
    Local(Vec<f32>, u64),
    /// Sent to the owner as request `req`; the answer comes as a [`Message::PullReply`].
    Remote(u64),
}

/// One node's state.
#[derive(Debug, Clone)]
pub struct Node {
    me: NodeId,
    nodes: usize,
    keys: u64,
    width: usize,
    mode: PmMode,
    clock: u64,
    timing: ActionTiming,
    intents: IntentBook,
    owned: HashMap<Key, OwnerRecord>,
    replicas: HashMap<Key, Replica>,
    /// Replicas pushed to since the last round (a superset of those with a nonzero delta), so a
    /// round flushes without scanning every replica.
    pushed_replicas: BTreeSet<Key>,
    /// Owned keys marked `dirty` since the last round (a superset of the dirty main copies), so a
    /// round refreshes without scanning every owned key.
    dirty_owned: BTreeSet<Key>,
    routing: Routing,
    next_req: u64,
    /// Sequence number of this node's next [`ToOwner::Flush`] (increasing across keys).
    next_flush: u64,
    replies: HashMap<u64, (Vec<f32>, u64)>,
    write_replies: HashMap<u64, bool>,
    stats: PmStats,
}

impl Node {
    /// Node `me` of `nodes`, for a table of `keys` rows of `width` floats with initial values
    /// `init(key)`. Owns the keys `k` with `k % nodes == me`; in [`PmMode::Replicate`] also holds a
    /// replica of every other key.
    ///
    /// ```
    /// use ordo_pm::{Node, PmMode};
    /// let n = Node::new(1, 2, 4, 2, PmMode::AdaPm, |k| vec![k as f32; 2]).unwrap();
    /// assert!(n.owns(1) && n.owns(3) && !n.owns(0));
    /// ```
    pub fn new(
        me: NodeId,
        nodes: usize,
        keys: u64,
        width: usize,
        mode: PmMode,
        init: impl Fn(Key) -> Vec<f32>,
    ) -> Result<Self, PmError> {
        if nodes == 0 {
            return Err(PmError::NoNodes);
        }
        if me >= nodes {
            return Err(PmError::NodeOutOfRange { node: me, nodes });
        }
        let routing = Routing::new(nodes);
        let mut owned = HashMap::new();
        let mut replicas = HashMap::new();
        for k in 0..keys {
            let value = init(k);
            if value.len() != width {
                return Err(PmError::WrongWidth { got: value.len(), width });
            }
            if routing.home(k) == me {
                let all_others: BTreeSet<NodeId> = if mode == PmMode::Replicate {
                    (0..nodes).filter(|&n| n != me).collect()
                } else {
                    BTreeSet::new()
                };
                owned.insert(
                    k,
                    OwnerRecord {
                        value,
                        version: 0,
                        holders: Default::default(),
                        ended: Default::default(),
                        replicas: all_others,
                        moves: 0,
                        dirty: false,
                        flushed: Default::default(),
                    },
                );
            } else if mode == PmMode::Replicate {
                let delta = vec![0.0; width];
                replicas.insert(k, Replica { value, delta, in_flight: Vec::new(), version: 0 });
            }
        }
        Ok(Node {
            me,
            nodes,
            keys,
            width,
            mode,
            clock: 0,
            timing: ActionTiming::new(),
            intents: IntentBook::default(),
            owned,
            replicas,
            pushed_replicas: BTreeSet::new(),
            dirty_owned: BTreeSet::new(),
            routing,
            next_req: 0,
            next_flush: 1,
            replies: HashMap::new(),
            write_replies: HashMap::new(),
            stats: PmStats::default(),
        })
    }

    /// Every node of a `nodes`-node table, node `me` at index `me`, as [`Node::new`] builds
    /// each: [`PmError::NoNodes`] for none, and the first node's error if `init` gives a row of
    /// the wrong width.
    ///
    /// ```
    /// use ordo_pm::{Node, PmMode};
    /// let all = Node::all(2, 4, 1, PmMode::AdaPm, |k| vec![k as f32]).unwrap();
    /// assert!(all[1].owns(1) && all[0].owns(2));
    /// assert!(Node::all(0, 4, 1, PmMode::AdaPm, |k| vec![k as f32]).is_err());
    /// ```
    pub fn all(
        nodes: usize,
        keys: u64,
        width: usize,
        mode: PmMode,
        init: impl Fn(Key) -> Vec<f32>,
    ) -> Result<Vec<Node>, PmError> {
        if nodes == 0 {
            return Err(PmError::NoNodes);
        }
        (0..nodes).map(|me| Node::new(me, nodes, keys, width, mode, &init)).collect()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.me
    }
    /// Number of nodes in the cluster.
    pub fn nodes(&self) -> usize {
        self.nodes
    }
    /// Number of keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }
    /// Floats per key.
    pub fn width(&self) -> usize {
        self.width
    }
    /// The strategy.
    pub fn mode(&self) -> PmMode {
        self.mode
    }
    /// The node's clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }
    /// Counters.
    pub fn stats(&self) -> PmStats {
        self.stats
    }
    /// Whether this node holds the main copy of `key`.
    pub fn owns(&self, key: Key) -> bool {
        self.owned.contains_key(&key)
    }
    /// The main copy of `key`, if this node owns it.
    pub fn owned_record(&self, key: Key) -> Option<&OwnerRecord> {
        self.owned.get(&key)
    }
    /// This node's replica of `key`, if any.
    pub fn replica(&self, key: Key) -> Option<&Replica> {
        self.replicas.get(&key)
    }
    /// Whether no intent is pending or active here.
    pub fn intents_done(&self) -> bool {
        self.intents.is_empty()
    }
    /// Largest end clock among this node's intents.
    pub fn last_intent_end(&self) -> Option<u64> {
        self.intents.last_end()
    }
    /// The part of this node's state that decides its protocol steps, as a value to hash and
    /// compare: what a model checker must tell apart (`pm/tests/model_node.rs` explores the
    /// shipped node's transitions with stateright over it). See [`ProtocolState`].
    pub fn protocol_state(&self) -> ProtocolState<'_> {
        ProtocolState(self)
    }

    /// Keys held locally (owned or replicated), in no particular order.
    pub fn local_keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.owned.keys().chain(self.replicas.keys()).copied()
    }

    fn check_key(&self, key: Key) -> Result<(), PmError> {
        if key >= self.keys { Err(PmError::KeyOutOfRange { key, keys: self.keys }) } else { Ok(()) }
    }

    /// Whether an intent for `keys` over `[start, end)` is recorded at all (this mode uses
    /// intents); an empty period or a key out of range is an error.
    fn check_intent(&self, keys: &[Key], start: u64, end: u64) -> Result<bool, PmError> {
        if end <= start {
            return Err(PmError::EmptyIntent { start, end });
        }
        for &k in keys {
            self.check_key(k)?;
        }
        Ok(self.mode.uses_intents())
    }

    /// Signal intent to access `keys` while this node's clock is in `[start, end)`.
    pub fn intent(&mut self, keys: &[Key], start: u64, end: u64) -> Result<(), PmError> {
        if self.check_intent(keys, start, end)? {
            for &key in keys {
                self.intents.signal(Intent { key, start, end });
            }
        }
        Ok(())
    }

    /// Signal intent to access `keys` now, until the clock reaches `end` (`> clock`), and act on
    /// it at once instead of at the next round (see [`IntentBook::activate`]). For keys the node
    /// drew from those it holds ([`crate::sampling::sample_local`]): with the node registered as
    /// a holder at once, another node's intent arriving before the access makes the owner
    /// replicate the key instead of relocating it away, and a replica is not dropped under the
    /// access. Call it under the same lock as the draw ([`crate::cluster::NodeHandle::sample_local`]).
    ///
    /// ```
    /// use ordo_pm::{Node, PmMode};
    /// let mut n = Node::new(0, 2, 4, 1, PmMode::AdaPm, |_| vec![0.0]).unwrap();
    /// let mut out = Vec::new();
    /// n.intent_now(&[0], 1, &mut out).unwrap();
    /// assert!(out.is_empty()); // node 0 owns key 0: it holds intent for it without a message
    /// assert!(!n.intents_done());
    /// ```
    pub fn intent_now(&mut self, keys: &[Key], end: u64, out: &mut Outbox) -> Result<(), PmError> {
        let start = self.clock;
        if !self.check_intent(keys, start, end)? {
            return Ok(());
        }
        for &key in keys {
            if let Some(Transition::On(key, epoch)) =
                self.intents.activate(Intent { key, start, end })
            {
                let node = self.me;
                self.route(key, ToOwner::IntentOn { node, epoch }, out);
            }
        }
        Ok(())
    }

    /// Advance this node's clock by one.
    pub fn advance_clock(&mut self) {
        self.clock += 1;
    }

    fn send(&mut self, out: &mut Outbox, to: NodeId, msg: Message) {
        self.stats.messages += 1;
        self.stats.bytes_sent += msg.wire_bytes();
        out.push((to, msg));
    }

    /// Send (or, if this node owns the key, handle in place) a request for `key`'s owner.
    fn route(&mut self, key: Key, body: ToOwner, out: &mut Outbox) {
        if self.owns(key) {
            self.on_owner(key, body, out);
        } else {
            let to = self.routing.guess(key);
            self.send(out, to, Message::Routed { key, hops: 0, body });
        }
    }

    /// Add `delta` to `key` (additive update).
    pub fn push(&mut self, key: Key, delta: &[f32], out: &mut Outbox) -> Result<(), PmError> {
        self.check_key(key)?;
        if delta.len() != self.width {
            return Err(PmError::WrongWidth { got: delta.len(), width: self.width });
        }
        if let Some(rec) = self.owned.get_mut(&key) {
            add(&mut rec.value, delta);
            rec.version += 1;
            rec.dirty = true;
            self.dirty_owned.insert(key);
            self.stats.local_pushes += 1;
        } else if let Some(r) = self.replicas.get_mut(&key) {
            add(&mut r.value, delta);
            add(&mut r.delta, delta);
            self.pushed_replicas.insert(key);
            self.stats.local_pushes += 1;
        } else {
            self.stats.remote_pushes += 1;
            self.route(key, ToOwner::Push { delta: delta.to_vec() }, out);
        }
        Ok(())
    }

    /// Read `key`: locally if owned or replicated, else a request to the owner.
    pub fn pull(&mut self, key: Key, out: &mut Outbox) -> Result<PullOutcome, PmError> {
        self.check_key(key)?;
        if let Some(rec) = self.owned.get(&key) {
            self.stats.local_pulls += 1;
            return Ok(PullOutcome::Local(rec.value.clone(), rec.version));
        }
        if let Some(r) = self.replicas.get(&key) {
            self.stats.local_pulls += 1;
            return Ok(PullOutcome::Local(r.value.clone(), r.version));
        }
        self.stats.remote_pulls += 1;
        let req = self.next_req;
        self.next_req += 1;
        let node = self.me;
        self.route(key, ToOwner::Pull { node, req }, out);
        Ok(PullOutcome::Remote(req))
    }

    /// Overwrite `key` with `values` as of timestamp `ts` if the main copy's version is `≤ ts`
    /// (then its version becomes `ts + 1`; pushes count one version each). Always decided by the
    /// owner; a replica's later flush adds on top ("set, then add"). The answer is local if this
    /// node owns the key, else it comes as a [`Message::WriteReply`] ([`Node::take_write_reply`]).
    pub fn write_if_newer(
        &mut self,
        key: Key,
        ts: u64,
        values: &[f32],
        out: &mut Outbox,
    ) -> Result<u64, PmError> {
        self.check_key(key)?;
        if values.len() != self.width {
            return Err(PmError::WrongWidth { got: values.len(), width: self.width });
        }
        let req = self.next_req;
        self.next_req += 1;
        let node = self.me;
        if !self.owns(key) {
            self.stats.remote_pushes += 1;
        } else {
            self.stats.local_pushes += 1;
        }
        self.route(key, ToOwner::Write { node, req, ts, values: values.to_vec() }, out);
        Ok(req)
    }

    /// The answer to write `req`, once it arrived.
    pub fn take_write_reply(&mut self, req: u64) -> Option<bool> {
        self.write_replies.remove(&req)
    }

    /// Whether this node has nothing left to do: no intent, no unflushed replica delta, no
    /// main copy with replicas awaiting a refresh.
    pub fn is_quiet(&self) -> bool {
        self.intents.is_empty()
            && self
                .pushed_replicas
                .iter()
                .all(|k| self.replicas.get(k).is_none_or(|r| r.delta.iter().all(|&x| x == 0.0)))
            && self
                .dirty_owned
                .iter()
                .all(|k| self.owned.get(k).is_none_or(|r| !r.dirty || r.replicas.is_empty()))
    }

    /// The answer to remote pull `req`, once it arrived.
    pub fn take_reply(&mut self, req: u64) -> Option<(Vec<f32>, u64)> {
        self.replies.remove(&req)
    }

    /// A communication round: update the clock-rate estimate, turn intents on and off (dropping
    /// expired replicas with their delta), flush replica deltas to owners and refresh the
    /// replicas of keys updated since the last round.
    pub fn sync_round(&mut self, out: &mut Outbox) {
        self.timing.round(self.clock);
        let immediate = !self.mode.adaptive_timing();
        for t in self.intents.round(self.clock, &self.timing, immediate) {
            match t {
                Transition::On(key, epoch) => {
                    let node = self.me;
                    self.route(key, ToOwner::IntentOn { node, epoch }, out);
                }
                Transition::Off(key, epoch) => {
                    let node = self.me;
                    let dropped = self.replicas.remove(&key);
                    let delta = match dropped {
                        Some(r) if !mutation::active(Mutant::PmReplicaExpiresUnflushed) => {
                            Some(r.delta)
                        }
                        // Mutant: the replica's unflushed pushes vanish with it.
                        _ => None,
                    };
                    self.route(key, ToOwner::IntentOff { node, epoch, delta }, out);
                }
            }
        }
        // Only pushed replicas can have a delta; in key order, as the deterministic sim expects.
        let mut flushes: Vec<(Key, u64, Vec<f32>)> = Vec::new();
        for key in std::mem::take(&mut self.pushed_replicas) {
            if let Some(r) = self.replicas.get_mut(&key)
                && r.delta.iter().any(|&x| x != 0.0)
            {
                let delta = std::mem::replace(&mut r.delta, vec![0.0; self.width]);
                r.in_flight.push((self.next_flush, delta.clone()));
                flushes.push((key, self.next_flush, delta));
                self.next_flush += 1;
            }
        }
        for (key, seq, delta) in flushes {
            let node = self.me;
            self.route(key, ToOwner::Flush { node, seq, delta }, out);
        }
        // A dirty main copy without replicas leaves the list but stays dirty: [`Node::decide`]
        // lists it again when it creates a replica of it.
        let refresh: Vec<Key> = std::mem::take(&mut self.dirty_owned)
            .into_iter()
            .filter(|k| self.owned.get(k).is_some_and(|r| r.dirty && !r.replicas.is_empty()))
            .collect();
        for key in refresh {
            let rec = self.owned.get_mut(&key).expect("listed above");
            rec.dirty = false;
            let (value, version) = (rec.value.clone(), rec.version);
            let to: Vec<(NodeId, u64)> = rec
                .replicas
                .iter()
                .map(|&n| (n, rec.flushed.get(&n).copied().unwrap_or(0)))
                .collect();
            for (n, acked) in to {
                let msg =
                    Message::Refresh { key, value: value.clone(), version, owner: self.me, acked };
                self.send(out, n, msg);
            }
        }
    }

    /// Handle a message from `from`.
    pub fn handle(&mut self, _from: NodeId, msg: Message, out: &mut Outbox) {
        match msg {
            Message::Routed { key, hops, body } => self.on_routed(key, hops, body, out),
            Message::Relocate { key, record } => self.on_relocate(key, record, out),
            Message::ReplicaCreate { key, value, version, owner, acked } => {
                self.on_replica_create(key, (value, version, acked), owner, out)
            }
            Message::Refresh { key, value, version, owner, acked } => {
                self.on_refresh(key, (value, version, acked), owner)
            }
            Message::PullReply { key, req, value, version, owner } => {
                if !self.owns(key) {
                    self.routing.learned(key, owner);
                }
                self.replies.insert(req, (value, version));
            }
            Message::WriteReply { key, req, landed, owner } => {
                if !self.owns(key) {
                    self.routing.learned(key, owner);
                }
                self.write_replies.insert(req, landed);
            }
        }
    }

    /// A request for `key`'s owner: handle it if this node owns the key, else pass it on.
    fn on_routed(&mut self, key: Key, hops: u32, body: ToOwner, out: &mut Outbox) {
        if self.owns(key) {
            return self.on_owner(key, body, out);
        }
        if self.routing.has_pointer(key) && mutation::active(Mutant::PmStaleOwnerNoForward) {
            // Mutant: the stale owner takes the request as delivered and does not forward it.
            return;
        }
        self.stats.forwards += 1;
        let to = self.routing.next_hop(key);
        self.send(out, to, Message::Routed { key, hops: hops + 1, body });
    }

    /// The owner's handling of a request.
    fn on_owner(&mut self, key: Key, body: ToOwner, out: &mut Outbox) {
        let me = self.me;
        let rec = self.owned.get_mut(&key).expect("on_owner is called only at the owner");
        match body {
            ToOwner::Push { delta } => {
                add(&mut rec.value, &delta);
                rec.version += 1;
                rec.dirty = true;
                self.dirty_owned.insert(key);
            }
            ToOwner::Flush { node, seq, delta } => {
                add(&mut rec.value, &delta);
                rec.version += 1;
                rec.dirty = true;
                self.dirty_owned.insert(key);
                let acked = rec.flushed.entry(node).or_insert(0);
                *acked = (*acked).max(seq);
            }
            ToOwner::Pull { node, req } => {
                let msg = Message::PullReply {
                    key,
                    req,
                    value: rec.value.clone(),
                    version: rec.version,
                    owner: me,
                };
                if node == me {
                    self.replies.insert(req, (rec.value.clone(), rec.version));
                } else {
                    self.send(out, node, msg);
                }
                return;
            }
            ToOwner::Write { node, req, ts, values } => {
                let landed = rec.version <= ts;
                if landed {
                    rec.value = values;
                    rec.version = ts + 1;
                    rec.dirty = true;
                    self.dirty_owned.insert(key);
                }
                if node == me {
                    self.write_replies.insert(req, landed);
                } else {
                    self.send(out, node, Message::WriteReply { key, req, landed, owner: me });
                }
                return;
            }
            ToOwner::IntentOn { node, epoch } => {
                if rec.ended.get(&node).is_some_and(|&e| e >= epoch) {
                    return; // overtaken by its own IntentOff
                }
                rec.holders.insert(node, epoch);
            }
            ToOwner::IntentOff { node, epoch, delta } => {
                if let Some(d) = delta {
                    add(&mut rec.value, &d);
                    rec.version += 1;
                    rec.dirty = true;
                    self.dirty_owned.insert(key);
                }
                if rec.holders.get(&node) == Some(&epoch) {
                    rec.holders.remove(&node);
                }
                let e = rec.ended.entry(node).or_insert(0);
                *e = (*e).max(epoch);
                rec.replicas.remove(&node);
            }
            ToOwner::Refuse { node } => {
                if !rec.holders.contains_key(&node) {
                    rec.replicas.remove(&node);
                }
            }
        }
        self.decide(key, out);
    }

    /// The owner's choice on intent (paper 002 §4.1): relocate to the one node with active intent,
    /// replicate to every node with active intent when several have it.
    fn decide(&mut self, key: Key, out: &mut Outbox) {
        if !self.mode.uses_intents() {
            return;
        }
        let me = self.me;
        let rec = &self.owned[&key];
        let others: Vec<NodeId> = rec.holders.keys().copied().filter(|&n| n != me).collect();
        let single_holder = rec.holders.len() == 1 && others.len() == 1;
        let relocate_to = if mutation::active(Mutant::PmRelocateWithTwoHolders) {
            // Mutant: relocate to some holder however many hold intent.
            others.last().copied().filter(|_| !rec.holders.contains_key(&me))
        } else {
            others.first().copied().filter(|_| single_holder)
        };
        if let Some(to) = relocate_to.filter(|_| self.mode.relocates()) {
            return self.relocate(key, to, out);
        }
        let replicate = self.mode.replicates() && (rec.holders.len() > 1 || !self.mode.relocates());
        if replicate {
            let missing: Vec<NodeId> =
                others.into_iter().filter(|n| !rec.replicas.contains(n)).collect();
            for n in missing {
                let rec = self.owned.get_mut(&key).expect("owned");
                rec.replicas.insert(n);
                if rec.dirty {
                    self.dirty_owned.insert(key);
                }
                let msg = Message::ReplicaCreate {
                    key,
                    value: rec.value.clone(),
                    version: rec.version,
                    owner: me,
                    acked: rec.flushed.get(&n).copied().unwrap_or(0),
                };
                self.stats.replications += 1;
                self.send(out, n, msg);
            }
        }
    }

    /// Hand `key`'s main copy to `to`.
    fn relocate(&mut self, key: Key, to: NodeId, out: &mut Outbox) {
        let mut record = self.owned.remove(&key).expect("relocate is called only at the owner");
        record.moves += 1;
        self.routing.moved(key, to);
        self.stats.relocations += 1;
        self.send(out, to, Message::Relocate { key, record });
    }

    /// Become `key`'s owner; a local replica's unflushed delta joins the main copy.
    pub fn on_relocate(&mut self, key: Key, mut record: OwnerRecord, out: &mut Outbox) {
        // Mutant: pushes made to the replica while the relocation was in flight are lost.
        let keep_delta = !mutation::active(Mutant::PmRelocateDropsReplicaDelta);
        if let Some(r) = self.replicas.remove(&key)
            && keep_delta
            && r.delta.iter().any(|&x| x != 0.0)
        {
            add(&mut record.value, &r.delta);
            record.version += 1;
            record.dirty = true;
        }
        record.replicas.remove(&self.me);
        if record.dirty {
            self.dirty_owned.insert(key);
        }
        self.routing.acquired(key, self.me);
        self.owned.insert(key, record);
        self.decide(key, out);
    }

    fn on_replica_create(&mut self, key: Key, fresh: Fresh, owner: NodeId, out: &mut Outbox) {
        if self.owns(key) {
            return; // overtaken by a relocation to this node
        }
        self.routing.learned(key, owner);
        if self.replicas.contains_key(&key) {
            return self.on_refresh(key, fresh, owner);
        }
        if self.intents.is_active(key) {
            let (value, version, _) = fresh;
            let (delta, in_flight) = (vec![0.0; self.width], Vec::new());
            self.replicas.insert(key, Replica { value, delta, in_flight, version });
        } else {
            let node = self.me;
            self.route(key, ToOwner::Refuse { node }, out);
        }
    }

    /// A fresh value for a replica: taken only if newer, with the flushes it does not yet hold
    /// (sequence above `acked`) and the local unflushed delta on top.
    fn on_refresh(&mut self, key: Key, (value, version, acked): Fresh, owner: NodeId) {
        if self.owns(key) {
            return;
        }
        self.routing.learned(key, owner);
        if let Some(r) = self.replicas.get_mut(&key)
            && version > r.version
        {
            r.in_flight.retain(|(seq, _)| *seq > acked);
            r.value = value;
            for (_, d) in &r.in_flight {
                add(&mut r.value, d);
            }
            add(&mut r.value, &r.delta);
            r.version = version;
        }
    }
}

/// A node's protocol state ([`Node::protocol_state`]): its id, clock, intents, routing
/// pointers, main copies, replicas, the keys listed for the next round and its next flush
/// sequence number. Left out: the counters and statistics that no step reads to decide (`stats`,
/// the timing estimate, a record's `moves`, pull and write request ids and their answers), so two
/// nodes that differ only there are one state. Values compare by their bits.
#[derive(Debug, Clone, Copy)]
pub struct ProtocolState<'a>(&'a Node);

impl ProtocolState<'_> {
    fn feed<H: Hasher>(&self, h: &mut H) {
        let n = self.0;
        (n.me, n.clock, n.next_flush).hash(h);
        n.intents.hash(h);
        n.routing.hash(h);
        n.pushed_replicas.hash(h);
        n.dirty_owned.hash(h);
        let mut owned: Vec<_> = n.owned.iter().collect();
        owned.sort_unstable_by_key(|(k, _)| **k);
        for (k, r) in owned {
            (k, bits(&r.value), r.version, &r.holders, &r.ended, &r.replicas).hash(h);
            (r.dirty, &r.flushed).hash(h);
        }
        let mut replicas: Vec<_> = n.replicas.iter().collect();
        replicas.sort_unstable_by_key(|(k, _)| **k);
        for (k, r) in replicas {
            (k, bits(&r.value), bits(&r.delta), r.version).hash(h);
            for (seq, d) in &r.in_flight {
                (seq, bits(d)).hash(h);
            }
        }
    }
}

impl Hash for ProtocolState<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.feed(h);
    }
}

/// Equal when every field [`ProtocolState`] keeps is equal (compared through the same feed as
/// the hash, with a collision-free recorder).
impl PartialEq for ProtocolState<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (mut a, mut b) = (Recorder::default(), Recorder::default());
        self.feed(&mut a);
        other.feed(&mut b);
        a.0 == b.0
    }
}

impl Eq for ProtocolState<'_> {}

/// A [`Hasher`] that keeps every byte it is fed, so equal records mean equal fields.
#[derive(Default)]
struct Recorder(Vec<u8>);

impl Hasher for Recorder {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// An owner's value for a replica: value, version, and the highest flush sequence number of the
/// receiver it holds.
type Fresh = (Vec<f32>, u64, u64);

fn add(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}
