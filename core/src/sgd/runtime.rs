//! Algorithm 1 of paper 001: dispatcher-driven workers with Hogwild updates, and the monitor.

use super::{
    BlockStore, Control, Every, GradientModel, RunReport, SgdConfig, SgdError, Snapshot, StepEvent,
    StepRecord,
};
use crate::dispatcher::Dispatcher;
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use std::time::{Duration, Instant};

/// The global model as the monitor and the report see it.
pub(super) trait ModelView: Sync {
    /// Model updates begun so far.
    fn version(&self) -> u64;
    /// Number of parameters.
    fn len(&self) -> usize;
    /// Copy the parameters into `out`.
    fn copy_into(&self, out: &mut [f32]);
}

impl ModelView for BlockStore {
    fn version(&self) -> u64 {
        BlockStore::version(self)
    }
    fn len(&self) -> usize {
        BlockStore::len(self)
    }
    fn copy_into(&self, out: &mut [f32]) {
        BlockStore::copy_into(self, out)
    }
}

/// What the workers and the monitor of one run share.
pub(super) struct Shared<P = BlockStore> {
    pub params: P,
    /// Set by anyone who ends the run (limit reached, monitor, a worker leaving).
    pub stop: AtomicBool,
    /// Steps started so far.
    pub started: AtomicU64,
    /// The accept lock (see [`run_dispatched`]).
    pub accept: Mutex<()>,
    pub start: Instant,
}

impl<P> Shared<P> {
    pub fn new(params: P) -> Self {
        Self {
            params,
            stop: AtomicBool::new(false),
            started: AtomicU64::new(0),
            accept: Mutex::new(()),
            start: Instant::now(),
        }
    }

    pub fn stopped(&self) -> bool {
        // Relaxed: a stop signal; the scope's joins order everything the caller reads after.
        self.stop.load(Ordering::Relaxed)
    }

    pub fn request_stop(&self) {
        // Relaxed: see `stopped`.
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn count_start(&self) {
        // Relaxed: a statistic for snapshots.
        self.started.fetch_add(1, Ordering::Relaxed);
    }
}

/// Stops the run when a worker leaves its loop for any reason (a panic included), so the
/// monitor never waits for workers that are gone.
pub(super) struct StopOnDrop<'a, P>(pub &'a Shared<P>);

impl<P> Drop for StopOnDrop<'_, P> {
    fn drop(&mut self) {
        self.0.request_stop();
    }
}

pub(super) fn check_args<M: GradientModel>(
    model: &M,
    threads: usize,
    init: &[f32],
    cfg: &SgdConfig,
) -> Result<(), SgdError> {
    cfg.validate(threads)?;
    if init.len() != model.num_params() {
        return Err(SgdError::ParamLen { expected: model.num_params(), got: init.len() });
    }
    Ok(())
}

/// Run parallel SGD following Algorithm 1 of paper 001 with `threads` worker threads
/// (ids `0..threads`; the dispatcher's `m` may be smaller and may change during the run).
///
/// Each worker: `try_start_step` (yield and retry on `None`) → copy θ → `model.gradient` on
/// batch `i` (the step's start index, the paper's `GetBatch(i)`) → `finish_step` → if accepted,
/// [`BlockStore::momentum_step`] with η = `cfg.lr`, μ = `cfg.momentum`. `on_step`, if given, sees
/// every step right after the decision. `monitor` is called on this thread per `cfg.every`
/// and may stop the run. All threads are joined before this returns.
///
/// **Staleness.** An accepted step's `τ` is the number of model updates that took a version
/// number ([`BlockStore::take_version`]) after the step read the version just before copying
/// θ, and before its own. Invariant: `finish_step` and the version ticket of an accepted step
/// happen together under the *accept lock*, and the version read before a copy takes the same
/// lock, so τ is counted in the dispatcher's accept order: every step accepted before this
/// step started is already counted in its base. Hence the dispatcher's bounds hold for the
/// recorded τ exactly (a sequential dispatcher gives τ = 0; an interval dispatcher τ ≤ y − 1).
/// Without the lock, an update accepted but not yet ticketed when the next step copies would be
/// counted against that step. Hogwild still applies to the words: a copy may see a ticketed
/// update only partly written, since τ counts updates *begun*, in the dispatcher's order. The
/// lock is held for one `finish_step` and one RMW (nanoseconds against a gradient's
/// milliseconds); the gradient writes themselves stay lock-free.
///
/// ```
/// use ordo::dispatcher::{DispatchError, Dispatcher};
/// use ordo::sgd::{run_dispatched, Control, GradientModel, SgdConfig, Stop, Every};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// f(θ) = ½‖θ − 3‖², whatever the batch.
/// struct Quad;
/// impl GradientModel for Quad {
///     type Scratch = ();
///     fn num_params(&self) -> usize { 1 }
///     fn scratch(&self) {}
///     fn gradient(&self, p: &[f32], _: u64, _: &mut (), g: &mut [f32]) -> f32 {
///         g[0] = p[0] - 3.0;
///         0.5 * g[0] * g[0]
///     }
/// }
/// /// Every step may start, every gradient is applied (Hogwild).
/// struct AllIn(AtomicU64);
/// impl Dispatcher for AllIn {
///     fn try_start_step(&self, _: usize) -> Option<u64> { Some(self.0.fetch_add(1, Ordering::Relaxed)) }
///     fn finish_step(&self, _: usize, _: u64) -> bool { true }
///     fn workers(&self) -> usize { 2 }
///     fn set_workers(&self, _: usize) -> Result<(), DispatchError> { Ok(()) }
/// }
/// let cfg = SgdConfig { lr: 0.1, momentum: 0.5, stop: Stop::updates(500), every: Every::Never };
/// let report = run_dispatched(&Quad, &AllIn(AtomicU64::new(0)), 2, &[0.0], &cfg,
///                             &mut |_| Control::Continue, None)?;
/// assert!((report.params[0] - 3.0).abs() < 1e-3);
/// # Ok::<(), ordo::sgd::SgdError>(())
/// ```
pub fn run_dispatched<M: GradientModel, D: Dispatcher + ?Sized>(
    model: &M,
    dispatcher: &D,
    threads: usize,
    init: &[f32],
    cfg: &SgdConfig,
    monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control,
    on_step: Option<&(dyn Fn(&StepEvent) + Sync)>,
) -> Result<RunReport, SgdError> {
    check_args(model, threads, init, cfg)?;
    let shared = Shared::new(BlockStore::hogwild(init));
    Ok(run_workers(&shared, threads, cfg, monitor, |w| {
        worker(model, dispatcher, (w, threads), &shared, cfg, on_step)
    }))
}

/// Run `work(w)` on `threads` scoped threads while this thread runs the monitor; join them
/// (resuming a worker's panic) and report.
pub(super) fn run_workers<P: ModelView>(
    shared: &Shared<P>,
    threads: usize,
    cfg: &SgdConfig,
    monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control,
    work: impl Fn(usize) -> Vec<StepRecord> + Sync,
) -> RunReport {
    // std's scoped threads: loom has none, and this module is compiled out under loom.
    let mut steps: Vec<StepRecord> = std::thread::scope(|s| {
        let work = &work;
        let workers: Vec<_> = (0..threads).map(|w| s.spawn(move || work(w))).collect();
        monitor_loop(shared, cfg, monitor);
        workers
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    steps.sort_by_key(|r| r.index);
    RunReport {
        steps,
        updates: shared.params.version(),
        wall: shared.start.elapsed(),
        params: {
            let mut p = vec![0.0; shared.params.len()];
            shared.params.copy_into(&mut p);
            p
        },
    }
}

/// One worker of Algorithm 1: worker `w` of `threads`.
fn worker<M: GradientModel, D: Dispatcher + ?Sized>(
    model: &M,
    dispatcher: &D,
    (w, threads): (usize, usize),
    shared: &Shared,
    cfg: &SgdConfig,
    on_step: Option<&(dyn Fn(&StepEvent) + Sync)>,
) -> Vec<StepRecord> {
    let _guard = StopOnDrop(shared);
    let n = shared.params.len();
    let (mut local, mut grad) = (vec![0.0f32; n], vec![0.0f32; n]);
    let mut scratch = model.scratch();
    let mut records = Vec::new();
    while !shared.stopped() {
        let Some(i) = dispatcher.try_start_step(w) else {
            // Not now (w ≥ m, or the dispatcher is waiting): give the core to someone else.
            std::thread::yield_now();
            continue;
        };
        shared.count_start();
        let base = {
            let _accept = shared.accept.lock().unwrap_or_else(|e| e.into_inner());
            shared.params.version()
        };
        shared.params.copy_into(&mut local);
        let loss = model.gradient(&local, i, &mut scratch, &mut grad);
        let version = {
            let _accept = shared.accept.lock().unwrap_or_else(|e| e.into_inner());
            // **Invariant (update budget):** a run applies at most `max_updates` updates. A
            // step that finishes after another worker's took the last one (it started before
            // the stop was seen) is dropped unrecorded; versions are taken only under this
            // lock, so the check and the take cannot interleave with another accept.
            if cfg.stop.max_updates.is_some_and(|max| shared.params.version() >= max) {
                shared.request_stop();
                break;
            }
            dispatcher.finish_step(w, i).then(|| shared.params.take_version())
        };
        let tau = version.map(|version| {
            shared.params.momentum_step(w, threads, &grad, cfg.lr, cfg.momentum);
            if cfg.stop.max_updates.is_some_and(|max| version + 1 >= max) {
                shared.request_stop();
            }
            version - base
        });
        let record =
            StepRecord { index: i, worker: w as u32, tau, loss, end: shared.start.elapsed() };
        if let Some(observe) = on_step {
            observe(&record);
        }
        records.push(record);
    }
    records
}

/// The caller's thread during a run: enforce the time limit and call the monitor per
/// `cfg.every`, until someone stops the run.
pub(super) fn monitor_loop<P: ModelView>(
    shared: &Shared<P>,
    cfg: &SgdConfig,
    monitor: &mut dyn FnMut(&Snapshot<'_>) -> Control,
) {
    const POLL: Duration = Duration::from_millis(1);
    let mut buf = Vec::new();
    let (mut next_updates, mut next_time) = match cfg.every {
        Every::Updates(n) => (n, Duration::MAX),
        Every::Time(d) => (u64::MAX, d),
        Every::Never => (u64::MAX, Duration::MAX),
    };
    while !shared.stopped() {
        let wall = shared.start.elapsed();
        if cfg.stop.max_time.is_some_and(|t| wall >= t) {
            shared.request_stop();
            break;
        }
        let updates = shared.params.version();
        if updates >= next_updates || wall >= next_time {
            buf.resize(shared.params.len(), 0.0);
            shared.params.copy_into(&mut buf);
            let snap = Snapshot {
                updates,
                // Relaxed: a statistic.
                started: shared.started.load(Ordering::Relaxed),
                wall,
                params: &buf,
            };
            if monitor(&snap) == Control::Stop {
                shared.request_stop();
                break;
            }
            match cfg.every {
                Every::Updates(n) => next_updates = (updates / n + 1) * n,
                Every::Time(d) => next_time = (wall.as_nanos() / d.as_nanos() + 1) as u32 * d,
                Every::Never => {}
            }
        }
        std::thread::sleep(POLL);
    }
}
