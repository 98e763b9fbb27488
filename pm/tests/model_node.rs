//! AdaPM's protocol checked on the shipped [`Node`]: a stateright [`Model`] whose state is three
//! real nodes and the messages between them, and whose transitions call the node's own API and
//! message handler (`intent_now`, `push`, `advance_clock` + `sync_round`, `sync_round`,
//! `handle`). Every interleaving is explored for one key (home: node 0), each node signalling
//! intent at most once, within the bounds of [`Cluster`]; messages travel in one FIFO queue per
//! ordered pair of nodes (the transport contract of `ordo_pm::transport`), and any non-empty
//! queue may deliver next. States are told apart by [`Node::protocol_state`], which leaves out
//! counters and statistics.
//!
//! Properties, each `always`, in every reachable state:
//! - *one owner*: the key's main copy is at exactly one node or in exactly one `Relocate`;
//! - *conservation*: main copy + replica deltas + deltas in flight = pushes made;
//! - *single holder*: every `Relocate` in flight carries exactly one intent holder;
//! - *routing bounded*: a request's hop count ≤ the key's relocations so far + 2;
//! - *quiescent agreement*: with no message in flight and no intent left, no replica remains;
//!
//! and `sometimes` ones showing that relocation, replication and forwarding happen (so the
//! `always` ones are not vacuous). Pulls are left out: they carry no delta and route as pushes.
//!
//! With `--features mutants` and `ORDO_MUTANT=pm-…` the test is expected to fail: each mutant of
//! `ordo_pm::mutation` breaks one of the properties on the shipped code.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use ordo_pm::{Key, Message, Node, NodeId, PmMode, ToOwner};
use stateright::{Checker, Expectation, HasDiscoveries, Model, Property};

/// Nodes in the cluster.
const NODES: usize = 3;
/// The one key (its home is node 0).
const KEY: Key = 0;

/// The bound of the exploration.
#[derive(Debug, Clone)]
struct Cluster {
    /// Pushes in a run, over all nodes.
    pushes: u32,
    /// Nodes that signal intent in a run (each at most once).
    intents: u32,
}

/// Three shipped nodes and the network between them, with ghost counts the properties read.
#[derive(Debug, Clone)]
struct State {
    nodes: Vec<Node>,
    /// `net[from * NODES + to]`: FIFO queue.
    net: Vec<VecDeque<Message>>,
    /// Ghost: pushes made.
    pushed: u32,
    /// Ghost: relocations sent.
    moves: u32,
    /// Ghost: nodes that signalled intent (bit per node).
    signalled: u8,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for n in &self.nodes {
            n.protocol_state().hash(h);
        }
        for q in &self.net {
            q.len().hash(h);
            for m in q {
                hash_message(m, h);
            }
        }
        (self.pushed, self.moves, self.signalled).hash(h);
    }
}

/// The same state when the nodes' protocol states, the queues and the ghosts are equal.
impl PartialEq for State {
    fn eq(&self, other: &Self) -> bool {
        self.nodes.iter().zip(&other.nodes).all(|(a, b)| a.protocol_state() == b.protocol_state())
            && self.net == other.net
            && (self.pushed, self.moves, self.signalled)
                == (other.pushed, other.moves, other.signalled)
    }
}

/// A message's fields, floats by their bits (messages hold floats, so they have no `Hash`).
fn hash_message<H: Hasher>(m: &Message, h: &mut H) {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    std::mem::discriminant(m).hash(h);
    match m {
        Message::Routed { key, hops, body } => {
            (key, hops).hash(h);
            std::mem::discriminant(body).hash(h);
            match body {
                ToOwner::IntentOn { node, epoch } => (node, epoch).hash(h),
                ToOwner::IntentOff { node, epoch, delta } => {
                    (node, epoch, delta.as_deref().map(bits)).hash(h)
                }
                ToOwner::Push { delta } => bits(delta).hash(h),
                ToOwner::Flush { node, seq, delta } => (node, seq, bits(delta)).hash(h),
                ToOwner::Pull { node, req } => (node, req).hash(h),
                ToOwner::Write { node, req, ts, values } => (node, req, ts, bits(values)).hash(h),
                ToOwner::Refuse { node } => node.hash(h),
            }
        }
        Message::Relocate { key, record: r } => {
            (key, bits(&r.value), r.version, &r.holders, &r.ended, &r.replicas).hash(h);
            (r.moves, r.dirty, &r.flushed).hash(h);
        }
        Message::ReplicaCreate { key, value, version, owner, acked }
        | Message::Refresh { key, value, version, owner, acked } => {
            (key, bits(value), version, owner, acked).hash(h)
        }
        Message::PullReply { key, req, value, version, owner } => {
            (key, req, bits(value), version, owner).hash(h)
        }
        Message::WriteReply { key, req, landed, owner } => (key, req, landed, owner).hash(h),
    }
}

/// Whether node `n`'s sync round has anything to send: a replica delta to flush or a main copy
/// updated since its replicas were refreshed (a round with nothing to do changes no state the
/// properties read, so it is left out of the actions).
fn has_work(n: &Node) -> bool {
    n.replica(KEY).is_some_and(|r| r.delta.iter().any(|&x| x != 0.0))
        || n.owned_record(KEY).is_some_and(|r| r.dirty && !r.replicas.is_empty())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    /// Node signals intent for the key and acts on it now (until its clock reaches 1).
    IntentNow(usize),
    /// Node pushes 1.0 to the key.
    Push(usize),
    /// Node's clock advances to 1 and it runs a sync round (its intent expires).
    Tick(usize),
    /// Node runs a sync round (flushes its replica's delta, refreshes replicas of its key).
    Round(usize),
    /// Deliver the head of queue `from → to`.
    Deliver(usize, usize),
}

fn in_flight(s: &State) -> impl Iterator<Item = &Message> {
    s.net.iter().flatten()
}

/// Main copy + replica deltas + deltas in flight.
fn total(s: &State) -> f32 {
    let mut t = 0.0;
    for n in &s.nodes {
        t += n.owned_record(KEY).map_or(0.0, |r| r.value[0]);
        t += n.replica(KEY).map_or(0.0, |r| r.delta[0]);
    }
    for m in in_flight(s) {
        t += match m {
            Message::Routed { body: ToOwner::Push { delta }, .. }
            | Message::Routed { body: ToOwner::Flush { delta, .. }, .. }
            | Message::Routed { body: ToOwner::IntentOff { delta: Some(delta), .. }, .. } => {
                delta[0]
            }
            Message::Relocate { record, .. } => record.value[0],
            _ => 0.0,
        };
    }
    t
}

impl State {
    /// Queue what node `from` sent.
    fn send(&mut self, from: NodeId, out: Vec<(NodeId, Message)>) {
        for (to, m) in out {
            if matches!(m, Message::Relocate { .. }) {
                self.moves += 1;
            }
            self.net[from * NODES + to].push_back(m);
        }
    }
}

impl Model for Cluster {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let nodes = Node::all(NODES, 1, 1, PmMode::AdaPm, |_| vec![0.0]).unwrap();
        let net = vec![VecDeque::new(); NODES * NODES];
        vec![State { nodes, net, pushed: 0, moves: 0, signalled: 0 }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for n in 0..NODES {
            let fresh = s.nodes[n].clock() == 0;
            if fresh && s.signalled & (1 << n) == 0 && s.signalled.count_ones() < self.intents {
                out.push(Action::IntentNow(n));
            }
            if s.pushed < self.pushes {
                out.push(Action::Push(n));
            }
            if fresh {
                out.push(Action::Tick(n));
            }
            if has_work(&s.nodes[n]) {
                out.push(Action::Round(n));
            }
        }
        for from in 0..NODES {
            for to in 0..NODES {
                if !s.net[from * NODES + to].is_empty() {
                    out.push(Action::Deliver(from, to));
                }
            }
        }
    }

    fn next_state(&self, last: &State, a: Action) -> Option<State> {
        let mut s = last.clone();
        let mut out = Vec::new();
        let at = match a {
            Action::IntentNow(n) => {
                s.signalled |= 1 << n;
                s.nodes[n].intent_now(&[KEY], 1, &mut out).unwrap();
                n
            }
            Action::Push(n) => {
                s.pushed += 1;
                s.nodes[n].push(KEY, &[1.0], &mut out).unwrap();
                n
            }
            Action::Tick(n) => {
                s.nodes[n].advance_clock();
                s.nodes[n].sync_round(&mut out);
                n
            }
            Action::Round(n) => {
                s.nodes[n].sync_round(&mut out);
                n
            }
            Action::Deliver(from, to) => {
                let m = s.net[from * NODES + to].pop_front()?;
                s.nodes[to].handle(from, m, &mut out);
                to
            }
        };
        s.send(at, out);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one owner", |_: &Cluster, s: &State| {
                let held = s.nodes.iter().filter(|n| n.owns(KEY)).count();
                let moving = in_flight(s).filter(|m| matches!(m, Message::Relocate { .. })).count();
                held + moving == 1
            }),
            Property::always("conservation", |_: &Cluster, s: &State| total(s) == s.pushed as f32),
            Property::always("single holder", |_: &Cluster, s: &State| {
                in_flight(s).all(|m| match m {
                    Message::Relocate { record, .. } => record.holders.len() == 1,
                    _ => true,
                })
            }),
            Property::always("routing bounded", |_: &Cluster, s: &State| {
                in_flight(s).all(|m| match m {
                    Message::Routed { hops, .. } => *hops <= s.moves + 2,
                    _ => true,
                })
            }),
            Property::always("quiescent agreement", |_: &Cluster, s: &State| {
                let quiet = in_flight(s).next().is_none() && s.nodes.iter().all(Node::intents_done);
                !quiet || s.nodes.iter().all(|n| n.replica(KEY).is_none())
            }),
            Property::sometimes("relocated", |_: &Cluster, s: &State| s.moves > 0),
            Property::sometimes("replicated", |_: &Cluster, s: &State| {
                s.nodes.iter().any(|n| n.replica(KEY).is_some())
            }),
            Property::sometimes("forwarded", |_: &Cluster, s: &State| {
                in_flight(s).any(|m| matches!(m, Message::Routed { hops, .. } if *hops > 0))
            }),
        ]
    }
}

/// Explore every reachable state of `cluster`: every `always` property holds (else the panic
/// shows the shortest counterexample), and every `sometimes` one is reached.
fn exhaust(cluster: Cluster) -> usize {
    // Stop at the first counterexample (a mutant on): the search is exhaustive otherwise.
    let checker =
        cluster.clone().checker().finish_when(HasDiscoveries::AnyFailures).spawn_bfs().join();
    for p in cluster.properties().into_iter().filter(|p| p.expectation == Expectation::Always) {
        if let Some(path) = checker.discovery(p.name) {
            panic!("{}: counterexample {:?}", p.name, path.into_actions());
        }
    }
    assert!(checker.is_done());
    checker.assert_properties();
    eprintln!("{cluster:?}: {} unique states", checker.unique_state_count());
    checker.unique_state_count()
}

/// Two nodes signal intent, one push: relocation, replication of a pushed replica, the owner's
/// move to the remaining holder when the other's intent ends, and forwarding by a stale owner.
#[test]
fn shipped_nodes_keep_every_property_two_intents_one_push() {
    assert!(exhaust(Cluster { pushes: 1, intents: 2 }) > 1_000);
}

/// All three nodes signal intent, no push: the owner's choice with two holders while it holds
/// none itself (where it must replicate, not relocate).
#[test]
fn shipped_nodes_keep_every_property_three_intents() {
    assert!(exhaust(Cluster { pushes: 0, intents: 3 }) > 1_000);
}
