//! The CUDA C sources of the kernels and their run-time compilation.
//!
//! **Why NVRTC at run time, not PTX from nvcc at build time:** the workspace must build and
//! test on machines without the CUDA toolkit (cudarc loads the driver and NVRTC with
//! `fallback-dynamic-loading`), and a build script that needs nvcc would break that. The sources
//! in `src/kernels/*.cu` are embedded with `include_str!` and compiled once per [`Gpu`] when a
//! kernel set is created; the PTX is JIT-compiled by the driver for the device at load time.
//! The cost is a few hundred milliseconds at start-up, paid once.

use crate::cuda_context::Gpu;
use crate::error::GpuError;
use cudarc::driver::CudaFunction;
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};

/// Source of the validation-cache kernels (`vc_validate`, `vc_insert`, `vc_evict`, `vc_rehash`).
pub const VALIDATION_CACHE_SRC: &str = include_str!("kernels/validation_cache.cu");

/// Source of the KGE kernels (`kge_scores`, `kge_loss`, `kge_entity_grad`,
/// `kge_relation_grad`, `kge_adagrad`).
pub const KGE_SRC: &str = include_str!("kernels/kge.cu");

/// Source of the chunked KGE step's kernels around its cuBLAS products (`kc_gather`,
/// `kc_row_loss`, `kc_query_back`, `kc_entity_update`, `kc_relation_update`; their host port is
/// `kge::chunked_step`).
pub const KGE_CHUNKED_SRC: &str = include_str!("kernels/kge_chunked.cu");

/// Source of the bench kernels: the bandwidth-ceiling copy (`copy_f32`) and a minimal device
/// step (`add_f32`).
pub const BENCH_SRC: &str = include_str!("kernels/bench.cu");

/// Kernel names of each module, as the Rust side launches them.
pub const VALIDATION_CACHE_KERNELS: [&str; 4] =
    ["vc_validate", "vc_insert", "vc_evict", "vc_rehash"];
/// See [`VALIDATION_CACHE_KERNELS`].
pub const KGE_KERNELS: [&str; 5] =
    ["kge_scores", "kge_loss", "kge_entity_grad", "kge_relation_grad", "kge_adagrad"];
/// See [`VALIDATION_CACHE_KERNELS`]; in launch order.
pub const KGE_CHUNKED_KERNELS: [&str; 5] =
    ["kc_gather", "kc_row_loss", "kc_query_back", "kc_entity_update", "kc_relation_update"];
/// See [`VALIDATION_CACHE_KERNELS`].
pub const BENCH_KERNELS: [&str; 2] = ["copy_f32", "add_f32"];

/// Every kernel module: its name (NVRTC's program name), its source and the kernels the Rust
/// side launches from it. The checks that need no GPU (the names below, the NVRTC compile in
/// `tests/nvrtc_compile.rs`) run over this one list.
pub const MODULES: [(&str, &str, &[&str]); 4] = [
    ("validation_cache", VALIDATION_CACHE_SRC, &VALIDATION_CACHE_KERNELS),
    ("kge", KGE_SRC, &KGE_KERNELS),
    ("kge_chunked", KGE_CHUNKED_SRC, &KGE_CHUNKED_KERNELS),
    ("bench", BENCH_SRC, &BENCH_KERNELS),
];

/// Compile `src` with NVRTC into PTX, with the options every kernel set is built with.
///
/// Options: IEEE-exact division and square root, no flush-to-zero, no fast math, so the
/// kernels' float results depend only on the source's operation order (see `kge.cu` for the
/// determinism argument). Needs only the NVRTC library, no driver or device: CI compiles every
/// source through this function (`tests/nvrtc_compile.rs`), so a kernel that NVRTC rejects fails
/// there, not first on a GPU machine.
pub fn compile(module: &'static str, src: &str) -> Result<Ptx, GpuError> {
    let opts = CompileOptions {
        ftz: Some(false),
        prec_div: Some(true),
        prec_sqrt: Some(true),
        use_fast_math: Some(false),
        name: Some(module.to_owned()),
        ..CompileOptions::default()
    };
    compile_ptx_with_opts(src, opts).map_err(|e| GpuError::Compile { module, log: compile_log(&e) })
}

/// Compile `src` ([`compile`]), load it into `gpu`'s context and return the named kernels in
/// order.
pub fn load(
    gpu: &Gpu,
    module: &'static str,
    src: &str,
    names: &[&str],
) -> Result<Vec<CudaFunction>, GpuError> {
    let m = gpu.context().load_module(compile(module, src)?)?;
    names.iter().map(|n| Ok(m.load_function(n)?)).collect()
}

fn compile_log(e: &cudarc::nvrtc::CompileError) -> String {
    match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the Rust side launches is defined, `extern "C"`, in its source — a check that
    /// runs without NVRTC (a misspelt name would otherwise only fail on a GPU machine).
    #[test]
    fn every_launched_kernel_is_defined_in_its_source() {
        for (_, src, names) in MODULES {
            for name in names {
                let decl = format!("extern \"C\" __global__ void {name}(");
                assert!(src.contains(&decl), "{name} is not defined as a kernel");
            }
            assert_eq!(
                src.matches("__global__").count(),
                names.len(),
                "a kernel in the source is not launched from Rust"
            );
        }
    }
}
