//! Deterministic models for the engine's own checks (equivalence, simulation, fuzzing, benches).
//! Not for training.

use super::{BatchRows, Model, StepError};

/// A deterministic step that mixes every row of the batch with the batch's mean and a per-batch
/// scalar, and folds the mean into a dense parameter: any lost or stale update changes the bits.
#[derive(Debug, Clone, PartialEq)]
pub struct MixModel {
    width: usize,
    dense: Vec<f32>,
}

impl MixModel {
    /// A model for rows of `width` floats, dense parameters zero.
    pub fn new(width: usize) -> Self {
        MixModel { width, dense: vec![0.0; 2] }
    }
}

impl Model for MixModel {
    type Data = f32;

    fn row_width(&self) -> usize {
        self.width
    }

    fn step(&mut self, data: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        let n = rows.values().len().max(1) as f32;
        let mean = rows.values().iter().sum::<f32>() / n;
        let d = self.dense[0];
        for (k, v) in rows.values_mut().iter_mut().enumerate() {
            *v = 0.5 * *v + 0.25 * mean + data + 0.125 * d + (k % 3) as f32 * 0.0625;
        }
        self.dense[0] = 0.5 * d + mean;
        self.dense[1] += 1.0;
        Ok(())
    }

    fn dense(&self) -> Vec<f32> {
        self.dense.clone()
    }
}
