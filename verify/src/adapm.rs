//! AdaPM's relocation, replication and routing (paper 002 §4, crate `ordo-pm`) as a stateright
//! [`Model`], exhausted for 3 nodes and 2 keys.
//!
//! Abstraction: a key's value is the number of pushes applied to it (so conservation is integer
//! arithmetic); each node may signal intent for each key once (on, then off), at most
//! [`AdaPmModel::intents`] activations in all, and the whole run makes [`AdaPmModel::pushes`]
//! pushes (the test's bound: 3 activations, 1 push — unbounded, 3 nodes × 2 keys exceed 18 GiB). Messages travel in one FIFO queue per ordered pair of
//! nodes (the transport contract of `ordo_pm::transport`); any non-empty queue may deliver next.
//! Replica refreshes and pulls are left out: they carry no delta (pulls route exactly like the
//! modelled pushes), so they cannot affect the checked properties.
//!
//! Properties (each an `always`, checked in every reachable state):
//! - *one owner*: a key's main copy is at exactly one node or in exactly one `Relocate` in flight;
//! - *conservation*: main copy + replica deltas + deltas in flight = pushes made;
//! - *single holder*: every `Relocate` in flight was sent with exactly one intent holder;
//! - *routing bounded*: a request's hop count ≤ the key's relocations + 2;
//! - *quiescent agreement*: with no message in flight and no intent active, no replica remains.
//!
//! plus `sometimes` properties showing the model reaches relocation, replication and forwarding
//! (so the `always` ones are not vacuous). Each `pm-*` [`Mutant`] breaks one of them.

use ordo::mutation::Mutant;
use stateright::{Model, Property};

/// Nodes in the model.
pub const NODES: usize = 3;
/// Keys in the model.
pub const KEYS: usize = 2;

/// A request for a key's owner (`ordo_pm::ToOwner`, values abstracted to counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    /// Intent became active at `node`.
    On(u8),
    /// Intent ended at `node`, with its replica's delta.
    Off(u8, u8),
    /// One push from a node without a local copy.
    Push,
    /// A replica's delta.
    Flush(u8, u8),
    /// A replica refused by `node` (its intent had ended).
    Refuse(u8),
}

/// The owner's record (`ordo_pm::OwnerRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rec {
    /// Pushes applied.
    pub value: u8,
    /// Nodes with active intent (bit per node).
    pub holders: u8,
    /// Nodes whose intent ended (bit per node).
    pub ended: u8,
    /// Nodes sent a replica (bit per node).
    pub replicas: u8,
}

/// A message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Msg {
    /// Routed to the owner of `key`.
    Routed {
        /// Key.
        key: u8,
        /// Forwards so far.
        hops: u8,
        /// Request.
        body: Body,
    },
    /// Ownership moves to the receiver.
    Relocate {
        /// Key.
        key: u8,
        /// The main copy.
        rec: Rec,
    },
    /// Start a replica.
    Create {
        /// Key.
        key: u8,
    },
}

/// Where a node's intent for a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentState {
    /// Not signaled yet.
    Idle,
    /// Active.
    Active,
    /// Ended.
    Done,
}

/// A global state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// `owned[k][n]`: node `n`'s main copy of key `k`.
    pub owned: [[Option<Rec>; NODES]; KEYS],
    /// `replica[k][n]`: node `n`'s replica delta of key `k`.
    pub replica: [[Option<u8>; NODES]; KEYS],
    /// `intent[k][n]`.
    pub intent: [[IntentState; NODES]; KEYS],
    /// `pointer[k][n]`: where node `n` sent key `k` last.
    pub pointer: [[Option<u8>; NODES]; KEYS],
    /// Relocations of each key so far.
    pub moves: [u8; KEYS],
    /// Pushes made to each key.
    pub pushed: [u8; KEYS],
    /// `net[from * NODES + to]`: FIFO queue.
    pub net: Vec<Vec<Msg>>,
}

/// A step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Node signals intent for key, which becomes active.
    IntentOn(u8, u8),
    /// Node's intent for key expires.
    IntentOff(u8, u8),
    /// Node pushes once to key.
    Push(u8, u8),
    /// Node flushes its replica delta of key.
    Flush(u8, u8),
    /// Deliver the head of queue `from → to`.
    Deliver(u8, u8),
}

/// The model, optionally with one of the `pm-*` mutants.
#[derive(Debug, Clone)]
pub struct AdaPmModel {
    /// Total pushes in a run.
    pub pushes: u8,
    /// Total intent activations in a run (over all nodes and keys).
    pub intents: u8,
    /// The seeded bug, if any.
    pub mutant: Option<Mutant>,
}

impl AdaPmModel {
    /// The protocol (with `mutant`, if any) bounded to `intents` intent activations and
    /// `pushes` pushes per run.
    pub fn new(intents: u8, pushes: u8, mutant: Option<Mutant>) -> Self {
        AdaPmModel { pushes, intents, mutant }
    }

    fn on(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }
}

fn home(key: usize) -> usize {
    key % NODES
}

fn send(s: &mut State, from: usize, to: usize, m: Msg) {
    s.net[from * NODES + to].push(m);
}

impl AdaPmModel {
    fn route(&self, s: &mut State, n: usize, key: usize, body: Body) {
        if s.owned[key][n].is_some() {
            return self.at_owner(s, n, key, body);
        }
        // Location guess: the home node (a cache would only shorten paths).
        let to = home(key);
        if to == n {
            self.routed(s, n, key, 0, body);
        } else {
            send(s, n, to, Msg::Routed { key: key as u8, hops: 0, body });
        }
    }

    fn routed(&self, s: &mut State, n: usize, key: usize, hops: u8, body: Body) {
        if s.owned[key][n].is_some() {
            return self.at_owner(s, n, key, body);
        }
        let to = match s.pointer[key][n] {
            Some(_) if self.on(Mutant::PmStaleOwnerNoForward) => return,
            Some(p) => p as usize,
            None => home(key),
        };
        send(s, n, to, Msg::Routed { key: key as u8, hops: hops + 1, body });
    }

    fn at_owner(&self, s: &mut State, n: usize, key: usize, body: Body) {
        let rec = s.owned[key][n].as_mut().expect("owner");
        match body {
            Body::On(h) => {
                if rec.ended & (1 << h) == 0 {
                    rec.holders |= 1 << h;
                }
            }
            Body::Off(h, d) => {
                rec.value += d;
                rec.holders &= !(1 << h);
                rec.ended |= 1 << h;
                rec.replicas &= !(1 << h);
            }
            Body::Push => rec.value += 1,
            Body::Flush(_, d) => rec.value += d,
            Body::Refuse(h) => {
                if rec.holders & (1 << h) == 0 {
                    rec.replicas &= !(1 << h);
                }
            }
        }
        self.decide(s, n, key);
    }

    fn decide(&self, s: &mut State, n: usize, key: usize) {
        let rec = s.owned[key][n].expect("owner");
        let others = rec.holders & !(1 << n);
        let single = rec.holders.count_ones() == 1 && others != 0;
        let relocate = if self.on(Mutant::PmRelocateWithTwoHolders) {
            others != 0 && rec.holders & (1 << n) == 0
        } else {
            single
        };
        if relocate {
            let to = 7 - others.leading_zeros() as usize; // highest holder
            s.owned[key][n] = None;
            s.pointer[key][n] = Some(to as u8);
            s.moves[key] += 1;
            send(s, n, to, Msg::Relocate { key: key as u8, rec });
        } else if rec.holders.count_ones() > 1 {
            for h in 0..NODES {
                if others & (1 << h) != 0 && rec.replicas & (1 << h) == 0 {
                    s.owned[key][n].as_mut().expect("owner").replicas |= 1 << h;
                    send(s, n, h, Msg::Create { key: key as u8 });
                }
            }
        }
    }

    fn deliver(&self, s: &mut State, to: usize, m: Msg) {
        match m {
            Msg::Routed { key, hops, body } => self.routed(s, to, key as usize, hops, body),
            Msg::Relocate { key, mut rec } => {
                let k = key as usize;
                if let Some(d) = s.replica[k][to].take()
                    && !self.on(Mutant::PmRelocateDropsReplicaDelta)
                {
                    rec.value += d;
                }
                rec.replicas &= !(1 << to);
                s.pointer[k][to] = None;
                s.owned[k][to] = Some(rec);
                self.decide(s, to, k);
            }
            Msg::Create { key } => {
                let k = key as usize;
                if s.owned[k][to].is_some() || s.replica[k][to].is_some() {
                    return;
                }
                if s.intent[k][to] == IntentState::Active {
                    s.replica[k][to] = Some(0);
                } else {
                    self.route(s, to, k, Body::Refuse(to as u8));
                }
            }
        }
    }
}

fn in_flight(s: &State) -> impl Iterator<Item = &Msg> {
    s.net.iter().flatten()
}

/// Whether key `k` satisfies conservation in `s`.
pub fn conserved(s: &State, k: usize) -> bool {
    let mut total: u32 = s.owned[k].iter().flatten().map(|r| u32::from(r.value)).sum();
    total += s.replica[k].iter().flatten().map(|&d| u32::from(d)).sum::<u32>();
    for m in in_flight(s) {
        match *m {
            Msg::Routed { key, body, .. } if key as usize == k => {
                total += match body {
                    Body::Push => 1,
                    Body::Off(_, d) | Body::Flush(_, d) => u32::from(d),
                    _ => 0,
                }
            }
            Msg::Relocate { key, rec } if key as usize == k => total += u32::from(rec.value),
            _ => {}
        }
    }
    total == u32::from(s.pushed[k])
}

impl Model for AdaPmModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut owned = [[None; NODES]; KEYS];
        for (k, row) in owned.iter_mut().enumerate() {
            row[home(k)] = Some(Rec { value: 0, holders: 0, ended: 0, replicas: 0 });
        }
        vec![State {
            owned,
            replica: [[None; NODES]; KEYS],
            intent: [[IntentState::Idle; NODES]; KEYS],
            pointer: [[None; NODES]; KEYS],
            moves: [0; KEYS],
            pushed: [0; KEYS],
            net: vec![Vec::new(); NODES * NODES],
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let pushed: u8 = s.pushed.iter().sum();
        let signaled = s.intent.iter().flatten().filter(|i| **i != IntentState::Idle).count();
        for k in 0..KEYS {
            for n in 0..NODES {
                let (k8, n8) = (k as u8, n as u8);
                match s.intent[k][n] {
                    IntentState::Idle if signaled < usize::from(self.intents) => {
                        out.push(Action::IntentOn(n8, k8))
                    }
                    IntentState::Idle => {}
                    IntentState::Active => out.push(Action::IntentOff(n8, k8)),
                    IntentState::Done => {}
                }
                if pushed < self.pushes {
                    out.push(Action::Push(n8, k8));
                }
                if s.replica[k][n].is_some_and(|d| d > 0) {
                    out.push(Action::Flush(n8, k8));
                }
            }
        }
        for from in 0..NODES {
            for to in 0..NODES {
                if !s.net[from * NODES + to].is_empty() {
                    out.push(Action::Deliver(from as u8, to as u8));
                }
            }
        }
    }

    fn next_state(&self, last: &State, a: Action) -> Option<State> {
        let mut s = last.clone();
        match a {
            Action::IntentOn(n, k) => {
                let (n, k) = (n as usize, k as usize);
                s.intent[k][n] = IntentState::Active;
                self.route(&mut s, n, k, Body::On(n as u8));
            }
            Action::IntentOff(n, k) => {
                let (n, k) = (n as usize, k as usize);
                s.intent[k][n] = IntentState::Done;
                let d = s.replica[k][n].take().unwrap_or(0);
                let d = if self.on(Mutant::PmReplicaExpiresUnflushed) { 0 } else { d };
                self.route(&mut s, n, k, Body::Off(n as u8, d));
            }
            Action::Push(n, k) => {
                let (n, k) = (n as usize, k as usize);
                s.pushed[k] += 1;
                if let Some(r) = s.owned[k][n].as_mut() {
                    r.value += 1;
                } else if let Some(d) = s.replica[k][n].as_mut() {
                    *d += 1;
                } else {
                    self.route(&mut s, n, k, Body::Push);
                }
            }
            Action::Flush(n, k) => {
                let (n, k) = (n as usize, k as usize);
                let d = s.replica[k][n].replace(0).unwrap_or(0);
                self.route(&mut s, n, k, Body::Flush(n as u8, d));
            }
            Action::Deliver(from, to) => {
                let q = &mut s.net[from as usize * NODES + to as usize];
                let m = q.remove(0);
                self.deliver(&mut s, to as usize, m);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one owner", |_: &AdaPmModel, s: &State| {
                (0..KEYS).all(|k| {
                    let held = s.owned[k].iter().flatten().count();
                    let moving = in_flight(s)
                        .filter(|m| matches!(m, Msg::Relocate { key, .. } if *key as usize == k))
                        .count();
                    held + moving == 1
                })
            }),
            Property::always("conservation", |_: &AdaPmModel, s: &State| {
                (0..KEYS).all(|k| conserved(s, k))
            }),
            Property::always("single holder", |_: &AdaPmModel, s: &State| {
                in_flight(s).all(|m| match m {
                    Msg::Relocate { rec, .. } => rec.holders.count_ones() == 1,
                    _ => true,
                })
            }),
            Property::always("routing bounded", |_: &AdaPmModel, s: &State| {
                in_flight(s).all(|m| match m {
                    Msg::Routed { key, hops, .. } => *hops <= s.moves[*key as usize] + 2,
                    _ => true,
                })
            }),
            Property::always("quiescent agreement", |_: &AdaPmModel, s: &State| {
                let quiet = in_flight(s).next().is_none()
                    && s.intent.iter().flatten().all(|i| *i != IntentState::Active);
                !quiet || s.replica.iter().flatten().all(Option::is_none)
            }),
            Property::sometimes("relocated", |_: &AdaPmModel, s: &State| {
                s.moves.iter().any(|&m| m > 0)
            }),
            Property::sometimes("replicated", |_: &AdaPmModel, s: &State| {
                s.replica.iter().flatten().any(|r| r.is_some())
            }),
            Property::sometimes("forwarded", |_: &AdaPmModel, s: &State| {
                in_flight(s).any(|m| matches!(m, Msg::Routed { hops, .. } if *hops > 0))
            }),
        ]
    }
}

/// The `pm-*` mutants this model kills, each with the property it breaks.
pub const MUTANTS: [(Mutant, &str); 4] = [
    (Mutant::PmRelocateWithTwoHolders, "single holder"),
    (Mutant::PmRelocateDropsReplicaDelta, "conservation"),
    (Mutant::PmReplicaExpiresUnflushed, "conservation"),
    (Mutant::PmStaleOwnerNoForward, "conservation"),
];
