//! End to end: KGE training with the parameters in AdaPM (`ordo-train kge --pm`, issue 14) on
//! four in-process nodes reaches the accuracy of the single-process run with the same epochs and
//! seed, while AdaPM's intent signals keep almost every access local, unlike the static
//! partition's.
#![cfg(not(ordo_loom))]

use indicatif::ProgressBar;
use ordo_pm::PmMode;
use ordo_train::kge::backends::pm::{PmConfig, PmNegatives, PmRun, train_pm};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::training::train::{TrainConfig, TrainMode, train};

fn config(seed: u64) -> TrainConfig {
    TrainConfig {
        score: ScoreFn::ComplEx,
        dim: 32,
        epochs: 10,
        batch_size: 128,
        negatives: 32,
        chunk: 16,
        seed,
        threads: 1,
        ..TrainConfig::default()
    }
}

fn pm_run(d: &Dataset, mode: PmMode, cfg: &TrainConfig) -> PmRun {
    let pm = PmConfig { mode, nodes: 4, intent_offset: 2, negatives: PmNegatives::default() };
    train_pm(d, cfg, pm, &ProgressBar::hidden()).expect("the PM run trains")
}

#[test]
fn adapm_on_four_nodes_matches_the_single_process_mrr_with_far_fewer_remote_accesses() {
    // UMLS is embedded in ordo-train (the same splits as ../shared/datasets/umls), so this test
    // never skips.
    let d = Dataset::load("umls").unwrap();
    // The seed fixes the data, not when the node threads' replica refreshes and flushes land,
    // so one run's MRR ratio varies: seed 11 alone gave mean 1.007, sd 0.018 over 40 runs on 2
    // cores, and its old bound, 0.97, was 2 sd away. The mean over seeds 11–13 gave mean 0.995,
    // sd 0.0085, lowest 0.977 over 15 runs; 0.96 is 4 sd below that mean.
    let mut ratios = Vec::new();
    let mut adapm = None;
    for seed in [11, 12, 13] {
        let cfg = config(seed);
        let single =
            train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).expect("the single run trains");
        let run = pm_run(&d, PmMode::AdaPm, &cfg);
        // Every training triple of every epoch was stepped once, across the nodes.
        assert_eq!(run.triples, (d.train.len() * cfg.epochs) as u64);
        ratios.push(run.test.mrr / single.test.mrr);
        adapm.get_or_insert(run);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(mean >= 0.96, "adapm MRR / single-process MRR over seeds 11–13: {ratios:.4?}");
    let adapm = adapm.expect("three runs");
    let cfg = config(11);
    let stat = pm_run(&d, PmMode::Static, &cfg);
    assert_eq!(stat.triples, (d.train.len() * cfg.epochs) as u64);
    // The static partition serves 3 of 4 accesses remotely (key k lives on node k mod 4).
    assert!(stat.stats.remote_share() > 0.6, "static: {}", stat.stats_line());
    assert!(
        adapm.stats.remote_share() < stat.stats.remote_share() / 10.0,
        "adapm {} vs static {}",
        adapm.stats_line(),
        stat.stats_line()
    );
    assert!(adapm.stats.relocations > 0 && adapm.stats.replications > 0, "{}", adapm.stats_line());
}

/// The `test (MODE): MRR x` value of an `ordo-train kge` run's stdout.
fn mrr_of(stdout: &str, mode: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("test ({mode}): MRR ")))
        .unwrap_or_else(|| panic!("no `test ({mode})` line in:\n{stdout}"));
    line.split_whitespace().nth(3).and_then(|m| m.parse().ok()).expect("MRR is a number")
}

/// `ordo-train kge --pm adapm` under `mpirun -n 4` (each rank one node over the MPI transport):
/// rank 0 alone prints the `pm:` line and the test metrics, and its MRR is ≥ 0.95× the
/// single-process synchronous run's with the same epochs and seed, with few remote accesses.
/// `ORDO_TRAIN_MPI_BIN` names an `ordo-train` built with `--features mpi` (`.ci/run` builds it
/// and runs this test); the test fails without it.
#[test]
#[ignore = "needs mpirun and ordo-train built with --features mpi (ORDO_TRAIN_MPI_BIN); .ci/run runs it"]
fn adapm_on_four_mpi_ranks_matches_the_single_process_mrr() {
    use std::process::Command;
    let bin = std::env::var("ORDO_TRAIN_MPI_BIN")
        .expect("ORDO_TRAIN_MPI_BIN names ordo-train built with --features mpi");
    let args = ["kge", "--dataset", "umls", "--epochs", "10", "--seed", "3", "--quiet"];
    let single = Command::new(&bin).args(args).args(["--mode", "sync"]).output().unwrap();
    assert!(single.status.success(), "{}", String::from_utf8_lossy(&single.stderr));
    let single_mrr = mrr_of(&String::from_utf8_lossy(&single.stdout), "sync");
    let mpi = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "4", &bin])
        .args(args)
        .args(["--pm", "adapm"])
        .output()
        .expect("mpirun runs");
    let (out, err) = (String::from_utf8_lossy(&mpi.stdout), String::from_utf8_lossy(&mpi.stderr));
    assert!(mpi.status.success(), "{out}\n{err}");
    // Ranks 1..3 print nothing: one header, one pm line, one metrics line; on stderr only
    // rank 0's dataset summary.
    let pm: Vec<&str> = out.lines().filter(|l| l.starts_with("pm: ")).collect();
    assert_eq!(pm.len(), 1, "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("test (")).count(), 1, "{out}");
    assert_eq!(err.lines().count(), 1, "stderr: {err}");
    assert!(pm[0].starts_with("pm: nodes=4 "), "{}", pm[0]);
    let field = |name: &str| -> f64 {
        let kv = pm[0].split_whitespace().find_map(|kv| kv.strip_prefix(name));
        kv.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} in {}", pm[0]))
    };
    // The static partition serves 3 of 4 accesses remotely.
    assert!(field("remote_share=") < 0.1, "{}", pm[0]);
    assert!(field("relocations=") > 0.0 && field("bytes_sent=") > 0.0, "{}", pm[0]);
    let mpi_mrr = mrr_of(&out, "adapm");
    // 0.95×, not the 0.97× (measured on WordNet, BENCHMARKS.md: 0.991×): on UMLS's 135
    // entities every key is replicated on every rank, and 19 runs of this command with the
    // batched MPI transport gave 0.963–1.004× the single-process MRR, 2 of them below 0.97×.
    assert!(
        mpi_mrr >= 0.95 * single_mrr,
        "4 MPI ranks MRR {mpi_mrr:.4} < 0.95 × single-process {single_mrr:.4}\n{out}"
    );
}
