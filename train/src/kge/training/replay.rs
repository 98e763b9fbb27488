//! The replay: recorded computation orders stepped sequentially, one batch at a time, with the
//! per-epoch evaluation of a session run ([`super::train`](mod@super::train)).

use super::device_step::{Step, Stepper};
use super::epochs::{Checkpoints, Epochs, Rows, Trained};
use super::error::{TrainError, engine_error};
use crate::kge::data::dataset::Dataset;
use crate::kge::model::device::Device;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::event::Event;
use crate::kge::run::mode::TrainMode;
use crate::kge::run::results::RunResult;
use ordo::engine;
use ordo::row_store::RowStore;
use std::time::Instant;

/// Replay recorded computation orders (one list of batch ids per epoch) sequentially
/// ([`engine::replay`]) from the same initialization, with the same per-epoch evaluation: the
/// synchronous run that an OAC run must equal bit for bit. With `cfg.device` = CUDA the replay
/// steps on the GPU too (no device stage: one batch at a time); a GPU run equals bit for bit only
/// a GPU replay (see [`crate::kge::model::gpu`]).
pub fn replay(d: &Dataset, cfg: &TrainConfig, order: &[Vec<u64>]) -> Result<RunResult, TrainError> {
    let cfg = TrainConfig { epochs: order.len(), ..*cfg };
    let (cfg, observe) = (&cfg, &mut |_: Event<'_>| {});
    Stepper::check(cfg)?;
    cfg.sampling(d).check()?;
    let cpu_model = cfg.init_model(d)?;
    // The replay's plain table: the engine's sequential reference.
    let mut table = cfg.init_store(d)?.snapshot();
    // On a GPU the replay steps on the calling thread without a device stage.
    let mut model = match cfg.device {
        Device::Cpu => Stepper::new(Step::Cpu(Box::new(cpu_model))),
        Device::Cuda => Stepper::cuda(&ordo_gpu::Gpu::open(0)?, &cpu_model)?,
    };
    let sampling = cfg.sampling(d);
    let mut run = Epochs::new(d, cfg, Checkpoints { dir: None, every: 0 }, None);
    for (epoch, recorded) in order.iter().enumerate() {
        let mut loader = sampling.epoch(&d.train, epoch);
        let first_id = loader.first_id();
        observe(Event::EpochStart { epoch: epoch + 1, batches: loader.len() });
        let t = Instant::now();
        // An id before this epoch's first, or past its last, is `UnknownBatch`.
        let batch_of = |id: u64| id.checked_sub(first_id).and_then(|i| loader.get(i as usize));
        engine::replay_ids(&mut model, &mut table, recorded, batch_of).map_err(engine_error)?;
        let seconds = t.elapsed().as_secs_f64();
        let trained = Trained { epoch, seconds, order: recorded.clone(), rows_replaced: 0 };
        run.end(trained, &model, Rows::Table(&table, cfg.row_width()), observe)?;
    }
    let (n, width) = (d.entities.len(), cfg.row_width());
    let store = RowStore::from_values_in(cfg.precision.store(), n, width, &table)
        .expect("the table is entities × row_width");
    run.finish(TrainMode::Sync, &model, store)
}
