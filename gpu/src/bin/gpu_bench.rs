//! gpu_bench: the device stage's numbers on a CUDA GPU, every figure next to the ceiling or the
//! baseline measured in the same run.
//!
//! 1. Ceilings: device-to-device copy bandwidth (cuMemcpyDtoD and a float4 copy kernel), pinned
//!    host→device and device→host bandwidth.
//! 2. Kernels: evict + validate + insert of the validation cache (every row hits, so each moves
//!    its row four times) as a fraction of the D2D ceiling; the KGE step (ComplEx) in steps/s.
//! 3. Modes: batches/s of Sync (depth 1, no cache), Async (depth K, no cache) and Oac (depth K,
//!    cache) on a synthetic table in pinned host memory (a minimal add step) and, when the file
//!    exists, on WordNet 3.0 with the ComplEx step; GPU busy = compute-stream time / wall time.
//!
//! Prints markdown tables for BENCHMARKS.md. Without a CUDA device it prints
//! "skipped: no CUDA device" and exits 0.
//!
//! ```text
//! cargo run --release -p ordo-gpu --bin gpu_bench -- [--quick] [--table-rows N] [--width W]
//!     [--batch-rows R] [--batches B] [--depth K] [--dim D] [--positives P] [--negatives N]
//!     [--wordnet PATH]
//! ```

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use ordo::engine::{AsyncWrite, Mode};
use ordo::store::RowStore;
use ordo_gpu::cache::{CacheConfig, CudaValidationCache, DeviceBatch};
use ordo_gpu::kge::{DeviceKgeBatch, KgeBatch, KgeHyper, KgeKernels, KgeModel, KgeShape};
use ordo_gpu::pipeline::{DeviceStep, KgeDeviceStep, Pipeline, PipelineConfig, Streams};
use ordo_gpu::queue::run_over;
use ordo_gpu::workload::{Rng, kge_batches, load_tsv_triples, random_kge_batch};
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
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "--quick" {
                (a.table_rows, a.batches, a.copy_mib) = (1_000_000, 100, 256);
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
    if !ordo_gpu::cuda_available() {
        println!("skipped: no CUDA device");
        eprintln!("({})", ordo_gpu::cuda_unavailable_reason().unwrap_or("unknown"));
        return;
    }
    let args = match Args::parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("gpu_bench: {e}");
        std::process::exit(1);
    }
}

/// Milliseconds of the work `f` queues on `stream`, between two timing events.
fn timed(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    f: impl FnOnce() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let (start, end): (CudaEvent, CudaEvent) =
        (gpu.context().new_event(flags)?, gpu.context().new_event(flags)?);
    start.record(stream)?;
    f()?;
    end.record(stream)?;
    Ok(f64::from(start.elapsed_ms(&end)?))
}

fn gbps(bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9
}

struct Ceilings {
    d2d: f64,
}

fn ceilings(gpu: &Gpu, args: &Args) -> Result<Ceilings, GpuError> {
    let s = gpu.new_stream()?;
    let n = args.copy_mib * (1 << 20) / 4;
    let reps = 10;
    let src: CudaSlice<f32> = s.alloc_zeros(n)?;
    let mut dst: CudaSlice<f32> = s.alloc_zeros(n)?;
    s.memcpy_dtod(&src, &mut dst)?; // warm-up
    let ms = timed(gpu, &s, || {
        for _ in 0..reps {
            s.memcpy_dtod(&src, &mut dst)?;
        }
        Ok(())
    })?;
    let bytes = (2 * n * 4 * reps) as f64; // read + write
    let d2d_memcpy = gbps(bytes, ms);

    let f = kernels::load(gpu, "bench.cu", kernels::BENCH_SRC, &kernels::BENCH_KERNELS)?;
    let n4 = (n / 4) as u64;
    let cfg = LaunchConfig { grid_dim: (1024, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let launch_copy = |dst: &mut CudaSlice<f32>| -> Result<(), GpuError> {
        let mut l = s.launch_builder(&f[0]);
        l.arg(&src).arg(dst).arg(&n4);
        // SAFETY: `copy_f32(const float4*, float4*, n4)`: both buffers hold 4·n4 floats.
        unsafe { l.launch(cfg) }?;
        Ok(())
    };
    launch_copy(&mut dst)?;
    let ms = timed(gpu, &s, || {
        for _ in 0..reps {
            launch_copy(&mut dst)?;
        }
        Ok(())
    })?;
    let d2d_kernel = gbps(bytes, ms);

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
    println!("| D2D cuMemcpyDtoD ({} MiB, read+write) | {d2d_memcpy:.1} |", args.copy_mib);
    println!("| D2D float4 copy kernel (read+write) | {d2d_kernel:.1} |");
    println!("| H2D pinned ({} MiB) | {:.1} |", (pn * 4) >> 20, gbps(pbytes, ms_h2d));
    println!("| D2H pinned | {:.1} |\n", gbps(pbytes, ms_d2h));
    Ok(Ceilings { d2d: d2d_memcpy.max(d2d_kernel) })
}

fn cache_kernels(gpu: &Gpu, args: &Args, ceil: &Ceilings) -> Result<(), GpuError> {
    let s = gpu.new_stream()?;
    let (r, w) = (args.batch_rows, args.width);
    let config = CacheConfig::for_in_flight(2 * args.depth, r, w)?;
    let mut cache = CudaValidationCache::new(gpu, s.clone(), config)?;
    let mut rng = Rng::new(1);
    let rows = rng.distinct_rows(r, args.table_rows as u64);
    let values: Vec<f32> = (0..r * w).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut b = DeviceBatch::upload(&s, &rows, &vec![0; r], &values, w)?;
    cache.insert(&b, 0)?;
    let iters = 200u64;
    let ms = timed(gpu, &s, || {
        for ts in 1..=iters {
            cache.evict(ts.saturating_sub(args.depth as u64))?;
            cache.validate(&mut b)?;
            cache.insert(&b, ts)?;
        }
        Ok(())
    })?;
    // Every row hits: validate reads the cached row and writes the batch row, insert reads the
    // batch row and writes the cached row.
    let bytes = (4 * r * w * 4) as f64 * iters as f64;
    let bw = gbps(bytes, ms);
    println!("## Kernels\n");
    println!("| kernel | per batch | effective GB/s | of D2D ceiling |\n|---|---|---|---|");
    println!(
        "| evict+validate+insert ({r} rows × {w} floats, all hits) | {:.1} µs | {bw:.1} | {:.0}% |",
        ms * 1e3 / iters as f64,
        100.0 * bw / ceil.d2d
    );

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
            "| KGE step {model:?} dim {} ({} × (1+{}) scores, {ents} rows) | {:.1} µs | {:.2} M scores/s | — |",
            args.dim,
            args.positives,
            args.negatives,
            per * 1e3,
            batch.triples.len() as f64 / (per * 1e-3) / 1e6
        );
    }
    println!();
    Ok(())
}

/// The minimal device step of the synthetic-table runs: add a constant to every float.
struct AddStep {
    f: CudaFunction,
}

impl DeviceStep for AddStep {
    type Data = ();
    fn step(&mut self, streams: &Streams, _: &(), batch: &mut DeviceBatch) -> Result<(), GpuError> {
        let n = (batch.rows().len() * batch.width()) as u64;
        let delta = 1e-3f32;
        let cfg =
            LaunchConfig { grid_dim: (512, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut l = streams.compute.launch_builder(&self.f);
        l.arg(batch.values_mut()).arg(&n).arg(&delta);
        // SAFETY: `add_f32(float*, n, delta)`: the batch's values hold rows × width = n floats.
        unsafe { l.launch(cfg) }?;
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
fn modes<S: DeviceStep>(
    gpu: &Gpu,
    args: &Args,
    width: usize,
    init: &dyn Fn(usize, usize) -> f32,
    batches: &[(Vec<u64>, S::Data)],
    make_step: &dyn Fn(&Arc<CudaStream>) -> Result<S, GpuError>,
) -> Result<Vec<ModeRow>, GpuError>
where
    S::Data: Clone + Send + Sync + 'static,
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
        let mut p = Pipeline::new(gpu, config, make_step)?;
        let start = Instant::now();
        let stats = run_over(&mut p, mode, &store, batches, ahead)?;
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
    let rows =
        modes(&gpu, args, args.width, &|_, _| 0.5, &batches, &|_| Ok(AddStep { f: f[1].clone() }))?;
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
                Ok(KgeDeviceStep::new(KgeKernels::new(&gpu, s.clone(), shape, &rel)?, hyper))
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
        }
    }
    Ok(())
}
