//! Gradient accumulation with `min_update_interval` (§3), shared by every parameterized node.

use crate::mutation::{self, Mutant};

use crate::error::MpError;
use crate::message::Payload;
use crate::node::Out;
use crate::staleness::StalenessHistogram;
use crate::state::State;

/// Gradients accumulated since the last update.
///
/// Invariant (*min_update_interval*): an update message is requested only once
/// `min_update_interval` gradients have accumulated, at most one is outstanding, and applying
/// it takes the mean of everything accumulated by then — so no update ever uses fewer than
/// `min_update_interval` gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct Accumulator {
    sums: Vec<Payload>,
    min_update_interval: usize,
    accumulated: usize,
    requested: bool,
    updates: u64,
    /// The parameter version ([`Accumulator::version`]) each accumulated gradient's forward
    /// read, in the order they were added.
    reads: Vec<u64>,
    staleness: StalenessHistogram,
}

impl Accumulator {
    /// Zero sums shaped like `params`; `min_update_interval` ≥ 1.
    ///
    /// ```
    /// let w = ndarray::Array2::<f32>::zeros((2, 2));
    /// let a = ordo_mp::accumulate::Accumulator::new(&[&w], 2).unwrap();
    /// assert_eq!(a.accumulated(), 0);
    /// ```
    pub fn new(params: &[&Payload], min_update_interval: usize) -> Result<Accumulator, MpError> {
        if min_update_interval == 0 {
            return Err(MpError::Config("min_update_interval must be at least 1".into()));
        }
        Ok(Accumulator {
            sums: params.iter().map(|p| Payload::zeros(p.raw_dim())).collect(),
            min_update_interval,
            accumulated: 0,
            requested: false,
            updates: 0,
            reads: Vec::new(),
            staleness: StalenessHistogram::default(),
        })
    }

    /// The sums, to add one gradient into (then call [`Accumulator::added`]).
    pub fn sums_mut(&mut self) -> &mut [Payload] {
        &mut self.sums
    }

    /// The sums accumulated so far.
    pub fn sums(&self) -> &[Payload] {
        &self.sums
    }

    /// Gradients accumulated since the last update.
    pub fn accumulated(&self) -> usize {
        self.accumulated
    }

    /// Updates applied.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// The parameters' version: updates applied so far. A forward records it beside its
    /// activation and hands it back to [`Accumulator::added`] with its gradient.
    pub fn version(&self) -> u64 {
        self.updates
    }

    /// Staleness of the gradients applied so far.
    pub fn staleness(&self) -> &StalenessHistogram {
        &self.staleness
    }

    /// One more gradient, computed from parameters of version `read`, was added: the update
    /// message to send to the node itself, if due.
    pub fn added(&mut self, read: u64) -> Option<Out> {
        self.accumulated += 1;
        self.reads.push(read);
        let due = if mutation::active(Mutant::AmpUpdateBeforeInterval) {
            self.accumulated + 1 >= self.min_update_interval
        } else {
            self.accumulated >= self.min_update_interval
        };
        (due && !self.requested).then(|| {
            self.requested = true;
            Out::Update(State::new(self.updates))
        })
    }

    /// Apply the update message `state`: the mean gradients, the sums reset.
    pub fn take_mean(&mut self, kind: &'static str, state: State) -> Result<Vec<Payload>, MpError> {
        if !self.requested || state != State::new(self.updates) {
            return Err(MpError::Unexpected { kind, what: "update", state });
        }
        let n = self.accumulated as f32;
        let means = self
            .sums
            .iter_mut()
            .map(|s| std::mem::replace(s, Payload::zeros(s.raw_dim())) / n)
            .collect();
        self.accumulated = 0;
        self.requested = false;
        // The gap counts the updates applied after the forward read and before this one.
        for read in self.reads.drain(..) {
            self.staleness.record(self.updates - read);
        }
        self.updates += 1;
        Ok(means)
    }
}
