//! `UpdateInterval`: how the interval dispatcher picks `y` for the next interval (paper 001,
//! Algorithm 2 line 28, and §4.1: y-decay, window-probing of y).
//!
//! The dispatcher calls [`UpdateInterval::next_y`] exactly once per closed interval, from the
//! step that closed it, while no other step can be accepted; calls are serialized in interval
//! order, and each happens-before the next. The value becomes the `y` of the interval that opens
//! next and never changes while that interval is open, so no policy can break τ ≤ y.

use super::window_probe::{ProbeConfig, WindowProbe};
use super::{DispatchError, StepIndex};

/// What the dispatcher tells its policy about the interval that just closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedInterval {
    /// Its `I_first`.
    pub first: StepIndex,
    /// Its size `y` (it accepted exactly `y` steps).
    pub y: u32,
    /// Steps accepted since the dispatcher was built, this interval included.
    pub accepted_total: u64,
    /// `I_first` of the interval about to open.
    pub next_first: StepIndex,
}

/// A `y` policy. The result is clamped to `1..=MAX_Y` by the dispatcher.
pub trait UpdateInterval: Send + Sync {
    /// `y` for the interval that opens after `closed` (module docs: when and how it is called).
    fn next_y(&self, closed: &ClosedInterval) -> u32;
}

impl<T: UpdateInterval + ?Sized> UpdateInterval for Box<T> {
    fn next_y(&self, closed: &ClosedInterval) -> u32 {
        (**self).next_y(closed)
    }
}

/// Keep `y` constant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fixed;

impl UpdateInterval for Fixed {
    fn next_y(&self, closed: &ClosedInterval) -> u32 {
        closed.y
    }
}

/// y-decay (§4.1): `y` drops by 1 per `every` accepted steps, never below 1.
///
/// A drop falls due when the accepted total passes a multiple of `every`, and takes effect at
/// the next interval boundary (the paper's experiments: `every = 4096`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decay {
    every: u64,
}

impl Decay {
    /// Decay by one per `every ≥ 1` accepted steps.
    pub fn new(every: u64) -> Result<Self, DispatchError> {
        if every == 0 {
            return Err(DispatchError::BadPolicy("the decay period must be at least 1 step"));
        }
        Ok(Self { every })
    }
}

impl UpdateInterval for Decay {
    fn next_y(&self, closed: &ClosedInterval) -> u32 {
        let end = closed.accepted_total;
        let start = end.saturating_sub(closed.y.into());
        let drops = end / self.every - start / self.every;
        let y = u64::from(closed.y).saturating_sub(drops).max(1);
        u32::try_from(y).unwrap_or(u32::MAX)
    }
}

/// Window-probing of `y` (§4.1): execution phases of `x` accepted steps at the current `y`,
/// then a probing phase that runs `p` accepted steps at each of `w` candidates around it and
/// keeps the one whose loss fell fastest. Phases change at interval boundaries.
///
/// Feed it the training loss with [`Probe::record_loss`] (e.g. each accepted minibatch's loss).
#[derive(Debug)]
pub struct Probe {
    window: WindowProbe,
}

impl Probe {
    /// Probe around `y0` (use the dispatcher's initial `y`), candidates within `1..=max_y`.
    pub fn new(y0: u32, max_y: u32, config: ProbeConfig) -> Result<Self, DispatchError> {
        if y0 == 0 || max_y == 0 {
            return Err(DispatchError::EmptyInterval);
        }
        Ok(Self { window: WindowProbe::new(y0.into(), 1, max_y.max(y0).into(), config)? })
    }

    /// Report a training loss measured now; attributed to the `y` being run.
    pub fn record_loss(&self, loss: f64) {
        self.window.record_loss(loss);
    }

    /// The window-probing state (current centre, phase).
    pub fn window(&self) -> &WindowProbe {
        &self.window
    }
}

impl UpdateInterval for Probe {
    fn next_y(&self, closed: &ClosedInterval) -> u32 {
        let y = self.window.advance(closed.accepted_total, |v, _| v);
        u32::try_from(y).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(y: u32, total: u64) -> ClosedInterval {
        ClosedInterval { first: 0, y, accepted_total: total, next_first: 0 }
    }

    #[test]
    fn fixed_keeps_y() {
        assert_eq!(Fixed.next_y(&closed(7, 100)), 7);
    }

    #[test]
    fn decay_counts_crossed_multiples_and_floors_at_one() {
        let d = Decay::new(4).unwrap();
        assert_eq!(d.next_y(&closed(3, 3)), 3);
        assert_eq!(d.next_y(&closed(3, 4)), 2);
        assert_eq!(d.next_y(&closed(9, 9)), 7);
        assert_eq!(d.next_y(&closed(1, 400)), 1);
        assert!(Decay::new(0).is_err());
    }

    #[test]
    fn probe_moves_y_towards_the_candidate_with_the_steepest_loss_drop() {
        let cfg = ProbeConfig { window: 3, spacing: 1, probe_steps: 4, exec_steps: 4 };
        let p = Probe::new(9, 100, cfg).unwrap();
        // Candidates y−1, y, y+1; the loss falls fastest at y = 11.
        let mut total = 0;
        let mut ys = Vec::new();
        let mut y: u32 = 9;
        for _ in 0..60 {
            total += u64::from(y);
            let slope = 1.0 / (1.0 + f64::from(y.abs_diff(11)));
            for t in 0..y {
                p.record_loss(100.0 - slope * f64::from(t));
            }
            y = p.next_y(&closed(y, total));
            ys.push(y);
        }
        assert!(ys.contains(&8) && ys.contains(&12), "probed around the centre: {ys:?}");
        assert_eq!(p.window().center(), 11, "{ys:?}");
        assert!(Probe::new(0, 10, cfg).is_err());
    }
}
