//! AdaPM (issue 14) on the KGE workload: the single-process run (the engine in `sync` mode) and
//! `--pm` over in-process nodes in every mode, same model, data, epochs and seed, one after
//! another in one process so all see the same machine load; then an intent-offset sweep of
//! `adapm`. Prints Markdown tables whose ratios are to the single-process run (MRR, triples/s)
//! and to `adapm` (bytes) of the same invocation.
//!
//! ```text
//! cargo run --release -p ordo-train --bin pm_bench -- --dataset ../shared/datasets/wordnet30 \
//!     [--nodes 4] [--epochs 1] [--offset 2] [--sweep 0,1,2,4,8] [--pm-negatives local|global]
//! ```

use clap::Parser;
use indicatif::ProgressBar;
use ordo_pm::PmMode;
use ordo_train::kge::backends::pm::{PmConfig, PmNegatives, PmRun, train_pm};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::training::train::{TrainConfig, TrainMode, train};

#[derive(Debug, Parser)]
#[command(
    about = "kge --pm in every mode and an intent-offset sweep, against the single-process run"
)]
struct Args {
    /// Dataset: an embedded name (umls, kinships, nations, wordnet30) or a directory.
    #[arg(long, default_value = "../shared/datasets/wordnet30")]
    dataset: String,
    /// Scoring function.
    #[arg(long, value_enum, default_value = "complex")]
    model: ScoreFn,
    /// Embedding dimension.
    #[arg(long, default_value_t = 100)]
    dim: usize,
    /// Epochs of every run.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Batch size.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
    /// Negatives per side.
    #[arg(long, default_value_t = 64)]
    negatives: usize,
    /// Positives sharing one set of negatives.
    #[arg(long, default_value_t = 50)]
    chunk: usize,
    /// Test triples evaluated (0 = all).
    #[arg(long, default_value_t = 1000)]
    eval_limit: usize,
    /// Seed of every run.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Nodes of the PM runs.
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Intent offset of the mode table.
    #[arg(long, default_value_t = 2)]
    offset: u64,
    /// Intent offsets of the adapm sweep.
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8")]
    sweep: Vec<u64>,
    /// Where the PM runs' nodes draw negatives.
    #[arg(long, value_enum, default_value = "local")]
    pm_negatives: PmNegatives,
}

fn row(label: &str, r: &PmRun, single: (f64, f64), adapm_bytes: Option<u64>) -> String {
    let s = &r.stats;
    let bytes_ratio = adapm_bytes
        .map_or("—".to_string(), |b| format!("{:.2}", s.bytes_sent as f64 / b.max(1) as f64));
    format!(
        "| {label} | {:.6} | {} | {bytes_ratio} | {} | {} | {:.4} | {:.3} | {:.0} | {:.2} |",
        s.remote_share(),
        s.bytes_sent,
        s.relocations,
        s.replications,
        r.test.mrr,
        r.test.mrr / single.0,
        r.triples_per_s(),
        r.triples_per_s() / single.1,
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The step runs on this thread, as ordo-train's does (`ordo_train::pool`).
    ordo_train::pool::init_global();
    let a = Args::parse();
    let d = Dataset::load(&a.dataset)?;
    let cfg = TrainConfig {
        score: a.model,
        dim: a.dim,
        epochs: a.epochs,
        batch_size: a.batch_size,
        negatives: a.negatives,
        chunk: a.chunk,
        eval_limit: a.eval_limit,
        seed: a.seed,
        ..TrainConfig::default()
    };
    eprintln!(
        "{} · {:?} dim {} · {} epochs · batch {} · seed {}",
        d.summary(),
        cfg.score,
        cfg.dim,
        cfg.epochs,
        cfg.batch_size,
        cfg.seed
    );
    let single = train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None)?;
    let single_tps = single.triples_per_s(d.train.len());
    let base = (single.test.mrr, single_tps);
    let pm = |mode, nodes, intent_offset| -> Result<PmRun, Box<dyn std::error::Error>> {
        let negatives = a.pm_negatives;
        eprintln!(
            "running {mode} on {nodes} nodes, intent offset {intent_offset}, {} negatives",
            negatives.name()
        );
        let pm = PmConfig { mode, nodes, intent_offset, negatives };
        Ok(train_pm(&d, &cfg, pm, &ProgressBar::hidden())?)
    };
    let header = "| run | remote_share | bytes_sent | bytes × adapm | relocations | replications | test MRR | MRR × single | triples/s | × single |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|";
    println!(
        "#### modes: {} nodes, intent offset {}, {} negatives\n\n{header}",
        a.nodes,
        a.offset,
        a.pm_negatives.name()
    );
    println!(
        "| single process (engine sync) | — | — | — | — | — | {:.4} | 1.000 | {single_tps:.0} | 1.00 |",
        single.test.mrr
    );
    let one = pm(PmMode::AdaPm, 1, a.offset)?;
    println!("{}", row("adapm, 1 node", &one, base, None));
    let adapm = pm(PmMode::AdaPm, a.nodes, a.offset)?;
    let adapm_bytes = Some(adapm.stats.bytes_sent);
    println!("{}", row("adapm", &adapm, base, adapm_bytes));
    for mode in PmMode::ALL.into_iter().filter(|&m| m != PmMode::AdaPm) {
        println!("{}", row(mode.name(), &pm(mode, a.nodes, a.offset)?, base, adapm_bytes));
    }
    println!(
        "\n#### adapm intent-offset sweep: {} nodes\n\n{}",
        a.nodes,
        header.replacen("| run |", "| intent offset |", 1)
    );
    for &k in &a.sweep {
        let r = if k == a.offset { adapm.clone() } else { pm(PmMode::AdaPm, a.nodes, k)? };
        println!("{}", row(&k.to_string(), &r, base, adapm_bytes));
    }
    Ok(())
}
