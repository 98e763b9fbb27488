//! End to end: KGE training with the parameters in AdaPM (`ordo-train kge --pm`, issue 14) on
//! four in-process nodes reaches the accuracy of the single-process run with the same epochs and
//! seed, while AdaPM's intent signals keep almost every access local, unlike the static
//! partition's.
#![cfg(not(ordo_loom))]

use indicatif::ProgressBar;
use ordo_pm::PmMode;
use ordo_train::kge::data::Dataset;
use ordo_train::kge::pm::{PmConfig, PmNegatives, PmRun, train_pm};
use ordo_train::kge::score::ScoreFn;
use ordo_train::kge::train::{Mode, TrainConfig, train};

fn config() -> TrainConfig {
    TrainConfig {
        score: ScoreFn::ComplEx,
        dim: 32,
        epochs: 10,
        batch_size: 128,
        negatives: 32,
        chunk: 16,
        seed: 11,
        threads: 1,
        ..TrainConfig::default()
    }
}

fn pm_run(d: &Dataset, mode: PmMode) -> PmRun {
    let pm = PmConfig { mode, nodes: 4, intent_offset: 2, negatives: PmNegatives::default() };
    train_pm(d, &config(), pm, &ProgressBar::hidden()).expect("the PM run trains")
}

#[test]
fn adapm_on_four_nodes_matches_the_single_process_mrr_with_far_fewer_remote_accesses() {
    // UMLS is embedded in ordo-train (the same splits as ../shared/datasets/umls), so this test
    // never skips.
    let d = Dataset::load("umls").unwrap();
    let cfg = config();
    let single = train(&d, &cfg, Mode::Sync, &mut |_| {}, None).expect("the single run trains");
    let adapm = pm_run(&d, PmMode::AdaPm);
    let stat = pm_run(&d, PmMode::Static);
    // Every training triple of every epoch was stepped once, across the nodes.
    let triples = (d.train.len() * cfg.epochs) as u64;
    assert_eq!((adapm.triples, stat.triples), (triples, triples));
    assert!(
        adapm.test.mrr >= 0.97 * single.test.mrr,
        "adapm MRR {:.4} < 0.97 × single-process {:.4}",
        adapm.test.mrr,
        single.test.mrr
    );
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
