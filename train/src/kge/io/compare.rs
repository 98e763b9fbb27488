//! Time-to-accuracy comparison of modes run on the same data, seed and hyper-parameters: each
//! mode against 95% of sync's best valid MRR (the OAC paper's time-to-accuracy metric).

use crate::kge::run::mode::TrainMode;
use crate::kge::run::results::RunResult;

/// One mode's row of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModeRow {
    /// The mode.
    pub mode: TrainMode,
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
    let sync = results.iter().find(|r| r.mode == TrainMode::Sync)?;
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

/// For each of `results`, whether its final parameters equal `sync`'s bit for bit: every entity
/// row (values and optimizer state), relation and dense float. (`oac` must match `sync` so.)
/// Sync's table is copied out of its store once, whatever the number of results.
pub fn same_bits_as(sync: &RunResult, results: &[RunResult]) -> Vec<bool> {
    let eq = |a: &[f32], b: &[f32]| {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    };
    let table = sync.entities.snapshot();
    results
        .iter()
        .map(|r| {
            std::ptr::eq(r, sync)
                || (r.row_width == sync.row_width
                    && eq(&r.relations, &sync.relations)
                    && eq(&r.dense, &sync.dense)
                    && eq(&r.entities.snapshot(), &table))
        })
        .collect()
}

/// The median, smallest and largest of some runs' values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` if there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().collect();
        v.sort_by(f64::total_cmp);
        let (&min, &max) = (v.first()?, v.last()?);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min, max })
    }
}

/// The most values [`median_interval`] takes: its first term, `2⁻ⁿ`, is a normal `f64` up to
/// n = 1022 (`kge_hogs` runs at most 1000 pairs).
pub const MEDIAN_INTERVAL_MAX: usize = 1000;

/// A distribution-free interval for the median of the population `values` were drawn from: the
/// order statistics `x(j) ≤ x(n+1−j)` (1-based) with the largest `j` for which at most
/// `(1 − confidence) / 2` of the `Binomial(n, ½)` mass lies below `j` on each side, so the
/// interval covers the median with probability at least `confidence` whatever the distribution
/// (independent draws). `None` when no such interval exists (fewer than 6 values for 95 %),
/// for more than [`MEDIAN_INTERVAL_MAX`] values, or when `confidence` is outside `(0, 1)`. It
/// answers "is the median of many alternated pairs above 0.95?" where one run's median of 5 or
/// 6 pairs swings by ±15 % (BENCHMARKS.md, issue 34).
///
/// The binomial tail is summed here (at p = ½ it is `Σ C(n, i) / 2ⁿ`, built term by term)
/// rather than taken from a statistics crate, whose default features would bring a
/// linear-algebra library into the trainer for eight lines.
pub fn median_interval(values: &[f64], confidence: f64) -> Option<(f64, f64)> {
    if !(confidence > 0.0 && confidence < 1.0) || values.len() > MEDIAN_INTERVAL_MAX {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let tail = (1.0 - confidence) / 2.0;
    // below = P(X ≤ i) for X ~ Binomial(n, ½), built up term by term: term = C(n, i) / 2ⁿ.
    let (mut term, mut below, mut j) = (0.5f64.powi(n as i32), 0.0, 0);
    for i in 0..n / 2 {
        below += term;
        // P(X ≤ i) ≤ tail: the order statistic i + 1 (1-based) may bound the interval.
        if below > tail {
            break;
        }
        j = i + 1;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    (j >= 1).then(|| (v[j - 1], v[n - j]))
}

/// One mode over repeated comparisons (`kge compare --repeat N`).
#[derive(Debug, Clone, PartialEq)]
pub struct RepeatedRow {
    /// The mode.
    pub mode: TrainMode,
    /// Runs of this mode.
    pub runs: usize,
    /// Training triples per second.
    pub triples_per_s: Spread,
    /// Triples per second over sync's in the same comparison.
    pub speed_vs_sync: Spread,
    /// Sync's seconds-to-target over this mode's, over the runs that reached the target.
    pub sooner_than_sync: Option<Spread>,
    /// Runs that reached 95% of their comparison's sync's best valid MRR.
    pub reached: usize,
    /// Runs whose final parameters equal their comparison's sync's bit for bit.
    pub same_bits_as_sync: usize,
}

/// Each mode's spread over `runs`, one per comparison: its rows ([`compare`]) and, per row,
/// whether that mode's parameters equalled sync's ([`same_bits_as`]). Modes in the order of the
/// first comparison.
pub fn repeated(runs: &[(Vec<ModeRow>, Vec<bool>)]) -> Vec<RepeatedRow> {
    let modes: Vec<TrainMode> =
        runs.first().map(|(rows, _)| rows.iter().map(|r| r.mode).collect()).unwrap_or_default();
    modes
        .into_iter()
        .filter_map(|mode| {
            let of_mode: Vec<(&ModeRow, bool)> = runs
                .iter()
                .flat_map(|(rows, same)| rows.iter().zip(same.iter().copied()))
                .filter(|(r, _)| r.mode == mode)
                .collect();
            let reached: Vec<f64> =
                of_mode.iter().filter_map(|(r, _)| r.sooner_than_sync).collect();
            Some(RepeatedRow {
                mode,
                runs: of_mode.len(),
                triples_per_s: Spread::of(of_mode.iter().map(|(r, _)| r.triples_per_s))?,
                speed_vs_sync: Spread::of(of_mode.iter().map(|(r, _)| r.speed_vs_sync))?,
                reached: reached.len(),
                sooner_than_sync: Spread::of(reached),
                same_bits_as_sync: of_mode.iter().filter(|(_, same)| *same).count(),
            })
        })
        .collect()
}

/// [`repeated`]'s rows as a plain-text table for the terminal.
pub fn repeated_text(rows: &[RepeatedRow]) -> String {
    let runs = rows.first().map_or(0, |r| r.runs);
    let spread = |s: &Spread, digits: usize, unit: &str| {
        format!("{:.d$}{unit} ({:.d$}–{:.d$})", s.median, s.min, s.max, d = digits)
    };
    let mut s = format!(
        "== over {runs} comparisons: median (range) ==\n{:>8} {:>30} {:>22} {:>34} {:>18}\n",
        "mode", "triples/s", "× sync", "sooner than sync", "same bits as sync"
    );
    for r in rows {
        let sooner = r.sooner_than_sync.as_ref().map_or("never".into(), |x| {
            let reached = if r.reached < r.runs {
                format!(" [{}/{} reached]", r.reached, r.runs)
            } else {
                String::new()
            };
            format!("{}{reached}", spread(x, 2, "×"))
        });
        s += &format!(
            "{:>8} {:>30} {:>22} {:>34} {:>18}\n",
            r.mode.name(),
            spread(&r.triples_per_s, 0, ""),
            spread(&r.speed_vs_sync, 2, ""),
            sooner,
            format!("{}/{}", r.same_bits_as_sync, r.runs)
        );
    }
    s
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

    /// The interval's bounds are the textbook order statistics: for n = 6 the 95 % interval is
    /// (x(1), x(6)) (P(X ≤ 0) = 1/64 ≤ 0.025 < P(X ≤ 1) = 7/64); for n = 20 it is (x(6),
    /// x(15)) (P(X ≤ 5) = 0.0207 ≤ 0.025 < P(X ≤ 6) = 0.0577); for n = 5 there is none.
    #[test]
    fn median_interval_takes_the_binomial_order_statistics() {
        let up = |n: usize| (1..=n).rev().map(|i| i as f64).collect::<Vec<_>>();
        assert_eq!(median_interval(&up(5), 0.95), None);
        assert_eq!(median_interval(&up(6), 0.95), Some((1.0, 6.0)));
        assert_eq!(median_interval(&up(20), 0.95), Some((6.0, 15.0)));
        // 100 values: P(X ≤ 39) = 0.0176 ≤ 0.025 < P(X ≤ 40) = 0.0284, so (x(40), x(61)).
        assert_eq!(median_interval(&up(100), 0.95), Some((40.0, 61.0)));
        // A looser confidence narrows it: 50 % over 20 values is (x(8), x(13)), as
        // P(X ≤ 7) = 0.132 ≤ 0.25 < P(X ≤ 8) = 0.252.
        assert_eq!(median_interval(&up(20), 0.5), Some((8.0, 13.0)));
        assert_eq!(median_interval(&up(20), 1.0), None);
        assert_eq!(median_interval(&up(20), f64::NAN), None);
        // At the cap the first term is still a normal float, and the interval is sane.
        let (lo, hi) = median_interval(&up(MEDIAN_INTERVAL_MAX), 0.95).unwrap();
        assert!(lo > 450.0 && lo < 500.0 && hi > 500.0 && hi < 550.0, "{lo} {hi}");
        assert_eq!(median_interval(&up(MEDIAN_INTERVAL_MAX + 1), 0.95), None);
    }

    /// Coverage, checked by drawing: over 2000 samples of 12 values from a skewed distribution
    /// whose median is known, the 95 % interval misses the median in at most 5 % of them
    /// (it is conservative: for n = 12 its exact coverage is 96.1 %).
    #[test]
    fn median_interval_covers_the_median_as_often_as_it_says() {
        use rand::Rng;
        let mut rng = ordo_pm::rng::seeded(7);
        // Uniform in [0, 1) from the top 53 bits of one draw.
        let mut uniform = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        // Exponential with rate 1: median ln 2.
        let median = std::f64::consts::LN_2;
        let misses = (0..2000)
            .filter(|_| {
                let v: Vec<f64> = (0..12).map(|_| -(1.0 - uniform()).ln()).collect();
                let (lo, hi) = median_interval(&v, 0.95).expect("12 values suffice");
                !(lo <= median && median <= hi)
            })
            .count();
        assert!(misses <= 100, "{misses} of 2000 intervals missed the median");
        assert!(misses >= 40, "{misses} of 2000: far more conservative than the exact 3.9 %");
    }
    use crate::kge::eval::ranking::Metrics;
    use crate::kge::run::results::EpochStats;

    fn run(mode: TrainMode, curve: &[(f64, f64)]) -> RunResult {
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
            entities: ordo::row_store::RowStore::zeros(0, 1),
            row_width: 0,
            relation_dim: 0,
            relations: vec![],
            dense: vec![],
            rows_replaced: 0,
        }
    }

    #[test]
    fn time_to_target_is_measured_against_sync() {
        let sync = run(TrainMode::Sync, &[(1.0, 0.5), (2.0, 0.8), (3.0, 1.0)]);
        let oac = run(TrainMode::Oac, &[(0.5, 0.5), (1.0, 0.8), (1.5, 0.96)]);
        let hog = run(TrainMode::Async, &[(0.4, 0.3), (0.8, 0.5), (1.2, 0.6)]);
        let (target, rows) = compare(&[sync, oac, hog], 30).unwrap();
        assert_eq!(target, 0.95);
        assert_eq!((rows[0].epochs_to_target, rows[0].s_to_target), (Some(3), Some(3.0)));
        assert_eq!((rows[1].epochs_to_target, rows[1].sooner_than_sync), (Some(3), Some(2.0)));
        assert_eq!(rows[1].speed_vs_sync, 2.0);
        assert_eq!(rows[2].epochs_to_target, None);
        let md = markdown(&rows);
        assert!(md.contains("| oac | 60 | 2.00 | 0.500 | 3 | 1.50 | 2.00× |"), "{md}");
        assert!(text(target, &rows).contains("never"));
        assert!(compare(&[run(TrainMode::Oac, &[])], 1).is_none());
    }

    #[test]
    fn repeated_comparisons_give_each_modes_median_range_and_bit_matches() {
        assert_eq!(Spread::of([3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(Spread::of([4.0, 1.0, 2.0, 3.0]).map(|s| s.median), Some(2.5));
        assert_eq!(Spread::of([]), None);
        // Two comparisons: oac twice as fast, then 1.5x; async reaches the target only once.
        let first = [
            run(TrainMode::Sync, &[(1.0, 0.5), (2.0, 1.0)]),
            run(TrainMode::Oac, &[(0.5, 0.5), (1.0, 1.0)]),
            run(TrainMode::Async, &[(0.5, 0.5), (1.0, 0.9)]),
        ];
        let second = [
            run(TrainMode::Sync, &[(1.5, 0.5), (3.0, 1.0)]),
            run(TrainMode::Oac, &[(1.0, 0.5), (2.0, 1.0)]),
            run(TrainMode::Async, &[(1.0, 0.5), (2.0, 0.96)]),
        ];
        let runs = vec![
            (compare(&first, 30).unwrap().1, vec![true, true, false]),
            (compare(&second, 30).unwrap().1, vec![true, false, false]),
        ];
        let rows = repeated(&runs);
        assert_eq!(
            rows.iter().map(|r| r.mode).collect::<Vec<_>>(),
            [TrainMode::Sync, TrainMode::Oac, TrainMode::Async]
        );
        let oac = &rows[1];
        assert_eq!((oac.runs, oac.reached, oac.same_bits_as_sync), (2, 2, 1));
        assert_eq!(oac.speed_vs_sync, Spread { median: 1.75, min: 1.5, max: 2.0 });
        assert_eq!(oac.sooner_than_sync.map(|s| (s.min, s.max)), Some((1.5, 2.0)));
        let hog = &rows[2];
        assert_eq!((hog.reached, hog.same_bits_as_sync), (1, 0));
        assert_eq!(hog.sooner_than_sync.map(|s| s.median), Some(1.5));
        let text = repeated_text(&rows);
        assert!(text.contains("over 2 comparisons"), "{text}");
        assert!(
            text.contains("[1/2 reached]") && text.contains("1/2") && text.contains("2/2"),
            "{text}"
        );
    }

    #[test]
    fn same_bits_compares_every_parameter_bit_for_bit() {
        let a = run(TrainMode::Sync, &[]);
        let mut b = run(TrainMode::Oac, &[]);
        assert_eq!(same_bits_as(&a, &[run(TrainMode::Oac, &[])]), [true]);
        b.dense = vec![-0.0];
        let mut a2 = run(TrainMode::Sync, &[]);
        a2.dense = vec![0.0];
        assert_eq!(
            same_bits_as(&a2, &[b]),
            [false],
            "0.0 and -0.0 compare equal as floats, not as bits"
        );
        let mut c = run(TrainMode::Oac, &[]);
        c.entities = ordo::row_store::RowStore::zeros(1, 1);
        assert_eq!(same_bits_as(&a, &[c]), [false]);
    }
}
