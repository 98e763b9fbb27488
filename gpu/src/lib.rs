//! ordo-gpu: the engine's device stage on CUDA, loaded at run time through cudarc so the crate
//! builds and tests on machines without CUDA.
//!
//! How this crate fits with the others: `docs/ARCHITECTURE.md` in the repository; the terms
//! and the papers it cites: `docs/GLOSSARY.md` and `docs/PAPERS.md`.
//!
//! What is here (paper 000, §3):
//! * [`cache`]: the validation cache — row id → (ts, value slot) in an open-addressing table —
//!   with one orchestration ([`cache::ValidationCache`]) over two table backends: the CUDA
//!   kernels ([`cache::CudaTable`]) and a sequential Rust port of the same kernels
//!   ([`cache::HostTable`]); plus the plain reference ([`cache::ReferenceValidationCache`]) that
//!   defines the semantics both must match.
//! * [`kge`]: DistMult and ComplEx scoring, softmax cross-entropy gradients and Adagrad on
//!   entity rows and relation parameters: an f64 reference ([`kge::reference_step`]) and the
//!   CUDA kernels ([`kge::KgeKernels`]); and the step in the CPU step's shape, chunk products on
//!   cuBLAS with fixed-order kernels around them ([`kge::ChunkedKernels`]), whose host port
//!   and spec is [`kge::chunked_step`].
//! * [`pipeline`]: pinned staging buffers, separate H2D / compute / D2H streams ordered by
//!   events, so several batches are in flight: [`pipeline::Pipeline`], the engine's
//!   `DeviceQueue` for a [`pipeline::DeviceModel`]; [`pipeline::CudaDevice`] is the depth-1
//!   device with the step on the host.
//! * [`chunked_device`]: the chunked KGE step as the pipeline's device model, its data the
//!   batch's packed ids.
//! * [`queue`]: the pipeline's host twin ([`queue::SimQueue`]) and [`queue::run_over`], one
//!   epoch of the engine's driver over either.
//! * [`cache_device`]: the engine's device over a validation cache that is not the host's
//!   ([`cache_device::CacheDevice`]), written once for both tables below.
//! * [`sim_device`]: that device over the host port of the cache, for the engine on
//!   machines without a GPU (tests the device and the table algorithm inside the real engine).
//! * [`blas`]: cuBLAS (loaded at run time) set up for repeatable strided-batched products, the
//!   matrix products of the KGE step in the CPU step's shape.
//! * [`cuda_context`]: opening a CUDA context behind the gate of [`cuda_available`].
//! * [`bandwidth`]: the measured device-to-device copy (and the rated figure) that the kernels'
//!   effective bandwidth is reported as a fraction of.
//!
//! **Kernels are CUDA C** in `src/kernels/*.cu`, embedded with `include_str!` and compiled at
//! run time with NVRTC (see [`kernels`]), so neither nvcc nor the CUDA toolkit is needed to build.
//!
//! Everything that touches CUDA returns [`GpuError::NoDevice`] on a machine without a usable
//! driver and device; nothing here calls `CudaContext::new` before that gate.

#![warn(missing_docs)]

mod admission;
pub mod bandwidth;
pub mod blas;
mod buffers;
pub mod cache;
pub mod cache_device;
pub mod chunked_device;
pub mod cuda_context;
pub mod error;
pub mod kernels;
pub mod kge;
pub mod pipeline;
pub mod queue;
pub mod sim_device;
pub mod workload;

pub use cuda_context::{Gpu, cuda_available, cuda_unavailable_reason};
pub use error::GpuError;
