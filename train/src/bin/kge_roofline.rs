//! Roofline of the KGE step (issue 13, item 2): this machine's random-row gather/scatter
//! bandwidth and the step's GEMM rate, measured in the same run as the trainer, give two bounds
//! in triples/s; each mode's measured throughput is printed as a fraction of the tighter one.
//!
//! * **Bytes per positive.** Every batch reads each of its distinct entity rows once (values and
//!   optimizer state, with the row's TID word) and writes each back once. The count of distinct
//!   rows comes from the epoch's real batches (heads, tails, and each chunk's shared negatives,
//!   after de-duplication), so `bytes/positive = 2 · rows/positive · (row_width · 4 + 8)`.
//! * **Gather bandwidth.** The same rows, in the same order, copied from a plain `rows × width`
//!   table into a contiguous buffer and back (`copy_from_slice`: the memory system's bound, no
//!   protocol), and through the [`RowStore`] itself (`read` + `write_if_newer`: the seqlock),
//!   with the engine's prefetch of the rows a group ahead (the rate used below) and without it.
//!   Through the store, each batch's rows are written back five batches after they were read,
//!   as the engine's pipeline does (its reader runs `input_depth` batches ahead of the step),
//!   so a write finds its rows gone from the caches as it does in a run; written right after
//!   the read (printed beside it) they are still cached and the copies cost about half.
//! * **Compute bound.** Per side of a chunk of `c` positives with `n` shared negatives the step
//!   multiplies `S = Q·Nᵀ`, `dQ = G·N`, `dN = Gᵀ·Q` (`c·n·d` multiply-adds each), timed with
//!   ndarray (the step's backend) on these shapes.
//! * **What the step cannot skip.** Its GEMMs, copying its rows through the store's protocol,
//!   the softmax loss over each query's scores and the optimizer's update of each of its rows
//!   (both timed here too, as the step computes them) cost core time per positive whatever
//!   else changes; with every core on them and nothing
//!   else, no pipeline passes their sum, and that ceiling is printed as a fraction of the
//!   bound. Beside it, the same ceiling if the rows were copied with plain `memcpy`s under
//!   per-row locks (timed for row widths 200 and 400: safe Rust has that layout only for a
//!   width fixed at compile time).
//! * **The step alone.** The model's own step (`EmbeddingModel::step`, its chunks on every core) over
//!   the epoch's batches, with each batch's rows copied in from a plain table and back outside
//!   the timed part: what a pipeline would reach if reading, validating and writing rows cost
//!   nothing. No mode passes it, so it splits the distance to the bound into the step's share
//!   and the pipeline's.
//! * **Core time per positive.** The process's CPU time (every thread's, from its CPU clock)
//!   over each mode's training epochs and over the step-alone row's steps, per positive. With
//!   every core busy on that same work, a run reaches at most `cores / core time` (printed as
//!   "all cores busy"): what a perfect scheduler of today's stages would reach, so a target
//!   above it needs less work, not better overlap. Spin-waits count as work here, so the
//!   figure is a lower bound on what better waiting could give.
//! * **The step without its layout copies.** The same replay with the model's
//!   `measure_without_layout_copies`: no chunk gathers its rows out of the batch's layout or
//!   adds its gradients back (the values are wrong, the products and the update the same). The
//!   core time it saves bounds what reading each row straight into the operands the products
//!   multiply, and writing it back from them (issue 34, item 1), could save.
//! * **The floor: sync with its step on one thread** (the last row; `--no-floor` leaves it
//!   out), with the step alone on one thread printed above it. No stage runs beside the step,
//!   no row crosses cores and no second thread takes part. Every mode does the floor's work
//!   (the same steps of the same batches, the same rows copied), and the pipelined ones add
//!   their pipeline's, so none should spend less core time per positive. The floor's distance
//!   from the unskippable sum is the step's work beyond its products and the engine's
//!   bookkeeping, which no scheduling removes. Each mode's core time
//!   is printed as a multiple of that sum (issue 34's roofline ratio; on a GPU, of the host's
//!   share of it, the store's copies), and, below the table, as a multiple of the floor's: what
//!   the mode's own scheduling costs (a pipeline's stages, a second step thread).
//! * **On a GPU** (`--device cuda`, where this machine has one): the modes' steps run on the GPU
//!   (ordo-gpu's kernels, as `ordo-train kge --device cuda`), so the host's GEMM rate bounds
//!   nothing and each mode is measured against the gather bound alone, the bound issue 13 names
//!   ("speed near the memory limit": the device computes while the host moves rows). The
//!   step-alone row is the host's step and is left out. Without a usable GPU it stops before
//!   any measurement with the reason, like the trainer.
//! * **One core and all cores.** The step runs its chunks on every core, so the bound a run is
//!   measured against is the machine's: both microbenchmarks run once on one thread and once on
//!   one thread per core at the same time (each gather thread on its own copy of the table, as
//!   threads writing the same plain rows would race), and the fractions are of the tighter
//!   all-core bound. The one-core bound (PERF_NOTES.md's) is printed beside it.
//!
//! ```text
//! cargo run --release -p ordo-train --bin kge_roofline -- [--epochs 2] [--modes sync,async,oac]
//!     [--device cuda] [--neg-sampling distinct] [--no-floor]
//! ```

/// mimalloc instead of glibc's malloc: `matrixmultiply` allocates and frees its GEMM packing
/// buffers on every call (the KGE step's products until issue 34, the evaluation's still), and
/// under glibc 8 % of an oac run's samples were page faults; on mimalloc the trainer's oac ran
/// 1.08× faster (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use ndarray::Array2;
use ordo::engine::{BatchRows, Model};
use ordo::row_store::RowStore;
use ordo::storage::prefetch_ahead;
use ordo_train::cpu_clock::{add_cpu_since, process_cpu_s};
use ordo_train::kge::data::batch::{NegSampling, SplitMix64, TripleBatch};
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::device::Device;
use ordo_train::kge::model::gpu::check_device;
use ordo_train::kge::model::matmul::mat_mul_into;
use ordo_train::kge::model::optim::Optimizer;
use ordo_train::kge::model::score::Loss;
use ordo_train::kge::model::softmax_exp::ExpPath;
use ordo_train::kge::model::step::{EmbeddingModel, NonFiniteLoss};
use ordo_train::kge::training::train::{Event, TrainConfig, TrainError, TrainMode, train};
use std::error::Error;
use std::hint::black_box;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(about = "Gather bandwidth, GEMM rate and the KGE step's roofline, in one run")]
struct Args {
    /// Dataset name or directory (the fixed configuration of
    /// `train/configs/wordnet30-complex-throughput.toml`).
    #[arg(long, default_value = "../shared/datasets/wordnet30")]
    dataset: String,
    /// Embedding floats per entity (ComplEx: dim/2 complex numbers).
    #[arg(long, default_value_t = 100)]
    dim: usize,
    /// Positives per batch.
    #[arg(long, default_value_t = 1000)]
    batch_size: usize,
    /// Negatives per chunk and side.
    #[arg(long, default_value_t = 100)]
    negatives: usize,
    /// Positives sharing one set of negatives.
    #[arg(long, default_value_t = 50)]
    chunk: usize,
    /// Training epochs per mode.
    #[arg(long, default_value_t = 2)]
    epochs: usize,
    /// Modes to train.
    #[arg(long, value_delimiter = ',', default_value = "sync,async,oac")]
    modes: Vec<TrainMode>,
    /// Repetitions of each microbenchmark (the best is kept).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// The optimizer of entity rows and relations: adagrad (the throughput config's: a sum per
    /// float, rows of `2·dim` floats) or row-adagrad (PyTorch-BigGraph's: a sum per row, rows of
    /// `dim + 1`).
    #[arg(long, value_enum, default_value = "adagrad")]
    optimizer: Optimizer,
    /// Where the modes' steps run: cpu, or cuda (measured against the gather bound alone).
    #[arg(long, value_enum, default_value = "cpu")]
    device: Device,
    /// Where negatives come from: uniform (the throughput config's), batch, or distinct
    /// (without replacement; those that are not positives' entities laid out where the step
    /// multiplies them).
    #[arg(long, value_enum, default_value = "uniform")]
    neg_sampling: NegSampling,
    /// Leave out the last row, the floor: sync with its step on one thread.
    #[arg(long)]
    no_floor: bool,
}

/// Best-of-`reps` seconds of `f`.
fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Best-of-`reps` seconds of `f` run on one thread per element of `a` (and `b`) at once, each
/// on its own pair: the wall time of the slowest thread.
fn on_threads<A: Send, B: Send>(
    reps: usize,
    a: &mut [A],
    b: &mut [B],
    f: impl Fn(&mut A, &mut B) + Sync,
) -> f64 {
    best_of(reps, || {
        std::thread::scope(|s| {
            for (a, b) in a.iter_mut().zip(b.iter_mut()) {
                let f = &f;
                s.spawn(move || f(a, b));
            }
        })
    })
}

/// Best-of-`reps` seconds to copy each batch's rows (`batches`: row lists) out of and back into a
/// table of `n` rows of `W` floats, each row a version word and its values behind its own lock,
/// copied with plain `memcpy`s. `RowStore` cannot be laid out so: safe Rust has no lock-protected
/// row whose width is chosen at run time (without `unsafe` the width must be a constant), so it
/// copies word by word through atomics. This measures what that costs. These copies are not
/// prefetched (safe code could ask only for a row's first line, its lock), while the `RowStore`
/// rate the ceiling uses is: the comparison favours `RowStore` by that much. Each batch's rows
/// are written `lag` batches after they were read, as in `RowStore`'s timing.
fn locked_rows_s<const W: usize>(
    reps: usize,
    n: usize,
    batches: &[&[u64]],
    max_rows: usize,
    lag: usize,
) -> f64 {
    let table: Vec<std::sync::Mutex<(u64, [f32; W])>> =
        (0..n).map(|_| std::sync::Mutex::new((0, [1.0; W]))).collect();
    let mut bufs = vec![vec![[0.0f32; W]; max_rows]; lag + 1];
    let mut ts = 0;
    let lock = |r: u64| table[r as usize].lock().unwrap_or_else(|e| e.into_inner());
    best_of(reps, || {
        read_ahead_of_writes(
            &mut bufs,
            batches.len(),
            |k, buf| {
                for (dst, &r) in buf.iter_mut().zip(batches[k]) {
                    *dst = lock(r).1;
                }
            },
            |j, buf| {
                ts += 1;
                for (src, &r) in buf.iter().zip(batches[j]) {
                    let mut row = lock(r);
                    if row.0 < ts {
                        *row = (ts, *src);
                    }
                }
            },
        );
        black_box(&bufs);
    })
}

/// The order in which the engine's pipeline reads and writes batches: each of `n` batches is
/// read (`read(k, slot)`) into slot `k % bufs.len()` of a ring, and batch `k − lag` (`lag` =
/// `bufs.len() − 1`) is written from its slot (`write(k − lag, slot)`) right after batch `k` is
/// read; the last `lag` batches are written after the last read. With one slot each batch is
/// written right after its own read.
fn read_ahead_of_writes<B>(
    bufs: &mut [B],
    n: usize,
    mut read: impl FnMut(usize, &mut B),
    mut write: impl FnMut(usize, &B),
) {
    let ring = bufs.len().max(1);
    let lag = ring - 1;
    for k in 0..n {
        read(k, &mut bufs[k % ring]);
        if let Some(j) = k.checked_sub(lag) {
            write(j, &bufs[j % ring]);
        }
    }
    for j in n.saturating_sub(lag)..n {
        write(j, &bufs[j % ring]);
    }
}

/// The KGE model with the wall time and the process CPU time of its steps summed: what the
/// step-alone row times inside the engine's replay, leaving out the replay's copies.
struct TimedStep {
    model: EmbeddingModel,
    seconds: f64,
    cpu_seconds: Option<f64>,
}

impl Model for TimedStep {
    type Data = TripleBatch;
    type Error = NonFiniteLoss;

    fn row_width(&self) -> usize {
        self.model.row_width()
    }

    fn step(&mut self, data: &TripleBatch, rows: &mut BatchRows<'_>) -> Result<(), NonFiniteLoss> {
        let (t, cpu) = (Instant::now(), process_cpu_s());
        let stepped = self.model.step(data, rows);
        self.seconds += t.elapsed().as_secs_f64();
        self.cpu_seconds = add_cpu_since(self.cpu_seconds, cpu);
        stepped
    }
}

fn main() -> std::process::ExitCode {
    // The step runs on this thread, as ordo-train's does (`ordo_train::pool`).
    ordo_train::pool::init_global();
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kge_roofline: {e}");
            // The trainer's exit codes: 2 for bad input, 1 for other failures (no CUDA device).
            std::process::ExitCode::from(ordo_train::kge::job::exit_code(&*e))
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // Before loading or measuring anything: a CUDA run without a usable GPU stops here.
    check_device(args.device)?;
    let d = Dataset::load(&args.dataset)?;
    let cfg = TrainConfig {
        dim: args.dim,
        batch_size: args.batch_size,
        negatives: args.negatives,
        chunk: args.chunk,
        epochs: args.epochs,
        eval_limit: 100,
        optimizer: args.optimizer,
        device: args.device,
        neg_sampling: args.neg_sampling,
        ..TrainConfig::default()
    };
    cfg.sampling(&d).check()?;
    let (n, w) = (d.entities.len(), cfg.row_width());
    let batches = cfg.sampling(&d).epoch_batches(&d.train, 0);
    let positives: usize = batches.iter().map(|b| b.data.pos.len()).sum();
    let rows_touched: usize = batches.iter().map(|b| b.rows.len()).sum();
    let rows_per_pos = rows_touched as f64 / positives as f64;
    let row_bytes = (w * 4 + 8) as f64;
    let bytes_per_pos = 2.0 * rows_per_pos * row_bytes;

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Gather and scatter of the epoch's real row lists, plain memory.
    let mut g = SplitMix64::new(1, 2);
    let table: Vec<f32> = (0..n * w).map(|_| g.below(1000) as f32).collect();
    let max_rows = batches.iter().map(|b| b.rows.len()).max().unwrap_or(0);
    let gather_pass = |table: &mut [f32], buf: &mut [f32]| {
        for b in &batches {
            for (dst, &r) in buf.chunks_mut(w).zip(&b.rows) {
                dst.copy_from_slice(&table[r as usize * w..(r as usize + 1) * w]);
            }
            for (src, &r) in buf.chunks(w).zip(&b.rows) {
                table[r as usize * w..(r as usize + 1) * w].copy_from_slice(src);
            }
        }
        black_box(table);
    };
    let plain_s = |threads: usize| {
        let mut tables: Vec<_> = (0..threads).map(|_| table.clone()).collect();
        let mut bufs = vec![vec![0.0f32; max_rows * w]; threads];
        on_threads(args.reps, &mut tables, &mut bufs, |t, b| gather_pass(t, b))
    };
    let (plain_one, plain_all) = (plain_s(1), plain_s(cores));
    // The same through the row store's protocol (seqlock read, locked versioned write).
    let store = RowStore::from_values(n, w, &table)?;
    // The engine writes a batch's rows back only after the batches its reader ran ahead on
    // (`input_depth`, 4 by default) and the step: by then other batches' rows have pushed them
    // out of the caches. So the rows of batch `k` are written after batch `k + lag` is read,
    // from a ring of `lag + 1` buffers; with `lag` 0 each write finds its rows still cached.
    const LAG: usize = 5;
    let mut bufs = vec![vec![0.0f32; max_rows * w]; LAG + 1];
    let mut ts = 0u64;
    // Timed without and with the prefetch schedule of the engine's reader and writers.
    let mut store_pass = |prefetch: bool, lag: usize| {
        best_of(args.reps, || {
            read_ahead_of_writes(
                &mut bufs[..=lag],
                batches.len(),
                |k, buf| {
                    let rows = &batches[k].rows;
                    for (i, (dst, &r)) in buf.chunks_mut(w).zip(rows).enumerate() {
                        if prefetch {
                            prefetch_ahead(&store, rows, i);
                        }
                        store.read(r, dst).expect("row in range");
                    }
                },
                |j, buf| {
                    let rows = &batches[j].rows;
                    for (i, (src, &r)) in buf.chunks(w).zip(rows).enumerate() {
                        if prefetch {
                            prefetch_ahead(&store, rows, i);
                        }
                        store.write_if_newer(r, ts, src).expect("row in range");
                    }
                    ts += 1;
                },
            )
        })
    };
    let (store_bare_s, store_hot_s, store_s) =
        (store_pass(false, LAG), store_pass(true, 0), store_pass(true, LAG));
    // The same with plain copies under per-row locks, where the row width has an instance.
    let row_lists: Vec<&[u64]> = batches.iter().map(|b| &b.rows[..]).collect();
    let locked_s = match w {
        200 => Some(locked_rows_s::<200>(args.reps, n, &row_lists, max_rows, LAG)),
        400 => Some(locked_rows_s::<400>(args.reps, n, &row_lists, max_rows, LAG)),
        _ => None,
    };
    let moved = (rows_touched * 2 * w * 4) as f64;
    let (plain_bw, plain_bw_all, store_bw) =
        (moved / plain_one, cores as f64 * moved / plain_all, moved / store_s);
    let locked_bw = locked_s.map(|s| moved / s);
    let (store_bare_bw, store_hot_bw) = (moved / store_bare_s, moved / store_hot_s);
    let (gather_one, gather_all) = (plain_bw / bytes_per_pos, plain_bw_all / bytes_per_pos);

    // The step's three GEMM shapes per chunk side, as the step runs them: `mat_mul_into` into
    // outputs reused from call to call. ndarray's own products (`matrixmultiply`, a fresh output
    // per call), which the step used before, are timed beside them for comparison.
    let (c, nn, dd) = (args.chunk.min(args.batch_size), args.negatives, args.dim);
    let q = Array2::<f32>::from_shape_fn((c, dd), |(i, j)| ((i * 7 + j) % 13) as f32 * 0.01);
    let negs = Array2::<f32>::from_shape_fn((nn, dd), |(i, j)| ((i * 5 + j) % 11) as f32 * 0.01);
    let gm = Array2::<f32>::from_shape_fn((c, nn), |(i, j)| ((i + j) % 7) as f32 * 0.01);
    let iters = 200;
    type Outputs = (Array2<f32>, Array2<f32>, Array2<f32>);
    let outputs = || (Array2::zeros((c, nn)), Array2::zeros((c, dd)), Array2::zeros((nn, dd)));
    let gemms = |o: &mut Outputs, _: &mut ()| {
        for _ in 0..iters {
            mat_mul_into(q.view(), negs.t(), false, o.0.view_mut());
            mat_mul_into(gm.view(), negs.view(), false, o.1.view_mut());
            mat_mul_into(gm.t(), q.view(), false, o.2.view_mut());
            black_box(&mut *o);
        }
    };
    let ndarray_gemms = |_: &mut (), _: &mut ()| {
        for _ in 0..iters {
            black_box(q.dot(&negs.t()));
            black_box(gm.dot(&negs));
            black_box(gm.t().dot(&q));
        }
    };
    let gemm_s = |threads: usize| {
        let mut outs: Vec<Outputs> = (0..threads).map(|_| outputs()).collect();
        on_threads(args.reps, &mut outs, &mut vec![(); threads], gemms)
    };
    let flop_per_side = 3.0 * 2.0 * (c * nn * dd) as f64;
    let (gflops, gflops_all) = (
        flop_per_side * iters as f64 / gemm_s(1) / 1e9,
        cores as f64 * flop_per_side * iters as f64 / gemm_s(cores) / 1e9,
    );
    let gflops_ndarray = flop_per_side * iters as f64
        / on_threads(args.reps, &mut [()], &mut [()], ndarray_gemms)
        / 1e9;
    let flop_per_pos = 2.0 * flop_per_side / c as f64;
    let (compute_one, compute_all) = (gflops * 1e9 / flop_per_pos, gflops_all * 1e9 / flop_per_pos);
    // On the host the step's GEMMs bound it too; on a GPU only the host's row traffic does.
    let on_gpu = args.device == Device::Cuda;
    let (bound_one, bound) = if on_gpu {
        (gather_one, gather_all)
    } else {
        (gather_one.min(compute_one), gather_all.min(compute_all))
    };

    // The softmax loss over each query's `negatives + 1` scores (both sides), timed as the step
    // computes it (`Loss::loss_and_grad`: max, one exp per score, sum, normalize).
    let row = nn + 1;
    let scores: Vec<f32> = (0..64 * row).map(|i| -((i * 37 % 1000) as f32) * 0.02).collect();
    let mut grads = vec![0.0f32; scores.len()];
    let loss_iters = 100;
    let loss_each = best_of(args.reps, || {
        for _ in 0..loss_iters {
            for (g, s) in grads.chunks_exact_mut(row).zip(black_box(&scores).chunks_exact(row)) {
                black_box(Loss::Softmax.loss_and_grad(s, g, 0.0));
            }
            black_box(&mut grads);
        }
    }) / (loss_iters * 64) as f64;
    // The optimizer's update of each row a batch touches (once per batch), timed as the step
    // runs it (`Optimizer::update` of a row's values and state with its gradient), over a
    // batch's worth of rows.
    let opt = cfg.step_config().optimizer;
    let mut opt_rows = vec![0.5f32; max_rows * w];
    let opt_grads: Vec<f32> =
        (0..max_rows * dd).map(|i| ((i * 13 % 97) as f32 - 48.0) * 1e-3).collect();
    let opt_row = best_of(args.reps, || {
        for (row, g) in opt_rows.chunks_mut(w).zip(opt_grads.chunks(dd)) {
            let (values, state) = row.split_at_mut(dd);
            opt.update(values, state, g, cfg.lr);
        }
        black_box(&mut opt_rows);
    }) / max_rows.max(1) as f64;
    // Core-seconds per positive of the four things no version of this step can skip: its GEMMs
    // (at the all-core rate), copying its rows in and out through the store (at the one-core
    // rate: optimistic if copies on several cores contend), its softmax, and the optimizer's
    // update of its rows. With every core busy and nothing else to do, no pipeline built on
    // them passes `ceiling`.
    let (t_gemm, t_store, t_loss, t_opt) = (
        cores as f64 / compute_all,
        bytes_per_pos / store_bw,
        2.0 * loss_each,
        rows_per_pos * opt_row,
    );
    let ceiling = cores as f64 / (t_gemm + t_store + t_loss + t_opt);
    // The same with the copies at the rate of plain rows under per-row locks.
    let locked = locked_bw.map(|bw| {
        let t_locked = bytes_per_pos / bw;
        (bw, t_locked, cores as f64 / (t_gemm + t_locked + t_loss + t_opt))
    });

    println!(
        "dataset {} · ComplEx dim {} · batch {} · {} negatives/side (chunks of {}) · {:?} · row width {} floats",
        args.dataset, args.dim, args.batch_size, args.negatives, args.chunk, args.optimizer, w
    );
    println!(
        "distinct rows per positive {rows_per_pos:.2}; bytes per positive (read + write, values + \
         optimizer state + TID) {bytes_per_pos:.0}"
    );
    println!(
        "random-row gather+scatter: plain memory {:.2} GB/s on one core, {:.2} GB/s on {cores}, \
         RowStore {:.2} GB/s on one core with the engine's prefetch, each batch written {LAG} \
         batches after its read as the engine's pipeline writes it ({:.2} without the prefetch, \
         {:.2} written right after its read) -> gather bound {gather_one:.0} triples/s on one \
         core, {gather_all:.0} on {cores} (RowStore protocol alone {:.0} triples/s on one core)",
        plain_bw / 1e9,
        plain_bw_all / 1e9,
        store_bw / 1e9,
        store_bare_bw / 1e9,
        store_hot_bw / 1e9,
        store_bw / bytes_per_pos
    );
    println!(
        "GEMM (the step's mat_mul_into, {c}x{dd}x{nn} shapes): {gflops:.1} GFLOP/s on one core, \
         {gflops_all:.1} on {cores} (ndarray's matrixmultiply: {gflops_ndarray:.1} on one core); \
         {:.0} kFLOP per positive -> compute bound {compute_one:.0} triples/s on one core, \
         {compute_all:.0} on {cores}",
        flop_per_pos / 1e3
    );
    if on_gpu {
        println!(
            "the steps run on the GPU: bound = the gather bound, {bound:.0} triples/s on {cores} \
             cores; on one core {bound_one:.0} (the host's GEMM rate above bounds nothing)\n"
        );
    } else {
        println!(
            "tighter bound: {bound:.0} triples/s on {cores} cores (the step's chunks run on all \
             of them); on one core {bound_one:.0}\n"
        );
    }
    let core_us = |cpu_s: f64, positives: usize| 1e6 * cpu_s / positives as f64;
    // A pool of one thread: a step run in it takes no second thread.
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let step_alone = if on_gpu {
        // The host's copies are what a GPU step leaves the host: with every core on them and
        // nothing else, no pipeline passes this.
        println!(
            "host core time per positive: RowStore copies {:.2} us -> with every core on them \
             and nothing else, at most {:.0} triples/s = {:.2}x the bound\n",
            t_store * 1e6,
            cores as f64 / t_store,
            cores as f64 / t_store / bound
        );
        None
    } else {
        println!(
            "core time per positive: GEMMs {:.2} us, RowStore copies {:.2} us, softmax over 2 x \
             {} scores {:.2} us ({:.2} ns per score, its exps on {}), {opt:?} update of \
             {rows_per_pos:.2} rows {:.2} us -> with every core on them and nothing else, at \
             most {ceiling:.0} triples/s = {:.2}x the bound\n",
            t_gemm * 1e6,
            t_store * 1e6,
            row,
            t_loss * 1e6,
            loss_each / row as f64 * 1e9,
            ExpPath::current().name(),
            t_opt * 1e6,
            ceiling / bound
        );
        match locked {
            Some((bw, t_locked, ceiling_locked)) => println!(
                "plain rows under per-row locks (no ordo store has them: fixed width or unsafe): \
                 {:.2} GB/s on one core, {:.2}x RowStore's; copies {:.2} us per positive -> at \
                 most {ceiling_locked:.0} triples/s = {:.2}x the bound\n",
                bw / 1e9,
                bw / store_bw,
                t_locked * 1e6,
                ceiling_locked / bound
            ),
            None => println!("(plain rows under per-row locks: not measured for row width {w})\n"),
        }
        // The step alone: the engine's sequential replay of the epoch on a plain table (each
        // batch's rows copied out, stepped, copied back), with only the steps timed, of a
        // fresh model that `prepare` sets up.
        let in_order: Vec<usize> = (0..batches.len()).collect();
        let replay_timed = |prepare: fn(&mut EmbeddingModel)| -> Result<TimedStep, Box<dyn Error>> {
            let (mut model, init) = cfg.init(&d)?;
            prepare(&mut model);
            let mut rows_table = init.snapshot();
            drop(init);
            let mut timed = TimedStep { model, seconds: 0.0, cpu_seconds: Some(0.0) };
            ordo::engine::replay(&mut timed, &mut rows_table, &batches, &in_order)?;
            Ok(timed)
        };
        let timed = replay_timed(|_| {})?;
        let step_s = timed.seconds;
        let step_alone = positives as f64 / step_s;
        let busy = |cpu_s: Option<f64>, wall_s: f64, positives: usize| match cpu_s {
            Some(c) => format!(
                "{:.2} core-us per positive, its cores busy {:.0}% of the time",
                core_us(c, positives),
                100.0 * c / (cores as f64 * wall_s)
            ),
            None => "core time not measured (no process CPU clock)".into(),
        };
        println!(
            "the step alone (EmbeddingModel::step on {cores} cores over one epoch, its rows copied in \
             and out of a plain table untimed): {step_alone:.0} triples/s = {:.2}x the bound; {}\n",
            step_alone / bound,
            busy(timed.cpu_seconds, step_s, positives)
        );
        // The same on one thread: the step of the floor row below, without the second
        // thread's hand-offs and the rows it reads on the other core.
        let both = || -> Result<_, Box<dyn Error>> {
            Ok((
                replay_timed(|_| {})?,
                replay_timed(EmbeddingModel::measure_without_layout_copies)?,
            ))
        };
        let single = one.install(|| both().map_err(|e| e.to_string()))?;
        let us = |t: &TimedStep| {
            t.cpu_seconds.map_or("-".into(), |c| format!("{:.2}", core_us(c, positives)))
        };
        println!(
            "the step alone on one thread: {:.0} triples/s; {} core-us per positive ({} without \
             its layout copies)\n",
            positives as f64 / single.0.seconds,
            us(&single.0),
            us(&single.1)
        );
        // The same replay with the chunks' copies between the batch's layout and theirs left
        // out (wrong values, same products): the most issue 34's item 1 could save.
        match replay_timed(EmbeddingModel::measure_without_layout_copies) {
            Ok(bare) => println!(
                "the step alone without its layout copies (no chunk gathers its rows from the \
                 batch's or adds its gradients back: the values are wrong, the products the \
                 same; what a layout that multiplies the rows where they were read could save \
                 at most): {:.0} triples/s; {}{}\n",
                positives as f64 / bare.seconds,
                busy(bare.cpu_seconds, bare.seconds, positives),
                match (timed.cpu_seconds, bare.cpu_seconds) {
                    (Some(a), Some(b)) => format!(
                        "; {:.2} core-us per positive less",
                        core_us(a, positives) - core_us(b, positives)
                    ),
                    _ => String::new(),
                }
            ),
            Err(e) => println!("the step alone without its layout copies: not measured ({e})\n"),
        }
        Some(step_alone)
    };
    // Oac's core time against the sum of the parts no step can skip: issue 34's ratio, printed
    // so that no one adds it up by hand. On a GPU the host's share of those parts is the copies.
    let unskippable_us = 1e6 * if on_gpu { t_store } else { t_gemm + t_store + t_loss + t_opt };
    println!(
        "| mode | triples/s | fraction of bound ({cores} cores) | of the one-core bound | of the \
         step alone | core-us per positive | x the unskippable sum ({unskippable_us:.2}) | all \
         cores busy: at most | fraction of that |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    // One mode's training epochs: triples/s and the process's CPU time per positive, from each
    // epoch's start to the end of its last step (`Batches` comes before the epoch's evaluation).
    let measure = |mode: TrainMode| -> Result<(f64, Option<f64>), TrainError> {
        let (mut cpu, mut since) = (Some(0.0), None);
        let run = train(
            &d,
            &cfg,
            mode,
            &mut |e| match e {
                Event::EpochStart { .. } => since = process_cpu_s(),
                Event::Batches(_) => cpu = add_cpu_since(cpu, since.take()),
                _ => {}
            },
            None,
        )?;
        let per_pos = cpu.map(|c| core_us(c, d.train.len() * run.epochs.len()));
        Ok((run.triples_per_s(d.train.len()), per_pos))
    };
    let print_row = |name: &str, (tps, per_pos): (f64, Option<f64>)| {
        let (per_pos, of_sum, most) = match per_pos {
            Some(p) => {
                let most = cores as f64 * 1e6 / p;
                (
                    format!("{p:.2}"),
                    format!("{:.2}", p / unskippable_us),
                    format!("{most:.0} | {:.2}", tps / most),
                )
            }
            None => ("-".into(), "-".into(), "- | -".into()),
        };
        let of_step = step_alone.map_or("-".into(), |s| format!("{:.2}", tps / s));
        println!(
            "| {name} | {tps:.0} | {:.2} | {:.2} | {of_step} | {per_pos} | {of_sum} | {most} |",
            tps / bound,
            tps / bound_one,
        );
    };
    let mut measured = Vec::with_capacity(args.modes.len());
    for &mode in &args.modes {
        let m = measure(mode)?;
        print_row(mode.name(), m);
        measured.push((mode, m.1));
    }
    // The floor (the module docs say why no mode should spend less).
    if !on_gpu && !args.no_floor {
        let floor = one.install(|| measure(TrainMode::Sync))?;
        print_row("sync, step on one thread (floor)", floor);
        // What each mode spends beyond the floor: its own scheduling's cost (a pipeline's,
        // a second step thread's), apart from the step's and the engine's, which the floor has.
        if let Some(f) = floor.1 {
            let over: Vec<String> = measured
                .iter()
                .filter_map(|(mode, c)| c.map(|c| format!("{} {:.2}x", mode.name(), c / f)))
                .collect();
            println!("\ncore time per positive over the floor's: {}", over.join(", "));
        }
    }
    Ok(())
}
