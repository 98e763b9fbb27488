//! Time-to-accuracy comparison of modes run on the same data, seed and hyper-parameters: each
//! mode against 95% of sync's best valid MRR (the OAC paper's time-to-accuracy metric).

use super::mode::Mode;
use super::results::RunResult;

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

/// Column headers of both tables.
const HEADERS: [&str; 10] = [
    "mode",
    "triples/s",
    "× sync",
    "s/epoch",
    "epochs → 95%",
    "s → 95%",
    "sooner than sync",
    "best valid MRR",
    "test MRR",
    "test Hits@10",
];

/// A row's cells, formatted.
fn cells(r: &ModeRow) -> [String; 10] {
    [
        r.mode.name().to_string(),
        format!("{:.0}", r.triples_per_s),
        format!("{:.2}", r.speed_vs_sync),
        format!("{:.3}", r.s_per_epoch),
        r.epochs_to_target.map_or("never".into(), |e| e.to_string()),
        r.s_to_target.map_or("never".into(), |s| format!("{s:.2}")),
        r.sooner_than_sync.map_or("—".into(), |x| format!("{x:.2}×")),
        format!("{:.4}", r.best_valid_mrr),
        format!("{:.4}", r.test_mrr),
        format!("{:.4}", r.test_hits10),
    ]
}

/// The comparison as a Markdown table.
pub fn markdown(rows: &[ModeRow]) -> String {
    let mut s =
        format!("| {} |\n|---|{}\n", HEADERS.join(" | "), "---:|".repeat(HEADERS.len() - 1));
    for r in rows {
        s += &format!("| {} |\n", cells(r).join(" | "));
    }
    s
}

/// The comparison as a plain-text table for the terminal.
pub fn text(target: f64, rows: &[ModeRow]) -> String {
    let line = |c: &[String]| {
        c.iter()
            .zip(HEADERS)
            .map(|(c, h)| format!("{c:>w$}", w = h.chars().count().max(8)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = format!("== comparison (target: 95% of sync's best valid MRR = {target:.4}) ==\n");
    s += &line(&HEADERS.map(String::from));
    s.push('\n');
    for r in rows {
        s += &line(&cells(r));
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::eval::Metrics;
    use crate::kge::results::EpochStats;

    fn run(mode: Mode, curve: &[(f64, f64)]) -> RunResult {
        let epochs = curve
            .iter()
            .enumerate()
            .map(|(i, &(wall_s, mrr))| EpochStats {
                epoch: i + 1,
                wall_s,
                epoch_s: 0.0,
                loss: 0.0,
                valid: Metrics { mrr, ..Metrics::default() },
            })
            .collect();
        RunResult {
            mode,
            epochs,
            test: Metrics::default(),
            order: vec![],
            entities: ordo::store::RowStore::zeros(0, 1),
            row_width: 0,
            relation_dim: 0,
            relations: vec![],
            dense: vec![],
            rows_replaced: 0,
        }
    }

    #[test]
    fn time_to_target_is_measured_against_sync() {
        let sync = run(Mode::Sync, &[(1.0, 0.5), (2.0, 0.8), (3.0, 1.0)]);
        let oac = run(Mode::Oac, &[(0.5, 0.5), (1.0, 0.8), (1.5, 0.96)]);
        let hog = run(Mode::Async, &[(0.4, 0.3), (0.8, 0.5), (1.2, 0.6)]);
        let (target, rows) = compare(&[sync, oac, hog], 30).unwrap();
        assert_eq!(target, 0.95);
        assert_eq!((rows[0].epochs_to_target, rows[0].s_to_target), (Some(3), Some(3.0)));
        assert_eq!((rows[1].epochs_to_target, rows[1].sooner_than_sync), (Some(3), Some(2.0)));
        assert_eq!(rows[1].speed_vs_sync, 2.0);
        assert_eq!(rows[2].epochs_to_target, None);
        let md = markdown(&rows);
        assert!(md.contains("| oac | 60 | 2.00 | 0.500 | 3 | 1.50 | 2.00× |"), "{md}");
        assert!(text(target, &rows).contains("never"));
        assert!(compare(&[run(Mode::Oac, &[])], 1).is_none());
    }
}
