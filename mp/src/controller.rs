//! The controller: pumps instances into the graph and throttles asynchrony (§4).

use std::sync::Arc;

use crate::mutation::{self, Mutant};

use crate::error::MpError;
use crate::message::Payload;
use crate::node::{Emit, check_port};
use crate::state::State;

/// Where instances come from: instance `i` is a state and one payload per controller output.
pub trait Source: Send + Sync {
    /// Number of instances.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Instance `i`: its state (instance id, sequence length) and one payload per output.
    fn instance(&self, i: usize) -> (State, Vec<Payload>);
}

/// The result the loss reported for one instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceResult {
    /// Instance id.
    pub instance: u64,
    /// Summed loss over the instance's examples.
    pub loss: f32,
    /// Correct predictions.
    pub correct: f32,
    /// Examples.
    pub examples: f32,
}

/// The controller node. Input 0 takes the loss's results; output `o` carries instance payload
/// `o`; `grads[o]` says whether a backward comes back on output `o` when training.
///
/// Invariant (*the mak bound*): the controller pumps a new instance only while fewer than
/// `max_active_keys` instances are active, an instance being active from its pump until its
/// result and every expected backward have come back. So at most `max_active_keys` instances
/// are ever in flight.
///
/// Invariant (*balanced replicas*): with `r` replicas ([`Controller::set_replicas`]) each
/// pumped instance is stamped ([`State::replica`]) with a replica that has the fewest active
/// instances (ties: the next in rotation after the last one stamped). An instance that
/// completes frees its replica for the instance pumped in its place, so while instances are
/// left to pump every replica holds `max_active_keys / r` of them (`r` dividing
/// `max_active_keys`; else they differ by at most one): no replica idles while another has a
/// queue, as routing by instance id alone lets happen (all in-flight ids even, say).
pub struct Controller {
    grads: Vec<bool>,
    source: Option<Arc<dyn Source>>,
    order: Vec<usize>,
    max_active_keys: usize,
    next: usize,
    active: usize,
    max_active: usize,
    /// Per active instance (by id): messages still expected back, and its replica.
    waiting: std::collections::HashMap<u64, (usize, u32)>,
    /// Active instances per replica (one entry per replica, at least one).
    in_replica: Vec<usize>,
    /// The replica after the one stamped last (where ties start).
    next_replica: usize,
    results: Vec<InstanceResult>,
    done: usize,
}

impl Controller {
    /// A controller with one output per entry of `grads` (`true`: that output's successor
    /// sends a gradient back).
    ///
    /// ```
    /// let c = ordo_mp::Controller::new(vec![true, false]);
    /// assert_eq!(c.outputs(), 2);
    /// ```
    pub fn new(grads: Vec<bool>) -> Controller {
        Controller {
            grads,
            source: None,
            order: Vec::new(),
            max_active_keys: 1,
            next: 0,
            active: 0,
            max_active: 0,
            waiting: Default::default(),
            in_replica: vec![0],
            next_replica: 0,
            results: Vec::new(),
            done: 0,
        }
    }

    /// Balance instances over `r` replicas (§5; at least 1): the graph builder sets this to
    /// the largest replica group, and a replica router sends an instance to
    /// `state.replica mod` its group's size.
    ///
    /// ```
    /// let mut c = ordo_mp::Controller::new(vec![true, false]);
    /// c.set_replicas(2);
    /// assert_eq!(c.replicas(), 2);
    /// ```
    pub fn set_replicas(&mut self, r: usize) {
        self.in_replica = vec![0; r.max(1)];
        self.next_replica = 0;
    }

    /// The replicas instances are balanced over.
    pub fn replicas(&self) -> usize {
        self.in_replica.len()
    }

    /// The replica for the next instance: the fewest active, ties from the rotation's next.
    fn pick_replica(&mut self) -> u32 {
        let r = self.in_replica.len();
        let pick = (0..r)
            .map(|k| (self.next_replica + k) % r)
            .min_by_key(|&q| self.in_replica[q])
            .unwrap_or(0);
        self.in_replica[pick] += 1;
        self.next_replica = (pick + 1) % r;
        pick as u32
    }

    /// Prepare a run over `source` in `order` with bound `max_active_keys` ≥ 1.
    pub fn prepare(
        &mut self,
        source: Arc<dyn Source>,
        order: Vec<usize>,
        max_active_keys: usize,
    ) -> Result<(), MpError> {
        if max_active_keys == 0 {
            return Err(MpError::Config("max_active_keys must be at least 1".into()));
        }
        if let Some(&i) = order.iter().find(|&&i| i >= source.len()) {
            return Err(MpError::Config(format!("instance {i} of {}", source.len())));
        }
        self.source = Some(source);
        self.order = order;
        self.max_active_keys = max_active_keys;
        self.next = 0;
        self.active = 0;
        self.max_active = 0;
        self.waiting.clear();
        self.in_replica.iter_mut().for_each(|a| *a = 0);
        self.next_replica = 0;
        self.results.clear();
        self.done = 0;
        Ok(())
    }

    /// Pump the first instances (the run's first event).
    pub fn start(&mut self, e: &mut Emit) -> Result<(), MpError> {
        self.pump(e)
    }

    /// Whether every instance has completed.
    pub fn finished(&self) -> bool {
        self.done == self.order.len()
    }

    /// The most instances that were active at once.
    pub fn max_active(&self) -> usize {
        self.max_active
    }

    /// Results in completion order.
    pub fn results(&self) -> &[InstanceResult] {
        &self.results
    }

    fn may_pump(&self) -> bool {
        if mutation::active(Mutant::AmpMakOffByOne) {
            self.active <= self.max_active_keys
        } else {
            self.active < self.max_active_keys
        }
    }

    fn pump(&mut self, e: &mut Emit) -> Result<(), MpError> {
        let source =
            self.source.clone().ok_or_else(|| MpError::Config("controller not prepared".into()))?;
        while self.may_pump() && self.next < self.order.len() {
            let (mut state, payloads) = source.instance(self.order[self.next]);
            if payloads.len() != self.grads.len() {
                return Err(MpError::Shape {
                    kind: "Controller",
                    detail: format!("{} payloads for {} outputs", payloads.len(), self.grads.len()),
                });
            }
            let expected = 1 + if e.train { self.grads.iter().filter(|&&g| g).count() } else { 0 };
            if self.waiting.contains_key(&state.instance) {
                return Err(MpError::Config(format!(
                    "instance id {} pumped twice at once",
                    state.instance
                )));
            }
            state.replica = self.pick_replica();
            self.waiting.insert(state.instance, (expected, state.replica));
            self.next += 1;
            self.active += 1;
            self.max_active = self.max_active.max(self.active);
            for (o, p) in payloads.into_iter().enumerate() {
                e.forward(o, state.clone(), p);
            }
        }
        Ok(())
    }

    fn arrived(&mut self, state: State, e: &mut Emit) -> Result<(), MpError> {
        let left = self.waiting.get_mut(&state.instance).ok_or(MpError::Unexpected {
            kind: "Controller",
            what: "message of an inactive instance",
            state: state.clone(),
        })?;
        left.0 -= 1;
        if left.0 == 0 {
            let replica = left.1 as usize;
            self.waiting.remove(&state.instance);
            self.in_replica[replica] -= 1;
            self.active -= 1;
            self.done += 1;
            self.pump(e)?;
        }
        Ok(())
    }
}

/// The controller's node semantics. It is no [`IrNode`](crate::IrNode): a graph gets its one
/// controller from [`GraphBuilder::controller`](crate::GraphBuilder::controller), which hands
/// back its id, and holds it by type.
impl Controller {
    /// The kind named in errors and traces.
    pub const KIND: &'static str = "Controller";

    /// Number of input ports (1: the loss's results).
    pub fn inputs(&self) -> usize {
        1
    }

    /// Number of output ports (one per instance payload).
    pub fn outputs(&self) -> usize {
        self.grads.len()
    }

    /// Handle a result arriving on input `port`: a NaN or infinite loss fails the run
    /// ([`MpError::NonFiniteLoss`]).
    pub fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        check_port(Self::KIND, "input", port, 1)?;
        if x.dim() != (1, 3) {
            return Err(MpError::Shape {
                kind: "Controller",
                detail: format!("result {:?}", x.dim()),
            });
        }
        let loss = x[[0, 0]];
        if !loss.is_finite() {
            let step = self.results.len() + 1;
            return Err(MpError::NonFiniteLoss { instance: state.instance, loss, step });
        }
        self.results.push(InstanceResult {
            instance: state.instance,
            loss,
            correct: x[[0, 1]],
            examples: x[[0, 2]],
        });
        self.arrived(state, e)
    }

    /// Handle a gradient arriving back on output `port`.
    pub fn backward(
        &mut self,
        port: usize,
        state: State,
        _g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        check_port(Self::KIND, "output", port, self.grads.len())?;
        if !self.grads[port] {
            return Err(MpError::Unexpected {
                kind: "Controller",
                what: "backward on a no-gradient output",
                state,
            });
        }
        self.arrived(state, e)
    }

    /// Instances active now (zero at the end of every complete run).
    pub fn pending(&self) -> usize {
        self.waiting.len()
    }
}

/// A source held in memory: instance `i` is `self[i]`.
impl Source for Vec<(State, Vec<Payload>)> {
    fn len(&self) -> usize {
        <[_]>::len(self)
    }
    fn instance(&self, i: usize) -> (State, Vec<Payload>) {
        self[i].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Out;

    /// The replicas stamped on the instances `e` pumped, in pump order.
    fn stamped(e: &Emit) -> Vec<(u64, u32)> {
        e.out
            .iter()
            .filter_map(|o| match o {
                Out::Forward { port: 0, state, .. } => Some((state.instance, state.replica)),
                _ => None,
            })
            .collect()
    }

    /// Instances go to the replica with the fewest active ones: with 2 replicas and mak 4, two
    /// each; an instance that completes frees its replica for the next one, whatever the
    /// instance ids (all even here, so routing by id mod 2 would send all to replica 0).
    #[test]
    fn instances_are_balanced_over_replicas() {
        let data: Vec<(State, Vec<Payload>)> =
            (0..8).map(|i| (State::new(2 * i), vec![Payload::zeros((1, 1))])).collect();
        let mut c = Controller::new(vec![false]);
        c.set_replicas(2);
        c.prepare(Arc::new(data), (0..8).collect(), 4).unwrap();
        let mut e = Emit::new(false);
        c.start(&mut e).unwrap();
        assert_eq!(stamped(&e), vec![(0, 0), (2, 1), (4, 0), (6, 1)]);
        let result = || Payload::zeros((1, 3));
        let mut e = Emit::new(false);
        c.forward(0, State::new(4), result(), &mut e).unwrap();
        assert_eq!(stamped(&e), vec![(8, 0)]);
        let mut e = Emit::new(false);
        c.forward(0, State::new(0), result(), &mut e).unwrap();
        c.forward(0, State::new(2), result(), &mut e).unwrap();
        assert_eq!(stamped(&e), vec![(10, 0), (12, 1)]);
        assert_eq!(c.in_replica, vec![2, 2]);
    }

    /// A NaN or infinite loss fails the run at its instance, naming it and its step (its place
    /// among the completed instances); no later instance is pumped for it.
    #[test]
    fn a_non_finite_loss_fails_the_run_at_its_instance() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let data: Vec<(State, Vec<Payload>)> =
                (0..4).map(|i| (State::new(i), vec![Payload::zeros((1, 1))])).collect();
            let mut c = Controller::new(vec![false]);
            c.prepare(Arc::new(data), (0..4).collect(), 2).unwrap();
            let mut e = Emit::new(false);
            c.start(&mut e).unwrap();
            c.forward(0, State::new(0), Payload::zeros((1, 3)), &mut e).unwrap();
            let mut result = Payload::zeros((1, 3));
            result[[0, 0]] = bad;
            let mut e = Emit::new(false);
            let err = c.forward(0, State::new(1), result, &mut e).unwrap_err();
            let MpError::NonFiniteLoss { instance: 1, loss, step: 2 } = err else {
                panic!("{bad}: {err}");
            };
            assert_eq!(loss.to_bits(), bad.to_bits());
            assert!(stamped(&e).is_empty() && c.results().len() == 1, "{bad}");
        }
    }
}
