//! Benchmarks of the OAC primitives against their baselines, measured in the same run:
//! * `mft_finish`: `Mft::finish` vs a `Mutex`-based MFT, 1 and 2 threads finishing interleaved
//!   timestamps (so finishes arrive out of order and each thread advances the other's);
//! * `store_row`: `RowStore::read` + `write_if_newer` of one row vs the unsynchronized Hogwild
//!   view of the same table (`read` + `write`) and vs a `Mutex` per row, rows of 64 and 256 f32.
//!
//! Run: `CARGO_TARGET_DIR=/work/main/target cargo bench -p ordo --bench primitives --
//! --warm-up-time 1 --measurement-time 3`. Ratios go in BENCHMARKS.md (§ Primitives).

use std::hint::black_box;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ordo::mft::Mft;
use ordo::row_store::RowStore;

/// The MFT ring is sized to the sample (`iters + 1` timestamps), so no finisher ever waits for
/// admission: on this shared, oversubscribed 2-core machine a full window makes the bench measure
/// the OS scheduler (a thread spinning until a descheduled peer runs again), not the MFT. The
/// admission check itself still runs before every finish.
fn capacity_for(iters: u64) -> usize {
    iters as usize + 1
}

/// The baseline: an MFT whose ring and prefix sit behind one lock.
struct MutexMft {
    inner: Mutex<MutexMftInner>,
}

struct MutexMftInner {
    prefix: u64,
    done: Vec<bool>,
}

impl MutexMft {
    fn new(capacity: usize) -> Self {
        // Written element by element (not `vec![false; n]`, which maps zero pages lazily), so
        // both trackers have touched their whole ring before the timed region.
        let done = (0..capacity).map(|i| black_box(i) == usize::MAX).collect();
        MutexMft { inner: Mutex::new(MutexMftInner { prefix: 0, done }) }
    }

    fn admits(&self, ts: u64) -> bool {
        let g = self.inner.lock().unwrap();
        ts < g.prefix + g.done.len() as u64
    }

    fn finish(&self, ts: u64) -> u64 {
        let mut g = self.inner.lock().unwrap();
        let cap = g.done.len() as u64;
        g.done[(ts % cap) as usize] = true;
        loop {
            let slot = (g.prefix % cap) as usize;
            if !g.done[slot] {
                return g.prefix;
            }
            g.done[slot] = false;
            g.prefix += 1;
        }
    }
}

/// What both MFTs offer the bench driver.
trait Tracker: Sync {
    fn admits(&self, ts: u64) -> bool;
    fn finish(&self, ts: u64) -> u64;
}

impl Tracker for Mft {
    fn admits(&self, ts: u64) -> bool {
        Mft::admits(self, ts)
    }
    fn finish(&self, ts: u64) -> u64 {
        Mft::finish(self, ts).expect("admitted, finished once")
    }
}

impl Tracker for MutexMft {
    fn admits(&self, ts: u64) -> bool {
        MutexMft::admits(self, ts)
    }
    fn finish(&self, ts: u64) -> u64 {
        MutexMft::finish(self, ts)
    }
}

/// `total` finishes spread over `threads` threads (thread `t` finishes `ts ≡ t mod threads`,
/// waiting for admission when it runs a window ahead). Returns the wall time from a common start.
fn drive(tracker: &impl Tracker, threads: u64, total: u64) -> Duration {
    let go = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let go = &go;
                s.spawn(move || {
                    // Acquire: start together (only a start signal).
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    let mut ts = t;
                    while ts < total {
                        while !tracker.admits(ts) {
                            std::thread::yield_now();
                        }
                        black_box(tracker.finish(ts));
                        ts += threads;
                    }
                })
            })
            .collect();
        let start = Instant::now();
        // Release: pairs with the workers' start-signal load.
        go.store(true, Ordering::Release);
        for w in workers {
            w.join().unwrap();
        }
        start.elapsed()
    })
}

fn mft_finish(c: &mut Criterion) {
    let mut group = c.benchmark_group("mft_finish");
    group.throughput(Throughput::Elements(1));
    for threads in [1u64, 2] {
        group.bench_function(BenchmarkId::new("lockfree", threads), |b| {
            b.iter_custom(|iters| drive(&Mft::new(capacity_for(iters)), threads, iters))
        });
        group.bench_function(BenchmarkId::new("mutex", threads), |b| {
            b.iter_custom(|iters| drive(&MutexMft::new(capacity_for(iters)), threads, iters))
        });
    }
    group.finish();
}

const ROWS: usize = 1024;

fn store_row(c: &mut Criterion) {
    let mut group = c.benchmark_group("store_row");
    group.throughput(Throughput::Elements(1));
    for width in [64usize, 256] {
        let store = RowStore::from_fn(ROWS, width, |r, c| (r + c) as f32);
        let mut buf = vec![0.0f32; width];
        let mut i = 0u64;
        group.bench_function(BenchmarkId::new("timestamped", width), |b| {
            b.iter(|| {
                let row = i % ROWS as u64;
                store.read(row, &mut buf).unwrap();
                buf[0] += 1.0;
                black_box(store.write_if_newer(row, i, &buf).unwrap());
                i += 1;
            })
        });
        let hogwild = store.hogwild();
        group.bench_function(BenchmarkId::new("hogwild", width), |b| {
            b.iter(|| {
                let row = i % ROWS as u64;
                hogwild.read(row, &mut buf).unwrap();
                buf[0] += 1.0;
                hogwild.write(row, &buf).unwrap();
                i += 1;
            })
        });
        let locked: Vec<Mutex<(u64, Vec<f32>)>> = (0..ROWS)
            .map(|r| Mutex::new((0, (0..width).map(|c| (r + c) as f32).collect())))
            .collect();
        group.bench_function(BenchmarkId::new("mutex", width), |b| {
            b.iter(|| {
                let row = (i % ROWS as u64) as usize;
                buf.copy_from_slice(&locked[row].lock().unwrap().1);
                buf[0] += 1.0;
                let mut g = locked[row].lock().unwrap();
                if i + 1 > g.0 {
                    g.0 = i + 1;
                    g.1.copy_from_slice(&buf);
                }
                drop(g);
                i += 1;
            })
        });
        // Reference only (not a valid concurrent store: plain memory, no atomics).
        let mut plain: Vec<f32> = (0..ROWS * width).map(|x| x as f32).collect();
        group.bench_function(BenchmarkId::new("plain_memcpy", width), |b| {
            b.iter(|| {
                let row = (i % ROWS as u64) as usize;
                buf.copy_from_slice(&plain[row * width..(row + 1) * width]);
                buf[0] += 1.0;
                plain[row * width..(row + 1) * width].copy_from_slice(black_box(&buf));
                i += 1;
            })
        });
    }
    group.finish();
}

criterion_group!(benches, mft_finish, store_row);
criterion_main!(benches);
