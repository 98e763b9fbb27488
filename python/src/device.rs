//! `device=` and `rows=`: where an engine's step runs and how it receives its rows, checked at
//! construction, before any thread starts.
//!
//! `"cpu"` (the default) is the engine as it always was. `"cuda"` / `"cuda:N"` is parsed and
//! checked in this order, each failure an `OrdoError` naming what is missing: PyTorch imports;
//! `torch.cuda.is_available()`; `N` is below `torch.cuda.device_count()`; `batch_rows=` is
//! given; the device buffers for batches of `batch_rows` rows fit in the GPU's free memory
//! (`torch.cuda.mem_get_info`), estimated as ordo-gpu's pipeline sizes them
//! ([`ordo_gpu::pipeline::PipelineConfig::device_bytes`], the trainer's own estimate); the wheel
//! was built with the `cuda` feature; the CUDA driver and NVRTC load. The CUDA data path itself
//! (rows gathered by the readers into pinned buffers, uploaded on a copy stream, the GPU
//! validation cache, the step's rows lent as a CUDA tensor) is not built yet, so an engine that
//! passes every check is then refused, saying so.

use crate::errors::OrdoError;
use ordo::engine::Mode;
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::pipeline::{PipelineConfig, check_fits};
use pyo3::prelude::*;

/// Where the step's rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    Cpu,
    /// The CUDA device of this index (as torch numbers them).
    Cuda(u32),
}

impl Device {
    /// `"cpu"`, `"cuda"` (device 0) or `"cuda:N"`; anything else is an `OrdoError`.
    pub(crate) fn parse(s: &str) -> PyResult<Self> {
        let malformed = || {
            OrdoError::new_err(format!(
                "device={s:?} is not a device: one of 'cpu', 'cuda', 'cuda:N' (N a GPU index)"
            ))
        };
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => {
                let n = s.strip_prefix("cuda:").ok_or_else(malformed)?;
                // Digits only: no sign, no spaces, no "0x".
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(malformed());
                }
                n.parse().map(Device::Cuda).map_err(|_| malformed())
            }
        }
    }

    /// As the user writes it.
    pub(crate) fn name(self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(n) => format!("cuda:{n}"),
        }
    }
}

/// How the step receives its rows (`rows=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowsAs {
    /// A numpy array (a copy of the rows, written back after the call): the CPU default.
    Numpy,
    /// A `torch.Tensor` over ordo's lent buffer, through DLPack (no copy between ordo and torch).
    Torch,
    /// ordo's lent buffer itself, an object with `__dlpack__` / `__dlpack_device__` that any
    /// framework's `from_dlpack` takes.
    Dlpack,
}

impl RowsAs {
    /// `rows=` for `device`: `None` is numpy on the CPU and torch on CUDA; numpy cannot hold
    /// device memory, so `"numpy"` with CUDA is refused. `"torch"` needs PyTorch to import.
    pub(crate) fn choose(py: Python<'_>, rows: Option<&str>, device: Device) -> PyResult<Self> {
        let rows_as = match (rows, device) {
            (None, Device::Cpu) | (Some("numpy"), Device::Cpu) => RowsAs::Numpy,
            (None, Device::Cuda(_)) | (Some("torch"), _) => RowsAs::Torch,
            (Some("dlpack"), _) => RowsAs::Dlpack,
            (Some("numpy"), Device::Cuda(_)) => {
                return Err(OrdoError::new_err(format!(
                    "rows='numpy' cannot hold rows on {}: use rows='torch' (or 'dlpack')",
                    device.name()
                )));
            }
            (Some(other), _) => {
                return Err(OrdoError::new_err(format!(
                    "rows={other:?} is not a kind of rows: one of 'numpy', 'torch', 'dlpack'"
                )));
            }
        };
        if rows_as == RowsAs::Torch {
            torch(py, "rows='torch'")?;
        }
        Ok(rows_as)
    }
}

/// PyTorch, or an `OrdoError` saying `what` needs it.
pub(crate) fn torch<'py>(py: Python<'py>, what: &str) -> PyResult<Bound<'py, PyModule>> {
    py.import("torch").map_err(|e| {
        OrdoError::new_err(format!("{what} needs PyTorch, which does not import: {e}"))
    })
}

/// The device buffers of an engine stepping batches of at most `batch_rows` rows of `width`
/// floats on a GPU, sized as the trainer's pipeline sizes them: `depth` staging slots (one in
/// `sync`) and, in `oac`, a validation cache for the batches the engine can have stamped past
/// the oldest outstanding one (`2 × depth` on the device, `depth` read ahead, 2 spare).
pub(crate) fn pipeline_config(
    mode: Mode,
    depth: usize,
    batch_rows: usize,
    width: usize,
) -> PyResult<PipelineConfig> {
    let depth = if mode == Mode::Sync { 1 } else { depth };
    let cache = (mode == Mode::Oac)
        .then(|| CacheConfig::for_in_flight(3 * depth + 2, batch_rows, width))
        .transpose()
        .map_err(|e| OrdoError::new_err(format!("batch_rows={batch_rows}: {e}")))?;
    Ok(PipelineConfig { depth, max_rows: batch_rows, width, cache, timing: false })
}

/// Refuse, with the estimate, batches of `batch_rows` rows whose device buffers do not fit in
/// `free` bytes (a tenth kept for the driver and torch's own allocations, as the trainer does).
pub(crate) fn check_device_memory(
    mode: Mode,
    depth: usize,
    batch_rows: usize,
    width: usize,
    free: u64,
) -> PyResult<u64> {
    let config = pipeline_config(mode, depth, batch_rows, width)?;
    let (staging, cache) = config.device_bytes();
    let need = staging.saturating_add(cache);
    let what = format!(
        "batches of {batch_rows} rows x {width} floats: {} staging slots {staging} B, validation cache {cache} B",
        config.depth
    );
    check_fits(need, free, what).map_err(|e| OrdoError::new_err(e.to_string()))?;
    Ok(need)
}

/// Everything `device` needs, checked before anything runs (see the module docs); `Ok` only
/// for the CPU. `batch_rows`: the most rows a batch has (over every table).
pub(crate) fn check(
    py: Python<'_>,
    device: Device,
    batch_rows: Option<usize>,
    mode: Mode,
    depth: usize,
    width: usize,
) -> PyResult<()> {
    let Device::Cuda(n) = device else {
        return Ok(());
    };
    let name = device.name();
    let torch = torch(py, &format!("device={name:?}"))?;
    let cuda = torch.getattr("cuda")?;
    if !cuda.call_method0("is_available")?.is_truthy()? {
        let version = torch.getattr("__version__")?;
        let built = torch.getattr("version")?.getattr("cuda")?;
        return Err(OrdoError::new_err(format!(
            "device={name:?}: torch sees no CUDA device (torch.cuda.is_available() is False; \
             torch {version}, built for CUDA {built})"
        )));
    }
    let count: u32 = cuda.call_method0("device_count")?.extract()?;
    if n >= count {
        return Err(OrdoError::new_err(format!(
            "device={name:?}: torch sees {count} CUDA device(s), numbered from 0"
        )));
    }
    let batch_rows = batch_rows.ok_or_else(|| {
        OrdoError::new_err(format!(
            "device={name:?} needs batch_rows=: the most rows a batch has (over every table), \
             to size the device buffers and check they fit before the run"
        ))
    })?;
    let (free, _total): (u64, u64) = cuda.call_method1("mem_get_info", (n,))?.extract()?;
    check_device_memory(mode, depth, batch_rows, width, free)
        .map_err(|e| OrdoError::new_err(format!("device={name:?}: {}", e.value(py))))?;
    if !cfg!(feature = "cuda") {
        return Err(OrdoError::new_err(format!(
            "device={name:?}: this ordo wheel was built without CUDA support (build it with \
             `maturin build --features cuda`)"
        )));
    }
    if let Some(reason) = ordo_gpu::cuda_unavailable_reason() {
        return Err(OrdoError::new_err(format!("device={name:?}: {reason}")));
    }
    Err(OrdoError::new_err(format!(
        "device={name:?} passed every check, but ordo's CUDA data path (rows gathered into \
         pinned buffers, uploaded on a copy stream, the GPU validation cache) is not built yet"
    )))
}

/// Whether this wheel was built with the `cuda` feature (`ordo.BUILT_WITH_CUDA`).
pub(crate) const BUILT_WITH_CUDA: bool = cfg!(feature = "cuda");
