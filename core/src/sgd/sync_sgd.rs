//! Data-parallel synchronous SGD (the paper's "Sync" baseline).

use super::runtime::{Shared, StopOnDrop, check_args, run_workers};
use super::{
    BlockStore, Control, GradientModel, RunReport, SgdConfig, SgdError, Snapshot, StepRecord,
};
use crate::sync::{AtomicBool, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Barrier, Mutex, RwLock};

/// Run data-parallel synchronous SGD with `m` worker threads: in round `r` every worker copies
/// the same θ and computes the gradient of batch `r·m + w`; barrier; the `m` gradients are
/// averaged and applied as **one** SGD + momentum update (each worker reduces and applies its
/// own `1/m` slice of the words, in parallel); barrier; next round. Every step has τ = 0 and
/// is accepted; the effective batch is `m` times the model's batch.
///
/// This is a runtime mode rather than a [`Dispatcher`](crate::dispatcher::Dispatcher): one
/// update made from `m` gradients does not fit "accept or discard each gradient".
///
/// Invariant: θ is written only between the two barriers of a round, and read (copied) only
/// outside them, so every worker of a round computes on the same θ: the result is that of
/// sequential SGD with batch `m·B` (up to the order of the floating-point sums).
///
/// `cfg.stop.max_updates` counts rounds. `monitor` is called on this thread as in
/// [`run_dispatched`](super::run_dispatched). A panic in `model.gradient` ends the round for
/// everyone and is resumed here.
pub fn run_sync<M: GradientModel>(
    model: &M,
    m: usize,
    init: &[f32],
    cfg: &SgdConfig,
    monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control,
) -> Result<RunReport, SgdError> {
    check_args(model, m, init, cfg)?;
    let shared = Shared::new(BlockStore::hogwild(init));
    let n = init.len();
    let round = Round {
        barrier: Barrier::new(m),
        grads: (0..m).map(|_| RwLock::new(vec![0.0; n])).collect(),
        halt: AtomicBool::new(false),
        panic: Mutex::new(None),
        chunk: n.div_ceil(m).max(1),
    };
    let report =
        run_workers(&shared, m, cfg, monitor, |w| sync_worker(model, w, m, &shared, &round, cfg));
    if let Some(p) = round.panic.into_inner().unwrap_or_else(|e| e.into_inner()) {
        resume_unwind(p);
    }
    Ok(report)
}

/// The state of the rounds, besides the model.
struct Round {
    barrier: Barrier,
    /// Worker `w`'s gradient of the current round (written before the first barrier, read
    /// by all between the barriers).
    grads: Vec<RwLock<Vec<f32>>>,
    /// Written only by worker 0 between the barriers, read by all after the second: every
    /// worker leaves at the same round.
    halt: AtomicBool,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    chunk: usize,
}

fn sync_worker<M: GradientModel>(
    model: &M,
    w: usize,
    m: usize,
    shared: &Shared,
    round: &Round,
    cfg: &SgdConfig,
) -> Vec<StepRecord> {
    let _guard = StopOnDrop(shared);
    let n = shared.params.len();
    let mut local = vec![0.0f32; n];
    let mut scratch = model.scratch();
    let range = (w * round.chunk).min(n)..((w + 1) * round.chunk).min(n);
    let mut sum = vec![0.0f32; range.len()];
    let mut records = Vec::new();
    for r in 0u64.. {
        shared.count_start();
        shared.params.copy_into(&mut local);
        let index = r * m as u64 + w as u64;
        let loss = {
            let mut grad = round.grads[w].write().unwrap_or_else(|e| e.into_inner());
            let out = catch_unwind(AssertUnwindSafe(|| {
                model.gradient(&local, index, &mut scratch, &mut grad)
            }));
            out.unwrap_or_else(|p| {
                *round.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                grad.fill(0.0);
                shared.request_stop();
                f32::NAN
            })
        };
        round.barrier.wait();
        sum.fill(0.0);
        for g in &round.grads {
            let g = g.read().unwrap_or_else(|e| e.into_inner());
            sum.iter_mut().zip(&g[range.clone()]).for_each(|(s, x)| *s += x);
        }
        let scale = 1.0 / m as f32;
        sum.iter_mut().for_each(|s| *s *= scale);
        shared.params.momentum_range(range.start, &sum, cfg.lr, cfg.momentum);
        if w == 0 {
            let version = shared.params.take_version();
            let done = cfg.stop.max_updates.is_some_and(|max| version + 1 >= max);
            if done || shared.stopped() {
                // Relaxed: the barrier below orders this store before every worker's load.
                round.halt.store(true, Ordering::Relaxed);
            }
        }
        records.push(StepRecord {
            index,
            worker: w as u32,
            tau: Some(0),
            loss,
            end: shared.start.elapsed(),
        });
        round.barrier.wait();
        // Relaxed: written before the barrier above (see `Round::halt`).
        if round.halt.load(Ordering::Relaxed) {
            break;
        }
    }
    records
}
