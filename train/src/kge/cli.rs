//! `ordo-train kge`: train link prediction in one mode, or `kge compare` to run every mode on the
//! same data, seeds and hyper-parameters (the OAC paper's Figures 2 and 3 for our data).
//!
//! ```text
//! ordo-train kge [OPTIONS]             # one mode (--mode, default oac)
//! ordo-train kge compare [OPTIONS]     # sync, async, bounded, oac
//! ordo-train kge eval --load DIR       # test metrics of saved embeddings
//! ```

use super::compare;
use super::data::Dataset;
use super::gpu::{Device, check_device};
use super::npy;
use super::plot;
use super::score::{Loss, ScoreFn};
use super::train::{EpochStats, Event, Mode, RunResult, TrainConfig, TrainError, Tune, train};
use indicatif::{ProgressBar, ProgressStyle};
use ordo::engine::{EngineConfig, Observer, Stamp};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `ordo-train kge`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct KgeArgs {
    #[command(subcommand)]
    command: Option<KgeCommand>,
    #[command(flatten)]
    opts: KgeOpts,
}

#[derive(Debug, clap::Subcommand)]
enum KgeCommand {
    /// Run every mode (sync, async, bounded, oac) on the same data, seed and hyper-parameters,
    /// then compare time-to-accuracy.
    Compare,
    /// Print the filtered test metrics of embeddings saved with --save (give --load).
    Eval,
}

/// Options shared by all `kge` commands.
#[derive(Debug, clap::Args)]
struct KgeOpts {
    /// Dataset: umls, kinships, nations (embedded) or a directory with train/valid/test.txt.
    #[arg(long, default_value = "umls", global = true)]
    dataset: String,
    /// Scoring function.
    #[arg(long, value_enum, default_value = "complex", global = true)]
    model: ScoreFn,
    /// Loss over each positive and its negatives.
    #[arg(long, value_enum, default_value = "softmax", global = true)]
    loss: Loss,
    /// Embedding floats per entity and relation (ComplEx: even; dim/2 complex numbers).
    #[arg(long, default_value_t = 100, global = true)]
    dim: usize,
    /// Passes over the training triples.
    #[arg(long, default_value_t = 25, global = true)]
    epochs: usize,
    /// Positives per batch.
    #[arg(long, default_value_t = 128, global = true)]
    batch_size: usize,
    /// Negatives per positive, for each of head and tail corruption.
    #[arg(long, default_value_t = 64, global = true)]
    negatives: usize,
    /// Positives per chunk sharing one set of negatives (1 = no sharing).
    #[arg(long, default_value_t = 16, global = true)]
    chunk: usize,
    /// Adagrad learning rate.
    #[arg(long, default_value_t = 0.1, global = true)]
    lr: f32,
    /// L2 weight per use of an embedding.
    #[arg(long, default_value_t = 0.0, global = true)]
    reg: f32,
    /// Initial embeddings uniform in [-init, init).
    #[arg(long, default_value_t = 0.1, global = true)]
    init: f32,
    /// Seed of initialization, shuffles and negatives.
    #[arg(long, default_value_t = 0, global = true)]
    seed: u64,
    /// Mode of a single run.
    #[arg(long, value_enum, default_value = "oac", global = true)]
    mode: Mode,
    /// Engine reader threads and writer threads (each).
    #[arg(long, default_value_t = 1, global = true)]
    threads: usize,
    /// Staleness bound of --mode bounded (batches in flight).
    #[arg(long, default_value_t = 4, global = true)]
    staleness: usize,
    /// Evaluate on at most the first this many valid and test triples (0 = all; for large sets).
    #[arg(long, default_value_t = 0, global = true)]
    eval_limit: usize,
    /// Write metrics.csv and the plots mrr_vs_time.png / mrr_vs_epoch.png here.
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Save the final embeddings (entities.npy, relations.npy and their names) to this
    /// directory; with compare, one subdirectory per mode.
    #[arg(long, global = true)]
    save: Option<PathBuf>,
    /// Embeddings directory written by --save (for `kge eval`).
    #[arg(long, global = true)]
    load: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, global = true)]
    quiet: bool,
    /// Where the training step runs: cpu, or cuda (ordo-gpu's kernels and device-side
    /// validation cache; checked first, fails with the reason when CUDA is not usable).
    /// Evaluation runs on the CPU either way.
    #[arg(long, value_enum, default_value = "cpu", global = true)]
    device: Device,
}

impl KgeOpts {
    fn config(&self) -> TrainConfig {
        TrainConfig {
            score: self.model,
            loss: self.loss,
            dim: self.dim,
            lr: self.lr,
            reg: self.reg,
            init: self.init,
            epochs: self.epochs,
            batch_size: self.batch_size,
            negatives: self.negatives,
            chunk: self.chunk,
            seed: self.seed,
            threads: self.threads,
            staleness: self.staleness,
            eval_limit: self.eval_limit,
            device: self.device,
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

/// Run `ordo-train kge`.
pub fn run(args: KgeArgs) -> Result<(), BoxError> {
    let o = &args.opts;
    // Before anything is read or written: a run asked for a GPU must not fall back or half-run.
    check_device(o.device).map_err(TrainError::Cuda)?;
    let d = Dataset::load(&o.dataset)?;
    eprintln!("{}", d.summary());
    if let Some(w) = d.skip_warning() {
        eprintln!("{w}");
    }
    let cfg = o.config();
    if let Some(KgeCommand::Eval) = args.command {
        let dir = o.load.as_ref().ok_or("kge eval needs --load DIR")?;
        let (ents, rels) = npy::load(dir)?;
        let m = npy::evaluate_loaded(&d, cfg.score, &ents, &rels)?;
        println!(
            "test  MRR {:.4}  Hits@1 {:.4}  Hits@3 {:.4}  Hits@10 {:.4}",
            m.mrr, m.hits1, m.hits3, m.hits10
        );
        return Ok(());
    }
    let modes: Vec<Mode> = match args.command {
        Some(KgeCommand::Compare) => Mode::ALL.to_vec(),
        _ => vec![o.mode],
    };
    println!(
        "{:?} dim {} · {:?} loss · batch {} · {} negatives/side (chunks of {}) · lr {} · {} epochs · seed {} · {:?}",
        cfg.score,
        cfg.dim,
        cfg.loss,
        cfg.batch_size,
        cfg.negatives,
        cfg.chunk,
        cfg.lr,
        cfg.epochs,
        cfg.seed,
        cfg.device
    );
    let mut results = Vec::new();
    for mode in modes {
        println!("\n== mode {} ==", mode.name());
        println!("{:>5} {:>8} {:>9} {:>10}", "epoch", "wall s", "loss", "valid MRR");
        let r = train_with_progress(&d, &cfg, mode, o.quiet)?;
        println!(
            "test ({}): MRR {:.4}  Hits@1 {:.4}  Hits@3 {:.4}  Hits@10 {:.4}  ({:.0} triples/s)",
            mode.name(),
            r.test.mrr,
            r.test.hits1,
            r.test.hits3,
            r.test.hits10,
            r.triples_per_s(d.train.len())
        );
        if mode == Mode::Oac {
            println!(
                "oac: validation replaced {} stale row reads with newer values from its cache",
                r.rows_replaced
            );
        }
        if let Some(dir) = &o.save {
            let dir = if results.is_empty() && o.mode == mode && args.command.is_none() {
                dir.clone()
            } else {
                dir.join(mode.name())
            };
            npy::save(&dir, &d, cfg.dim, &r)?;
            println!("saved embeddings to {}", dir.display());
        }
        results.push(r);
    }
    if results.len() > 1 {
        print_comparison(&results, d.train.len());
    }
    if let Some(out) = &o.out {
        std::fs::create_dir_all(out)?;
        let title = format!("{} · {:?} dim {}", d.name, cfg.score, cfg.dim);
        plot::write_outputs(out, &title, &results)?;
        println!("wrote {}/{{metrics.csv, mrr_vs_time.png, mrr_vs_epoch.png}}", out.display());
    }
    Ok(())
}

fn train_with_progress(
    d: &Dataset,
    cfg: &TrainConfig,
    mode: Mode,
    quiet: bool,
) -> Result<RunResult, BoxError> {
    let style =
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} batches {elapsed}")
            .expect("valid template")
            .progress_chars("=> ");
    // One bar, reset each epoch; the engine's device stage advances it as it steps batches.
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(0).with_style(style) };
    let ticks: Arc<dyn Observer> = Arc::new(Ticks(bar.clone()));
    let tune = move |c: EngineConfig| c.observe(ticks.clone());
    let mut observe = |e: Event<'_>| match e {
        Event::EpochStart { epoch, batches } => {
            bar.reset();
            bar.set_length(batches as u64);
            bar.set_prefix(format!("{} ep {epoch}", mode.name()));
        }
        Event::Batches(_) => {}
        Event::EpochEnd(s) => bar.suspend(|| print_epoch(s)),
    };
    let r = train(d, cfg, mode, &mut observe, (!quiet).then_some(&tune as &Tune<'_>));
    bar.finish_and_clear();
    Ok(r?)
}

/// Advances the progress bar as the device stamps batches.
struct Ticks(ProgressBar);

impl Observer for Ticks {
    fn stamped(&self, _: &Stamp) {
        self.0.inc(1);
    }
}

fn print_epoch(s: &EpochStats) {
    println!("{:>5} {:>8.2} {:>9.4} {:>10.4}", s.epoch, s.wall_s, s.loss, s.valid.mrr);
}

/// The time-to-accuracy summary: each mode against 95% of sync's best valid MRR.
fn print_comparison(results: &[RunResult], n_train: usize) {
    if let Some((target, rows)) = compare::compare(results, n_train) {
        print!("\n{}", compare::text(target, &rows));
    }
}
