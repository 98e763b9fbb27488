//! Time-to-accuracy comparison of modes run on the same data, seed and hyper-parameters: each
//! mode against 95% of sync's best valid MRR (the OAC paper's time-to-accuracy metric).

use super::train::{Mode, RunResult};

/// One mode's row of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeRow {
    /// The mode.
    pub mode: Mode,
    /// Training triples per second over the run.
    pub triples_per_s: f64,
    /// `triples_per_s` over sync's.
    pub speed_vs_sync: f64,
    /// Mean training seconds per epoch.
    pub s_per_epoch: f64,
    /// First epoch whose valid MRR reaches the target.
    pub epochs_to_target: Option<usize>,
    /// Training seconds until then.
    pub s_to_target: Option<f64>,
    /// Sync's seconds-to-target over this mode's (> 1: this mode is sooner).
    pub sooner_than_sync: Option<f64>,
    /// Best valid MRR over the epochs.
    pub best_valid_mrr: f64,
    /// Final filtered test MRR.
    pub test_mrr: f64,
    /// Final filtered test Hits@10.
    pub test_hits10: f64,
}

/// The comparison of `results` (one must be sync), with `target = 0.95 ×` sync's best valid MRR.
/// `None` without a sync run.
pub fn compare(results: &[RunResult], n_train: usize) -> Option<(f64, Vec<ModeRow>)> {
    let sync = results.iter().find(|r| r.mode == Mode::Sync)?;
    let target = 0.95 * sync.best_valid_mrr();
    let sync_tps = sync.triples_per_s(n_train);
    let sync_s = sync.first_reaching(target).map(|e| e.wall_s);
    let rows = results
        .iter()
        .map(|r| {
            let reach = r.first_reaching(target);
            let tps = r.triples_per_s(n_train);
            ModeRow {
                mode: r.mode,
                triples_per_s: tps,
                speed_vs_sync: tps / sync_tps,
                s_per_epoch: r.epochs.last().map_or(0.0, |e| e.wall_s)
                    / r.epochs.len().max(1) as f64,
                epochs_to_target: reach.map(|e| e.epoch),
                s_to_target: reach.map(|e| e.wall_s),
                sooner_than_sync: reach.zip(sync_s).map(|(e, s)| s / e.wall_s.max(1e-9)),
                best_valid_mrr: r.best_valid_mrr(),
                test_mrr: r.test.mrr,
                test_hits10: r.test.hits10,
            }
        })
        .collect();
    Some((target, rows))
}

/// The comparison as a Markdown table.
pub fn markdown(rows: &[ModeRow]) -> String {
    let mut s = String::from(
        "| mode | triples/s | × sync | s/epoch | epochs → 95% | s → 95% | sooner than sync | best valid MRR | test MRR | test Hits@10 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.0} | {:.2} | {:.3} | {} | {} | {} | {:.4} | {:.4} | {:.4} |\n",
            r.mode.name(),
            r.triples_per_s,
            r.speed_vs_sync,
            r.s_per_epoch,
            r.epochs_to_target.map_or("never".into(), |e| e.to_string()),
            r.s_to_target.map_or("never".into(), |s| format!("{s:.2}")),
            r.sooner_than_sync.map_or("—".into(), |x| format!("{x:.2}×")),
            r.best_valid_mrr,
            r.test_mrr,
            r.test_hits10
        );
    }
    s
}

/// The comparison as a plain-text table for the terminal.
pub fn text(target: f64, rows: &[ModeRow]) -> String {
    let mut s = format!(
        "== comparison (target: 95% of sync's best valid MRR = {target:.4}) ==\n{:>8} {:>11} {:>8} {:>9} {:>13} {:>9} {:>9} {:>9} {:>9}\n",
        "mode",
        "triples/s",
        "× sync",
        "s/epoch",
        "epochs→target",
        "s→target",
        "× sooner",
        "test MRR",
        "Hits@10"
    );
    for r in rows {
        s += &format!(
            "{:>8} {:>11.0} {:>8.2} {:>9.3} {:>13} {:>9} {:>9} {:>9.4} {:>9.4}\n",
            r.mode.name(),
            r.triples_per_s,
            r.speed_vs_sync,
            r.s_per_epoch,
            r.epochs_to_target.map_or("never".into(), |e| e.to_string()),
            r.s_to_target.map_or("never".into(), |s| format!("{s:.2}")),
            r.sooner_than_sync.map_or("—".into(), |x| format!("{x:.2}")),
            r.test_mrr,
            r.test_hits10
        );
    }
    s
}
