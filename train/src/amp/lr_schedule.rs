//! Learning-rate schedules over epochs for `ordo-train amp` (`--lr-schedule`).

use std::str::FromStr;

/// How the learning rate changes from epoch to epoch. The rate is set at the start of each
/// epoch and kept through it, so every arm of a comparison (1 replica or several, any number
/// of synchronizations or evaluations per epoch) trains at the same rate in the same epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// The base rate throughout.
    Constant,
    /// `lr · factor^⌊(e − 1) / every⌋` in epoch `e` (from 1): multiplied by `factor` every
    /// `every` epochs. Written `step:EVERY:FACTOR`.
    Step {
        /// Epochs between decays (≥ 1).
        every: usize,
        /// Factor per decay.
        factor: f32,
    },
    /// `lr · ½ (1 + cos(π (e − 1) / E))` in epoch `e` of `E` (cosine annealing, Loshchilov &
    /// Hutter 2017, one cycle, per epoch): the base rate in epoch 1, falling towards 0.
    /// Written `cosine`.
    Cosine,
}

impl LrSchedule {
    /// The learning rate in epoch `epoch` (from 1) of `epochs`, from the base rate `lr`.
    ///
    /// ```
    /// use ordo_train::amp::lr_schedule::LrSchedule;
    /// let s: LrSchedule = "step:2:0.5".parse().unwrap();
    /// assert_eq!(s.lr(0.002, 3, 6), 0.001);
    /// assert_eq!(LrSchedule::Cosine.lr(0.002, 1, 6), 0.002);
    /// ```
    pub fn lr(&self, lr: f32, epoch: usize, epochs: usize) -> f32 {
        let e = epoch.saturating_sub(1);
        match *self {
            LrSchedule::Constant => lr,
            LrSchedule::Step { every, factor } => lr * factor.powi((e / every.max(1)) as i32),
            LrSchedule::Cosine => {
                let x = std::f64::consts::PI * e as f64 / epochs.max(1) as f64;
                (f64::from(lr) * 0.5 * (1.0 + x.cos())) as f32
            }
        }
    }
}

/// A schedule that does not parse.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("learning-rate schedule `{0}`: expected constant, cosine or step:EVERY:FACTOR (EVERY ≥ 1)")]
pub struct BadSchedule(String);

impl FromStr for LrSchedule {
    type Err = BadSchedule;

    fn from_str(s: &str) -> Result<LrSchedule, BadSchedule> {
        let bad = || BadSchedule(s.to_string());
        match s.split(':').collect::<Vec<_>>().as_slice() {
            ["constant"] => Ok(LrSchedule::Constant),
            ["cosine"] => Ok(LrSchedule::Cosine),
            ["step", every, factor] => {
                let every: usize = every.parse().map_err(|_| bad())?;
                let factor: f32 = factor.parse().map_err(|_| bad())?;
                if every == 0 || !factor.is_finite() || factor <= 0.0 {
                    return Err(bad());
                }
                Ok(LrSchedule::Step { every, factor })
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_decays_by_the_factor_every_n_epochs() {
        let s: LrSchedule = "step:2:0.25".parse().unwrap();
        let lrs: Vec<f32> = (1..=6).map(|e| s.lr(0.004, e, 6)).collect();
        assert_eq!(lrs, [0.004, 0.004, 0.001, 0.001, 0.00025, 0.00025]);
    }

    #[test]
    fn cosine_starts_at_the_base_rate_and_halves_at_mid_run() {
        let s = LrSchedule::Cosine;
        assert_eq!(s.lr(0.002, 1, 6), 0.002);
        assert!((s.lr(0.002, 4, 6) - 0.001).abs() < 1e-9);
        assert!(
            (s.lr(0.002, 6, 6) - 0.002 * 0.5 * (1.0 + (5.0 * std::f32::consts::PI / 6.0).cos()))
                .abs()
                < 1e-9
        );
        let lrs: Vec<f32> = (1..=6).map(|e| s.lr(0.002, e, 6)).collect();
        assert!(lrs.windows(2).all(|w| w[1] < w[0]), "{lrs:?}");
    }

    #[test]
    fn constant_keeps_the_rate_and_bad_specs_are_errors() {
        assert_eq!("constant".parse::<LrSchedule>().unwrap().lr(0.3, 9, 10), 0.3);
        for bad in ["", "step", "step:0:0.5", "step:2:-1", "step:2:x", "cosine:1", "linear"] {
            assert_eq!(bad.parse::<LrSchedule>(), Err(BadSchedule(bad.to_string())), "{bad}");
        }
    }
}
