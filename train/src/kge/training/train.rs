//! The training loop on the engine: epochs of batches through one of the engine's modes in one
//! session, a valid-MRR evaluation after each epoch, test metrics at the end, and the recorded
//! computation order. [`super::replay`](mod@super::replay) runs the same epochs sequentially in
//! a recorded order.
//!
//! The items a run is described and answered with live in their own modules and are re-exported
//! here, so `kge::training::train::{TrainConfig, TrainMode, …}` keeps naming them: [`TrainConfig`]
//! ([`crate::kge::run::config`]), [`TrainMode`] ([`crate::kge::run::mode`]), [`TrainError`]
//! ([`super::error`]), [`RunResult`] and [`EpochStats`] ([`crate::kge::run::results`]), [`Event`]
//! ([`crate::kge::run::event`]), [`metrics`] and [`metrics_of_embeddings`]
//! ([`crate::kge::run::measure`]), [`replay`] ([`super::replay`](mod@super::replay)).

pub use super::error::TrainError;
pub use super::replay::replay;
pub use crate::kge::run::config::TrainConfig;
pub use crate::kge::run::event::Event;
pub use crate::kge::run::measure::{metrics, metrics_of_embeddings};
pub use crate::kge::run::mode::TrainMode;
pub use crate::kge::run::results::{EpochStats, RunResult};

use super::device_step::{Step, Stepper};
use super::epochs::{Checkpoints, Epochs, Resumed, Rows, Trained};
use super::error::{engine_error, in_epoch};
use super::stage_choice::{StageChoice, Stages, StagesPolicy};
use crate::kge::data::dataset::Dataset;
use crate::kge::io::checkpoint::{Checkpoint, Identity};
use crate::kge::model::device::Device;
use crate::kge::model::step::EmbeddingModel;
use ordo::engine::{CpuDevice, DeviceQueue, Engine, EngineConfig};
use ordo::row_store::RowStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Rows a batch can touch: its positives' heads and tails and its chunks' negatives.
fn max_batch_rows(cfg: &TrainConfig, entities: usize) -> usize {
    let chunks = cfg.batch_size.div_ceil(cfg.chunk.max(1));
    (2 * cfg.batch_size + 2 * chunks * cfg.negatives).min(entities)
}

/// Adjusts the engine configuration of a training run (see [`train`]).
pub type Tune<'a> = dyn Fn(EngineConfig) -> EngineConfig + 'a;

/// Train on `d` in `mode`, evaluating valid MRR after every epoch and test metrics at the end.
/// `tune`, if given, adjusts each epoch's engine configuration (e.g. installs a progress
/// [`ordo::engine::Observer`], or in tests a fault-injection hook).
pub fn train(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: TrainMode,
    observe: &mut dyn FnMut(Event<'_>),
    tune: Option<&Tune<'_>>,
) -> Result<RunResult, TrainError> {
    train_resumable(d, cfg, mode, Resumable::default(), observe, tune)
}

/// Checkpointing of a run: where and how often to write, and where to resume from.
#[derive(Debug, Default)]
pub struct Resumable {
    /// Write a checkpoint here every `every` epochs and after the last.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Epochs between checkpoints (0 = only after the last).
    pub every: usize,
    /// Continue from this checkpoint (read with [`Checkpoint::read`]) up to `cfg.epochs`.
    pub resume: Option<Checkpoint>,
    /// Stop the run when this flag is set (e.g. on Ctrl-C): no batch is submitted after it is
    /// seen, the batches in the pipeline are written, the session's threads are joined, and the
    /// run returns [`TrainError::Interrupted`] without ending the epoch, so no checkpoint or
    /// record of a partial epoch is written. The last checkpoint resumes the run.
    pub stop: Option<Arc<AtomicBool>>,
}

/// [`train`] with checkpoints and resume (see [`crate::kge::io::checkpoint`]): a run of `a + b`
/// epochs equals one of `a` epochs resumed for `b` more.
pub fn train_resumable(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: TrainMode,
    mut resumable: Resumable,
    observe: &mut dyn FnMut(Event<'_>),
    tune: Option<&Tune<'_>>,
) -> Result<RunResult, TrainError> {
    Stepper::check(cfg)?;
    cfg.sampling(d).check()?;
    let stages = StagesPolicy::from_env()
        .map_err(|_| TrainError::Config("ORDO_KGE_STAGES must be pipelined, auto or inline"))?;
    let mut cpu_model = cfg.init_model(d)?;
    // A resumed run's store is the checkpoint's (whose tables must match this run's); the
    // initial one is built only for a fresh run, so the two never coexist.
    let (store, resumed) = match resumable.resume.take() {
        Some(ck) => resume(d, cfg, &mut cpu_model, ck)?,
        None => (cfg.init_store(d)?, None),
    };
    let checkpoints = Checkpoints { dir: resumable.checkpoint.as_deref(), every: resumable.every };
    let session = Session { d, cfg, mode, tune, stop: resumable.stop.as_deref(), stages };
    match cfg.device {
        Device::Cpu => {
            let mut model = Stepper::new(Step::Cpu(Box::new(cpu_model)));
            let mut run = Epochs::new(d, cfg, checkpoints, resumed);
            session.epochs(&mut CpuDevice::new(), &mut model, &store, &mut run, observe)?;
            run.finish(mode, &model, store)
        }
        Device::Cuda => {
            let gpu = ordo_gpu::Gpu::open(0)?;
            let mut model = Stepper::cuda(&gpu, &cpu_model)?;
            drop(cpu_model);
            let n = d.entities.len();
            let batch = (cfg.batch_size, cfg.negatives);
            let (rows, emode) = (max_batch_rows(cfg, n), mode.engine_mode(cfg.staleness));
            let mut device = model.pipeline(&gpu, emode, n, rows, batch)?;
            let mut run = Epochs::new(d, cfg, checkpoints, resumed);
            session.epochs(&mut device, &mut model, &store, &mut run, observe)?;
            run.finish(mode, &model, store)
        }
    }
}

/// The store and progress of checkpoint `ck`, after checking that it belongs to this run and
/// its tables fit; `cpu_model` takes its dense state.
fn resume(
    d: &Dataset,
    cfg: &TrainConfig,
    cpu_model: &mut EmbeddingModel,
    ck: Checkpoint,
) -> Result<(RowStore, Option<Resumed>), TrainError> {
    let fits = ck.identity == Identity::of(d, cfg)
        && cpu_model.set_dense(&ck.dense)
        && (ck.entities.rows(), ck.entities.width()) == (d.entities.len(), cfg.row_width());
    if !fits {
        return Err(TrainError::Config("the checkpoint does not fit this run"));
    }
    let resumed = Resumed {
        epochs: ck.epochs,
        orders: ck.orders,
        done: ck.epoch,
        rows_replaced: ck.rows_replaced,
    };
    Ok((ck.entities, Some(resumed)))
}

/// Batches the loader thread builds ahead of the session (each holds its positives, negatives
/// and row ids: ≈ 60 kB at batch 1000): with the engine's bounded queues, the batch memory of
/// a run is O(batch · queue depth).
const LOADER_DEPTH: usize = 8;

/// Positives the engine's input and output queues each hold at least (as whole batches, from
/// [`QUEUE_DEPTHS`]' least to its most): what carries the pipeline through a stage's thread
/// losing its core for a while. The engine's default of 4 batches held 1,024 positives at the
/// main job's batches of 256, about 4 ms of its steps; beside one busy loop per core the
/// scheduler takes a thread's core for slices of a few milliseconds, and with queues that short
/// the reader or the writer then ran dry or full, its thread slept, and oac received barely
/// more of the machine than sync while doing 1.2× its work per positive (0.91× sync, pooled
/// over 30 pairs). At 8 batches (2,048 positives) oac received 1.28× sync's cores and ran at
/// 1.00×; idle, the main job's oac ran 1.05× faster too. Batches of 1,000 already hold 4,000
/// positives at depth 4, and at depth 8 the throughput config ran 0.96× (more rows read
/// stale, a larger validation cache), so the depth stays 4 there (BENCHMARKS.md, issue 34,
/// eleventh pass). The depths change no bit: with one reader the pipeline stamps batches in
/// submission order at any depth.
const QUEUE_POSITIVES: usize = 2048;

/// The least and most batches per queue that [`QUEUE_POSITIVES`] may ask for.
const QUEUE_DEPTHS: (usize, usize) = (4, 8);

/// The depth of the engine's input and output queues for batches of `batch_size` positives.
fn queue_depth(batch_size: usize) -> usize {
    QUEUE_POSITIVES.div_ceil(batch_size.max(1)).clamp(QUEUE_DEPTHS.0, QUEUE_DEPTHS.1)
}

/// What a session run trains: the dataset, the configuration, the mode and the engine tuning.
struct Session<'a> {
    d: &'a Dataset,
    cfg: &'a TrainConfig,
    mode: TrainMode,
    tune: Option<&'a Tune<'a>>,
    /// [`Resumable::stop`].
    stop: Option<&'a AtomicBool>,
    /// Where oac's batches run ([`super::stage_choice`]).
    stages: StagesPolicy,
}

impl Session<'_> {
    /// Train the epochs `run` has left in one engine session on `device`: its reader and writer
    /// threads live across the epochs, and each epoch's batches are built one at a time as the
    /// pipeline takes them ([`crate::kge::data::batch::EpochBatches`]), so the bounded queues are
    /// the only batch buffer.
    fn epochs<D: DeviceQueue<Stepper>>(
        &self,
        device: &mut D,
        model: &mut Stepper,
        store: &RowStore,
        run: &mut Epochs<'_>,
        observe: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), TrainError> {
        let (d, cfg) = (self.d, self.cfg);
        let threads = cfg.threads.max(1);
        let depth = queue_depth(cfg.batch_size);
        let mut ecfg = EngineConfig::new(self.mode.engine_mode(cfg.staleness))
            .threads(threads, threads)
            .depths(depth, depth);
        if let Some(tune) = self.tune {
            ecfg = tune(ecfg);
        }
        let engine = Engine::new(ecfg).map_err(TrainError::Engine)?;
        let sampling = cfg.sampling(d);
        // Acquire: pairs with the Release of whoever sets the flag; only the flag is read.
        let stop = self.stop;
        let stopped = move || stop.is_some_and(|f| f.load(Ordering::Acquire));
        // Oac on the CPU may run batches inline, as `ORDO_KGE_STAGES` says (`super::stage_choice`);
        // the other modes, and the GPU's queue, whose cache validates every batch, always
        // submit.
        let policy = self.stages;
        let inline_ok = self.mode == TrainMode::Oac && cfg.device == Device::Cpu;
        let mut stages = match policy {
            StagesPolicy::Auto if inline_ok => Some(StageChoice::default()),
            _ => None,
        };
        let always_inline = inline_ok && policy == StagesPolicy::Inline;
        engine.session(device, model, store, |s| {
            for epoch in run.start()..cfg.epochs {
                if stopped() {
                    return Err(TrainError::Interrupted { epoch: epoch + 1 });
                }
                let loader = sampling.epoch(&d.train, epoch);
                observe(Event::EpochStart { epoch: epoch + 1, batches: loader.len() });
                let t = Instant::now();
                // The loader builds batches on its own thread, at most `LOADER_DEPTH` ahead, so
                // building overlaps the device step (which runs on this thread, inside
                // `submit`). If a submit fails, the receiver is dropped and the loader stops.
                let submitted = std::thread::scope(|scope| {
                    let (tx, rx) = std::sync::mpsc::sync_channel(LOADER_DEPTH);
                    scope.spawn(move || {
                        for batch in loader {
                            if stopped() || tx.send(batch).is_err() {
                                break;
                            }
                        }
                    });
                    // A batch is well-formed by construction, so a submit fails only once the
                    // pipeline stopped, and `finish` then says why.
                    rx.into_iter().try_for_each(|mut batch| {
                        let positives = batch.data.pos.len();
                        let pending = s.pending();
                        let way =
                            stages.as_mut().map(|c| c.start(Instant::now(), positives, pending));
                        let inline = always_inline || way == Some(Stages::Inline);
                        batch.data.inline = inline;
                        if inline { s.submit_inline(batch) } else { s.submit(batch) }
                    })
                });
                if let Some(c) = stages.as_mut() {
                    c.pause();
                }
                let failed = |e| in_epoch(engine_error(e), epoch + 1);
                let report = s.finish().map_err(failed)?;
                submitted.map_err(failed)?;
                if stopped() {
                    // The loader may have stopped early: the epoch is not complete.
                    return Err(TrainError::Interrupted { epoch: epoch + 1 });
                }
                let seconds = t.elapsed().as_secs_f64();
                observe(Event::Batches(report.order.len()));
                let (order, rows_replaced) = (report.batch_ids(), report.rows_replaced);
                let trained = Trained { epoch, seconds, order, rows_replaced };
                run.end(trained, s.model(), Rows::Store(store), observe)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::io::npy;
    use crate::kge::model::score::ScoreFn;

    /// The queues hold at least `QUEUE_POSITIVES` positives, within the depths' bounds: the
    /// main job's batches of 256 get 8, the throughput config's 1,000 the engine's 4.
    #[test]
    fn queue_depth_holds_enough_positives_within_bounds() {
        assert_eq!(queue_depth(256), 8);
        assert_eq!(queue_depth(512), 4);
        assert_eq!(queue_depth(300), 7);
        assert_eq!(queue_depth(1000), 4);
        assert_eq!(queue_depth(1), 8);
        assert_eq!(queue_depth(0), 8);
        for b in [100, 256, 300, 700, 4096] {
            let d = queue_depth(b);
            assert!((QUEUE_DEPTHS.0..=QUEUE_DEPTHS.1).contains(&d));
            assert!(d * b >= QUEUE_POSITIVES || d == QUEUE_DEPTHS.1, "batch {b}: depth {d}");
        }
    }

    #[test]
    fn divergence_stops_training_with_a_clear_error_in_every_mode() {
        let d = Dataset::load("nations").unwrap();
        let cfg =
            TrainConfig { dim: 8, epochs: 3, lr: 1e30, init_scale: 1e18, ..TrainConfig::default() };
        for mode in TrainMode::ALL {
            let err = train(&d, &cfg, mode, &mut |_| {}, None).unwrap_err();
            assert!(matches!(err, TrainError::Diverged { epoch: 1, .. }), "{mode:?}: {err}");
            assert!(err.to_string().contains("training diverged"), "{err}");
            assert!(err.to_string().starts_with("epoch 1: loss is "), "{err}");
            assert!(err.to_string().contains("in batch ") && err.to_string().contains("--lr"));
        }
    }

    #[test]
    fn bad_hyper_parameters_are_errors() {
        let d = Dataset::load("nations").unwrap();
        let bad = [
            TrainConfig { dim: 7, ..TrainConfig::default() },
            TrainConfig { batch_size: 0, ..TrainConfig::default() },
            TrainConfig { lr: f32::NAN, ..TrainConfig::default() },
        ];
        for cfg in bad {
            assert!(train(&d, &cfg, TrainMode::Oac, &mut |_| {}, None).is_err(), "{cfg:?}");
        }
    }

    #[test]
    fn replay_rejects_an_order_from_another_epoch() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 1, ..TrainConfig::default() };
        assert!(matches!(replay(&d, &cfg, &[vec![1000]]), Err(TrainError::Engine(_))));
    }

    /// A trained run saved as `.npy` files loads back with the same embeddings and metrics (in
    /// this module rather than `npy`'s: a run needs the checkpoint writer, which `npy` lies below).
    #[test]
    fn saved_embeddings_are_numpy_f32_and_load_back_with_the_same_metrics() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 2, ..TrainConfig::default() };
        let r = train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).unwrap();
        let dir = std::env::temp_dir().join(format!("ordo-kge-npy-{}", std::process::id()));
        npy::save(&dir, &d, &cfg, &r).unwrap();
        let bytes = std::fs::read(dir.join("entities.npy")).unwrap();
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let header = String::from_utf8_lossy(&bytes[10..80]);
        assert!(
            header.contains("'descr': '<f4'") && header.contains("'shape': (14, 8"),
            "{header}"
        );
        let saved = npy::load(&dir, &d).unwrap();
        assert_eq!(saved.model(&dir, None, ScoreFn::DistMult).unwrap(), cfg.score);
        assert!(saved.entities.is_mapped(), "a little-endian f32 table is evaluated in place");
        let (e, rel) = (saved.entities.view(), saved.relations.view());
        assert_eq!(e.as_slice().unwrap(), r.entity_embeddings(8).as_slice());
        assert_eq!(rel.as_slice().unwrap(), r.relations.as_slice());
        assert_eq!(npy::evaluate_loaded(&d, cfg.score, e, rel, &cfg).unwrap(), r.test);
        let names = std::fs::read_to_string(dir.join("entities.txt")).unwrap();
        assert!(names.lines().eq(d.entities.iter()));
        let umls = Dataset::load("umls").unwrap();
        assert!(matches!(
            npy::evaluate_loaded(&umls, cfg.score, e, rel, &cfg),
            Err(npy::NpyError::Shape(_))
        ));
        std::fs::remove_file(dir.join("relations.npy")).unwrap();
        assert!(matches!(npy::load(&dir, &d), Err(npy::NpyError::Manifest(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `kge eval` scores the mapped `entities.npy` with the filter of the evaluated queries only;
    /// its metrics equal, bit for bit, those of the table held in memory ranked with the filter
    /// of every triple (the path before): full ranking, and sampled on the first test triples.
    #[test]
    fn a_mapped_save_evaluates_bit_for_bit_as_the_table_in_memory() {
        use crate::kge::eval::ranking::{Filter, evaluate, evaluate_sampled};
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 2, score: ScoreFn::ComplEx, ..Default::default() };
        let r = train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        npy::save(dir.path(), &d, &cfg, &r).unwrap();
        let saved = npy::load(dir.path(), &d).unwrap();
        assert!(saved.entities.is_mapped());
        let table = ndarray::Array2::from_shape_vec((d.entities.len(), 8), r.entity_embeddings(8));
        let table = table.unwrap();
        let rdim = cfg.step_config().relation_dim();
        let rels = ndarray::ArrayView2::from_shape((r.relations.len() / rdim, rdim), &r.relations);
        let (rels, model) = (rels.unwrap(), (cfg.score, cfg.reciprocal));
        let all = Filter::of(&d);
        let (e, rel) = (saved.entities.view(), saved.relations.view());
        let full = npy::evaluate_loaded(&d, cfg.score, e, rel, &cfg).unwrap();
        assert_eq!(full, evaluate(model, table.view(), rels, &d.test, &all));
        let few = TrainConfig { eval_limit: 30, eval_sample: 5, ..cfg };
        let sampled = npy::evaluate_loaded(&d, cfg.score, e, rel, &few).unwrap();
        let old = evaluate_sampled(model, table.view(), rels, &d.test[..30], &all, (5, cfg.seed));
        assert_eq!(sampled, old);
        assert_eq!(sampled.queries, 60);
        assert_ne!(sampled, full);
    }
}
