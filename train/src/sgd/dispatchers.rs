//! Build the algorithm a run asks for: Sync, Async, ElAsync, Interval with a y policy, or
//! paper 003's ASSM / PASSM / PASSM+.

use ordo::dispatcher::Dispatcher;
use ordo::dispatcher::{
    Async, Decay, DispatchError, ElAsync, Fixed, IntervalDispatcher, Probe, ProbeConfig,
};
use ordo::sgd::StepEvent;
use std::sync::Arc;
use thiserror::Error;

/// How steps are dispatched.
pub enum Algorithm {
    /// Data-parallel synchronous SGD ([`ordo::sgd::run_sync`]).
    Sync,
    /// A dispatcher of Algorithm 1 ([`ordo::sgd::run_dispatched`]).
    Dispatched(Arc<dyn Dispatcher>),
    /// Paper 003's ASSM, PASSM or PASSM+ ([`ordo::sgd::run_async_subgradient`]; the kind is
    /// one of [`Kind::is_subgradient`]).
    Subgradient(Kind),
}

/// The dispatching algorithm (paper 001 §5's contenders).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Data-parallel synchronous SGD (m gradients averaged per step).
    Sync,
    /// Hogwild: every step accepted.
    Async,
    /// Hogwild with window-probed worker count (ElAsyncSGD).
    Elasync,
    /// Interval-Asynchrony.
    Interval,
    /// Paper 003's ASSM: full subgradients, private momentum, per-block locks.
    Assm,
    /// Paper 003's PASSM: worker c owns block c (restricted subgradient, lock-free writes).
    Passm,
    /// Paper 003's PASSM+: ASSM, switching to PASSM and back at `--switch-at` epochs.
    PassmPlus,
}

impl Kind {
    /// The method family of paper 003 (run by `ordo::sgd::run_async_subgradient`, not by a
    /// dispatcher).
    pub fn is_subgradient(self) -> bool {
        matches!(self, Kind::Assm | Kind::Passm | Kind::PassmPlus)
    }

    /// `--lr` as the step it sets for this kind: η itself, or for paper 003's methods their γ with the
    /// step η = (1 − μ)·γ it makes and the `--lr` that makes that step for the other dispatchers
    /// (the same flags are a 1/(1 − μ) times larger step there).
    pub fn step_size(self, lr: f32, momentum: f32) -> String {
        if self.is_subgradient() {
            // Four significant digits: (1 − 0.9)·0.05 in floats is 0.0050000013, meant as 0.005.
            let eta = format!("{:.3e}", (1.0 - f64::from(momentum)) * f64::from(lr));
            let eta = eta.parse::<f64>().map_or(eta, |v| v.to_string());
            format!(
                "γ = {lr} (paper 003's scale: the step is η = (1 − μ)·γ = {eta}; \
                 --lr {eta} is this step for sync, async, elasync and interval)"
            )
        } else {
            format!("η = {lr}")
        }
    }
}

/// How the interval `y` changes (§4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum YPolicy {
    /// Constant y.
    Fixed,
    /// y − 1 per `decay_every` accepted steps.
    Decay,
    /// Window-probing of y on the training loss.
    Probe,
}

/// Everything that picks a dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Algorithm.
    pub kind: Kind,
    /// Worker threads m.
    pub threads: usize,
    /// Initial interval y (Interval only).
    pub y: u32,
    /// y policy (Interval only).
    pub policy: YPolicy,
    /// Accepted steps per decrement of y (paper: 4096).
    pub decay_every: u64,
    /// Window probing of y (`--y-policy probe`).
    pub y_probe: ProbeConfig,
    /// Window probing of m (ElAsync; paper's tuned w = 12, p = 1024, x = 8192).
    pub m_probe: ProbeConfig,
}

impl Spec {
    /// The paper's defaults for `kind` at `threads` (y0 = 64, decay per 4096 accepted steps).
    pub fn paper(kind: Kind, threads: usize) -> Self {
        Self {
            kind,
            threads,
            y: 64,
            policy: YPolicy::Fixed,
            decay_every: 4096,
            y_probe: ProbeConfig { window: 8, spacing: 8, probe_steps: 512, exec_steps: 4096 },
            m_probe: ProbeConfig::PAPER,
        }
    }

    /// A short label, e.g. `interval-decay(y=64)`.
    pub fn label(&self) -> String {
        match (self.kind, self.policy) {
            (Kind::Interval, p) => format!("interval-{p:?}(y={})", self.y).to_lowercase(),
            (Kind::PassmPlus, _) => "passm-plus".to_string(),
            (k, _) => format!("{k:?}").to_lowercase(),
        }
    }
}

/// A bad dispatcher request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BuildError {
    /// m = 0.
    #[error("--threads must be at least 1 (m = 0 workers cannot train)")]
    NoWorkers,
    /// y = 0.
    #[error("--y must be at least 1 (an interval of 0 steps accepts nothing)")]
    NoInterval,
    /// The dispatcher rejected its arguments.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
}

/// Feeds accepted steps' minibatch losses to a probing policy.
pub type LossFeed = Box<dyn Fn(&StepEvent) + Send + Sync>;

/// A built algorithm and the loss feed its probing needs (call it with each accepted step).
pub struct Built {
    /// What to run.
    pub algo: Algorithm,
    /// Feeds accepted steps' minibatch losses to a probing policy (ElAsync, y-probe).
    pub feed: Option<LossFeed>,
}

fn feeder<T: Send + Sync + 'static>(d: &Arc<T>, record: fn(&T, f64)) -> Option<LossFeed> {
    let d = Arc::clone(d);
    Some(Box::new(move |e: &StepEvent| {
        if e.accepted() {
            record(&d, f64::from(e.loss));
        }
    }))
}

/// Build `spec`.
pub fn build(spec: &Spec) -> Result<Built, BuildError> {
    if spec.threads == 0 {
        return Err(BuildError::NoWorkers);
    }
    if spec.kind == Kind::Interval && spec.y == 0 {
        return Err(BuildError::NoInterval);
    }
    let m = spec.threads;
    Ok(match spec.kind {
        Kind::Sync => Built { algo: Algorithm::Sync, feed: None },
        Kind::Assm | Kind::Passm | Kind::PassmPlus => {
            Built { algo: Algorithm::Subgradient(spec.kind), feed: None }
        }
        Kind::Async => Built { algo: Algorithm::Dispatched(Arc::new(Async::new(m)?)), feed: None },
        Kind::Elasync => {
            let d = Arc::new(ElAsync::new(m, m, spec.m_probe)?);
            let feed = feeder(&d, ElAsync::record_loss);
            Built { algo: Algorithm::Dispatched(d), feed }
        }
        Kind::Interval => match spec.policy {
            YPolicy::Fixed => Built {
                algo: Algorithm::Dispatched(Arc::new(IntervalDispatcher::new(m, spec.y, Fixed)?)),
                feed: None,
            },
            YPolicy::Decay => {
                let d = IntervalDispatcher::new(m, spec.y, Decay::new(spec.decay_every)?)?;
                Built { algo: Algorithm::Dispatched(Arc::new(d)), feed: None }
            }
            YPolicy::Probe => {
                let max_y = ordo::dispatcher::MAX_Y;
                let d = Arc::new(IntervalDispatcher::new(
                    m,
                    spec.y,
                    Probe::new(spec.y, max_y, spec.y_probe)?,
                )?);
                let feed = feeder(&d, |d: &IntervalDispatcher<Probe>, l| d.policy().record_loss(l));
                Built { algo: Algorithm::Dispatched(d), feed }
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_workers_or_zero_interval_are_errors() {
        let mut s = Spec::paper(Kind::Interval, 0);
        assert_eq!(build(&s).err(), Some(BuildError::NoWorkers));
        s.threads = 2;
        s.y = 0;
        assert_eq!(build(&s).err(), Some(BuildError::NoInterval));
        s.y = ordo::dispatcher::MAX_Y + 1;
        assert!(matches!(build(&s).err(), Some(BuildError::Dispatch(_))));
    }

    #[test]
    fn every_kind_builds() {
        for kind in
            [Kind::Sync, Kind::Async, Kind::Elasync, Kind::Interval, Kind::Assm, Kind::PassmPlus]
        {
            for policy in [YPolicy::Fixed, YPolicy::Decay, YPolicy::Probe] {
                let s = Spec { policy, ..Spec::paper(kind, 4) };
                let b = build(&s).unwrap();
                let probing =
                    kind == Kind::Elasync || (kind == Kind::Interval && policy == YPolicy::Probe);
                assert_eq!(b.feed.is_some(), probing, "{}", s.label());
                assert_eq!(matches!(b.algo, Algorithm::Sync), kind == Kind::Sync);
                assert_eq!(matches!(b.algo, Algorithm::Subgradient(_)), kind.is_subgradient());
            }
        }
    }
}
