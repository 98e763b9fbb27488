//! AMPNet's message protocol (paper 004, §3–§5; crate `ordo-mp`) as a stateright [`Model`]:
//! the `max_active_keys` bound, the multi-parent / multi-child caches, the `Phi` origin record
//! and `min_update_interval`.
//!
//! The graph is the smallest that has every mechanism: the controller pumps instance `i` into a
//! `Cond` that routes it to replica `i mod 2` of a parameterized node (Figure 4b); a `Phi` joins
//! the replicas; a `Bcast` feeds both inputs of a `Concat` (multi-child cache backward,
//! multi-parent cache forward); the loss turns around. Every message in flight is in one
//! multiset and any of them may be delivered next, so the model covers every order the
//! runtime's inboxes and priority queues can produce (and more).
//!
//! Properties:
//! - *mak bound*: in-flight instances never exceed `max_active_keys`;
//! - *one backward per forward*: every backward finds the forward it answers (a replica's
//!   recorded activation, a Phi origin, a controller instance), and none arrives twice;
//! - *min_update_interval*: no update is applied with fewer gradients accumulated;
//! - *no cache entry leaks*: once nothing is in flight and nothing can be pumped, every
//!   instance completed and every cache and record is empty.
//!
//! What it cannot see: payload values (the runtime's equivalence and replay tests do), and
//! loops (the RNN's `Isu` counters; `ordo-mp`'s replay and cache-leak tests cover them).

use std::collections::{BTreeMap, BTreeSet};

use ordo_mp::mutation::Mutant;
use stateright::{Model, Property};

/// The mutants this model is the checker of.
pub const AMPNET_MUTANTS: [Mutant; 3] =
    [Mutant::AmpMakOffByOne, Mutant::AmpPhiForgetsOrigin, Mutant::AmpUpdateBeforeInterval];

/// Nodes of the modelled graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// The controller.
    Ctrl,
    /// The replicas' `Cond`, routing instance `i` to replica `i mod 2`. (The runtime routes by
    /// the replica its controller stamps at the pump, balancing active instances; the
    /// properties here hold for any routing that is a function of the state.)
    Split,
    /// Replica `r` of the parameterized node.
    Replica(u8),
    /// The `Phi` joining the replicas.
    Join,
    /// The `Bcast` to both inputs of the `Concat`.
    Bcast,
    /// The two-parent `Concat`.
    Concat,
    /// The loss.
    Loss,
}

/// A message in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Forward to `node`'s input `port`, for an instance.
    Fwd(Node, u8, u8),
    /// Backward to `node`'s output `port`, for an instance.
    Bwd(Node, u8, u8),
    /// Update message of replica `r` to itself.
    Upd(u8),
}

/// What can happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The controller pumps the next instance.
    Pump,
    /// A message in flight is delivered.
    Deliver(Msg),
}

/// One replica of the parameterized node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Replica {
    /// Instances whose activation is recorded.
    pub acts: BTreeSet<u8>,
    /// Gradients accumulated since the last update.
    pub accumulated: u8,
    /// An update message is in flight.
    pub requested: bool,
}

/// The protocol's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AmpState {
    /// Next instance to pump.
    pub next: u8,
    /// Instances pumped and not completed.
    pub active: u8,
    /// Instances whose backward reached the controller.
    pub completed: BTreeSet<u8>,
    /// Messages in flight (a multiset).
    pub net: BTreeMap<Msg, u8>,
    /// The Phi's origin record.
    pub origin: BTreeMap<u8, u8>,
    /// The input the Phi's latest forward came from.
    pub latest: u8,
    /// Concat forward cache: ports arrived per instance.
    pub concat: BTreeMap<u8, u8>,
    /// Bcast backward cache: ports arrived per instance.
    pub bcast: BTreeMap<u8, u8>,
    /// The two replicas.
    pub replicas: [Replica; 2],
    /// A protocol error seen (a backward without its forward, a duplicate).
    pub error: Option<&'static str>,
    /// An update was applied with fewer than `min_update_interval` gradients.
    pub early_update: bool,
}

/// The model: `instances` instances, `max_active_keys`, `min_update_interval`, and possibly a
/// seeded bug.
#[derive(Debug, Clone)]
pub struct Ampnet {
    /// Instances pumped in total.
    pub instances: u8,
    /// The mak bound.
    pub max_active_keys: u8,
    /// Gradients per update.
    pub min_update_interval: u8,
    /// The seeded bug, if any.
    pub mutant: Option<Mutant>,
}

impl Ampnet {
    /// The bound the tests and CI check: 3 instances, mak 2, mui 2.
    ///
    /// ```
    /// use stateright::{Checker, Model};
    /// let m = ordo_verify::ampnet::Ampnet::ci(None);
    /// assert_eq!(m.max_active_keys, 2);
    /// ```
    pub fn ci(mutant: Option<Mutant>) -> Ampnet {
        Ampnet { instances: 3, max_active_keys: 2, min_update_interval: 2, mutant }
    }

    fn on(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    fn may_pump(&self, s: &AmpState) -> bool {
        let room = if self.on(Mutant::AmpMakOffByOne) {
            s.active <= self.max_active_keys
        } else {
            s.active < self.max_active_keys
        };
        room && s.next < self.instances
    }

    /// Whether the property named `name` has a counterexample (the checker kills a mutant when
    /// a property it breaks does).
    pub fn violated(&self, name: &'static str) -> bool {
        use stateright::Checker;
        self.clone().checker().spawn_bfs().join().discovery(name).is_some()
    }

    /// Whether any `always` property fails or the `sometimes` one is never reached.
    pub fn fails(&self) -> bool {
        use stateright::Checker;
        let c = self.clone().checker().spawn_bfs().join();
        let d = c.discoveries();
        PROPERTIES.iter().any(|p| d.contains_key(p)) || !d.contains_key(ALL_COMPLETE)
    }
}

/// The `always` properties, by name.
pub const PROPERTIES: [&str; 4] = [MAK_BOUND, ONE_BACKWARD, MIN_UPDATE_INTERVAL, NO_LEAK];
/// In-flight instances never exceed `max_active_keys`.
pub const MAK_BOUND: &str = "in-flight instances never exceed max_active_keys";
/// Every backward finds its forward, and none arrives twice.
pub const ONE_BACKWARD: &str = "every forward gets exactly one backward";
/// No update before `min_update_interval` gradients.
pub const MIN_UPDATE_INTERVAL: &str = "no update before min_update_interval gradients";
/// A quiescent state has completed everything and holds no cache entry.
pub const NO_LEAK: &str = "a finished run leaves no cache entry";
/// Sanity: the run can complete.
pub const ALL_COMPLETE: &str = "every instance can complete";

fn send(s: &mut AmpState, m: Msg) {
    *s.net.entry(m).or_insert(0) += 1;
}

fn take(s: &mut AmpState, m: Msg) -> bool {
    match s.net.get_mut(&m) {
        Some(n) if *n > 1 => {
            *n -= 1;
            true
        }
        Some(_) => s.net.remove(&m).is_some(),
        None => false,
    }
}

/// Add `port` to a two-port cache entry for `inst`; true (and the entry gone) once both are in.
fn gather(
    cache: &mut BTreeMap<u8, u8>,
    inst: u8,
    port: u8,
    error: &mut Option<&'static str>,
) -> bool {
    let bits = cache.entry(inst).or_insert(0);
    if *bits & (1 << port) != 0 {
        *error = Some("a port arrived twice");
    }
    *bits |= 1 << port;
    if *bits == 0b11 {
        cache.remove(&inst);
        true
    } else {
        false
    }
}

impl Ampnet {
    fn deliver(&self, s: &mut AmpState, m: Msg) {
        use Node::*;
        match m {
            Msg::Fwd(Split, _, i) => send(s, Msg::Fwd(Replica(i % 2), 0, i)),
            Msg::Fwd(Replica(r), _, i) => {
                if !s.replicas[r as usize].acts.insert(i) {
                    s.error = Some("activation recorded twice");
                }
                send(s, Msg::Fwd(Join, r, i));
            }
            Msg::Fwd(Join, port, i) => {
                s.origin.insert(i, port);
                s.latest = port;
                send(s, Msg::Fwd(Bcast, 0, i));
            }
            Msg::Fwd(Bcast, _, i) => {
                send(s, Msg::Fwd(Concat, 0, i));
                send(s, Msg::Fwd(Concat, 1, i));
            }
            Msg::Fwd(Concat, port, i) => {
                if gather(&mut s.concat, i, port, &mut s.error) {
                    send(s, Msg::Fwd(Loss, 0, i));
                }
            }
            Msg::Fwd(Loss, _, i) => send(s, Msg::Bwd(Concat, 0, i)),
            Msg::Bwd(Concat, _, i) => {
                send(s, Msg::Bwd(Bcast, 0, i));
                send(s, Msg::Bwd(Bcast, 1, i));
            }
            Msg::Bwd(Bcast, port, i) => {
                if gather(&mut s.bcast, i, port, &mut s.error) {
                    send(s, Msg::Bwd(Join, 0, i));
                }
            }
            Msg::Bwd(Join, _, i) => match s.origin.remove(&i) {
                Some(origin) => {
                    let to = if self.on(Mutant::AmpPhiForgetsOrigin) { s.latest } else { origin };
                    send(s, Msg::Bwd(Replica(to), 0, i));
                }
                None => s.error = Some("Phi backward without an origin"),
            },
            Msg::Bwd(Replica(r), _, i) => {
                let rep = &mut s.replicas[r as usize];
                if !rep.acts.remove(&i) {
                    s.error = Some("replica backward without its forward");
                    return;
                }
                rep.accumulated += 1;
                let due = if self.on(Mutant::AmpUpdateBeforeInterval) {
                    rep.accumulated + 1 >= self.min_update_interval
                } else {
                    rep.accumulated >= self.min_update_interval
                };
                if due && !rep.requested {
                    rep.requested = true;
                    send(s, Msg::Upd(r));
                }
                send(s, Msg::Bwd(Split, 0, i));
            }
            Msg::Bwd(Split, _, i) => send(s, Msg::Bwd(Ctrl, 0, i)),
            Msg::Bwd(Ctrl, _, i) => {
                if !s.completed.insert(i) {
                    s.error = Some("instance completed twice");
                }
                s.active -= 1;
            }
            Msg::Upd(r) => {
                let rep = &mut s.replicas[r as usize];
                if rep.accumulated < self.min_update_interval {
                    s.early_update = true;
                }
                rep.accumulated = 0;
                rep.requested = false;
            }
            Msg::Fwd(Ctrl, _, _) | Msg::Bwd(Loss, _, _) => {
                s.error = Some("message to a port with no edge")
            }
        }
    }
}

impl Model for Ampnet {
    type State = AmpState;
    type Action = Action;

    fn init_states(&self) -> Vec<AmpState> {
        vec![AmpState {
            next: 0,
            active: 0,
            completed: BTreeSet::new(),
            net: BTreeMap::new(),
            origin: BTreeMap::new(),
            latest: 0,
            concat: BTreeMap::new(),
            bcast: BTreeMap::new(),
            replicas: Default::default(),
            error: None,
            early_update: false,
        }]
    }

    fn actions(&self, s: &AmpState, actions: &mut Vec<Action>) {
        if s.error.is_some() {
            return;
        }
        if self.may_pump(s) {
            actions.push(Action::Pump);
        }
        actions.extend(s.net.keys().map(|&m| Action::Deliver(m)));
    }

    fn next_state(&self, s: &AmpState, a: Action) -> Option<AmpState> {
        let mut s = s.clone();
        match a {
            Action::Pump => {
                let i = s.next;
                send(&mut s, Msg::Fwd(Node::Split, 0, i));
                s.next += 1;
                s.active += 1;
            }
            Action::Deliver(m) => {
                if !take(&mut s, m) {
                    return None;
                }
                self.deliver(&mut s, m);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MAK_BOUND, |m: &Ampnet, s: &AmpState| s.active <= m.max_active_keys),
            Property::always(ONE_BACKWARD, |_, s: &AmpState| s.error.is_none()),
            Property::always(MIN_UPDATE_INTERVAL, |_, s: &AmpState| !s.early_update),
            Property::always(NO_LEAK, |m: &Ampnet, s: &AmpState| {
                let quiescent = s.net.is_empty() && !m.may_pump(s);
                !quiescent
                    || (s.completed.len() == m.instances as usize
                        && s.active == 0
                        && s.origin.is_empty()
                        && s.concat.is_empty()
                        && s.bcast.is_empty()
                        && s.replicas.iter().all(|r| r.acts.is_empty() && !r.requested))
            }),
            Property::sometimes(ALL_COMPLETE, |m: &Ampnet, s: &AmpState| {
                s.completed.len() == m.instances as usize
            }),
        ]
    }
}
