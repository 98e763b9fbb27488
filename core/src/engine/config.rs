//! How an [`Engine`](crate::engine::Engine) runs: the mode, thread counts, queue depths, a progress
//! observer, and (with the `testing` feature) a hook that injects delays and faults at every stage.

use crate::engine::error::EngineError;
use crate::engine::hook::StageHook;
use crate::engine::mode::Mode;
use std::sync::Arc as StdArc;

/// The engine's configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The mode.
    pub mode: Mode,
    /// Reader threads (≥ 1).
    pub readers: usize,
    /// Writer threads (≥ 1).
    pub writers: usize,
    /// Capacity of the queue from the readers to the device (≥ 1).
    pub input_depth: usize,
    /// Capacity of the queue from the device to the writers (≥ 1).
    pub output_depth: usize,
    /// Outstanding-batch slots for `Oac` (batches between registration and deregistration).
    /// `None`: enough for every batch the threads and queues can hold, so readers never wait.
    pub max_in_flight: Option<usize>,
    /// Test-only hook for delays and faults (`testing` feature).
    pub(crate) hook: Option<StageHook>,
    /// Progress observer.
    pub(crate) observer: Option<crate::engine::observer::ObserverHandle>,
}

impl EngineConfig {
    /// Defaults for `mode`: 2 readers, 2 writers, queues of 4.
    pub fn new(mode: Mode) -> Self {
        EngineConfig {
            mode,
            readers: 2,
            writers: 2,
            input_depth: 4,
            output_depth: 4,
            max_in_flight: None,
            hook: None,
            observer: None,
        }
    }

    /// Set the reader and writer thread counts.
    pub fn threads(mut self, readers: usize, writers: usize) -> Self {
        self.readers = readers;
        self.writers = writers;
        self
    }

    /// Set both queue depths.
    pub fn depths(mut self, input: usize, output: usize) -> Self {
        self.input_depth = input;
        self.output_depth = output;
        self
    }

    /// Install an observer of the pipeline's progress (see [`Progress`](crate::engine::Progress)).
    pub fn observe(mut self, observer: StdArc<dyn crate::engine::observer::Observer>) -> Self {
        self.observer = Some(crate::engine::observer::ObserverHandle(observer));
        self
    }

    /// Install a fault-injection hook (`testing` feature).
    #[cfg(feature = "testing")]
    pub fn hook(mut self, hook: StageHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Check the numbers.
    pub fn validate(&self) -> Result<(), EngineError> {
        self.check()
    }

    /// [`validate`](EngineConfig::validate), as the error type of a caller's model.
    pub(crate) fn check<E>(&self) -> Result<(), EngineError<E>> {
        let bad = |what: &'static str| Err(EngineError::Config(what));
        if self.readers == 0 {
            return bad("readers must be at least 1");
        }
        if self.writers == 0 {
            return bad("writers must be at least 1");
        }
        if self.input_depth == 0 || self.output_depth == 0 {
            return bad("queue depths must be at least 1");
        }
        if self.mode == Mode::Bounded(0) {
            return bad("Bounded(k) needs k at least 1");
        }
        if self.max_in_flight == Some(0) {
            return bad("max_in_flight must be at least 1");
        }
        Ok(())
    }

    /// How many positions past the device's next one a reader may start a batch: the readers,
    /// the input queue and the device, as many as a pipeline of these depths holds, but never
    /// more than the outstanding slots, so the batch the device waits for always finds a slot
    /// (the device takes batches in submission order; see `engine/arrivals.rs`).
    ///
    /// ```
    /// use ordo::engine::{EngineConfig, Mode};
    /// assert_eq!(EngineConfig::new(Mode::Oac).read_ahead(), 2 + 4 + 1);
    /// assert_eq!(EngineConfig::new(Mode::Bounded(2)).read_ahead(), 2);
    /// ```
    pub fn read_ahead(&self) -> usize {
        let pipeline = self.readers + self.input_depth + 1;
        self.in_flight_slots().map_or(pipeline, |slots| pipeline.min(slots))
    }

    /// Outstanding slots (and MFT window) the run uses; `None` for `Async` (no registration).
    pub fn in_flight_slots(&self) -> Option<usize> {
        match self.mode {
            Mode::Async(_) => None,
            Mode::Sync => Some(1),
            Mode::Bounded(k) => Some(k),
            Mode::Oac => Some(self.max_in_flight.unwrap_or(
                // Every place a registered batch can be: a reader each, the input queue, the
                // device, the output queue, a writer each.
                self.readers + self.input_depth + 1 + self.output_depth + self.writers,
            )),
        }
    }
}
