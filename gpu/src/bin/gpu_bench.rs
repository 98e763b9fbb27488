//! gpu_bench: the device stage's numbers on a CUDA GPU, every figure next to the ceiling or the
//! baseline measured in the same run.
//!
//! 1. Ceilings: device-to-device copy bandwidth (cuMemcpyDtoD and a float4 copy kernel), pinned
//!    host→device and device→host bandwidth.
//! 2. Kernels: validate, insert, and evict + validate + insert of the validation cache (every
//!    row hits: validate and insert each read and write every row once) as fractions of the D2D
//!    copy and of the rated bandwidth; the KGE step (DistMult, ComplEx) in scores/s; the
//!    chunked KGE step (cuBLAS products) per 1000-positive batch at the throughput config's
//!    shape, event-timed.
//! 3. Modes: batches/s of Sync (depth 1, no cache), Async (depth K, no cache) and Oac (depth K,
//!    cache) on a synthetic table in pinned host memory (a minimal add step) and, when the file
//!    exists, on WordNet 3.0 with the ComplEx step and with the chunked step (cuBLAS) at the
//!    throughput config's shape; GPU busy = compute-stream time / wall time.
//!
//! Prints markdown tables for BENCHMARKS.md. Without a usable CUDA device (driver, NVRTC, a
//! device) it prints `gpu_bench: no CUDA device: <reason>` on stderr and exits 1. `--check`
//! only opens the device, compiles and loads every kernel module, and prints the device's name,
//! its rated memory bandwidth and a short D2D copy: the first GPU step of
//! `gpu/run-gpu-checks.sh`.
//!
//! "Fraction of memory bandwidth" is defined in [`ordo_gpu::bandwidth`]: of the D2D copy
//! measured in the same run, and of the rated figure when the driver reports it.
//!
//! ```text
//! cargo run --release -p ordo-gpu --bin gpu_bench -- [--check] [--quick] [--table-rows N] [--width W]
//!     [--batch-rows R] [--batches B] [--depth K] [--dim D] [--positives P] [--negatives N]
//!     [--wordnet PATH]
//! ```

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use ordo::engine::SubmitError;
use ordo::engine::{AsyncWrite, Mode};
use ordo::row_store::RowStore;
use ordo_gpu::bandwidth::{self, D2dCopy};
use ordo_gpu::cache::{CacheConfig, CudaValidationCache, DeviceBatch};
use ordo_gpu::chunked_device::ChunkedDeviceModel;
use ordo_gpu::kge::{
    ChunkLimits, ChunkedBatch, ChunkedIds, ChunkedKernels, DeviceKgeBatch, KgeBatch, KgeHyper,
    KgeKernels, KgeModel, KgeShape,
};
use ordo_gpu::pipeline::{
    DeviceModel, KgeDeviceModel, Pipeline, PipelineConfig, Streams, on_device,
};
use ordo_gpu::queue::run_over;
use ordo_gpu::workload::{
    Rng, Triples, chunked_kge_batches, kge_batches, load_tsv_triples, random_kge_batch,
};
use ordo_gpu::{Gpu, GpuError, kernels};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
struct Args {
    table_rows: usize,
    width: usize,
    batch_rows: usize,
    batches: usize,
    depth: usize,
    dim: usize,
    positives: usize,
    negatives: usize,
    wordnet: PathBuf,
    copy_mib: usize,
    check: bool,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut a = Args {
            table_rows: 10_000_000,
            width: 128,
            batch_rows: 4096,
            batches: 400,
            depth: 4,
            dim: 128,
            positives: 1000,
            negatives: 64,
            wordnet: PathBuf::from("../shared/datasets/wordnet30/train.txt"),
            copy_mib: 1024,
            check: false,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--quick" {
                (a.table_rows, a.batches, a.copy_mib) = (1_000_000, 100, 256);
                continue;
            }
            if flag == "--check" {
                a.check = true;
                continue;
            }
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            if flag == "--wordnet" {
                a.wordnet = PathBuf::from(value);
                continue;
            }
            let n: usize = value.parse().map_err(|_| format!("{flag}: not a number: {value}"))?;
            match flag.as_str() {
                "--table-rows" => a.table_rows = n,
                "--width" => a.width = n,
                "--batch-rows" => a.batch_rows = n,
                "--batches" => a.batches = n,
                "--depth" => a.depth = n.max(1),
                "--dim" => a.dim = n,
                "--positives" => a.positives = n,
                "--negatives" => a.negatives = n,
                "--copy-mib" => a.copy_mib = n,
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(a)
    }
}

fn main() {
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            std::process::exit(2);
        }
    };
    // No device is a failure, not a skip: a run that measured nothing must not look like one
    // that did (the GPU machine's script stops here, with the reason).
    if let Some(reason) = ordo_gpu::cuda_unavailable_reason() {
        eprintln!("gpu_bench: no CUDA device: {reason}");
        std::process::exit(1);
    }
    let done = if args.check { check(&args) } else { run(&args) };
    if let Err(e) = done {
        eprintln!("gpu_bench: {e}");
        std::process::exit(1);
    }
}

fn timed(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    f: impl FnOnce() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    bandwidth::elapsed_ms(gpu, stream, f)
}

/// The denominators of the kernels' fractions: the D2D copy measured now and, when the driver
/// reports it, the card's rated memory bandwidth.
struct Ceilings {
    d2d: D2dCopy,
    rated: Option<f64>,
}

impl Ceilings {
    /// "x% | y%" (or "—" for the rated share when it is unknown) of `gbps`.
    fn shares(&self, gbps: f64) -> String {
        let rated = self.rated.map_or("—".to_owned(), |r| format!("{:.0}%", 100.0 * gbps / r));
        format!("{:.0}% | {rated}", 100.0 * self.d2d.fraction(gbps))
    }
}

fn rated_text(rated: Option<f64>) -> String {
    rated.map_or("not reported by the driver".to_owned(), |r| format!("{r:.1} GB/s"))
}

fn ceilings(gpu: &Gpu, args: &Args) -> Result<Ceilings, GpuError> {
    let reps = 10;
    let d2d = bandwidth::measure_d2d_copy(gpu, args.copy_mib, reps)?;
    let rated = bandwidth::device_rated_gbps(gpu);

    let s = gpu.new_stream()?;
    let pn = (args.copy_mib.min(512)) * (1 << 20) / 4;
    // SAFETY: uninitialised pinned memory, only copied (its bytes are never interpreted).
    let h_in = unsafe { gpu.context().alloc_pinned::<f32>(pn) }?;
    // SAFETY: as above; written by the D2H copy before anything reads it.
    let mut h_out = unsafe { gpu.context().alloc_pinned_with_flags::<f32>(pn, 0) }?;
    let mut d: CudaSlice<f32> = s.alloc_zeros(pn)?;
    s.memcpy_htod(&h_in, &mut d)?;
    let ms_h2d = timed(gpu, &s, || {
        for _ in 0..reps {
            s.memcpy_htod(&h_in, &mut d)?;
        }
        Ok(())
    })?;
    let ms_d2h = timed(gpu, &s, || {
        for _ in 0..reps {
            s.memcpy_dtoh(&d, &mut h_out)?;
        }
        Ok(())
    })?;
    let pbytes = (pn * 4 * reps) as f64;
    println!("## Ceilings ({})\n", gpu.name());
    println!("| ceiling | GB/s |\n|---|---|");
    println!("| rated memory bandwidth (memory clock × bus width × 2) | {} |", rated_text(rated));
    println!("| D2D cuMemcpyDtoD ({} MiB, read+write) | {:.1} |", d2d.bytes >> 20, d2d.memcpy_gbps);
    println!("| D2D float4 copy kernel (read+write) | {:.1} |", d2d.kernel_gbps);
    println!("| H2D pinned ({} MiB) | {:.1} |", (pn * 4) >> 20, bandwidth::gbps(pbytes, ms_h2d));
    println!("| D2H pinned | {:.1} |\n", bandwidth::gbps(pbytes, ms_d2h));
    println!(
        "Fractions below are of the better D2D copy measured above ({:.1} GB/s) and of the rated \
         figure.\n",
        d2d.ceiling_gbps()
    );
    Ok(Ceilings { d2d, rated })
}

/// `--check`: the gate passed; open the device, print what the bench's fractions are of, and
/// load every kernel module (NVRTC + the driver's JIT), so a machine that cannot run the kernels
/// fails here, first, with the reason.
fn check(args: &Args) -> Result<(), GpuError> {
    let gpu = Gpu::open(0)?;
    let rated = bandwidth::device_rated_gbps(&gpu);
    for (name, src, names) in kernels::MODULES {
        kernels::load(&gpu, name, src, names)?;
    }
    let d2d = bandwidth::measure_d2d_copy(&gpu, args.copy_mib.min(256), 3)?;
    println!("device 0: {}", gpu.name());
    println!("kernel modules compiled and loaded (NVRTC)");
    println!("rated memory bandwidth: {}", rated_text(rated));
    println!(
        "D2D copy ({} MiB): cuMemcpyDtoD {:.1} GB/s, float4 kernel {:.1} GB/s",
        d2d.bytes >> 20,
        d2d.memcpy_gbps,
        d2d.kernel_gbps
    );
    Ok(())
}

fn cache_kernels(gpu: &Gpu, args: &Args, ceil: &Ceilings) -> Result<(), GpuError> {
    let s = gpu.new_stream()?;
    let (r, w) = (args.batch_rows, args.width);
    let config = CacheConfig::for_in_flight(2 * args.depth, r, w)?;
    let mut cache = CudaValidationCache::new(gpu, s.clone(), config)?;
    let mut rng = Rng::new(1);
    let rows = rng.distinct_rows(r, args.table_rows as u64);
    let values: Vec<f32> = (0..r * w).map(|_| rng.uniform(-1.0, 1.0)).collect();
    // Every batch row read at version 0, so every cached row (inserted at ts ≥ 0, version ≥ 1)
    // is newer: validate replaces every row.
    let mut b = DeviceBatch::upload(&s, &rows, &vec![0; r], &values, w)?;
    cache.insert(&b, 0)?;
    let iters = 200u64;
    // Bytes each kernel must move per batch: a validated row is read from the cache and written
    // into the batch; an inserted row is read from the batch and written into the cache. The
    // table's keys and versions (16 bytes a row) are not counted.
    let row_bytes = (2 * r * w * 4) as f64;
    let ms_validate = timed(gpu, &s, || {
        for _ in 0..iters {
            cache.validate(&mut b)?;
        }
        Ok(())
    })?;
    let ms_insert = timed(gpu, &s, || {
        for ts in 1..=iters {
            cache.insert(&b, ts)?;
        }
        Ok(())
    })?;
    let ms_all = timed(gpu, &s, || {
        for ts in iters + 1..=2 * iters {
            cache.evict(ts.saturating_sub(args.depth as u64))?;
            cache.validate(&mut b)?;
            cache.insert(&b, ts)?;
        }
        Ok(())
    })?;
    println!("## Kernels\n");
    println!(
        "| kernel | per batch | effective GB/s | of measured D2D copy | of rated |\n|---|---|---|---|---|"
    );
    let shape = format!("{r} rows × {w} floats, all hits");
    for (name, bytes, ms) in [
        ("validate", row_bytes, ms_validate),
        ("insert", row_bytes, ms_insert),
        ("evict+validate+insert", 2.0 * row_bytes, ms_all),
    ] {
        let bw = bandwidth::gbps(bytes * iters as f64, ms);
        println!(
            "| {name} ({shape}) | {:.1} µs | {bw:.1} | {} |",
            ms * 1e3 / iters as f64,
            ceil.shares(bw)
        );
    }

    for model in [KgeModel::DistMult, KgeModel::ComplEx] {
        let shape = KgeShape { model, dim: args.dim, relations: 11 };
        let mut rng = Rng::new(2);
        let ents = (args.positives * 2).max(2);
        let batch = random_kge_batch(&mut rng, args.positives, args.negatives, ents, 11);
        let mut k = KgeKernels::new(gpu, s.clone(), shape, &rng.params(11, args.dim))?;
        let db = DeviceKgeBatch::upload(&s, &shape, &batch)?;
        let mut rows = s.clone_htod(&rng.params(ents, args.dim))?;
        let hyper = KgeHyper { eps: 1e-8, ..KgeHyper::new(0.01) };
        k.step(&db, &mut rows, &hyper)?;
        let iters = 50;
        let ms = timed(gpu, &s, || {
            for _ in 0..iters {
                k.step(&db, &mut rows, &hyper)?;
            }
            Ok(())
        })?;
        let per = ms / f64::from(iters);
        println!(
            "| KGE step {model:?} dim {} ({} × (1+{}) scores, {ents} rows) | {:.1} µs | {:.2} M scores/s | — | — |",
            args.dim,
            args.positives,
            args.negatives,
            per * 1e3,
            batch.triples.len() as f64 / (per * 1e-3) / 1e6
        );
    }
    chunked_step(gpu, &s)?;
    println!();
    Ok(())
}

/// The chunked step ([`ChunkedKernels`]) at the throughput config's shape
/// (`train/configs/wordnet30-complex-throughput.toml`: ComplEx dim 100, 1000 positives, chunks
/// of 50, 100 negatives per chunk side; WordNet's 18 relations; about 6000 rows a batch):
/// event-timed per batch (the ids' upload from pinned memory, the kernels, the products and
/// the losses' download), and the host's time to enqueue it.
fn chunked_step(gpu: &Gpu, s: &Arc<CudaStream>) -> Result<(), GpuError> {
    let (dim, relations) = (100, 18);
    let limits =
        ChunkLimits { max_positives: 1000, chunk: 50, negatives: 100, max_rows: 6000, relations };
    let shape = KgeShape { model: KgeModel::ComplEx, dim, relations };
    let mut rng = Rng::new(7);
    let row = |rng: &mut Rng| rng.below(limits.max_rows as u64) as u32;
    let positives = (0..limits.max_positives)
        .map(|_| [row(&mut rng), rng.below(relations as u64) as u32, row(&mut rng)])
        .collect();
    let side_negatives = limits.negative_slots();
    let batch = ChunkedBatch {
        rows: limits.max_rows,
        positives,
        chunk: limits.chunk,
        negatives: limits.negatives,
        chunk_negatives: (0..side_negatives).map(|_| row(&mut rng)).collect(),
    };
    let ids = ChunkedIds::build(&batch, &shape, &limits)?;
    let rel = rng.params(relations, dim);
    let mut k = ChunkedKernels::new(gpu, s.clone(), shape, limits, &rel)?;
    let mut rows = s.clone_htod(&rng.params(limits.max_rows, dim))?;
    let hyper = KgeHyper { eps: 1e-8, ..KgeHyper::new(0.01) };
    k.step(&ids, &mut rows, &hyper)?;
    s.synchronize()?;
    let iters = 50u32;
    let host = Instant::now();
    let mut enqueue = 0.0;
    let ms = timed(gpu, s, || {
        for _ in 0..iters {
            let t = Instant::now();
            k.step(&ids, &mut rows, &hyper)?;
            enqueue += t.elapsed().as_secs_f64();
        }
        Ok(())
    })?;
    s.synchronize()?;
    let wall = host.elapsed().as_secs_f64();
    let per = ms / f64::from(iters);
    println!(
        "| KGE chunked step ComplEx dim {dim} (1000 positives, chunks of 50, 100 negatives a side, {} rows) | {:.1} µs | {:.2} M scores/s | host enqueue {:.1} µs | wall {:.1} µs |",
        limits.max_rows,
        per * 1e3,
        (2 * 1000 * 101) as f64 / (per * 1e-3) / 1e6,
        enqueue * 1e6 / f64::from(iters),
        wall * 1e6 / f64::from(iters)
    );
    Ok(())
}

/// The minimal device step of the synthetic-table runs: add a constant to every float.
struct AddStep {
    f: CudaFunction,
    width: usize,
}

impl ordo::engine::Model for AddStep {
    type Data = ();
    type Error = GpuError;
    fn row_width(&self) -> usize {
        self.width
    }
    fn step(&mut self, _: &(), rows: &mut ordo::engine::BatchRows<'_>) -> Result<(), GpuError> {
        rows.values_mut().iter_mut().for_each(|v| *v += 1e-3);
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        Vec::new()
    }
}

impl DeviceModel for AddStep {
    fn step_on_device(
        &mut self,
        streams: &Streams,
        _: &(),
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<GpuError>> {
        let n = (batch.rows().len() * batch.width()) as u64;
        let delta = 1e-3f32;
        let cfg =
            LaunchConfig { grid_dim: (512, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut l = streams.compute.launch_builder(&self.f);
        l.arg(batch.values_mut()).arg(&n).arg(&delta);
        // SAFETY: `add_f32(float*, n, delta)`: the batch's values hold rows × width = n floats.
        unsafe { l.launch(cfg) }.map_err(|e| on_device(e.into()))?;
        Ok(())
    }
}

struct ModeRow {
    name: &'static str,
    batches_per_s: f64,
    busy: f64,
    replaced: usize,
    max_gap: u64,
}

fn print_modes(title: &str, rows: &[ModeRow]) {
    let get = |n: &str| rows.iter().find(|r| r.name == n).map_or(f64::NAN, |r| r.batches_per_s);
    let (sync, asy, oac) = (get("Sync"), get("Async"), get("Oac"));
    println!("## Modes: {title}\n");
    println!(
        "| mode | batches/s | GPU busy | rows replaced | largest gap |\n|---|---|---|---|---|"
    );
    for r in rows {
        println!(
            "| {} | {:.1} | {:.0}% | {} | {} |",
            r.name,
            r.batches_per_s,
            100.0 * r.busy,
            r.replaced,
            r.max_gap
        );
    }
    println!(
        "\nOac / Async = {:.2} (goal ≥ 0.95), Oac / Sync = {:.2} (goal ≥ 1.8)\n",
        oac / asy,
        oac / sync
    );
}

/// Run `batches` in the three modes over a store filled by `init` (rows of `width` floats),
/// each through the engine's driver ([`run_over`]).
fn modes<S: DeviceModel>(
    gpu: &Gpu,
    args: &Args,
    width: usize,
    init: &dyn Fn(usize, usize) -> f32,
    batches: &[(Vec<u64>, S::Data)],
    make_step: &dyn Fn(&Arc<CudaStream>) -> Result<S, GpuError>,
) -> Result<Vec<ModeRow>, GpuError>
where
    S::Data: Clone,
{
    let table_rows = args.table_rows;
    let max_rows = batches.iter().map(|b| b.0.len()).max().unwrap_or(1);
    let mut out = Vec::new();
    let k = args.depth;
    // (mode, batches in flight on the device, batches read ahead by the host)
    let modes = [
        ("Sync", Mode::Sync, 1, 1),
        ("Async", Mode::Async(AsyncWrite::Overwrite), k, k),
        ("Oac", Mode::Oac, k, k),
    ];
    for (name, mode, depth, ahead) in modes {
        let store = RowStore::from_fn(table_rows, width, init);
        let cache = (mode == Mode::Oac)
            .then(|| CacheConfig::for_in_flight(2 * depth + ahead + 2, max_rows, width))
            .transpose()?;
        let config = PipelineConfig { depth, max_rows, width, cache, timing: true };
        let compute = gpu.new_stream()?;
        let mut model = make_step(&compute)?;
        let mut p = Pipeline::new(gpu, config, compute)?;
        let start = Instant::now();
        let stats = run_over(&mut p, &mut model, mode, &store, batches, ahead)?;
        let wall = start.elapsed().as_secs_f64();
        out.push(ModeRow {
            name,
            batches_per_s: stats.batches as f64 / wall,
            busy: p.compute_busy_ms() * 1e-3 / wall,
            replaced: stats.replaced,
            max_gap: stats.max_gap,
        });
    }
    Ok(out)
}

fn run(args: &Args) -> Result<(), GpuError> {
    let gpu = Gpu::open(0)?;
    let ceil = ceilings(&gpu, args)?;
    cache_kernels(&gpu, args, &ceil)?;

    let mut rng = Rng::new(3);
    let batches: Vec<(Vec<u64>, ())> = (0..args.batches)
        .map(|_| (rng.distinct_rows(args.batch_rows, args.table_rows as u64), ()))
        .collect();
    let f = kernels::load(&gpu, "bench.cu", kernels::BENCH_SRC, &kernels::BENCH_KERNELS)?;
    let rows = modes(&gpu, args, args.width, &|_, _| 0.5, &batches, &|_| {
        Ok(AddStep { f: f[1].clone(), width: args.width })
    })?;
    let title = format!(
        "synthetic table {} rows × {} floats in pinned memory, {} batches of {} rows, depth {}",
        args.table_rows, args.width, args.batches, args.batch_rows, args.depth
    );
    print_modes(&title, &rows);

    match load_tsv_triples(&args.wordnet) {
        Err(e) => println!("(WordNet skipped: {}: {e})", args.wordnet.display()),
        Ok(kg) => {
            let batches: Vec<(Vec<u64>, KgeBatch)> =
                kge_batches(&kg, args.positives, args.negatives, 4);
            let shape =
                KgeShape { model: KgeModel::ComplEx, dim: args.dim, relations: kg.relations };
            let rel = Rng::new(5).params(kg.relations, args.dim);
            let wargs = Args { table_rows: kg.entities, ..args.clone() };
            let params = Rng::new(6).params(kg.entities, args.dim);
            let init = |r: usize, c: usize| params[r * 2 * args.dim + c];
            let hyper = KgeHyper::new(0.1);
            let rows = modes(&gpu, &wargs, 2 * args.dim, &init, &batches, &|s| {
                Ok(KgeDeviceModel::new(KgeKernels::new(&gpu, s.clone(), shape, &rel)?, hyper))
            })?;
            let title = format!(
                "WordNet 3.0 train ({} triples, {} entities), ComplEx dim {}, {} positives × {} negatives per batch, depth {}",
                kg.triples.len(),
                kg.entities,
                args.dim,
                args.positives,
                args.negatives,
                args.depth
            );
            print_modes(&title, &rows);
            chunked_modes(&gpu, args, &kg)?;
        }
    }
    Ok(())
}

/// Sync, Async and Oac on WordNet with the chunked step ([`ChunkedDeviceModel`]) at the
/// throughput config's shape (ComplEx dim 100, chunks of 50, 100 negatives a side), the
/// batches' ids packed before the run, as a loader would.
fn chunked_modes(gpu: &Gpu, args: &Args, kg: &Triples) -> Result<(), GpuError> {
    let dim = 100;
    let shape = KgeShape { model: KgeModel::ComplEx, dim, relations: kg.relations };
    let (limits, batches) = chunked_kge_batches(kg, &shape, (args.positives, 50, 100), 4)?;
    let rel = Rng::new(5).params(kg.relations, dim);
    let params = Rng::new(6).params(kg.entities, dim);
    let init = |r: usize, c: usize| params[r * 2 * dim + c];
    let wargs = Args { table_rows: kg.entities, ..args.clone() };
    let hyper = KgeHyper::new(0.1);
    let rows = modes(gpu, &wargs, 2 * dim, &init, &batches, &|s| {
        let kernels = ChunkedKernels::new(gpu, s.clone(), shape, limits, &rel)?;
        Ok(ChunkedDeviceModel { kernels, hyper })
    })?;
    let title = format!(
        "WordNet 3.0 train, the chunked step (cuBLAS): ComplEx dim {dim}, {} positives in chunks of 50, 100 negatives a side, ≤ {} rows a batch, depth {}",
        args.positives, limits.max_rows, args.depth
    );
    print_modes(&title, &rows);
    Ok(())
}
