//! The step's rows lent through DLPack (`rows="torch"` and `rows="dlpack"`), with the
//! protocol's producer side from dlpark (legacy and versioned capsules, the consumer's
//! `stream`, `max_version`, `dl_device` and `copy` arguments).
//!
//! ordo copies the batch's rows into a buffer of its own ([`LentBuffer`]) and lends it: every
//! export is a managed tensor whose context is a clone of the buffer's `Arc`, dropped by the
//! tensor's DLPack deleter, so torch's tensor is a view of that buffer (no copy between ordo and
//! torch; on a GPU the same buffer will be the device slot the rows were uploaded to). After
//! the step returns, ordo takes the buffer back only if it is the buffer's one owner again:
//! every tensor, view and capsule over it has been freed and its deleter has run. Otherwise the
//! step kept one, and the run stops naming the batch (as a kept numpy array does); the buffer
//! then stays with whatever kept it, and ordo never reads or lends it again, so later writes
//! through a kept tensor reach neither the table nor another batch.
//!
//! **Stream ordering** (on a GPU, [`StreamOrder`]): the consumer names its stream in
//! `__dlpack__(stream=...)`, as torch's `from_dlpack` does with its current stream. ordo makes
//! that stream wait for the rows' upload (an event, no host wait) before it returns the capsule,
//! and after the step records an event on the same stream that the download waits for. The step
//! therefore uses torch on its current stream as usual and ordo orders its copies around it.

use dlpark::ffi::{DLDataType, DLDevice, DLDeviceType, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::metadata::Fixed;
use dlpark::python::{CudaStreamRequest, DlpackExporter, ExportRequest, export_dlpack};
use dlpark::{DlpackFlags, Managed, ManagedTensorBase};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Rows lent to a step: written by ordo only through `&mut` (an [`Arc::get_mut`], when no export
/// is alive) and by the step only through its exports, during its call.
pub(crate) struct LentBuffer {
    values: Box<[UnsafeCell<f32>]>,
}

// SAFETY: the values are written through a shared reference only by the DLPack consumer of an
// export (the step, on the one thread that holds the interpreter lock while it runs); ordo
// touches them only through `&mut LentBuffer`, which exists only when no export is alive.
unsafe impl Sync for LentBuffer {}

impl LentBuffer {
    fn new(len: usize) -> Self {
        LentBuffer { values: (0..len).map(|_| UnsafeCell::new(0.0)).collect() }
    }

    /// The first value, for exports.
    fn ptr(&self) -> *mut f32 {
        UnsafeCell::raw_get(self.values.as_ptr())
    }

    fn values_mut(&mut self) -> &mut [f32] {
        let len = self.values.len();
        // SAFETY: `&mut self` is exclusive, and `UnsafeCell<f32>` has the layout of `f32`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), len) }
    }
}

/// The buffer a step's rows are lent from, reused from batch to batch while no step keeps it.
#[derive(Default)]
pub(crate) struct Lender {
    buffer: Option<Arc<LentBuffer>>,
}

/// The step kept an export of its rows past its call.
pub(crate) struct Kept;

impl Lender {
    /// Lend a copy of `values`: the buffer, holding them first.
    pub(crate) fn lend(&mut self, values: &[f32]) -> Arc<LentBuffer> {
        // Reused while no export of it is alive (it never is here: `take_back` drops a kept
        // one) and it is large enough.
        let mut buffer = match self.buffer.take() {
            Some(b) if Arc::strong_count(&b) == 1 && b.values.len() >= values.len() => b,
            _ => Arc::new(LentBuffer::new(values.len())),
        };
        if let Some(b) = Arc::get_mut(&mut buffer) {
            b.values_mut()[..values.len()].copy_from_slice(values);
        }
        self.buffer = Some(buffer.clone());
        buffer
    }

    /// Copy the lent values back into `out` once the step returned and every export of them
    /// was freed; `Kept` (and the buffer left to its keeper) if one is still alive.
    pub(crate) fn take_back(&mut self, out: &mut [f32]) -> Result<(), Kept> {
        let Some(b) = self.buffer.as_mut().and_then(Arc::get_mut) else {
            self.buffer = None;
            return Err(Kept);
        };
        out.copy_from_slice(&b.values_mut()[..out.len()]);
        Ok(())
    }
}

/// How ordo orders its copies with the consumer's stream for one export: the consumer's
/// `stream` argument read by the Python DLPack convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamOrder {
    /// CPU rows: nothing to order (the consumer must pass no stream).
    Host,
    /// The consumer's stream (a `cudaStream_t`; 1 and 2 are CUDA's legacy and per-thread default
    /// streams) waits for the upload's event; the download waits for an event recorded on it
    /// after the step.
    Stream(usize),
    /// `stream=-1`, no synchronization asked: ordo waits for the upload on the host before it
    /// lends the rows, and for the device after the step, before the download.
    HostWait,
}

impl StreamOrder {
    /// The order for an export of rows on `device` to a consumer that asked `request`.
    pub(crate) fn of(device: DLDevice, request: &ExportRequest<'_>) -> PyResult<Self> {
        if device.device_type != DLDeviceType::CUDA {
            return match request.stream() {
                None => Ok(StreamOrder::Host),
                Some(s) if s.is_none() => Ok(StreamOrder::Host),
                Some(s) => Err(PyBufferError::new_err(format!(
                    "rows on the CPU take no stream, got stream={s}"
                ))),
            };
        }
        Ok(match request.cuda_stream()? {
            // The protocol's default for CUDA: the legacy default stream.
            CudaStreamRequest::Omitted | CudaStreamRequest::LegacyDefault => StreamOrder::Stream(1),
            CudaStreamRequest::PerThreadDefault => StreamOrder::Stream(2),
            CudaStreamRequest::Pointer(p) => StreamOrder::Stream(p),
            CudaStreamRequest::NoSync => StreamOrder::HostWait,
        })
    }

    fn describe(self) -> String {
        match self {
            StreamOrder::Host => "host".into(),
            StreamOrder::Stream(s) => format!("stream:{s}"),
            StreamOrder::HostWait => "host-wait".into(),
        }
    }
}

/// `ordo._ordo._stream_order(device, stream)`: how ordo would order its copies with a consumer
/// passing `stream` for rows on `device` (`"cpu"` or `"cuda:N"`): `"host"`, `"stream:S"` or
/// `"host-wait"`; the consumer's error for a stream the protocol refuses. For the tests: it
/// runs without a GPU.
#[pyfunction]
#[pyo3(name = "_stream_order", signature = (device, stream = None))]
pub(crate) fn stream_order(device: &str, stream: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let device = match crate::device::Device::parse(device)? {
        crate::device::Device::Cpu => DLDevice::CPU,
        crate::device::Device::Cuda(n) => DLDevice::cuda(n as i32),
    };
    let request = ExportRequest::parse(stream, None, None, None)?;
    Ok(StreamOrder::of(device, &request)?.describe())
}

/// One table's rows of a batch, lent for the step's call: `rows x cols` floats at `offset` in
/// the buffer, `stride` floats from one row to the next. Its `__dlpack__` exports a fresh
/// managed tensor each time; once the call is over it exports nothing (`BufferError`).
#[pyclass(module = "ordo", name = "LentRows", frozen)]
pub(crate) struct LentRows {
    buffer: Mutex<Option<Arc<LentBuffer>>>,
    offset: usize,
    rows: usize,
    cols: usize,
    stride: usize,
    device: DLDevice,
    /// The stream order of the last export, for `stream_order`.
    last_order: Mutex<Option<StreamOrder>>,
}

impl LentRows {
    pub(crate) fn new(
        buffer: Arc<LentBuffer>,
        offset: usize,
        (rows, cols): (usize, usize),
        stride: usize,
    ) -> Self {
        LentRows {
            buffer: Mutex::new(Some(buffer)),
            offset,
            rows,
            cols,
            stride,
            device: DLDevice::CPU,
            last_order: Mutex::new(None),
        }
    }

    /// End the loan: no export after this, and this object no longer holds the buffer.
    pub(crate) fn revoke(&self) {
        self.buffer.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn export<M: ManagedTensorBase>(&self) -> PyResult<Managed<M>> {
        let buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let buffer = buffer.ok_or_else(expired)?;
        // SAFETY (of the `add`): offset + rows × stride stays within the buffer, which the
        // lender sized for the batch; an empty table's rows point one past its last value.
        let data = unsafe { buffer.ptr().add(self.offset) }.cast::<c_void>();
        let (rows, cols, stride) = (self.rows, self.cols, self.stride);
        let mut tensor = Fixed::new([rows, cols], [stride, 1])
            .initialize_as::<M>(buffer)
            .map_err(|e| PyBufferError::new_err(e.to_string()))?;
        tensor.set_data(data).set_device(self.device).set_dtype(DLDataType::of::<f32>());
        // SAFETY: the data pointer, shape and strides describe floats inside the buffer, which
        // the tensor's context (an `Arc` of it) keeps alive until its deleter runs; no flags.
        Ok(unsafe { tensor.finish() })
    }
}

fn expired() -> PyErr {
    PyBufferError::new_err(
        "these rows were lent to a step only during its call: the call is over, copy what you keep",
    )
}

impl DlpackExporter for LentRows {
    fn device(&self) -> DLDevice {
        self.device
    }

    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }

    fn prepare_export(&self, _py: Python<'_>, request: &ExportRequest<'_>) -> PyResult<()> {
        if self.buffer.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return Err(expired());
        }
        let order = StreamOrder::of(self.device, request)?;
        *self.last_order.lock().unwrap_or_else(|p| p.into_inner()) = Some(order);
        Ok(())
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        self.export()
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.export()
    }
}

#[pymethods]
impl LentRows {
    /// A DLPack capsule of the rows (the Python array API's protocol): no copy, writable,
    /// valid only during the step's call.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?;
        export_dlpack(self, py, request)
    }

    /// `(device type, device id)` as DLPack numbers them (1, 0 for the CPU).
    fn __dlpack_device__(&self) -> (u32, i32) {
        (self.device.device_type.0, self.device.device_id)
    }

    /// `(rows, columns)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// How the last export ordered ordo's copies with its consumer's stream: `"host"` (CPU
    /// rows), `"stream:S"` or `"host-wait"`; `None` before the first export.
    #[getter]
    fn stream_order(&self) -> Option<String> {
        self.last_order.lock().unwrap_or_else(|p| p.into_inner()).map(StreamOrder::describe)
    }

    fn __repr__(&self) -> String {
        format!("LentRows(shape=({}, {}), device=cpu)", self.rows, self.cols)
    }
}
