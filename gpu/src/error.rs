//! The crate's error type for everything that touches CUDA.

use crate::cache::CacheError;
use crate::kge::KgeError;
use thiserror::Error;

/// Why a CUDA operation could not be done. Input errors of the cache and the KGE kernels are
/// reported before anything is launched, so the device state is unchanged when one is returned.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum GpuError {
    /// No CUDA driver library, no NVRTC library, or no device on this machine.
    #[error("no CUDA device: {reason}")]
    NoDevice {
        /// Which check failed.
        reason: &'static str,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC rejected one of the crate's kernel sources (a bug in the crate, or an NVRTC that is
    /// too old for the source).
    #[error("NVRTC failed to compile kernel module {module}: {log}")]
    Compile {
        /// The kernel module (file name in `src/kernels/`).
        module: &'static str,
        /// NVRTC's log, or its error.
        log: String,
    },
    /// A bad argument to, or a full, validation cache.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A bad KGE batch or parameter buffer.
    #[error(transparent)]
    Kge(#[from] KgeError),
    /// A buffer size that does not fit the device's index types or the host's address space.
    #[error("buffer of {elems} elements is too large for {what}")]
    TooLarge {
        /// What the buffer is for.
        what: &'static str,
        /// Requested number of elements.
        elems: usize,
    },
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    /// The run needs more device memory than is free: refused before anything is allocated.
    #[error(
        "the run needs about {} MiB of device memory and {} MiB are free ({what})",
        need / (1 << 20),
        free / (1 << 20)
    )]
    DeviceMemory {
        /// Bytes the run's buffers need (the estimate).
        need: u64,
        /// Bytes free on the device.
        free: u64,
        /// What the estimate is made of.
        what: String,
    },
    /// A pipeline call out of order (e.g. collecting a batch that was never submitted).
    #[error("pipeline misuse: {0}")]
    Pipeline(&'static str),
    /// The engine driving a queue stopped or refused the run ([`crate::queue::run_over`]).
    #[error("engine run over the queue failed")]
    Engine(#[source] Box<ordo::engine::EngineError>),
}

impl From<ordo::engine::EngineError> for GpuError {
    fn from(e: ordo::engine::EngineError) -> Self {
        GpuError::Engine(Box::new(e))
    }
}
