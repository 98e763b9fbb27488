//! `kge --storage`: a run with the entity table in a partition buffer, and what it prints.

use super::error::BoxError;
use super::options::Options;
use super::report::{sampled, test_metrics};
use crate::kge::backends::partitioned::{self, PartitionOpts, PartitionedRun};
use crate::kge::data::dataset::Dataset;
use crate::kge::io::npy;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::mode::TrainMode;
use crate::memory::Budget;
use crate::outdir::Held;
use std::path::Path;

/// What `ordo-train kge --storage` does between loading the dataset `d` and training, in its
/// order: the storage folder's free disk and the buffer's memory checked against what the run
/// will write and hold (and `c` picked from `--memory-limit` without `--buffer`), then the
/// save's directory locked (busy or unwritable: now, not after training). The options the run
/// trains with, and the lock, held until it is dropped.
pub(super) fn prepare_partitioned(
    o: &Options,
    cfg: &TrainConfig,
    d: &Dataset,
    popts: PartitionOpts,
) -> Result<(PartitionOpts, Held), BoxError> {
    let popts = o.fit_partitions(cfg, d, popts, Budget::of_process(o.memory_limit))?;
    let mut held = Held::default();
    if let Some(dir) = &o.save {
        held.hold(dir, false)?;
    }
    Ok((popts, held))
}

/// Save the embeddings of a finished partitioned `run` in `dir` as `--save` does (the caller
/// holds its lock), streamed from its storage partition by partition.
pub fn save_partitioned(
    dir: &Path,
    d: &Dataset,
    cfg: &TrainConfig,
    run: &PartitionedRun,
) -> Result<(), BoxError> {
    let entities = partitioned::StoredEntities { storage: &run.storage, dim: cfg.dim };
    let relations = (run.model.relations(), cfg.step_config().relation_dim());
    npy::save_parts(dir, d, cfg, &entities, relations)?;
    Ok(())
}

/// `kge --storage`: train with the entity table in a partition buffer; print each epoch's
/// validation MRR, the I/O and the test metrics, all evaluated from the storage; with `save`,
/// save the embeddings streamed from it partition by partition (the caller holds its lock).
pub(super) fn run_partitioned(
    d: &Dataset,
    cfg: &TrainConfig,
    opts: &PartitionOpts,
    mode: TrainMode,
    save: Option<&std::path::Path>,
) -> Result<(), BoxError> {
    let sampled = sampled(cfg);
    let mut shown = std::time::Instant::now();
    let mut print = |e: partitioned::Event| {
        let (epoch, batches, seconds, io_wait, valid, eval_seconds, drains) = match e {
            partitioned::Event::Progress { epoch, done, total, seconds } => {
                // At most every 2 s: where the epoch stands, its rate and the time left.
                if shown.elapsed().as_secs_f64() >= 2.0 {
                    shown = std::time::Instant::now();
                    let rate = done as f64 / seconds.max(1e-9);
                    let left = (total - done) as f64 / rate.max(1e-9);
                    println!(
                        "epoch {epoch}: {done}/{total} batches ({:.1}%), {rate:.0} batches/s, about {left:.0} s left",
                        100.0 * done as f64 / total.max(1) as f64
                    );
                }
                return;
            }
            partitioned::Event::Epoch {
                epoch,
                batches,
                seconds,
                io_wait,
                valid,
                eval_seconds,
                drains,
            } => (epoch, batches, seconds, io_wait, valid, eval_seconds, drains),
        };
        let valid = valid.map_or(String::new(), |m| {
            format!("; valid MRR {:.4}{sampled} ({eval_seconds:.2} s)", m.mrr)
        });
        println!(
            "epoch {epoch}: {batches} batches in {seconds:.2} s, I/O wait {:.2} s ({:.1}%), {drains} swaps drained the pipeline{valid}",
            io_wait.as_secs_f64(),
            100.0 * io_wait.as_secs_f64() / seconds.max(1e-9)
        );
    };
    let run = partitioned::train(d, cfg, opts, mode.engine_mode(cfg.staleness), &mut print)?;
    let cost = run.cost();
    let g = run.storage.geometry();
    let part_bytes = g.file_len(0);
    let epochs = run.orders.len().max(1) as u64;
    let moved = run.io.bytes_read + run.io.bytes_written;
    println!(
        "storage {:?}: {} partitions, buffer {}; {} swaps per epoch (lower bound {}); read {} bytes per epoch (lower bound {}); I/O wait {:.2} s of {:.2} s; {} bytes read and written in {:.2} s of I/O threads busy ({:.2} GB/s)",
        opts.storage,
        g.partitions,
        opts.buffer,
        cost.swaps,
        cost.lower_bound_swaps,
        run.io.bytes_read / epochs,
        cost.lower_bound_bytes(part_bytes, opts.buffer),
        run.io.wait.as_secs_f64(),
        run.train_time.as_secs_f64(),
        moved,
        run.io.busy.as_secs_f64(),
        moved as f64 / run.io.busy.as_secs_f64().max(1e-9) / 1e9
    );
    println!("test ({}{sampled}): {}", mode.name(), test_metrics(d, &run.test));
    if let Some(dir) = save {
        save_partitioned(dir, d, cfg, &run)?;
        println!("saved embeddings to {} (streamed from the storage)", dir.display());
    }
    Ok(())
}
