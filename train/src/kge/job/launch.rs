//! The run itself: [`run`] takes a checked [`Job`] and does it, and the steps it shares with
//! [`OneRun`](super::OneRun): the output directories locked before training and written after,
//! the checkpoint to resume read.

use super::error::BoxError;
use super::options::Options;
use super::partitioned_run::{prepare_partitioned, run_partitioned};
use super::plan::{Command, Job};
use super::pm_run::{Output, run_pm};
use super::report::{
    Ticks, print_comparison, print_config, print_epoch, progress_bar, sampled, test_metrics,
};
use crate::kge::data::dataset::Dataset;
use crate::kge::io::checkpoint::Checkpoint;
use crate::kge::io::compare;
use crate::kge::io::npy;
use crate::kge::io::npy::NpyError;
use crate::kge::io::plot;
use crate::kge::model::gpu::check_device;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::event::Event;
use crate::kge::run::mode::TrainMode;
use crate::kge::run::results::RunResult;
use crate::kge::training::error::TrainError;
use crate::kge::training::train::{Resumable, Tune, train_resumable};
use crate::memory::Budget;
use crate::outdir::{Held, OutputLock};
use ordo::engine::{EngineConfig, Observer};
use std::path::PathBuf;
use std::sync::Arc;

/// Run `job` as `ordo-train kge` does: write the synthetic graph, or read the dataset, check the
/// run's memory and train (in the engine, in a partition buffer or in AdaPM), evaluate saved
/// embeddings, or compare the modes; printing as it goes.
pub fn run(job: Job) -> Result<(), BoxError> {
    let (plan, launch) = (&job, job.launch);
    let (o, cfg) = (&plan.opts, plan.cfg);
    if let Some(Command::Synth { entities, triples, relations, communities, out, seed }) =
        &plan.command
    {
        crate::kge::data::synth::write(out, *entities, *relations, *triples, *communities, *seed)?;
        println!("wrote {triples} triples over {entities} entities to {}", out.display());
        return Ok(());
    }
    let pm = plan.pm;
    // Before anything is read or written: a run asked for a GPU must not fall back or half-run.
    check_device(cfg.device).map_err(TrainError::Cuda)?;
    // Under mpirun only rank 0 of a --pm run prints (errors aside).
    let silent = pm.is_some() && launch.is_some_and(|(rank, _)| rank != 0);
    let d = Dataset::load_with_progress(o.dataset(), !o.quiet && !silent)?;
    if !silent {
        eprintln!("{}", d.summary());
    }
    if let Some(popts) = o.partition_opts(plan.command.is_some())? {
        // The table is in partitions: the disk and the buffer's memory are checked instead
        // (and `c` picked from --memory-limit without --buffer).
        let (popts, _held) = prepare_partitioned(o, &cfg, &d, popts)?;
        if o.buffer.is_none() && o.memory_limit.is_some() {
            println!("--buffer {} (the largest that fits --memory-limit)", popts.buffer);
        }
        return run_partitioned(&d, &cfg, &popts, plan.opts.mode(), o.save.as_deref());
    }
    plan.check_memory(&d, Budget::of_process(o.memory_limit))?;
    if let Some(Command::Eval) = plan.command {
        return evaluate_saved(o, &d, &cfg);
    }
    if let Some(pm) = pm {
        let out = Output { quiet: o.quiet, silent };
        return run_pm(&d, &cfg, pm, out, launch.is_some());
    }
    train_job(plan, &d)
}

/// `kge eval`: the filtered test metrics of the embeddings `--load` names, checked against `d`,
/// after the memory evaluation holds is checked against the budget (refused with the figures;
/// a mapped entity table is not counted: see [`npy::evaluate_loaded`]).
fn evaluate_saved(o: &Options, d: &Dataset, cfg: &TrainConfig) -> Result<(), BoxError> {
    let dir = o.load.as_ref().ok_or("kge eval needs --load DIR")?;
    // A save whose table cannot be opened is refused by `load`, with its manifest's word.
    if let Ok(table) = npy::entities_shape(dir) {
        o.check_eval_memory(cfg, d, table, Budget::of_process(o.memory_limit))?;
    }
    let saved = npy::load(dir, d)?;
    // Trained on this train.txt (names alone do not say: lines swapped keep every id).
    if let Some(m) = &saved.manifest {
        m.check_train(dir, d).map_err(NpyError::from)?;
    }
    if saved.manifest.is_none() {
        eprintln!(
            "note: {} has no manifest.json (a save of format 0, from before manifests): loaded \
             without checksums or its model; its names were checked",
            dir.display()
        );
    }
    let score = saved.model(dir, o.model, cfg.score)?;
    let (ents, rels) = (saved.entities.view(), saved.relations.view());
    let m = npy::evaluate_loaded(d, score, ents, rels, cfg)?;
    if cfg.eval_sample > 0 {
        println!("(test MRR: sampled ranking against {} entities)", cfg.eval_sample);
    }
    println!("test  {}", test_metrics(d, &m));
    Ok(())
}

/// `kge` and `kge compare` in the engine: each mode trained in turn (the comparison `--repeat`
/// times), its outputs locked before and written after.
fn train_job(plan: &Job, d: &Dataset) -> Result<(), BoxError> {
    let (o, cfg) = (&plan.opts, plan.cfg);
    let modes = plan.modes();
    let subcommand = plan.command.is_some();
    // With compare, each mode has its own directory under each of --save, --checkpoint and
    // --resume.
    let per_mode = |dir: &PathBuf, mode: TrainMode| {
        if subcommand { dir.join(mode.name()) } else { dir.clone() }
    };
    // Before any output is touched: the checkpoints to resume (locked, then checked without
    // their tables); then every output directory, locked for the whole run (an unwritable or
    // busy one is found here, not after training).
    // The options are checked (by building the model's small relation table once) before any
    // output is touched.
    cfg.init_model(d)?;
    let (held, out_lock) = hold_outputs(o, d, &cfg, &modes, &per_mode)?;
    print_config(&cfg);
    let repeats = o.repeats();
    // With --repeat (checked: nothing is written then), each comparison's rows and which modes
    // matched sync to the bit; the parameters themselves are dropped after each comparison.
    let mut runs = Vec::new();
    for rep in 1..=repeats {
        if repeats > 1 {
            println!("\n=== comparison {rep} of {repeats} ===");
        }
        let results = train_modes(o, d, &cfg, &modes, &per_mode)?;
        if results.len() > 1 && d.valid.is_empty() {
            println!("\nno validation split: no time-to-accuracy comparison");
        } else if results.len() > 1 {
            print_comparison(&results, d.train.len());
        }
        if let Some(lock) = &out_lock {
            let out = lock.dir();
            write_out(lock, d, &cfg, &results)?;
            println!(
                "wrote {}/{{metrics.csv, mrr_vs_time.png, mrr_vs_epoch.png, COMPLETE}}",
                out.display()
            );
        }
        if repeats > 1
            && let Some(sync) = results.iter().find(|r| r.mode == TrainMode::Sync)
            && let Some((_, rows)) = compare::compare(&results, d.train.len())
        {
            runs.push((rows, compare::same_bits_as(sync, &results)));
        }
    }
    if repeats > 1 {
        print!("\n{}", compare::repeated_text(&compare::repeated(&runs)));
    }
    drop(held);
    Ok(())
}

/// Train each of `modes` in turn on `d` (one comparison, or the single run of `kge`), printing
/// each mode's epochs and test metrics, and saving its embeddings under --save.
fn train_modes(
    o: &Options,
    d: &Dataset,
    cfg: &TrainConfig,
    modes: &[TrainMode],
    per_mode: &DirOf<'_>,
) -> Result<Vec<RunResult>, BoxError> {
    let mut results = Vec::new();
    for &mode in modes {
        println!("\n== mode {} ==", mode.name());
        if cfg.eval_sample > 0 {
            println!("(valid and test MRR: sampled ranking against {} entities)", cfg.eval_sample);
        }
        if d.valid.is_empty() {
            println!("no validation split (valid.txt has no triple): valid MRR is not computed");
        }
        println!("{:>5} {:>8} {:>9} {:>10}", "epoch", "wall s", "loss", "valid MRR");
        let resumable = resumable(o, d, cfg, mode, per_mode)?;
        let has_valid = !d.valid.is_empty();
        let r = train_with_progress(d, cfg, mode, resumable, o.quiet, has_valid)?;
        println!(
            "test ({}{}): {}  ({:.0} triples/s)",
            mode.name(),
            sampled(cfg),
            test_metrics(d, &r.test),
            r.triples_per_s(d.train.len())
        );
        if mode == TrainMode::Oac {
            println!(
                "oac: validation replaced {} stale row reads with newer values from its cache",
                r.rows_replaced
            );
        }
        if let Some(dir) = &o.save {
            let dir = per_mode(dir, mode);
            npy::save(&dir, d, cfg, &r)?;
            println!("saved embeddings to {}", dir.display());
        }
        results.push(r);
    }
    Ok(results)
}

/// Where each mode of a run writes under an output directory the options name: the directory
/// itself, or (with `compare`) its subdirectory named after the mode.
type DirOf<'a> = dyn Fn(&PathBuf, TrainMode) -> PathBuf + 'a;

/// What `ordo-train kge` does with its output directories before training, in its order: the
/// checkpoints to resume, locked, then checked without their tables; then every directory to
/// write (`--checkpoint`, `--save`), locked for the whole run, and `--out`, locked and marked
/// incomplete. An unwritable or busy directory is found here, not after training.
pub(super) fn hold_outputs(
    o: &Options,
    d: &Dataset,
    cfg: &TrainConfig,
    modes: &[TrainMode],
    dir_of: &DirOf<'_>,
) -> Result<(Held, Option<OutputLock>), BoxError> {
    let mut held = Held::default();
    if let Some(dir) = &o.resume {
        for &mode in modes {
            held.hold(&dir_of(dir, mode), true)?;
            Checkpoint::verify(&dir_of(dir, mode), d, cfg)?;
        }
    }
    for dir in [&o.checkpoint, &o.save].into_iter().flatten() {
        for &mode in modes {
            held.hold(&dir_of(dir, mode), false)?;
        }
    }
    // A save's size is known now (entities and relations, inverse ones at most): a disk too
    // full for it is found before training.
    if let Some(dir) = &o.save {
        let sc = cfg.step_config();
        let floats = d.entities.len() * cfg.dim + 2 * d.relations.len() * sc.relation_dim();
        for &mode in modes {
            npy::ensure_space(&dir_of(dir, mode), d, floats)?;
        }
    }
    let out_lock = o.out.as_deref().map(OutputLock::take_out).transpose()?;
    Ok((held, out_lock))
}

/// The checkpointing of `mode`'s run: `--checkpoint` and `--checkpoint-every`, and the
/// `--resume` checkpoint read (tables included) and checked against the run.
pub(super) fn resumable(
    o: &Options,
    d: &Dataset,
    cfg: &TrainConfig,
    mode: TrainMode,
    dir_of: &DirOf<'_>,
) -> Result<Resumable, BoxError> {
    Ok(Resumable {
        checkpoint: o.checkpoint.as_ref().map(|dir| dir_of(dir, mode)),
        every: o.checkpoint_every.unwrap_or(0),
        resume: match &o.resume {
            Some(dir) => Some(Checkpoint::read(&dir_of(dir, mode), d, cfg)?),
            None => None,
        },
        stop: None,
    })
}

/// `--out`: the CSV and the plots of `results`, then `COMPLETE`.
pub(super) fn write_out(
    lock: &OutputLock,
    d: &Dataset,
    cfg: &TrainConfig,
    results: &[RunResult],
) -> Result<(), BoxError> {
    let title = format!("{} · {:?} dim {}", d.name, cfg.score, cfg.dim);
    plot::write_outputs(lock.dir(), &title, results)?;
    lock.complete()?;
    Ok(())
}

/// One mode's run with its progress bar and epoch lines.
fn train_with_progress(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: TrainMode,
    resumable: Resumable,
    quiet: bool,
    has_valid: bool,
) -> Result<RunResult, BoxError> {
    // One bar, reset each epoch; the engine's device stage advances it as it steps batches.
    let bar = progress_bar(quiet);
    let ticks: Arc<dyn Observer> = Arc::new(Ticks(bar.clone()));
    let tune = move |c: EngineConfig| c.observe(ticks.clone());
    let mut observe = |e: Event<'_>| match e {
        Event::EpochStart { epoch, batches } => {
            bar.reset();
            bar.set_length(batches as u64);
            bar.set_prefix(format!("{} ep {epoch}", mode.name()));
        }
        Event::Batches(_) => {}
        Event::EpochEnd(s) => bar.suspend(|| print_epoch(s, has_valid)),
    };
    let r = train_resumable(
        d,
        cfg,
        mode,
        resumable,
        &mut observe,
        (!quiet).then_some(&tune as &Tune<'_>),
    );
    bar.finish_and_clear();
    Ok(r?)
}
