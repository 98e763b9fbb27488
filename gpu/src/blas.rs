//! cuBLAS for the KGE step in the CPU step's shape ([`crate::kge::chunked_step`] is its host
//! port): the three matrix products of one chunk side, over all chunks at once as strided-batched
//! GEMMs, set up so that the same inputs give the same bits (see `gpu/README.md`, "Bit-exact
//! on the GPU"): one handle bound to the compute stream, its own workspace allocated once, math
//! mode without TF32 or reduced-precision reductions, and fixed shapes (a short last chunk is
//! padded with zero rows to the full chunk, so every call has the same dimensions, leading
//! dimensions and strides). cuBLAS is loaded at run time like NVRTC (cudarc's `cublas` feature
//! with dynamic loading): a build without CUDA needs nothing.
//!
//! Layouts are row-major, per chunk: queries `Q` (`P × d`), negatives `N` (`n × d`), scores
//! and their gradients `S`, `G` (`P × n`); cuBLAS is column-major, so each product is taken on
//! the transposes (`Sᵀ = N·Qᵀ` and so on).

use crate::cuda_context::Gpu;
use crate::error::GpuError;
use cudarc::cublas::sys::{cublasMath_t, cublasOperation_t};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use std::sync::Arc;

/// The cuBLAS workspace each handle gets (cuBLAS's recommendation for Hopper).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// The fixed shape of one batch's chunk products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkShape {
    /// Chunks per batch (the GEMM batch count).
    pub chunks: usize,
    /// Positives per chunk (`P`; a short chunk is padded to it).
    pub positives: usize,
    /// Shared negatives per chunk side (`n`).
    pub negatives: usize,
    /// Embedding floats (`d`).
    pub dim: usize,
}

impl ChunkShape {
    /// Floats of all chunks' `Q` (`chunks × P × d`), `N` (`chunks × n × d`) and `S`
    /// (`chunks × P × n`).
    pub fn lens(&self) -> [usize; 3] {
        let (c, p, n, d) = (self.chunks, self.positives, self.negatives, self.dim);
        [c * p * d, c * n * d, c * p * n]
    }
}

/// A cuBLAS handle on the compute stream, set up for repeatable products.
#[derive(Debug)]
pub struct ChunkBlas {
    blas: CudaBlas,
    /// Owned for the handle's life: cuBLAS uses it instead of allocating its own.
    _workspace: CudaSlice<u8>,
}

/// `x` as cuBLAS's `int`.
fn int(x: usize, what: &'static str) -> Result<i32, GpuError> {
    i32::try_from(x).map_err(|_| GpuError::TooLarge { what, elems: x })
}

impl ChunkBlas {
    /// A handle on `compute` with its own workspace and no TF32 or reduced-precision
    /// reductions; [`GpuError::NoDevice`] when the cuBLAS library cannot be loaded.
    pub fn new(gpu: &Gpu, compute: Arc<CudaStream>) -> Result<Self, GpuError> {
        // SAFETY: `is_culib_present` only tries to dlopen cuBLAS; it calls no function.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoDevice { reason: "the cuBLAS library is not loadable" });
        }
        let _ = gpu;
        let workspace = compute.alloc_zeros::<u8>(WORKSPACE_BYTES)?;
        let blas = CudaBlas::new(compute.clone())?;
        {
            let (ptr, _record) = workspace.device_ptr(&compute);
            let handle = *blas.handle();
            // SAFETY: the handle is live; the workspace is a device allocation of
            // WORKSPACE_BYTES that outlives the handle (both owned by `Self`, the handle used
            // only on `compute`).
            let status = unsafe {
                cudarc::cublas::sys::cublasSetWorkspace_v2(
                    handle,
                    ptr as *mut std::ffi::c_void,
                    WORKSPACE_BYTES,
                )
            };
            status.result()?;
            let mode = cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
            // SAFETY: a live handle and a valid mode (default math, no reduced precision).
            unsafe { cudarc::cublas::sys::cublasSetMathMode(handle, mode) }.result()?;
        }
        Ok(ChunkBlas { blas, _workspace: workspace })
    }

    /// One strided-batched `sgemm` over the chunks, after checking every buffer's length.
    #[allow(clippy::too_many_arguments)]
    fn batched(
        &self,
        shape: &ChunkShape,
        (transa, transb): (cublasOperation_t, cublasOperation_t),
        (m, n, k): (usize, usize, usize),
        (lda, ldb, ldc): (usize, usize, usize),
        (a, b, c): (&CudaSlice<f32>, &CudaSlice<f32>, &mut CudaSlice<f32>),
        strides: [usize; 3],
    ) -> Result<(), GpuError> {
        for (buf, stride) in [(a.len(), strides[0]), (b.len(), strides[1]), (c.len(), strides[2])] {
            crate::cache::check_len("chunk product buffer", shape.chunks * stride, buf)?;
        }
        let gemm = GemmConfig {
            transa,
            transb,
            m: int(m, "gemm m")?,
            n: int(n, "gemm n")?,
            k: int(k, "gemm k")?,
            alpha: 1.0f32,
            lda: int(lda, "gemm lda")?,
            ldb: int(ldb, "gemm ldb")?,
            beta: 0.0f32,
            ldc: int(ldc, "gemm ldc")?,
        };
        let cfg = StridedBatchedConfig {
            gemm,
            batch_size: int(shape.chunks, "gemm batch")?,
            stride_a: strides[0] as i64,
            stride_b: strides[1] as i64,
            stride_c: strides[2] as i64,
        };
        // SAFETY: every buffer holds `chunks × stride` floats (checked above), and each
        // chunk's operand is an `m × k`, `k × n`, `m × n` (after the transposes) column-major
        // matrix with the given leading dimensions inside its stride.
        unsafe { self.blas.gemm_strided_batched(cfg, a, b, c) }?;
        Ok(())
    }

    /// Scores of every query against its chunk's negatives: `S = Q·Nᵀ` (`P × n` per chunk).
    pub fn scores(
        &self,
        shape: &ChunkShape,
        q: &CudaSlice<f32>,
        negatives: &CudaSlice<f32>,
        s: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let (p, n, d) = (shape.positives, shape.negatives, shape.dim);
        // Column-major: Sᵀ (n × P) = Nᵀ·Qᵀ with N stored d × n and Q stored d × P.
        let ops = (cublasOperation_t::CUBLAS_OP_T, cublasOperation_t::CUBLAS_OP_N);
        self.batched(shape, ops, (n, p, d), (d, d, n), (negatives, q, s), [n * d, p * d, p * n])
    }

    /// The queries' gradients from the negatives: `dQ = G·N` (`P × d` per chunk).
    pub fn query_grads(
        &self,
        shape: &ChunkShape,
        g: &CudaSlice<f32>,
        negatives: &CudaSlice<f32>,
        dq: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let (p, n, d) = (shape.positives, shape.negatives, shape.dim);
        // Column-major: dQᵀ (d × P) = Nᵀ (d × n, stored so) · Gᵀ (n × P, stored so).
        let ops = (cublasOperation_t::CUBLAS_OP_N, cublasOperation_t::CUBLAS_OP_N);
        self.batched(shape, ops, (d, p, n), (d, n, d), (negatives, g, dq), [n * d, p * n, p * d])
    }

    /// The negatives' gradients: `dN = Gᵀ·Q` (`n × d` per chunk).
    pub fn negative_grads(
        &self,
        shape: &ChunkShape,
        g: &CudaSlice<f32>,
        q: &CudaSlice<f32>,
        dn: &mut CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let (p, n, d) = (shape.positives, shape.negatives, shape.dim);
        // Column-major: dNᵀ (d × n) = Qᵀ (d × P, stored so) · G (P × n: Gᵀ stored n × P, T).
        let ops = (cublasOperation_t::CUBLAS_OP_N, cublasOperation_t::CUBLAS_OP_T);
        self.batched(shape, ops, (d, n, p), (d, n, d), (q, g, dn), [p * d, p * n, n * d])
    }
}
