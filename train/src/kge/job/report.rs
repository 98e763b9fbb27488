//! What a `kge` run prints: the configuration line, the progress bar, each epoch's line, the
//! test metrics and the time-to-accuracy comparison.

use crate::kge::data::dataset::Dataset;
use crate::kge::eval::ranking::Metrics;
use crate::kge::io::compare;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::results::{EpochStats, RunResult};
use indicatif::{ProgressBar, ProgressStyle};
use ordo::engine::{Observer, Stamp};

/// The configuration line a run in the engine prints before training.
pub(super) fn print_config(cfg: &TrainConfig) {
    println!(
        "{:?} dim {}{} · {:?} loss · batch {} · {}{} negatives/side (chunks of {}, {:?}) · {:?} lr {} · init {:?} {} · {:?} {} · {} epochs · seed {} · {:?}",
        cfg.score,
        cfg.dim,
        if cfg.reciprocal { " (reciprocal)" } else { "" },
        cfg.loss,
        cfg.batch_size,
        cfg.negatives,
        match cfg.batch_negatives {
            0 => String::new(),
            b => format!(" + {b} in-batch"),
        },
        cfg.chunk,
        cfg.neg_sampling,
        cfg.optimizer,
        cfg.lr,
        cfg.init,
        cfg.init_scale,
        cfg.regularizer,
        cfg.reg,
        cfg.epochs,
        cfg.seed,
        cfg.device
    );
}

/// A progress bar of batches (hidden when `hidden`), its prefix and length set by its user.
pub(super) fn progress_bar(hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let style =
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} batches {elapsed}")
            .expect("valid template")
            .progress_chars("=> ");
    ProgressBar::new(0).with_style(style)
}

/// How the valid and test metrics were ranked, as the lines of a run say it: empty for full
/// ranking, else against how many sampled entities.
pub(super) fn sampled(cfg: &TrainConfig) -> String {
    if cfg.eval_sample > 0 {
        format!(", sampled ranking against {} entities", cfg.eval_sample)
    } else {
        String::new()
    }
}

/// Advances the progress bar as the device stamps batches.
pub(super) struct Ticks(pub(super) ProgressBar);

impl Observer for Ticks {
    fn stamped(&self, _: &Stamp) {
        self.0.inc(1);
    }
}

/// An epoch's line; the valid MRR column reads `-` without a validation split.
pub(super) fn print_epoch(s: &EpochStats, has_valid: bool) {
    let mrr = if has_valid { format!("{:.4}", s.valid.mrr) } else { "-".to_string() };
    println!("{:>5} {:>8.2} {:>9.4} {:>10}", s.epoch, s.wall_s, s.loss, mrr);
}

/// The test metrics, or that there are none: an empty `test.txt` has no mean to print.
pub(super) fn test_metrics(d: &Dataset, m: &Metrics) -> String {
    if d.test.is_empty() {
        return "no test split (test.txt has no triple): no test metrics".to_string();
    }
    format!(
        "MRR {:.4}  Hits@1 {:.4}  Hits@3 {:.4}  Hits@10 {:.4}",
        m.mrr, m.hits1, m.hits3, m.hits10
    )
}

/// The time-to-accuracy summary: each mode against 95% of sync's best valid MRR.
pub(super) fn print_comparison(results: &[RunResult], n_train: usize) {
    if let Some((target, rows)) = compare::compare(results, n_train) {
        print!("\n{}", compare::text(target, &rows));
    }
}
