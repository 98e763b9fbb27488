//! Fault injection: the points of a batch's trip where a test hook (feature `testing`) may
//! delay or fail it.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

/// A point in a batch's trip through the pipeline: where a fault-injection hook (`StageHook`,
/// feature `testing`) is called, and where
/// [`StopCause::Injected`](crate::engine::StopCause::Injected) says an injected fault stopped it.
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
    /// Fail here (fault injection): the pipeline stops with
    /// [`StopCause::Injected`](crate::engine::StopCause::Injected).
    Fail,
}

/// A fault-injection hook for tests: called with the point and the batch id at every
/// [`HookPoint`] of the pipeline, to inject delays and faults. It can be built only with the
/// `testing` feature; for progress, use an [`Observer`](crate::engine::Observer).
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
