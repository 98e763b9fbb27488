//! Shared by `sim_engine.rs` and `cuda_engine.rs`: a small deterministic model and the check
//! that an `Oac` run with a given device stage equals the sequential replay of its order.

use ordo::engine::{
    Batch, BatchRows, DeviceQueue, Engine, EngineConfig, EngineError, Mode, Model, StepError,
    replay,
};
use ordo::row_store::RowStore;

/// Pull every row of the batch towards the batch's target; a dense bias counts the steps.
pub struct Pull {
    pub bias: f32,
}

impl Model for Pull {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        3
    }
    fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        rows.values_mut().iter_mut().for_each(|v| *v += 0.5 * (target - *v) + self.bias);
        self.bias += 0.01;
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        vec![self.bias]
    }
}

/// 400 batches of 4 rows; the first three rows overlap heavily across batches.
pub fn batches() -> Vec<Batch<f32>> {
    (0..400u64)
        .map(|i| Batch { id: i, rows: vec![i % 5, 5 + i % 11, 20 + i % 3, 40 + i], data: i as f32 })
        .collect()
}

/// Run `Oac` with `device` and `readers`/`writers` threads.
pub fn run_oac(
    device: &mut impl DeviceQueue<Pull>,
    threads: (usize, usize),
) -> Result<(RowStore, Pull, Vec<usize>), EngineError> {
    let store = RowStore::zeros(500, 3);
    let mut model = Pull { bias: 0.0 };
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(threads.0, threads.1))?;
    let report = engine.session(device, &mut model, &store, |s| {
        // A submit fails only once the pipeline stopped; `finish` says why.
        let _ = s.submit_all(batches());
        s.finish()
    })?;
    Ok((store, model, report.positions()))
}

/// Assert that an `Oac` run with `device` equals the sequential replay of its recorded order.
pub fn assert_oac_equals_replay(device: &mut impl DeviceQueue<Pull>, threads: (usize, usize)) {
    let (store, model, positions) = run_oac(device, threads).unwrap();
    let (mut table, mut fresh) = (vec![0.0; 1500], Pull { bias: 0.0 });
    replay(&mut fresh, &mut table, &batches(), &positions).unwrap();
    assert_eq!(store.snapshot(), table, "threads {threads:?}");
    assert_eq!(model.dense(), fresh.dense());
}
