//! The *state* of a message (paper §3): the instance id, the loop counters of the loops the
//! message is inside, and the instance's sequence length. Together they identify a message
//! uniquely for the whole run, so every cache in the IR is keyed by it.

/// The state a message carries besides its payload.
///
/// ```
/// use ordo_mp::State;
/// let s = State::new(7).with_len(3).push(0);
/// assert_eq!(s.counters, vec![0]);
/// assert_eq!(s.pop().counters, Vec::<u32>::new());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct State {
    /// The instance this message belongs to.
    pub instance: u64,
    /// Loop counters, outermost first.
    pub counters: Vec<u32>,
    /// The instance's sequence length (the number of steps of its loop; 0 when it has none).
    pub len: u32,
    /// The replica (§5) of each replicated layer this instance goes through, modulo the
    /// layer's replica count: stamped by the controller when it pumps the instance (0 for a
    /// graph without replicas), so a replica router is a function of the state, as §5 asks.
    pub replica: u32,
}

impl State {
    /// The state of instance `instance`, outside every loop.
    pub fn new(instance: u64) -> State {
        State { instance, counters: Vec::new(), len: 0, replica: 0 }
    }

    /// The same state with sequence length `len`.
    pub fn with_len(mut self, len: u32) -> State {
        self.len = len;
        self
    }

    /// The state inside one more loop, at counter `c`.
    pub fn push(mut self, c: u32) -> State {
        self.counters.push(c);
        self
    }

    /// The state outside the innermost loop.
    pub fn pop(mut self) -> State {
        self.counters.pop();
        self
    }

    /// The innermost loop counter, if any.
    pub fn counter(&self) -> Option<u32> {
        self.counters.last().copied()
    }
}
