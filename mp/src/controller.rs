//! The controller: pumps instances into the graph and throttles asynchrony (§4).

use std::sync::Arc;

use ordo::mutation::{self, Mutant};

use crate::error::MpError;
use crate::message::Payload;
use crate::node::{Emit, Node, check_port};
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
pub struct Controller {
    grads: Vec<bool>,
    source: Option<Arc<dyn Source>>,
    order: Vec<usize>,
    max_active_keys: usize,
    next: usize,
    active: usize,
    max_active: usize,
    /// Per active instance (by position in `order`): messages still expected back.
    waiting: std::collections::HashMap<u64, usize>,
    results: Vec<InstanceResult>,
    done: usize,
}

impl Controller {
    /// A controller with one output per entry of `grads` (`true`: that output's successor
    /// sends a gradient back).
    ///
    /// ```
    /// let c = ordo_mp::Controller::new(vec![true, false]);
    /// assert_eq!(ordo_mp::Node::outputs(&c), 2);
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
            results: Vec::new(),
            done: 0,
        }
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
            let (state, payloads) = source.instance(self.order[self.next]);
            if payloads.len() != self.grads.len() {
                return Err(MpError::Shape {
                    kind: "Controller",
                    detail: format!("{} payloads for {} outputs", payloads.len(), self.grads.len()),
                });
            }
            let expected = 1 + if e.train { self.grads.iter().filter(|&&g| g).count() } else { 0 };
            if self.waiting.insert(state.instance, expected).is_some() {
                return Err(MpError::Config(format!(
                    "instance id {} pumped twice at once",
                    state.instance
                )));
            }
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
        *left -= 1;
        if *left == 0 {
            self.waiting.remove(&state.instance);
            self.active -= 1;
            self.done += 1;
            self.pump(e)?;
        }
        Ok(())
    }
}

impl Node for Controller {
    fn kind(&self) -> &'static str {
        "Controller"
    }
    fn inputs(&self) -> usize {
        1
    }
    fn outputs(&self) -> usize {
        self.grads.len()
    }
    fn forward(
        &mut self,
        port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        check_port(self.kind(), "input", port, 1)?;
        if x.dim() != (1, 3) {
            return Err(MpError::Shape {
                kind: "Controller",
                detail: format!("result {:?}", x.dim()),
            });
        }
        self.results.push(InstanceResult {
            instance: state.instance,
            loss: x[[0, 0]],
            correct: x[[0, 1]],
            examples: x[[0, 2]],
        });
        self.arrived(state, e)
    }
    fn backward(
        &mut self,
        port: usize,
        state: State,
        _g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        check_port(self.kind(), "output", port, self.grads.len())?;
        if !self.grads[port] {
            return Err(MpError::Unexpected {
                kind: "Controller",
                what: "backward on a no-gradient output",
                state,
            });
        }
        self.arrived(state, e)
    }
    fn pending(&self) -> usize {
        self.waiting.len()
    }
    fn as_controller(&mut self) -> Option<&mut Controller> {
        Some(self)
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
