//! The scheduler's shared stop state: the first failure of a run, which stamped batches did
//! not land, and how often a blocked stage looks at it.

use crate::engine::error::StopCause;
use crate::sync::Ordering;
use crate::sync::host::{AtomicBool, Mutex};
use std::time::Duration;

/// How long a blocked stage waits before it re-checks the stop flag: bounds shutdown latency.
pub(crate) const POLL: Duration = Duration::from_millis(2);

/// The first failure of a run, and the stamped batches whose writes did not all land.
pub(crate) struct StopState<E> {
    stopped: AtomicBool,
    cause: Mutex<Option<StopCause<E>>>,
    unwritten: Mutex<Vec<(u64, u64)>>,
}

impl<E> Default for StopState<E> {
    fn default() -> Self {
        StopState {
            stopped: AtomicBool::default(),
            cause: Mutex::default(),
            unwritten: Mutex::default(),
        }
    }
}

impl<E> StopState<E> {
    pub(crate) fn fail(&self, cause: StopCause<E>) {
        let mut c = self.cause.lock().unwrap_or_else(|e| e.into_inner());
        c.get_or_insert(cause);
        // Release: pairs with the Acquire in `is_stopped`; the cause is behind the mutex anyway.
        self.stopped.store(true, Ordering::Release);
    }

    pub(crate) fn unwritten(&self, ts: u64, id: u64) {
        self.unwritten.lock().unwrap_or_else(|e| e.into_inner()).push((ts, id));
    }

    pub(crate) fn is_stopped(&self) -> bool {
        // Acquire: a stage that sees the flag stops; nothing else is read through it.
        self.stopped.load(Ordering::Acquire)
    }

    /// Stop every stage without a failure (the session is closing).
    pub(crate) fn close(&self) {
        // Release: as in `fail`.
        self.stopped.store(true, Ordering::Release);
    }

    /// Take the first failure, if any, and the unwritten batches (sorted).
    #[allow(clippy::type_complexity)] // the cause and its `(ts, id)` list, as `Stopped` holds them
    pub(crate) fn take(&self) -> Option<(StopCause<E>, Vec<(u64, u64)>)> {
        let cause = self.cause.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        let mut unwritten =
            std::mem::take(&mut *self.unwritten.lock().unwrap_or_else(|e| e.into_inner()));
        unwritten.sort_unstable();
        Some((cause, unwritten))
    }
}
