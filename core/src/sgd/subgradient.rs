//! Paper 003's Algorithm 1 (asynchronous stochastic subgradient method with momentum) for an
//! individual core, run by `c` workers as ASSM, PASSM or PASSM+ ([`BlockSchedule`]).

use super::assm::{assm_read, assm_write};
use super::passm::{passm_read, passm_write};
use super::runtime::{Shared, StopOnDrop, run_workers};
use super::{
    BlockRunReport, BlockSchedule, BlockStore, Blocks, Control, LayeredModel, Method, PhaseGate,
    SgdError, Snapshot, StepRecord, WorkerTelemetry,
};
use crate::sync::{AtomicU64, Mutex, Ordering};
use std::time::{Duration, Instant};

/// Train `model` from `init` with `threads` workers running Algorithm 1 of paper 003.
///
/// The parameters are split into `threads` layer-aligned blocks ([`Blocks::by_weight`]); worker
/// `c` owns block `c`. Each worker loops: take the next start index `i` (its minibatch, and its
/// epoch `e`, see [`BlockSchedule`]) → enter the phase gate with `schedule.method(e)` → read
/// `x` → compute the subgradient `g` (ASSM: full; PASSM: restricted to its block, backprop
/// stopping at the block's lowest layer) → `u ← m·u + g (+ weight_decay·x)` in its **private**
/// momentum `u` (only the block's words in PASSM) → write `x ← x − (1 − m)·γ_e·u` (ASSM: every
/// block under its lock; PASSM: its own block, lock-free) → leave the gate.
///
/// When a worker's method changes (PASSM+), it zeroes its momentum outside its own block: those
/// words were last moved by steps of the other method and their direction is stale.
///
/// `monitor` is called on this thread per `schedule.sgd.every`, as in
/// [`run_dispatched`](super::run_dispatched); `schedule.sgd.stop.max_updates` counts steps
/// (every step is an update). All threads are joined before this returns.
///
/// With one worker, ASSM is sequential SGD with momentum `v ← m·v + g; x ← x − η·v` at
/// `η = (1 − m)·γ`, bit for bit (`core/tests/sgd_subgradient.rs`).
///
/// ```
/// use ordo::sgd::{run_async_subgradient, BlockSchedule, Control, GradientModel, LayeredModel, SgdConfig, Stop, Every};
///
/// /// f(x) = ½‖x − 3‖² over two one-parameter "layers".
/// struct Quad;
/// impl GradientModel for Quad {
///     type Scratch = ();
///     fn num_params(&self) -> usize { 2 }
///     fn scratch(&self) {}
///     fn gradient(&self, p: &[f32], b: u64, s: &mut (), g: &mut [f32]) -> f32 {
///         self.restricted_gradient(p, b, 0, s, g)
///     }
/// }
/// impl LayeredModel for Quad {
///     fn layer_sizes(&self) -> Vec<usize> { vec![1, 1] }
///     fn restricted_gradient(&self, p: &[f32], _: u64, lowest: usize, _: &mut (), g: &mut [f32]) -> f32 {
///         for j in 0..2 { g[j] = if j >= lowest { p[j] - 3.0 } else { 0.0 }; }
///         p.iter().map(|x| 0.5 * (x - 3.0) * (x - 3.0)).sum()
///     }
/// }
/// // In PASSM each worker writes only its own block, so a worker the OS starts late leaves its
/// // block where it was: run until the monitor sees every block converged, not for a fixed count.
/// let sgd = SgdConfig {
///     lr: 0.5, momentum: 0.9, stop: Stop::updates(100_000_000), every: Every::Updates(100),
/// };
/// let mut converged = None;
/// let r = run_async_subgradient(&Quad, 2, &[0.0, 0.0], &BlockSchedule::passm(sgd, 100), &mut |s| {
///     if s.params.iter().all(|x| (x - 3.0).abs() < 1e-3) {
///         converged = Some(s.params.to_vec());
///         return Control::Stop;
///     }
///     Control::Continue
/// })?;
/// assert!(converged.is_some(), "both blocks reach the minimum: {:?}", r.run.params);
/// // Only worker 1 writes block 1, so it stepped, and its backprop stopped at layer 1.
/// assert!(r.workers[1].layers_skipped > 0);
/// # Ok::<(), ordo::sgd::SgdError>(())
/// ```
pub fn run_async_subgradient<M: LayeredModel>(
    model: &M,
    threads: usize,
    init: &[f32],
    schedule: &BlockSchedule,
    monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control,
) -> Result<BlockRunReport, SgdError> {
    schedule.validate(threads)?;
    if init.len() != model.num_params() {
        return Err(SgdError::ParamLen { expected: model.num_params(), got: init.len() });
    }
    let sizes = model.layer_sizes();
    let layers: usize = sizes.iter().sum();
    if layers != model.num_params() {
        return Err(SgdError::LayerSizes { layers, params: model.num_params() });
    }
    let blocks = Blocks::by_weight(&sizes, threads)?;
    let shared = Shared::new(BlockStore::new(blocks.clone(), init));
    let run = Run {
        next: AtomicU64::new(0),
        gate: PhaseGate::new(schedule.method(0)),
        telemetry: Mutex::new(vec![WorkerTelemetry::default(); threads]),
    };
    let report = run_workers(&shared, threads, &schedule.sgd, monitor, |w| {
        worker(model, w, &shared, &run, schedule)
    });
    let workers = run.telemetry.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(BlockRunReport { run: report, workers, blocks })
}

/// What the workers share besides the model.
struct Run {
    /// The next start index (minibatch number).
    next: AtomicU64,
    gate: PhaseGate,
    /// Each worker's telemetry, filled in when it leaves.
    telemetry: Mutex<Vec<WorkerTelemetry>>,
}

/// One core of Algorithm 1 (see [`run_async_subgradient`]).
fn worker<M: LayeredModel>(
    model: &M,
    w: usize,
    shared: &Shared<BlockStore>,
    run: &Run,
    schedule: &BlockSchedule,
) -> Vec<StepRecord> {
    let _guard = StopOnDrop(shared);
    let store = &shared.params;
    let blocks = store.blocks();
    let own = blocks.range(w);
    let n = store.len();
    let (mut x, mut g, mut u) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
    let mut scratch = model.scratch();
    let (mut records, mut t) = (Vec::new(), WorkerTelemetry::default());
    let mut last = None;
    let m = schedule.sgd.momentum;
    while !shared.stopped() {
        // Relaxed: a ticket; the gate and the store order the data.
        let i = run.next.fetch_add(1, Ordering::Relaxed);
        shared.count_start();
        let epoch = schedule.epoch(i);
        let method = schedule.method(epoch);
        if !run.gate.enter(method, || shared.stopped()) {
            break;
        }
        if last.is_some_and(|l| l != method) {
            u[..own.start].fill(0.0);
            u[own.end..].fill(0.0);
        }
        last = Some(method);
        let base = store.version();
        let t0 = Instant::now();
        let words = match method {
            Method::Assm => {
                t.lock_wait += assm_read(store, &mut x);
                0..n
            }
            Method::Passm => {
                passm_read(store, &mut x);
                own.clone()
            }
        };
        let t1 = Instant::now();
        let lowest = blocks.lowest_layer(w);
        let loss = match method {
            Method::Assm => model.gradient(&x, i, &mut scratch, &mut g),
            Method::Passm => model.restricted_gradient(&x, i, lowest, &mut scratch, &mut g),
        };
        let t2 = Instant::now();
        // Algorithm 1, line 7, in private memory.
        let wd = schedule.weight_decay;
        for j in words {
            let gj = if wd == 0.0 { g[j] } else { g[j] + wd * x[j] };
            u[j] = m * u[j] + gj;
        }
        // The update budget (`max_updates`) is exact: a step that finishes after the last
        // update was taken is dropped, unwritten and unrecorded.
        let Some(version) = store.take_version_within(schedule.sgd.stop.max_updates) else {
            run.gate.leave();
            shared.request_stop();
            break;
        };
        if method == Method::Passm {
            t.passm_steps += 1;
            t.layers_skipped += lowest as u64;
            t.params_skipped += blocks.offset(lowest) as u64;
        }
        let step = schedule.step(epoch);
        // Algorithm 1, line 8.
        match method {
            Method::Assm => t.lock_wait += assm_write(store, step, &u),
            Method::Passm => passm_write(store, w, step, &u),
        }
        run.gate.leave();
        let t3 = Instant::now();
        t.steps += 1;
        t.read += t1 - t0;
        t.compute += t2 - t1;
        t.write += t3 - t2;
        if schedule.sgd.stop.max_updates.is_some_and(|max| version + 1 >= max) {
            shared.request_stop();
        }
        let end: Duration = shared.start.elapsed();
        records.push(StepRecord {
            index: i,
            worker: w as u32,
            tau: Some(version - base),
            loss,
            end,
        });
    }
    run.telemetry.lock().unwrap_or_else(|e| e.into_inner())[w] = t;
    records
}
