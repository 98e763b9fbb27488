//! How an [`Engine`](super::Engine) runs: the mode, thread counts, queue depths, a progress
//! observer, and (with the `testing` feature) a hook that injects delays and faults at every stage.

use super::EngineError;
use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

/// How asynchronous the pipeline is, and what it promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Mode {
    /// One batch in flight: read, step, write, then the next. Equals the sequential order.
    Sync,
    /// No validation and no timestamps: the lost-update baseline (Hogwild, Marius, DGL-KE).
    /// Promises nothing about the result.
    Async(AsyncWrite),
    /// Marius' staleness bound: at most `k` batches in flight, no validation. Equals the
    /// sequential order only for `k = 1`.
    Bounded(usize),
    /// Optimistic Asynchrony Control: full pipelining, and the result of the sequential order.
    Oac,
}

/// How `Async` writes a stepped row back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AsyncWrite {
    /// Overwrite the row (the last writer wins).
    Overwrite,
    /// Add the step's delta (`new − read`) float by float, like Marius' `indexAdd`.
    AddDelta,
}

impl Mode {
    /// Whether this mode promises the result of its recorded computation order.
    pub fn is_equivalent(self) -> bool {
        matches!(self, Mode::Sync | Mode::Oac | Mode::Bounded(1))
    }

    /// Whether batches register in the outstanding set and stamp their writes.
    pub(crate) fn timestamped(self) -> bool {
        !matches!(self, Mode::Async(_))
    }
}

/// A point in a batch's trip through the pipeline: where a fault-injection hook (`StageHook`,
/// feature `testing`) is called, and where [`StopCause::Injected`](super::StopCause::Injected)
/// says an injected fault stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// A reader took the batch, before it registers.
    ReadStart,
    /// A reader registered the batch, before it reads rows.
    ReadRows,
    /// The device took the batch, before validation and the step.
    Device,
    /// A writer took the stamped batch, before it writes rows.
    WriteStart,
    /// A writer wrote every row, before it reports the ts finished.
    WriteFinish,
}

/// What a [`StageHook`] asks the stage to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Without `testing` no hook can be built, so no action is ever constructed.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub enum HookAction {
    /// Go on.
    Continue,
    /// Sleep, then go on.
    Delay(Duration),
    /// Fail here (fault injection): the pipeline stops with [`StopCause::Injected`](super::StopCause::Injected).
    Fail,
}

/// A fault-injection hook for tests: called with the point and the batch id at every
/// [`HookPoint`] of the pipeline, to inject delays and faults. It can be built only with the
/// `testing` feature; for progress, use an [`Observer`](super::Observer).
#[derive(Clone)]
pub struct StageHook(pub(crate) StdArc<dyn Fn(HookPoint, u64) -> HookAction + Send + Sync>);

impl StageHook {
    /// Wrap a closure.
    #[cfg(feature = "testing")]
    pub fn new(f: impl Fn(HookPoint, u64) -> HookAction + Send + Sync + 'static) -> Self {
        StageHook(StdArc::new(f))
    }
}

impl fmt::Debug for StageHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StageHook(..)")
    }
}

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
    pub(crate) observer: Option<super::observer::ObserverHandle>,
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

    /// Install an observer of the pipeline's progress (see [`Progress`](super::Progress)).
    pub fn observe(mut self, observer: StdArc<dyn super::Observer>) -> Self {
        self.observer = Some(super::observer::ObserverHandle(observer));
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
