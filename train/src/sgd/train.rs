//! One training run: an MLP on Fashion-MNIST under a dispatcher (or Sync), evaluated on the
//! test split as it trains.

use super::cnn::Cnn;
use super::dispatchers::{Algorithm, Kind};
use super::idx::FashionMnist;
use super::mlp::Mlp;
use super::net::{Classifier, NetError};
use ordo::sgd::{
    BlockSchedule, Control, Every, LayeredModel, RunReport, SgdConfig, SgdError, StepEvent, Stop,
    WorkerTelemetry, run_async_subgradient, run_dispatched, run_sync,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use thiserror::Error;

/// Which network to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// MLP 784-hidden-10.
    Mlp,
    /// LeNet-like CNN (conv-pool-conv-pool-dense-dense), ~15k parameters.
    Cnn,
}

/// Options of one run (defaults: the paper's η = 0.005, μ = 0.5, batch 16).
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Worker threads.
    pub threads: usize,
    /// η.
    pub lr: f32,
    /// μ.
    pub momentum: f32,
    /// Minibatch size per step.
    pub batch: usize,
    /// The network.
    pub model: ModelKind,
    /// Hidden units of the MLP.
    pub hidden: usize,
    /// When to stop (a target accuracy may stop it earlier).
    pub stop: Stop,
    /// When to evaluate on the test split.
    pub eval_every: Every,
    /// Evaluate on the first this many test examples (all if `None`).
    pub eval_limit: Option<usize>,
    /// Stop once the test accuracy reaches this.
    pub target_acc: Option<f64>,
    /// Seed of the shuffle and the initial weights.
    pub seed: u64,
    /// PASSM+: epochs where the method flips (ASSM → PASSM → ASSM …).
    pub switch_at: Vec<u64>,
    /// ASSM / PASSM / PASSM+: epochs where γ is multiplied by `lr_drop`.
    pub lr_drops: Vec<u64>,
    /// The dampening factor of `lr_drops`.
    pub lr_drop: f32,
    /// ASSM / PASSM / PASSM+: weight decay.
    pub weight_decay: f32,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            threads: 2,
            lr: 0.005,
            momentum: 0.5,
            batch: 16,
            model: ModelKind::Mlp,
            hidden: 128,
            stop: Stop::time(Duration::from_secs(30)),
            eval_every: Every::Time(Duration::from_secs(1)),
            eval_limit: None,
            target_acc: None,
            seed: 1,
            switch_at: Vec::new(),
            lr_drops: Vec::new(),
            lr_drop: 0.1,
            weight_decay: 0.0,
        }
    }
}

/// A bad training argument.
#[derive(Debug, Error)]
pub enum TrainError {
    /// Bad model shape.
    #[error(transparent)]
    Net(#[from] NetError),
    /// Bad runtime argument.
    #[error(transparent)]
    Sgd(#[from] SgdError),
    /// A minibatch loss or a parameter became NaN or infinite: the run stopped there.
    #[error("the run diverged: {what} at {at} (epoch {epoch}); lower --lr (it was {lr}{scale})")]
    Diverged {
        /// What became non-finite.
        what: &'static str,
        /// Where: `step N` (the first step whose loss was not finite, counted from 1) or
        /// `update N` (the first snapshot whose parameters were not).
        at: String,
        /// The epoch it was in, counted from 1.
        epoch: u64,
        /// The run's `--lr`.
        lr: f32,
        /// How `--lr` maps to the step for this algorithm (empty where it is η itself).
        scale: String,
    },
}

/// Where a run stands when it is found to diverge: the first non-finite step loss (its start
/// index) seen by the step observer, shared with the monitor that stops the run.
struct Divergence {
    first_bad_step: AtomicU64,
}

impl Divergence {
    fn new() -> Self {
        Divergence { first_bad_step: AtomicU64::new(u64::MAX) }
    }

    fn see(&self, e: &StepEvent) {
        if !e.loss.is_finite() {
            // Relaxed: a minimum over steps, read by the monitor and after the run's join.
            self.first_bad_step.fetch_min(e.index, Ordering::Relaxed);
        }
    }

    /// Whether the run must stop: a step's loss or a parameter of `params` is not finite.
    fn found(&self, params: &[f32]) -> bool {
        self.first_bad_step.load(Ordering::Relaxed) != u64::MAX
            || params.iter().any(|v| !v.is_finite())
    }
}

/// The error of a run whose report shows a non-finite loss or final parameter, if it does.
fn diverged(
    report: &RunReport,
    algo: &Algorithm,
    opts: &TrainOptions,
    n_train: usize,
) -> Option<TrainError> {
    let epoch = |examples: u64| examples / (n_train.max(1) as u64) + 1;
    let batch = opts.batch.max(1) as u64;
    let scale = match algo {
        Algorithm::Subgradient(kind) => {
            format!(": {}", kind.step_size(opts.lr, opts.momentum))
        }
        _ => String::new(),
    };
    let lr = opts.lr;
    if let Some(s) = report.steps.iter().filter(|s| !s.loss.is_finite()).min_by_key(|s| s.index) {
        let what = if s.loss.is_nan() {
            "the minibatch loss became NaN"
        } else {
            "the minibatch loss became infinite"
        };
        let at = format!("step {}", s.index + 1);
        return Some(TrainError::Diverged { what, at, epoch: epoch(s.index * batch), lr, scale });
    }
    if report.params.iter().any(|v| !v.is_finite()) {
        let what = "a parameter became NaN or infinite";
        let at = format!("update {}", report.updates);
        return Some(TrainError::Diverged {
            what,
            at,
            epoch: epoch(report.updates * batch),
            lr,
            scale,
        });
    }
    None
}

/// One evaluation during training.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalPoint {
    /// Model updates so far.
    pub updates: u64,
    /// Steps started so far.
    pub started: u64,
    /// Wall seconds since the start.
    pub wall_s: f64,
    /// Mean test cross-entropy.
    pub test_loss: f64,
    /// Test accuracy.
    pub test_acc: f64,
    /// Accepted / finished steps so far.
    pub accept_rate: f64,
    /// Mean τ of the accepted steps so far.
    pub mean_tau: f64,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct TrainOutcome {
    /// The evaluations, in time order (the last one is of the final model).
    pub curve: Vec<EvalPoint>,
    /// The runtime's record.
    pub report: RunReport,
    /// ASSM / PASSM / PASSM+: what each worker did (empty for the other algorithms).
    pub workers: Vec<WorkerTelemetry>,
}

impl TrainOutcome {
    /// The best test accuracy seen.
    pub fn best_acc(&self) -> f64 {
        self.curve.iter().map(|p| p.test_acc).fold(0.0, f64::max)
    }
    /// Wall seconds of the first evaluation at or above `acc`.
    pub fn time_to(&self, acc: f64) -> Option<f64> {
        self.curve.iter().find(|p| p.test_acc >= acc).map(|p| p.wall_s)
    }
}

/// A step observer.
pub type OnStep<'a> = Option<&'a (dyn Fn(&StepEvent) + Sync)>;

/// Train `opts.model` on `data` with `algo`; `on_eval` sees each evaluation as it happens.
/// `on_step` (e.g. a probing policy's loss feed) sees every step.
pub fn train(
    data: &FashionMnist,
    algo: &Algorithm,
    opts: &TrainOptions,
    on_eval: &mut dyn FnMut(&EvalPoint),
    on_step: OnStep<'_>,
) -> Result<TrainOutcome, TrainError> {
    match opts.model {
        ModelKind::Mlp => {
            let mlp = Mlp::new(&data.train, opts.hidden, opts.batch, opts.seed)?;
            let init = mlp.init_params(opts.seed);
            train_model(&mlp, init, data, algo, opts, on_eval, on_step)
        }
        ModelKind::Cnn => {
            let cnn = Cnn::new(&data.train, opts.batch, opts.seed)?;
            let init = cnn.init_params(opts.seed);
            train_model(&cnn, init, data, algo, opts, on_eval, on_step)
        }
    }
}

/// The schedule of an ASSM / PASSM / PASSM+ run of `kind` (one epoch = one pass over `n_train`
/// examples in minibatches of `opts.batch`).
pub fn schedule(kind: Kind, cfg: SgdConfig, opts: &TrainOptions, n_train: usize) -> BlockSchedule {
    let per_epoch = (n_train / opts.batch.max(1)).max(1) as u64;
    let base = match kind {
        Kind::Passm => BlockSchedule::passm(cfg, per_epoch),
        Kind::PassmPlus => {
            BlockSchedule::passm_plus(cfg, per_epoch, opts.switch_at.clone(), opts.threads)
        }
        _ => BlockSchedule::assm(cfg, per_epoch),
    };
    BlockSchedule {
        lr_drops: opts.lr_drops.clone(),
        lr_drop: opts.lr_drop,
        weight_decay: opts.weight_decay,
        ..base
    }
}

fn train_model<M: Classifier + LayeredModel>(
    model: &M,
    init: Vec<f32>,
    data: &FashionMnist,
    algo: &Algorithm,
    opts: &TrainOptions,
    on_eval: &mut dyn FnMut(&EvalPoint),
    on_step: OnStep<'_>,
) -> Result<TrainOutcome, TrainError> {
    let cfg =
        SgdConfig { lr: opts.lr, momentum: opts.momentum, stop: opts.stop, every: opts.eval_every };
    // Live counters for the progress table (the report has the exact per-step record).
    let (finished, accepted, tau_sum) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let divergence = Divergence::new();
    let count = |e: &StepEvent| {
        divergence.see(e);
        // Relaxed: statistics read by the monitor; exactness comes from the final report.
        finished.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = e.tau {
            accepted.fetch_add(1, Ordering::Relaxed);
            tau_sum.fetch_add(t, Ordering::Relaxed);
        }
        if let Some(f) = on_step {
            f(e);
        }
    };
    let mut curve = Vec::new();
    // `exact`: (accept rate, mean τ) from the final report; otherwise the live counters.
    let mut evaluate = |updates, started, wall: Duration, params: &[f32], exact: Option<_>| {
        let (test_loss, test_acc) = model.evaluate(params, &data.test, opts.eval_limit);
        let (accept_rate, mean_tau) = exact.unwrap_or_else(|| {
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64;
            let (f, a, t) = (load(&finished), load(&accepted), load(&tau_sum));
            (if f > 0.0 { a / f } else { 1.0 }, if a > 0.0 { t / a } else { 0.0 })
        });
        let point = EvalPoint {
            updates,
            started,
            wall_s: wall.as_secs_f64(),
            test_loss,
            test_acc,
            accept_rate,
            mean_tau,
        };
        on_eval(&point);
        curve.push(point);
        point
    };
    let mut monitor = |s: &ordo::sgd::Snapshot<'_>| {
        // A diverged run stops at the next snapshot (its error is made from the report).
        if divergence.found(s.params) {
            return Control::Stop;
        }
        let p = evaluate(s.updates, s.started, s.wall, s.params, None);
        match opts.target_acc {
            Some(t) if p.test_acc >= t => Control::Stop,
            _ => Control::Continue,
        }
    };
    let mut workers = Vec::new();
    let report = match algo {
        Algorithm::Sync => {
            let r = run_sync(model, opts.threads, &init, &cfg, &mut monitor)?;
            r.steps.iter().for_each(count);
            r
        }
        Algorithm::Subgradient(kind) => {
            let s = schedule(*kind, cfg, opts, data.train.n);
            let r = run_async_subgradient(model, opts.threads, &init, &s, &mut monitor)?;
            r.run.steps.iter().for_each(count);
            workers = r.workers;
            r.run
        }
        Algorithm::Dispatched(d) => run_dispatched(
            model,
            d.as_ref(),
            opts.threads,
            &init,
            &cfg,
            &mut monitor,
            Some(&count),
        )?,
    };
    if let Some(e) = diverged(&report, algo, opts, data.train.n) {
        return Err(e);
    }
    // The final model, with exact statistics from the report.
    let exact = Some((report.accept_rate(), report.mean_tau()));
    evaluate(report.updates, report.started() as u64, report.wall, &report.params, exact);
    Ok(TrainOutcome { curve, report, workers })
}
