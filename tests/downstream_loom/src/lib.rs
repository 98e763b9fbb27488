//! A downstream crate of `ordo`, written as a user's trainer would be, using only the public API
//! with default features. CI checks it with `RUSTFLAGS="--cfg loom" cargo check` (the usual cfg
//! a crate sets to run its *own* loom tests): ordo's model-checker switch is the crate-specific
//! `ordo_loom`, so `Engine`, `Session` and `DeviceQueue` must be there, unchanged, under
//! `--cfg loom` too. If ordo's public API changed under that cfg, this crate would not compile.

use ordo::engine::{
    Batch, BatchRows, CpuDevice, DeviceQueue, Engine, EngineConfig, EngineError, Mode, Model,
    RunReport, StepError,
};
use ordo::row_store::RowStore;

/// The user's model: pull every row towards the batch's target.
pub struct Pull;

impl Model for Pull {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        1
    }
    fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v));
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        Vec::new()
    }
}

/// The user's training loop: one OAC epoch through a session on the CPU device.
pub fn train(store: &RowStore, batches: Vec<Batch<f32>>) -> Result<RunReport, EngineError> {
    let engine: Engine = Engine::new(EngineConfig::new(Mode::Oac))?;
    let mut device = CpuDevice::new();
    let _: &dyn DeviceQueue<Pull> = &device;
    engine.session(&mut device, &mut Pull, store, |s| {
        s.submit_all(batches)?;
        s.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(loom))]
    #[test]
    fn an_epoch_stamps_every_batch() {
        let store = RowStore::zeros(4, 1);
        let batches = (0..8).map(|i| Batch { id: i, rows: vec![i % 4], data: 1.0 }).collect();
        let report = train(&store, batches).unwrap();
        assert_eq!(report.order.len(), 8);
        assert!(store.snapshot().iter().all(|&v| v > 0.0));
    }
}
