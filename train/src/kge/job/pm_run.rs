//! `kge --pm`: a run with the parameters in AdaPM, in process or as one rank of an MPI job, and
//! what it prints.

use super::error::BoxError;
use super::report::{progress_bar, test_metrics};
use crate::kge::backends::pm::{PmConfig, PmRun, PmTrainError, train_pm};
use crate::kge::data::dataset::Dataset;
use crate::kge::run::config::TrainConfig;
use indicatif::ProgressBar;

/// What a run prints: nothing at all when `silent` (an MPI rank other than 0), no progress bar
/// when `quiet`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Output {
    pub(super) quiet: bool,
    pub(super) silent: bool,
}

/// `--pm`: train over the in-process AdaPM cluster, or (`on_mpi`) as this rank's node of the MPI
/// job; print the `pm:` line and the test metrics unless `out.silent`.
pub(super) fn run_pm(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    out: Output,
    on_mpi: bool,
) -> Result<(), BoxError> {
    if !out.silent {
        println!(
            "pm {} · {} nodes{} · intent offset {} · {} negatives · {:?} dim {} · batch {} · {} epochs · seed {}",
            pm.mode,
            pm.nodes,
            if on_mpi { " (MPI ranks)" } else { "" },
            pm.intent_offset,
            pm.negatives.name(),
            cfg.score,
            cfg.dim,
            cfg.batch_size,
            cfg.epochs,
            cfg.seed
        );
    }
    let bar = progress_bar(out.quiet || out.silent);
    bar.set_prefix(pm.mode.name());
    let r = if on_mpi {
        train_pm_on_mpi(d, cfg, pm, &bar)
    } else {
        train_pm(d, cfg, pm, &bar).map(Some)
    };
    bar.finish_and_clear();
    if let Some(r) = r? {
        print_pm_run(&r, pm, d);
    }
    Ok(())
}

/// Under mpirun: this rank's node of the MPI job (`Some` on rank 0). Without the `mpi` feature
/// `Options::pm_config` has refused `--pm` under mpirun before this is reached.
fn train_pm_on_mpi(
    d: &Dataset,
    cfg: &TrainConfig,
    pm: PmConfig,
    bar: &ProgressBar,
) -> Result<Option<PmRun>, PmTrainError> {
    #[cfg(feature = "mpi")]
    return crate::kge::backends::pm::train_pm_mpi(d, cfg, pm, bar);
    #[cfg(not(feature = "mpi"))]
    train_pm(d, cfg, pm, bar).map(Some)
}

fn print_pm_run(r: &PmRun, pm: PmConfig, d: &Dataset) {
    println!(
        "trained in {:.2} s ({:.0} triples/s), mean loss {:.4}",
        r.wall_s,
        r.triples_per_s(),
        r.loss
    );
    println!("{}", r.stats_line());
    println!("test ({}): {}", pm.mode, test_metrics(d, &r.test));
}
