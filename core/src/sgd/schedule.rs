//! What a run of paper 003's methods is told: which method each epoch uses (ASSM, PASSM, or
//! PASSM+'s switches between them), the step size γ with its dampening epochs, momentum and
//! weight decay (paper 003 §4 "PASSM+ Heuristic" and Appendix D, Table D).

use super::{SgdConfig, SgdError};

/// How a step computes and writes its update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Full subgradient; every block read and written under the block's lock.
    Assm,
    /// Worker `c` computes the subgradient restricted to block `c` and writes it lock-free.
    Passm,
}

/// The configuration of an ASSM / PASSM / PASSM+ run.
///
/// A step's epoch is its start index divided by `steps_per_epoch` (start indices are also the
/// minibatch numbers, so an epoch is a pass over the data). In epoch `e` the method is
/// `start`, flipped once for every entry of `switch_at` that is `≤ e`; the step size is
/// `γ_e = sgd.lr · lr_drop^(number of lr_drops ≤ e)`, times `passm_lr_factor` in PASSM epochs,
/// and a step writes `x ← x − (1 − m)·γ_e·u` with `u ← m·u + g + weight_decay·x` (Algorithm 1,
/// lines 7–8; `m = sgd.momentum`).
///
/// ```
/// use ordo::sgd::{BlockSchedule, Method, SgdConfig};
/// // PASSM+ as in paper 003's Table D (ResNet20): ASSM, PASSM from epoch 75, ASSM from 135, ...
/// let s = BlockSchedule::passm_plus(SgdConfig::default(), 391, vec![75, 135, 165], 2);
/// assert_eq!(s.method(74), Method::Assm);
/// assert_eq!(s.method(75), Method::Passm);
/// assert_eq!(s.method(140), Method::Assm);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSchedule {
    /// γ (`lr`), momentum `m`, when to stop and when to look.
    pub sgd: SgdConfig,
    /// Steps (minibatches) per epoch; at least 1.
    pub steps_per_epoch: u64,
    /// The method of epoch 0.
    pub start: Method,
    /// Epochs where the method flips, strictly increasing.
    pub switch_at: Vec<u64>,
    /// Epochs where γ is multiplied by `lr_drop` (dampening), strictly increasing.
    pub lr_drops: Vec<u64>,
    /// The dampening factor (paper: 0.1 or 0.2).
    pub lr_drop: f32,
    /// Factor on γ in PASSM epochs (PASSM+: `1 − 1/c`, paper §4; otherwise 1).
    pub passm_lr_factor: f32,
    /// Weight decay (L2 coefficient added to the subgradient), ≥ 0.
    pub weight_decay: f32,
}

impl BlockSchedule {
    /// ASSM throughout.
    pub fn assm(sgd: SgdConfig, steps_per_epoch: u64) -> Self {
        Self {
            sgd,
            steps_per_epoch,
            start: Method::Assm,
            switch_at: Vec::new(),
            lr_drops: Vec::new(),
            lr_drop: 0.1,
            passm_lr_factor: 1.0,
            weight_decay: 0.0,
        }
    }

    /// PASSM throughout.
    pub fn passm(sgd: SgdConfig, steps_per_epoch: u64) -> Self {
        Self { start: Method::Passm, ..Self::assm(sgd, steps_per_epoch) }
    }

    /// PASSM+ with `c` workers: ASSM first, flipping at `switch_at`, γ times `1 − 1/c` in PASSM
    /// epochs (paper §4).
    pub fn passm_plus(sgd: SgdConfig, steps_per_epoch: u64, switch_at: Vec<u64>, c: usize) -> Self {
        let passm_lr_factor = if c > 1 { 1.0 - 1.0 / c as f32 } else { 1.0 };
        Self { switch_at, passm_lr_factor, ..Self::assm(sgd, steps_per_epoch) }
    }

    /// The epoch of the step with start index `i`.
    pub fn epoch(&self, i: u64) -> u64 {
        i / self.steps_per_epoch.max(1)
    }

    /// The method of epoch `e`.
    pub fn method(&self, e: u64) -> Method {
        let flips = self.switch_at.iter().filter(|&&s| s <= e).count();
        match (self.start, flips % 2) {
            (m, 0) => m,
            (Method::Assm, _) => Method::Passm,
            (Method::Passm, _) => Method::Assm,
        }
    }

    /// The multiplier `(1 − m)·γ_e` of a write in epoch `e` (see the type's docs).
    pub fn step(&self, e: u64) -> f32 {
        let drops = self.lr_drops.iter().filter(|&&d| d <= e).count();
        let mut gamma = self.sgd.lr;
        for _ in 0..drops {
            gamma *= self.lr_drop;
        }
        if self.method(e) == Method::Passm {
            gamma *= self.passm_lr_factor;
        }
        (1.0 - self.sgd.momentum) * gamma
    }

    /// Check the schedule against a worker count.
    #[cfg_attr(ordo_loom, allow(dead_code))] // the runtimes that call it are not built under loom
    pub(crate) fn validate(&self, threads: usize) -> Result<(), SgdError> {
        self.sgd.validate(threads)?;
        if self.steps_per_epoch == 0 {
            return Err(SgdError::NoEpoch);
        }
        let increasing = |v: &[u64]| v.windows(2).all(|w| w[0] < w[1]);
        if !increasing(&self.switch_at) || !increasing(&self.lr_drops) {
            return Err(SgdError::UnsortedEpochs);
        }
        let positive = |x: f32| x.is_finite() && x > 0.0;
        if !positive(self.lr_drop) || !positive(self.passm_lr_factor) {
            return Err(SgdError::BadLearningRate(self.lr_drop.min(self.passm_lr_factor)));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(SgdError::BadWeightDecay(self.weight_decay));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_drop_and_passm_epochs_are_damped() {
        let sgd = SgdConfig { lr: 0.1, momentum: 0.5, ..SgdConfig::default() };
        let mut s = BlockSchedule::passm_plus(sgd, 10, vec![2, 4], 2);
        s.lr_drops = vec![3];
        assert_eq!(s.epoch(19), 1);
        assert_eq!(s.epoch(20), 2);
        assert_eq!(s.step(0), 0.5 * 0.1);
        assert_eq!(s.step(2), 0.5 * (0.1 * 0.5));
        assert_eq!(s.step(3), 0.5 * (0.1 * 0.1 * 0.5));
        assert_eq!(s.step(4), 0.5 * (0.1 * 0.1));
        assert_eq!(s.method(5), Method::Assm);
        assert!(s.validate(2).is_ok());
        s.switch_at = vec![4, 2];
        assert_eq!(s.validate(2), Err(SgdError::UnsortedEpochs));
        let mut p = BlockSchedule::passm(sgd, 0);
        assert_eq!(p.validate(1), Err(SgdError::NoEpoch));
        p.steps_per_epoch = 1;
        p.weight_decay = -1.0;
        assert_eq!(p.validate(1), Err(SgdError::BadWeightDecay(-1.0)));
    }
}
