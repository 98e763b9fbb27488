//! Deterministic models and forced interleavings for the engine's own checks (equivalence,
//! simulation, fuzzing, benches) and for checkers built on ordo. Not for training.

use crate::engine::{BatchRows, HookAction, HookPoint, Model, StageHook, StepError};
use std::collections::HashMap;
// The hook runs on the pipeline's OS threads (never inside loom or shuttle), so it uses std's
// lock and condition variable, not `crate::sync`'s.
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A deterministic step that mixes every row of the batch with the batch's mean and a per-batch
/// scalar, and folds the mean into a dense parameter: any lost or stale update changes the bits.
#[derive(Debug, Clone, PartialEq)]
pub struct MixModel {
    width: usize,
    dense: Vec<f32>,
}

impl MixModel {
    /// A model for rows of `width` floats, dense parameters zero.
    pub fn new(width: usize) -> Self {
        MixModel { width, dense: vec![0.0; 2] }
    }
}

impl Model for MixModel {
    type Data = f32;
    type Error = StepError;

    fn row_width(&self) -> usize {
        self.width
    }

    fn step(&mut self, data: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let n = rows.values().len().max(1) as f32;
        let mean = rows.values().iter().sum::<f32>() / n;
        let d = self.dense[0];
        for (k, v) in rows.values_mut().iter_mut().enumerate() {
            *v = 0.5 * *v + 0.25 * mean + data + 0.125 * d + (k % 3) as f32 * 0.0625;
        }
        self.dense[0] = 0.5 * d + mean;
        self.dense[1] += 1.0;
        Ok(())
    }

    fn dense(&self) -> Vec<f32> {
        self.dense.clone()
    }
}

/// A forced interleaving for tests that need an asynchronous run to read stale rows: the write
/// of each batch `first` picks (say the first of every epoch) waits until the device has taken
/// `ahead` more batches. Those batches then read their rows before that write lands, on any
/// machine and under any load, so a check like "validation repaired a stale read" holds by
/// construction wherever they share a row with it, instead of by the readers' head start.
///
/// A held write waits at most `patience` (an epoch with fewer than `ahead` batches after its
/// first), so the hook never hangs a run; [`held`](Self::held) counts the writes whose
/// batches did come, so a test can check that the interleaving really happened.
///
/// ```
/// use ordo::engine::testing::ReadsBeforeWrite;
/// use ordo::engine::{EngineConfig, Mode};
/// use std::time::Duration;
///
/// // Batch ids e·100 + i: hold each epoch's first write until 3 more batches were taken.
/// let gate = ReadsBeforeWrite::new(|id| id % 100 == 0, 3, Duration::from_secs(5));
/// let config = EngineConfig::new(Mode::Oac).hook(gate.clone().into());
/// # let _ = (config, gate.held());
/// ```
#[derive(Clone)]
pub struct ReadsBeforeWrite {
    first: Arc<dyn Fn(u64) -> bool + Send + Sync>,
    ahead: u64,
    patience: Duration,
    state: Arc<(Mutex<Taken>, Condvar)>,
}

/// What [`ReadsBeforeWrite`] has seen: batches the device took, and for each picked batch how
/// many had been taken when it was.
#[derive(Default)]
struct Taken {
    count: u64,
    at: HashMap<u64, u64>,
    held: usize,
}

impl ReadsBeforeWrite {
    /// Hold the write of every batch whose id `first` picks until the device has taken `ahead`
    /// more batches after it, or `patience` has passed.
    pub fn new(
        first: impl Fn(u64) -> bool + Send + Sync + 'static,
        ahead: usize,
        patience: Duration,
    ) -> Self {
        ReadsBeforeWrite {
            first: Arc::new(first),
            ahead: ahead as u64,
            patience,
            state: Arc::default(),
        }
    }

    /// Writes held until their `ahead` batches had been taken (not those released by
    /// `patience`).
    pub fn held(&self) -> usize {
        self.state.0.lock().unwrap_or_else(PoisonError::into_inner).held
    }

    /// The hook's action at `point` for batch `id` (to combine with other actions in one
    /// [`StageHook`]; `into()` makes it the whole hook).
    pub fn at(&self, point: HookPoint, id: u64) -> HookAction {
        let (lock, cv) = &*self.state;
        let mut t = lock.lock().unwrap_or_else(PoisonError::into_inner);
        match point {
            HookPoint::Device => {
                t.count += 1;
                if (self.first)(id) {
                    let count = t.count;
                    t.at.insert(id, count);
                }
                cv.notify_all();
            }
            HookPoint::WriteStart => {
                if let Some(&taken) = t.at.get(&id) {
                    let until = taken + self.ahead;
                    let (mut t, _) = cv
                        .wait_timeout_while(t, self.patience, |t| t.count < until)
                        .unwrap_or_else(PoisonError::into_inner);
                    if t.count >= until {
                        t.held += 1;
                    }
                }
            }
            _ => {}
        }
        HookAction::Continue
    }
}

impl From<ReadsBeforeWrite> for StageHook {
    fn from(gate: ReadsBeforeWrite) -> Self {
        StageHook::new(move |point, id| gate.at(point, id))
    }
}

impl std::fmt::Debug for ReadsBeforeWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadsBeforeWrite")
            .field("ahead", &self.ahead)
            .field("patience", &self.patience)
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}
