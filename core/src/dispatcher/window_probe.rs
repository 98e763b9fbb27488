//! Window-probing (ElAsyncSGD's parameter search, reused by paper 001 §4.1 for `y`): alternate
//! an *execution* phase of `x` accepted steps at the current value with a *probing* phase that
//! runs `p` accepted steps at each of `w` candidates `v' ∈ [v − k·w/2, v + k·w/2)` (spacing `k`),
//! then continue from the candidate whose loss fell fastest.
//!
//! The convergence rate of a candidate is minus the least-squares slope of the losses reported
//! while it ran, against their order of arrival; a candidate with fewer than two reports is not
//! eligible, and with none eligible the value stays. Ties keep the current value, then the
//! lowest candidate. Losses arrive asynchronously, so a report is attributed to whatever value
//! runs when it arrives.

use crate::sync::Mutex;

use super::DispatchError;

/// Window-probing parameters (paper 001: `w`, `p`, `x`; the spacing `k` of the candidates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeConfig {
    /// `w`: candidates per probing phase.
    pub window: u32,
    /// `k`: distance between neighbouring candidates.
    pub spacing: u64,
    /// `p`: accepted steps per candidate.
    pub probe_steps: u64,
    /// `x`: accepted steps per execution phase.
    pub exec_steps: u64,
}

impl ProbeConfig {
    /// The ElAsync baseline's tuned setting in paper 001 §5: `w = 12`, `p = 1024`, `x = 8192`.
    pub const PAPER: ProbeConfig =
        ProbeConfig { window: 12, spacing: 1, probe_steps: 1024, exec_steps: 8192 };

    fn validate(&self) -> Result<(), DispatchError> {
        match () {
            _ if self.window == 0 => Err(DispatchError::BadPolicy("window w must be ≥ 1")),
            _ if self.spacing == 0 => Err(DispatchError::BadPolicy("spacing k must be ≥ 1")),
            _ if self.probe_steps == 0 => {
                Err(DispatchError::BadPolicy("probe steps p must be ≥ 1"))
            }
            _ if self.exec_steps == 0 => Err(DispatchError::BadPolicy("exec steps x must be ≥ 1")),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Exec,
    Probe(usize),
}

/// Running least-squares sums of (arrival order t, loss).
#[derive(Debug, Clone, Copy, Default)]
struct Segment {
    n: f64,
    t: f64,
    l: f64,
    tl: f64,
    tt: f64,
}

impl Segment {
    fn push(&mut self, loss: f64) {
        let t = self.n;
        self.n += 1.0;
        self.t += t;
        self.l += loss;
        self.tl += t * loss;
        self.tt += t * t;
    }

    /// −slope, if at least two reports.
    fn rate(&self) -> Option<f64> {
        let den = self.n * self.tt - self.t * self.t;
        (self.n >= 2.0 && den > 0.0).then(|| -(self.n * self.tl - self.t * self.l) / den)
    }
}

#[derive(Debug)]
struct State {
    center: u64,
    phase: Phase,
    /// Accepted-step total at which the phase ends.
    phase_end: u64,
    /// Largest accepted total seen (older calls are ignored).
    latest: u64,
    rates: Vec<Option<f64>>,
    segment: Segment,
}

/// The window-probing controller of one integer parameter in `[min, max]` (module docs).
#[derive(Debug)]
pub struct WindowProbe {
    config: ProbeConfig,
    min: u64,
    max: u64,
    state: Mutex<State>,
}

impl WindowProbe {
    /// Start an execution phase at `initial` (clamped to `[min, max]`).
    pub fn new(
        initial: u64,
        min: u64,
        max: u64,
        config: ProbeConfig,
    ) -> Result<Self, DispatchError> {
        config.validate()?;
        if min > max {
            return Err(DispatchError::BadPolicy("empty probing range (min > max)"));
        }
        Ok(Self {
            config,
            min,
            max,
            state: Mutex::new(State {
                center: initial.clamp(min, max),
                phase: Phase::Exec,
                phase_end: config.exec_steps,
                latest: 0,
                rates: vec![None; config.window as usize],
                segment: Segment::default(),
            }),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // A panic while holding the lock leaves only statistics behind: keep going.
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// Candidate `j` of a probing phase around `center`.
    fn candidate(&self, center: u64, j: usize) -> u64 {
        let k = i128::from(self.config.spacing);
        let lo = i128::from(center) - k * i128::from(self.config.window) / 2;
        let v = lo + k * j as i128;
        v.clamp(i128::from(self.min), i128::from(self.max)) as u64
    }

    /// The current execution value.
    pub fn center(&self) -> u64 {
        self.with(|s| s.center)
    }

    /// Report a loss measured now.
    pub fn record_loss(&self, loss: f64) {
        if loss.is_finite() {
            self.with(|s| s.segment.push(loss));
        }
    }

    /// Move the phases on to `accepted_total` steps and call `apply(value, phase_end)` with the
    /// value to run now and the accepted total at which the current phase ends, under the lock
    /// (so applications happen in order). Calls with a smaller total than an earlier call are
    /// not advanced.
    pub fn advance<R>(&self, accepted_total: u64, apply: impl FnOnce(u64, u64) -> R) -> R {
        self.with(|s| {
            if accepted_total >= s.latest {
                s.latest = accepted_total;
                if accepted_total >= s.phase_end {
                    self.next_phase(s, accepted_total);
                }
            }
            let value = match s.phase {
                Phase::Exec => s.center,
                Phase::Probe(j) => self.candidate(s.center, j),
            };
            apply(value, s.phase_end)
        })
    }

    fn next_phase(&self, s: &mut State, now: u64) {
        let w = self.config.window as usize;
        match s.phase {
            Phase::Exec => {
                s.rates.iter_mut().for_each(|r| *r = None);
                s.phase = Phase::Probe(0);
            }
            Phase::Probe(j) => {
                s.rates[j] = s.segment.rate();
                if j + 1 < w {
                    s.phase = Phase::Probe(j + 1);
                } else {
                    s.center = self.best(s);
                    s.phase = Phase::Exec;
                }
            }
        }
        s.segment = Segment::default();
        let len = match s.phase {
            Phase::Exec => self.config.exec_steps,
            Phase::Probe(_) => self.config.probe_steps,
        };
        s.phase_end = now.saturating_add(len);
    }

    fn best(&self, s: &State) -> u64 {
        let mut best: Option<(f64, u64)> = None;
        for (j, r) in s.rates.iter().enumerate() {
            let Some(r) = *r else { continue };
            let v = self.candidate(s.center, j);
            let better = match best {
                None => true,
                Some((br, bv)) => r > br || (r == br && v == s.center && bv != s.center),
            };
            if better {
                best = Some((r, v));
            }
        }
        best.map_or(s.center, |(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_x_then_p_per_candidate() {
        let cfg = ProbeConfig { window: 2, spacing: 3, probe_steps: 5, exec_steps: 10 };
        let w = WindowProbe::new(10, 1, 100, cfg).unwrap();
        let seen: Vec<(u64, u64)> =
            [0, 9, 10, 14, 15, 20].iter().map(|&t| w.advance(t, |v, end| (v, end))).collect();
        // exec 10 until 10; probe 7 (10 − 3) until 15; probe 10 until 20; exec (no losses: 10).
        assert_eq!(seen, vec![(10, 10), (10, 10), (7, 15), (7, 15), (10, 20), (10, 30)]);
        // An out-of-date call does not move the phases back.
        assert_eq!(w.advance(3, |v, end| (v, end)), (10, 30));
    }

    #[test]
    fn candidates_clamp_to_the_range_and_bad_configs_are_errors() {
        let cfg = ProbeConfig { window: 4, spacing: 2, probe_steps: 1, exec_steps: 1 };
        let w = WindowProbe::new(2, 1, 5, cfg).unwrap();
        let c: Vec<u64> = (0..4).map(|j| w.candidate(2, j)).collect();
        assert_eq!(c, vec![1, 1, 2, 4]);
        for bad in [
            ProbeConfig { window: 0, ..cfg },
            ProbeConfig { spacing: 0, ..cfg },
            ProbeConfig { probe_steps: 0, ..cfg },
            ProbeConfig { exec_steps: 0, ..cfg },
        ] {
            assert!(WindowProbe::new(2, 1, 5, bad).is_err());
        }
        assert!(WindowProbe::new(2, 6, 5, cfg).is_err());
    }

    #[test]
    fn slope_of_falling_losses_is_a_positive_rate() {
        let mut s = Segment::default();
        assert_eq!(s.rate(), None);
        for l in [5.0, 3.0, 1.0] {
            s.push(l);
        }
        assert!((s.rate().unwrap() - 2.0).abs() < 1e-12);
    }
}
