//! `ElAsync`: asynchronous SGD with elastic parallelism (ElAsyncSGD, the baseline of paper 001
//! §2 and §5): every finished step is accepted, and the number of active workers `m` is
//! window-probed — execution phases of `x` accepted steps at the current `m`, then probing
//! phases of `p` accepted steps at each of `w` candidate values of `m`, keeping the one whose
//! loss fell fastest ([`WindowProbe`]).
//!
//! The step whose acceptance reaches the end of a phase moves the probe on and sets `m`
//! (under the probe's lock, so bounds are applied in phase order). Workers `≥ m` get `None` from
//! `try_start_step` and should idle briefly; a step already running when `m` shrinks still
//! finishes and is accepted.

use crate::sync::{AtomicU64, Ordering};

use super::asynchronous::Async;
use super::window_probe::{ProbeConfig, WindowProbe};
use super::{Decision, DispatchError, Dispatcher, StepIndex, Telemetry, WorkerId};

/// Accept-all dispatcher with a window-probed worker bound (module docs).
pub struct ElAsync {
    inner: Async,
    probe: WindowProbe,
    /// Accepted total at which the current phase ends (a hint: the probe re-checks it).
    phase_end: AtomicU64,
}

impl ElAsync {
    /// Up to `max_workers` workers, starting with `m0` active, probing with `config`.
    pub fn new(max_workers: usize, m0: usize, config: ProbeConfig) -> Result<Self, DispatchError> {
        let inner = Async::with_capacity(m0, max_workers)?;
        let probe = WindowProbe::new(m0 as u64, 1, max_workers as u64, config)?;
        let phase_end = probe.advance(0, |_, end| end);
        Ok(Self { inner, probe, phase_end: AtomicU64::new(phase_end) })
    }

    /// Report a training loss measured now (drives the probing of `m`).
    pub fn record_loss(&self, loss: f64) {
        self.probe.record_loss(loss);
    }

    /// The window-probing state.
    pub fn probe(&self) -> &WindowProbe {
        &self.probe
    }
}

impl Dispatcher for ElAsync {
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex> {
        self.inner.try_start_step(worker)
    }

    fn finish_step(&self, worker: WorkerId, step: StepIndex) -> bool {
        self.finish_step_detailed(worker, step).accepted
    }

    fn finish_step_detailed(&self, worker: WorkerId, _step: StepIndex) -> Decision {
        let (decision, seq) = self.inner.accept(worker);
        let total = seq + 1;
        // Relaxed: a hint; the probe's lock orders the real phase change.
        if total >= self.phase_end.load(Ordering::Relaxed) {
            self.probe.advance(total, |m, end| {
                // m is within [1, capacity] by construction of the probe's range.
                let _ = self.inner.set_workers(m as usize);
                // Relaxed: a hint (see above); written under the probe's lock, in phase order.
                self.phase_end.store(end, Ordering::Relaxed);
            });
        }
        decision
    }

    fn workers(&self) -> usize {
        self.inner.workers()
    }

    /// Override the probed bound until the next phase change.
    fn set_workers(&self, m: usize) -> Result<(), DispatchError> {
        self.inner.set_workers(m)
    }

    fn telemetry(&self) -> Option<Telemetry> {
        self.inner.telemetry()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_worker_counts_and_settles_on_the_best() {
        let cfg = ProbeConfig { window: 3, spacing: 1, probe_steps: 20, exec_steps: 20 };
        let d = ElAsync::new(8, 4, cfg).unwrap();
        let mut seen = Vec::new();
        for _ in 0..400 {
            let m = d.workers();
            seen.push(m);
            // Loss falls fastest with 5 workers.
            let rate = 1.0 / (1.0 + m.abs_diff(5) as f64);
            let w = m - 1;
            let i = d.try_start_step(w).unwrap();
            assert!(d.finish_step(w, i));
            d.record_loss(1000.0 - rate * seen.iter().filter(|&&x| x == m).count() as f64);
        }
        assert!(seen.contains(&3) && seen.contains(&6), "probed around: {seen:?}");
        assert_eq!(d.probe().center(), 5);
        assert!(ElAsync::new(0, 1, cfg).is_err());
        assert!(ElAsync::new(2, 3, cfg).is_err());
    }
}
