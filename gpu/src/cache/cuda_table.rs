//! The validation cache's table in device memory, driven by the kernels of
//! `src/kernels/validation_cache.cu`.

use super::{CacheConfig, CacheError, TableBackend, ValidationCache, check_len};
use crate::buffers::{count_u32, upload, zeros};
use crate::cuda_context::Gpu;
use crate::error::GpuError;
use crate::kernels;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Threads per block of the per-row kernels (copy loops over the row's floats).
const ROW_BLOCK: u32 = 128;
/// Threads per block of the per-slot kernel.
const SLOT_BLOCK: u32 = 256;
/// Grid-stride cap on blocks.
const MAX_BLOCKS: u32 = 1 << 16;

/// A batch in device memory: row ids (also kept on the host for the cache's bookkeeping), the
/// versions read from the store, the row values, and per row the version that replaced it.
#[derive(Debug)]
pub struct DeviceBatch {
    rows_host: Vec<u64>,
    width: usize,
    pub(crate) rows: CudaSlice<u64>,
    pub(crate) read_versions: CudaSlice<u64>,
    pub(crate) values: CudaSlice<f32>,
    pub(crate) replaced: CudaSlice<u64>,
}

impl DeviceBatch {
    /// Upload a batch (synchronously ordered on `stream`).
    pub fn upload(
        stream: &Arc<CudaStream>,
        rows: &[u64],
        read_versions: &[u64],
        values: &[f32],
        width: usize,
    ) -> Result<Self, GpuError> {
        check_len("read versions", rows.len(), read_versions.len())?;
        check_len("values", rows.len() * width, values.len())?;
        count_u32("batch rows", rows.len())?;
        Ok(DeviceBatch {
            rows_host: rows.to_vec(),
            width,
            rows: upload(stream, rows)?,
            read_versions: upload(stream, read_versions)?,
            values: upload(stream, values)?,
            replaced: zeros(stream, rows.len())?,
        })
    }

    /// Wrap buffers already on the device (e.g. filled by the pipeline's H2D copies).
    /// `rows` must be the host copy of what `rows_dev` holds.
    pub(crate) fn from_parts(
        rows: Vec<u64>,
        width: usize,
        rows_dev: CudaSlice<u64>,
        read_versions: CudaSlice<u64>,
        values: CudaSlice<f32>,
        replaced: CudaSlice<u64>,
    ) -> Self {
        DeviceBatch { rows_host: rows, width, rows: rows_dev, read_versions, values, replaced }
    }

    /// Set the host copy of the row ids (the device copy is written by the pipeline).
    pub(crate) fn set_rows(&mut self, rows: &[u64]) {
        self.rows_host.clear();
        self.rows_host.extend_from_slice(rows);
    }

    /// The row ids.
    pub fn rows(&self) -> &[u64] {
        &self.rows_host
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The row values on the device (`rows × width`, row-major; may be padded to one element).
    pub fn values(&self) -> &CudaSlice<f32> {
        &self.values
    }

    /// The row values on the device, mutable (the model step updates them in place).
    pub fn values_mut(&mut self) -> &mut CudaSlice<f32> {
        &mut self.values
    }

    /// Copy the values back (blocking).
    pub fn download_values(&self, stream: &Arc<CudaStream>) -> Result<Vec<f32>, GpuError> {
        let mut v = stream.clone_dtoh(&self.values)?;
        v.truncate(self.rows_host.len() * self.width);
        Ok(v)
    }

    /// Copy back, per row, the version that replaced it in the last validation (`0`: kept)
    /// (blocking).
    pub fn download_replaced(&self, stream: &Arc<CudaStream>) -> Result<Vec<u64>, GpuError> {
        let mut v = stream.clone_dtoh(&self.replaced)?;
        v.truncate(self.rows_host.len());
        Ok(v)
    }
}

/// The table in device memory. All launches go to one stream (the device stage's compute
/// stream), so they run in the order the orchestration issues them.
#[derive(Debug)]
pub struct CudaTable {
    stream: Arc<CudaStream>,
    f_validate: CudaFunction,
    f_insert: CudaFunction,
    f_evict: CudaFunction,
    f_rehash: CudaFunction,
    width: usize,
    slots: usize,
    keys: CudaSlice<u64>,
    versions: CudaSlice<u64>,
    values: CudaSlice<f32>,
    /// Sticky flag set by a kernel whose probe found no slot (an orchestration bug).
    failed: CudaSlice<u32>,
}

/// The validation cache in device memory.
pub type CudaValidationCache = ValidationCache<CudaTable>;

impl CudaValidationCache {
    /// An empty cache sized by `config`, launching on `stream`.
    pub fn new(gpu: &Gpu, stream: Arc<CudaStream>, config: CacheConfig) -> Result<Self, GpuError> {
        let slots = config.checked_slots()?;
        let f = kernels::load(
            gpu,
            "validation_cache.cu",
            kernels::VALIDATION_CACHE_SRC,
            &kernels::VALIDATION_CACHE_KERNELS,
        )?;
        let [f_validate, f_insert, f_evict, f_rehash]: [CudaFunction; 4] =
            f.try_into().map_err(|_| GpuError::Pipeline("kernel count"))?;
        let cells = slots
            .checked_mul(config.width)
            .ok_or(GpuError::TooLarge { what: "cache values", elems: slots })?;
        count_u32("row width", config.width)?;
        let table = CudaTable {
            keys: zeros(&stream, slots)?,
            versions: zeros(&stream, slots)?,
            values: zeros(&stream, cells)?,
            failed: zeros(&stream, 1)?,
            stream,
            f_validate,
            f_insert,
            f_evict,
            f_rehash,
            width: config.width,
            slots,
        };
        Ok(ValidationCache::with_backend(table, config)?)
    }
}

impl CudaTable {
    /// Whether any kernel failed to find a slot since creation (blocking read). Always false
    /// unless the host-side occupancy bookkeeping is wrong; the CUDA tests assert it.
    pub fn probe_failed(&self) -> Result<bool, GpuError> {
        Ok(self.stream.clone_dtoh(&self.failed)?[0] != 0)
    }

    /// The stream the kernels run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn row_launch(n: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (n.clamp(1, MAX_BLOCKS), 1, 1),
            block_dim: (ROW_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn slot_launch(&self) -> LaunchConfig {
        let blocks = self.slots.div_ceil(SLOT_BLOCK as usize).clamp(1, MAX_BLOCKS as usize);
        LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (SLOT_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn mask(&self) -> u64 {
        self.slots as u64 - 1
    }
}

impl TableBackend for CudaTable {
    type Batch = DeviceBatch;
    type Error = GpuError;

    fn slots(&self) -> usize {
        self.slots
    }

    fn width(&self) -> usize {
        self.width
    }

    fn rows<'b>(&self, batch: &'b DeviceBatch) -> &'b [u64] {
        &batch.rows_host
    }

    fn check_batch(&self, b: &DeviceBatch) -> Result<(), CacheError> {
        check_len("batch width", self.width, b.width)
    }

    fn validate(&mut self, b: &mut DeviceBatch, replace_equal: bool) -> Result<(), GpuError> {
        let n = count_u32("batch rows", b.rows_host.len())?;
        if n == 0 {
            return Ok(());
        }
        let (mask, width, flag) = (self.mask(), self.width as u32, u32::from(replace_equal));
        let mut launch = self.stream.launch_builder(&self.f_validate);
        launch
            .arg(&self.keys)
            .arg(&self.versions)
            .arg(&self.values)
            .arg(&mask)
            .arg(&width)
            .arg(&n)
            .arg(&b.rows)
            .arg(&b.read_versions)
            .arg(&mut b.values)
            .arg(&mut b.replaced)
            .arg(&flag);
        // SAFETY: the argument list matches `vc_validate`'s signature; every buffer holds at
        // least the `n` rows / `slots` slots the kernel indexes (checked lengths, `mask + 1 =
        // slots`), and the kernel writes only `b.values` and `b.replaced`.
        unsafe { launch.launch(Self::row_launch(n)) }?;
        Ok(())
    }

    fn insert(&mut self, b: &DeviceBatch, version: u64) -> Result<(), GpuError> {
        let n = count_u32("batch rows", b.rows_host.len())?;
        if n == 0 {
            return Ok(());
        }
        let (mask, width) = (self.mask(), self.width as u32);
        let mut launch = self.stream.launch_builder(&self.f_insert);
        launch
            .arg(&mut self.keys)
            .arg(&mut self.versions)
            .arg(&mut self.values)
            .arg(&mask)
            .arg(&width)
            .arg(&n)
            .arg(&b.rows)
            .arg(&version)
            .arg(&b.values)
            .arg(&mut self.failed);
        // SAFETY: matches `vc_insert`'s signature; buffers sized as in `validate`; the batch's
        // rows are distinct (checked sorted), which the kernel's concurrent claims require.
        unsafe { launch.launch(Self::row_launch(n)) }?;
        Ok(())
    }

    fn evict(&mut self, bound: u64) -> Result<(), GpuError> {
        let slots = self.slots as u64;
        let cfg = self.slot_launch();
        let mut launch = self.stream.launch_builder(&self.f_evict);
        launch.arg(&mut self.keys).arg(&self.versions).arg(&slots).arg(&bound);
        // SAFETY: matches `vc_evict`'s signature; `keys` and `versions` hold `slots` elements.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    fn clear(&mut self) -> Result<(), GpuError> {
        self.stream.memset_zeros(&mut self.keys)?;
        Ok(())
    }

    fn rehash(&mut self) -> Result<(), GpuError> {
        let mut keys = zeros::<u64>(&self.stream, self.slots)?;
        let mut versions = zeros::<u64>(&self.stream, self.slots)?;
        let mut values = zeros::<f32>(&self.stream, self.slots * self.width)?;
        let (slots, width) = (self.slots as u64, self.width as u32);
        let cfg = LaunchConfig {
            grid_dim: (self.slots.clamp(1, MAX_BLOCKS as usize) as u32, 1, 1),
            block_dim: (ROW_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.f_rehash);
        launch
            .arg(&self.keys)
            .arg(&self.versions)
            .arg(&self.values)
            .arg(&slots)
            .arg(&width)
            .arg(&mut keys)
            .arg(&mut versions)
            .arg(&mut values)
            .arg(&mut self.failed);
        // SAFETY: matches `vc_rehash`'s signature; old and new tables both hold `slots` slots of
        // `width` floats, and the new keys are zero (empty) from `alloc_zeros`.
        unsafe { launch.launch(cfg) }?;
        self.keys = keys;
        self.versions = versions;
        self.values = values;
        Ok(())
    }
}
