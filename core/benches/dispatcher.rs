//! `finish_step` throughput of the CAS interval dispatcher against a `Mutex`-based interval
//! dispatcher (the paper's "simpler implementation with a lock around FinishStep"), at 1 and 2
//! threads (and 16 where the machine has the cores: `ORDO_BENCH_THREADS=1,2,16`).
//!
//! One element = one `try_start_step` + `finish_step` pair; both dispatchers take start indices
//! from the same kind of fetch-and-add, so the difference is the finish. y = 16, 64 (paper 001
//! uses y₀ ∈ {64, 128}).
//!
//! Before the criterion groups, a *paired* run prints the Mutex/CAS time ratio as the median
//! over rounds that alternate the two dispatchers back to back (robust to the load drifting
//! between criterion's separate benchmarks on a shared machine; `ORDO_BENCH_PAIRED=0` skips it).
//!
//! `cargo bench -p ordo --bench dispatcher -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use ordo::dispatcher::{DispatchError, Dispatcher, Fixed, IntervalDispatcher, StepIndex, WorkerId};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Baseline: Algorithm 2's FinishStep under one lock (what the CAS version must beat).
struct MutexInterval {
    started: AtomicU64,
    /// (I_first, I_done, y)
    state: Mutex<(u64, u32, u32)>,
    workers: AtomicUsize,
}

impl MutexInterval {
    fn new(m: usize, y: u32) -> Self {
        Self {
            started: AtomicU64::new(0),
            state: Mutex::new((0, 0, y)),
            workers: AtomicUsize::new(m),
        }
    }
}

impl Dispatcher for MutexInterval {
    fn try_start_step(&self, worker: WorkerId) -> Option<StepIndex> {
        // Relaxed: advisory bound, as in the CAS dispatcher.
        if worker >= self.workers.load(Ordering::Relaxed) {
            return None;
        }
        // Relaxed: unique indices; the lock orders the finish side.
        Some(self.started.fetch_add(1, Ordering::Relaxed))
    }

    fn finish_step(&self, _worker: WorkerId, step: StepIndex) -> bool {
        let mut s = self.state.lock().unwrap();
        let (first, done, y) = *s;
        if step < first || done >= y {
            return false;
        }
        *s = if done + 1 == y {
            // AcqRel RMW: the latest start index, as the CAS dispatcher reads it.
            (self.started.fetch_add(0, Ordering::AcqRel), 0, y)
        } else {
            (first, done + 1, y)
        };
        true
    }

    fn workers(&self) -> usize {
        // Relaxed: advisory bound.
        self.workers.load(Ordering::Relaxed)
    }

    fn set_workers(&self, m: usize) -> Result<(), DispatchError> {
        // Relaxed: advisory bound.
        self.workers.store(m, Ordering::Relaxed);
        Ok(())
    }
}

/// `threads` threads doing `iters` start+finish pairs each on one fresh dispatcher; the time of
/// the slowest thread.
fn pairs<D: Dispatcher>(d: &D, threads: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|w| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let t0 = Instant::now();
                    let mut accepted = 0u64;
                    for _ in 0..iters {
                        if let Some(i) = d.try_start_step(w) {
                            accepted += u64::from(d.finish_step(w, black_box(i)));
                        }
                    }
                    black_box(accepted);
                    t0.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap_or_default()
    })
}

fn thread_counts() -> Vec<usize> {
    std::env::var("ORDO_BENCH_THREADS")
        .ok()
        .and_then(|v| v.split(',').map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2])
}

fn finish_step(c: &mut Criterion) {
    for y in [16u32, 64] {
        let mut g = c.benchmark_group(format!("finish_step/y{y}"));
        for threads in thread_counts() {
            g.throughput(Throughput::Elements(threads as u64));
            g.bench_function(BenchmarkId::new("cas", threads), |b| {
                b.iter_custom(|iters| {
                    let d = IntervalDispatcher::new(threads, y, Fixed).unwrap();
                    pairs(&d, threads, iters)
                })
            });
            g.bench_function(BenchmarkId::new("mutex", threads), |b| {
                b.iter_custom(|iters| pairs(&MutexInterval::new(threads, y), threads, iters))
            });
        }
        g.finish();
    }
}

/// Median (and quartiles) of per-round `mutex time / cas time`, rounds alternating the order.
fn paired_ratios() {
    const ROUNDS: usize = 41;
    const PAIRS: u64 = 200_000;
    println!("paired: y threads  mutex/cas time ratio  median [q1 q3]  (rounds = {ROUNDS})");
    for y in [16u32, 64] {
        for threads in thread_counts() {
            let mut ratios: Vec<f64> = (0..ROUNDS)
                .map(|r| {
                    let cas = || {
                        pairs(&IntervalDispatcher::new(threads, y, Fixed).unwrap(), threads, PAIRS)
                    };
                    let mutex = || pairs(&MutexInterval::new(threads, y), threads, PAIRS);
                    let (c, m) = if r % 2 == 0 {
                        let c = cas();
                        (c, mutex())
                    } else {
                        let m = mutex();
                        (cas(), m)
                    };
                    m.as_secs_f64() / c.as_secs_f64()
                })
                .collect();
            ratios.sort_by(f64::total_cmp);
            let q = |f: f64| ratios[((ROUNDS - 1) as f64 * f).round() as usize];
            println!(
                "paired: {y:>2} {threads:>7}  {:>20.2}  [{:.2} {:.2}]",
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
    }
}

criterion_group!(benches, finish_step);

fn main() {
    if std::env::var("ORDO_BENCH_PAIRED").as_deref() != Ok("0") {
        paired_ratios();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
