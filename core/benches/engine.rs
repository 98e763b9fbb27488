//! Throughput (batches/s) of the engine's modes on a synthetic embedding workload whose step
//! costs about as much as reading and writing the batch's rows (calibrated at start).
//!
//! `cargo bench -p ordo --bench engine` (env: `ORDO_BENCH_ROWS` = 1000000, `ORDO_BENCH_BATCHES`
//! = 200, `ORDO_BENCH_DRAWS` = 10000 Zipf(1.1) draws per batch, `ORDO_BENCH_REPEATS` = 3).
//! Every figure that matters is a ratio between modes measured in the same process, interleaved.

use chacha20::ChaCha8Rng;
use ordo::engine::{
    AsyncWrite, Batch, BatchRows, Engine, EngineConfig, Mode, Model, RunReport, StepError,
};
use ordo::row_store::RowStore;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use std::time::Instant;

const WIDTH: usize = 64;

/// `passes` sweeps of a multiply-add over the rows: cost tunable to match the row I/O.
struct Synthetic {
    passes: usize,
    steps: u64,
}

impl Model for Synthetic {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        WIDTH
    }
    fn step(&mut self, data: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        for _ in 0..self.passes {
            for v in rows.values_mut() {
                *v = *v * 0.999 + *data;
            }
        }
        self.steps += 1;
        Ok(())
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn batches(rows: usize, n: usize, draws: usize) -> Vec<Batch<f32>> {
    // ChaCha8 by name (output fixed by the `chacha20` crate's version), keyed by the seed's
    // bytes, not `StdRng`, whose algorithm rand may change: the seed keeps naming the same
    // uniform stream across updates (the Zipf draws on it are `rand_distr`'s algorithm).
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&42u64.to_le_bytes());
    let mut rng = ChaCha8Rng::from_seed(key);
    let zipf = Zipf::new(rows as f64, 1.1).expect("valid Zipf");
    (0..n as u64)
        .map(|id| {
            let mut ids: Vec<u64> = (0..draws).map(|_| zipf.sample(&mut rng) as u64 - 1).collect();
            ids.sort_unstable();
            ids.dedup();
            Batch { id, rows: ids, data: 1e-4 }
        })
        .collect()
}

/// Seconds to read + write a batch's rows through the store, and to run one step pass.
fn calibrate(store: &RowStore, batch: &Batch<f32>) -> (f64, f64) {
    let mut buf = vec![0.0f32; batch.rows.len() * WIDTH];
    let t = Instant::now();
    for _ in 0..5 {
        for (i, &r) in batch.rows.iter().enumerate() {
            store.read(r, &mut buf[i * WIDTH..(i + 1) * WIDTH]).expect("row");
        }
        for (i, &r) in batch.rows.iter().enumerate() {
            store.hogwild().write(r, &buf[i * WIDTH..(i + 1) * WIDTH]).expect("row");
        }
    }
    let io = t.elapsed().as_secs_f64() / 5.0;
    let mut one = Synthetic { passes: 1, steps: 0 };
    let t = Instant::now();
    for _ in 0..5 {
        one.step(&1e-4, &mut BatchRows::new(&batch.rows, WIDTH, &mut buf).expect("sized"))
            .expect("step");
    }
    (io, t.elapsed().as_secs_f64() / 5.0)
}

fn main() {
    let rows = env("ORDO_BENCH_ROWS", 1_000_000);
    let n = env("ORDO_BENCH_BATCHES", 200);
    let draws = env("ORDO_BENCH_DRAWS", 10_000);
    let repeats = env("ORDO_BENCH_REPEATS", 3);
    let store = RowStore::from_fn(rows, WIDTH, |r, c| ((r * 31 + c) % 97) as f32 * 0.01);
    let work = batches(rows, n, draws);
    let mean_rows = work.iter().map(|b| b.rows.len()).sum::<usize>() as f64 / n as f64;
    let (io, pass) = calibrate(&store, &work[0]);
    let passes = ((io / pass).round() as usize).max(1);
    println!(
        "workload: {rows} rows x {WIDTH} f32, {n} batches of {draws} Zipf(1.1) draws \
         ({mean_rows:.0} distinct rows on average); row read+write {:.3} ms/batch, step {passes} \
         passes = {:.3} ms/batch",
        io * 1e3,
        pass * passes as f64 * 1e3
    );
    let modes = [
        ("Sync", Mode::Sync),
        ("Async", Mode::Async(AsyncWrite::Overwrite)),
        ("Async(AddDelta)", Mode::Async(AsyncWrite::AddDelta)),
        ("Bounded(8)", Mode::Bounded(8)),
        ("Oac", Mode::Oac),
    ];
    let mut results: Vec<Vec<RunReport>> = vec![Vec::new(); modes.len()];
    for rep in 0..repeats {
        // Rotate the order each repeat so drift on a shared machine hits every mode alike.
        for k in 0..modes.len() {
            let i = (k + rep) % modes.len();
            let engine = Engine::new(EngineConfig::new(modes[i].1).threads(2, 2).depths(4, 4))
                .expect("config");
            let mut model = Synthetic { passes, steps: 0 };
            let report = engine.run(&mut model, &store, work.clone()).expect("run");
            assert_eq!(model.steps, n as u64);
            results[i].push(report);
        }
    }
    let median = |rs: &[RunReport]| {
        let mut v: Vec<f64> = rs.iter().map(RunReport::batches_per_sec).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let speed: Vec<f64> = results.iter().map(|r| median(r)).collect();
    let (sync, asyn) = (speed[0], speed[1]);
    println!(
        "| mode | batches/s (median of {repeats}) | × Sync | × Async | cache peak (rows) | \
         validation hit rate |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, (name, _)) in modes.iter().enumerate() {
        let last = results[i].last().expect("ran");
        println!(
            "| {name} | {:.1} | {:.2} | {:.2} | {} | {:.3} |",
            speed[i],
            speed[i] / sync,
            speed[i] / asyn,
            last.cache_peak,
            last.hit_rate()
        );
    }
}
