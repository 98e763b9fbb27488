//! The device stage on CUDA: pinned staging buffers, one stream each for host→device copies,
//! compute and device→host copies, and events that order them, so the copies of one batch
//! overlap the compute of another.
//!
//! Two ways in, both the engine's one device interface ([`ordo::engine::DeviceQueue`]):
//! * [`Pipeline`] keeps up to `depth` batches in flight for a model whose step runs on the
//!   device ([`DeviceModel`], e.g. [`KgeDeviceModel`]): `submit` returns at once, `collect`
//!   waits for the oldest batch. The session's stamps are the pipeline's; the sequencer asks
//!   for the eviction before each batch ([`DeviceQueue::evict`]).
//! * [`CudaDevice`] is the depth-1 case with the validation cache in device memory and the
//!   model step on the host: a drop-in for `ordo::engine::CpuDevice`.
//!
//! **Ordering (per batch, one staging slot):**
//! ```text
//! host: wait slot.downloaded → fill pinned staging
//! h2d stream:     copy ids, read versions, values → device batch; record slot.uploaded
//! compute stream: wait slot.uploaded → evict(STE) → validate → step → insert(ts);
//!                 record slot.computed
//! d2h stream:     wait slot.computed → copy values, replaced versions → pinned; record
//!                 slot.downloaded
//! host (collect): wait slot.downloaded → read pinned staging
//! ```
//! The compute stream runs the cache operations of all batches in submission order, which is
//! the computation order; so each batch validates against the inserts of every earlier batch,
//! however many are in flight. Staging memory is only touched by the host after the slot's
//! `downloaded` event (which follows its `uploaded` and `computed` events), so an asynchronous
//! copy never races a host write. cudarc's own per-buffer event tracking also orders device
//! buffers across the streams; the explicit events are what order the pinned host memory.
//!
//! H2D staging is allocated write-combined (`alloc_pinned`: fast host writes and PCIe reads);
//! D2H staging is allocated cached (flags 0), since the host reads it.

use crate::admission::admit;
use crate::buffers::{count_u32, zeros};
use crate::cache::{CacheConfig, CacheError, CudaValidationCache, DeviceBatch};
use crate::cache_device::repaired;
use crate::cache_device::{CacheBackend, CacheDevice, apply_validation, version_words};
use crate::cuda_context::Gpu;
use crate::error::GpuError;
use crate::kge::{DeviceKgeBatch, KgeBatch, KgeHyper, KgeKernels};
use cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};
use ordo::engine::{
    BatchRows, DeviceError, DeviceQueue, Model, QueueCache, RowBlock, Staleness, Submission,
    SubmitError,
};
use std::sync::Arc;

/// The three streams of the device stage.
#[derive(Debug, Clone)]
pub struct Streams {
    /// Host → device copies.
    pub h2d: Arc<CudaStream>,
    /// Kernels.
    pub compute: Arc<CudaStream>,
    /// Device → host copies.
    pub d2h: Arc<CudaStream>,
}

impl Streams {
    /// Three new streams on `gpu`.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        Ok(Streams { h2d: gpu.new_stream()?, compute: gpu.new_stream()?, d2h: gpu.new_stream()? })
    }
}

/// Pinned host staging and device buffers for one batch in flight, and the events that say
/// how far it got.
#[derive(Debug)]
struct Slot {
    ids: PinnedHostSlice<u64>,
    read: PinnedHostSlice<u64>,
    /// The loaded batch's read versions again, in ordinary memory: `read` is write-combined
    /// (fast to fill, slow to read back), and [`Collected`] needs them for the version gaps.
    read_host: Vec<u64>,
    values_in: PinnedHostSlice<f32>,
    values_out: PinnedHostSlice<f32>,
    replaced_out: PinnedHostSlice<u64>,
    batch: DeviceBatch,
    uploaded: CudaEvent,
    computed: CudaEvent,
    downloaded: CudaEvent,
    /// Timing events around the batch's compute (only with `PipelineConfig::timing`).
    timing: Option<(CudaEvent, CudaEvent)>,
    max_rows: usize,
    /// `downloaded` was recorded and the host has not waited on it since.
    pending: bool,
}

/// `len` elements of pinned host memory with `flags`, checked against cudarc's size assert.
fn pinned<T: cudarc::driver::DeviceRepr>(
    gpu: &Gpu,
    len: usize,
    flags: u32,
) -> Result<PinnedHostSlice<T>, GpuError> {
    let len = len.max(1);
    if len.checked_mul(size_of::<T>()).is_none_or(|b| b >= isize::MAX as usize) {
        return Err(GpuError::TooLarge { what: "pinned staging", elems: len });
    }
    // SAFETY: the memory is uninitialised; every read of it (by a D2H copy's consumer or the
    // host) is preceded by a write of the same range (the `load` / D2H copy of `n` rows).
    Ok(unsafe { gpu.context().alloc_pinned_with_flags::<T>(len, flags) }?)
}

impl Slot {
    fn new(
        gpu: &Gpu,
        streams: &Streams,
        max_rows: usize,
        width: usize,
        timing: bool,
    ) -> Result<Self, GpuError> {
        let cells = max_rows
            .checked_mul(width)
            .ok_or(GpuError::TooLarge { what: "staging values", elems: max_rows })?;
        let wc = cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        let s = &streams.compute;
        let ctx = gpu.context();
        Ok(Slot {
            ids: pinned(gpu, max_rows, wc)?,
            read: pinned(gpu, max_rows, wc)?,
            read_host: Vec::with_capacity(max_rows),
            values_in: pinned(gpu, cells, wc)?,
            values_out: pinned(gpu, cells, 0)?,
            replaced_out: pinned(gpu, max_rows, 0)?,
            batch: DeviceBatch::from_parts(
                Vec::with_capacity(max_rows),
                width,
                zeros(s, max_rows)?,
                zeros(s, max_rows)?,
                zeros(s, cells)?,
                zeros(s, max_rows)?,
            ),
            uploaded: ctx.new_event(None)?,
            computed: ctx.new_event(None)?,
            // The one event the host waits on: blocking-sync, so the host thread sleeps.
            downloaded: ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC))?,
            timing: if timing {
                let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
                Some((ctx.new_event(flags)?, ctx.new_event(flags)?))
            } else {
                None
            },
            max_rows,
            pending: false,
        })
    }

    /// Wait until the slot's last batch is fully back, then fill the staging buffers.
    fn load(
        &mut self,
        ids: &[u64],
        read_versions: impl Iterator<Item = u64>,
        values: &[f32],
    ) -> Result<(), GpuError> {
        let n = ids.len();
        let w = self.batch.width();
        if n > self.max_rows {
            return Err(GpuError::TooLarge {
                what: "batch rows (above the staging size)",
                elems: n,
            });
        }
        crate::cache::check_len("values", n * w, values.len())?;
        if self.pending {
            self.downloaded.synchronize()?;
            self.pending = false;
        }
        self.read_host.clear();
        self.read_host.extend(read_versions.take(n));
        crate::cache::check_len("read versions", n, self.read_host.len())?;
        self.ids.as_mut_slice()?[..n].copy_from_slice(ids);
        self.read.as_mut_slice()?[..n].copy_from_slice(&self.read_host);
        self.values_in.as_mut_slice()?[..n * w].copy_from_slice(values);
        self.batch.set_rows(ids);
        Ok(())
    }

    /// Queue the copies of the loaded batch on `h2d`, and make `compute` wait for them.
    fn upload(&mut self, streams: &Streams) -> Result<(), GpuError> {
        let n = self.batch.rows().len();
        let w = self.batch.width();
        if n > 0 {
            let s = &streams.h2d;
            // Sub-slices of pinned memory: asynchronous copies; `downloaded` guards reuse.
            s.memcpy_htod(&self.ids.as_slice()?[..n], &mut self.batch.rows.slice_mut(..n))?;
            s.memcpy_htod(
                &self.read.as_slice()?[..n],
                &mut self.batch.read_versions.slice_mut(..n),
            )?;
            s.memcpy_htod(
                &self.values_in.as_slice()?[..n * w],
                &mut self.batch.values.slice_mut(..n * w),
            )?;
            streams.h2d.memset_zeros(&mut self.batch.replaced.slice_mut(..n))?;
        }
        self.uploaded.record(&streams.h2d)?;
        streams.compute.wait(&self.uploaded)?;
        Ok(())
    }

    /// Mark the end of the batch's compute, and queue the copies back on `d2h`.
    fn download(&mut self, streams: &Streams) -> Result<(), GpuError> {
        self.computed.record(&streams.compute)?;
        streams.d2h.wait(&self.computed)?;
        let n = self.batch.rows().len();
        let w = self.batch.width();
        if n > 0 {
            let s = &streams.d2h;
            s.memcpy_dtoh(
                &self.batch.values.slice(..n * w),
                &mut self.values_out.as_mut_slice()?[..n * w],
            )?;
            s.memcpy_dtoh(
                &self.batch.replaced.slice(..n),
                &mut self.replaced_out.as_mut_slice()?[..n],
            )?;
        }
        self.downloaded.record(&streams.d2h)?;
        self.pending = true;
        Ok(())
    }

    /// Wait for the copies back.
    fn wait(&mut self) -> Result<(), GpuError> {
        self.downloaded.synchronize()?;
        self.pending = false;
        Ok(())
    }

    /// The stepped values and the replacing versions (after [`wait`](Slot::wait)).
    fn results(&self) -> Result<(&[f32], &[u64]), GpuError> {
        let n = self.batch.rows().len();
        let w = self.batch.width();
        Ok((&self.values_out.as_slice()?[..n * w], &self.replaced_out.as_slice()?[..n]))
    }
}

/// The engine's device on CUDA: the validation cache in device memory (with its staging slot
/// and streams), the model step on the host (the engine's [`Model`]).
///
/// A CUDA failure is returned from the method that met it (the engine stops with it as the
/// typed source of [`ordo::engine::StageError::Device`]).
pub type CudaDevice = CacheDevice<StagedCudaCache>;

/// The validation cache in device memory, with the staging slot and streams that move a
/// batch's rows to it and back: the [`CacheBackend`] of [`CudaDevice`].
#[derive(Debug)]
pub struct StagedCudaCache {
    streams: Streams,
    cache: CudaValidationCache,
    slot: Slot,
}

impl CudaDevice {
    /// A device whose cache holds `config.capacity` rows of `config.width` floats and whose
    /// batches have at most `max_rows` rows.
    pub fn new(gpu: &Gpu, config: CacheConfig, max_rows: usize) -> Result<Self, GpuError> {
        let streams = Streams::new(gpu)?;
        let cache = CudaValidationCache::new(gpu, streams.compute.clone(), config)?;
        let slot = Slot::new(gpu, &streams, max_rows, config.width, false)?;
        Ok(CacheDevice::over(StagedCudaCache { streams, cache, slot }))
    }

    /// Rows in the cache.
    pub fn cache(&self) -> &CudaValidationCache {
        &self.cache.cache
    }
}

impl QueueCache for StagedCudaCache {
    fn clear(&mut self) -> Result<(), DeviceError> {
        QueueCache::clear(&mut self.cache)
    }

    fn evict(&mut self, ste: u64) -> Result<(), DeviceError> {
        QueueCache::evict(&mut self.cache, ste)
    }

    fn cached_rows(&self) -> usize {
        self.cache.len()
    }
}

impl CacheBackend for StagedCudaCache {
    fn validate(
        &mut self,
        read: &[Option<u64>],
        rows: &mut BatchRows<'_>,
    ) -> Result<Staleness, GpuError> {
        crate::cache::check_len("read timestamps", rows.len(), read.len())?;
        self.slot.load(rows.ids(), version_words(read), rows.values())?;
        self.slot.upload(&self.streams)?;
        self.cache.validate(&mut self.slot.batch)?;
        self.slot.download(&self.streams)?;
        self.slot.wait()?;
        let (values, replaced) = self.slot.results()?;
        Ok(apply_validation(read, values, replaced, rows))
    }

    fn insert(&mut self, ts: u64, block: &RowBlock) -> Result<(), GpuError> {
        let ids = block.ids();
        self.slot.load(ids, std::iter::repeat_n(0, ids.len()), block.values())?;
        self.slot.upload(&self.streams)?;
        self.cache.insert(&self.slot.batch, ts)?;
        // No copy back: record `downloaded` so the next `load` waits for this insert's upload
        // and kernel, and nothing else.
        self.slot.computed.record(&self.streams.compute)?;
        self.slot.downloaded.record(&self.streams.compute)?;
        self.slot.pending = true;
        Ok(())
    }
}

/// A model whose step also runs on the device, on the batch's rows in device memory: what a
/// [`Pipeline`] runs. Its host step ([`Model::step`]) is the same update on host rows (used
/// where no pipeline is, e.g. a replay), so the engine is handed the model itself: there is no
/// stand-in model whose host step is an error.
pub trait DeviceModel: Model {
    /// Update `batch`'s values in place: upload the payload on `streams.h2d` (cudarc's buffer
    /// events order it before the kernels) and launch on `streams.compute` (the stream the
    /// pipeline was built with), where the cache kernels of the same batch run before and after.
    /// A CUDA failure is [`SubmitError::Device`] ([`on_device`] makes one); the model's own
    /// error (e.g. a non-finite loss) is [`SubmitError::Step`], as from a host step.
    fn step_on_device(
        &mut self,
        streams: &Streams,
        data: &Self::Data,
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<Self::Error>>;
}

/// A CUDA failure of a device step, as the engine takes it.
pub fn on_device<E>(e: GpuError) -> SubmitError<E> {
    SubmitError::Device(e.into())
}

/// The KGE step as a [`DeviceModel`]: the batch's rows are its entity rows, the relations live
/// in the kernels on the device.
#[derive(Debug)]
pub struct KgeDeviceModel {
    /// The kernels (and the relation parameters they own).
    pub kernels: KgeKernels,
    /// Learning rate and epsilon.
    pub hyper: KgeHyper,
    /// The last uploads, kept alive a while: dropping a device buffer makes its stream (h2d)
    /// wait for the kernels reading it, which would stall the next batch's copies.
    recent: std::collections::VecDeque<DeviceKgeBatch>,
}

impl KgeDeviceModel {
    /// The step with these kernels and hyper-parameters.
    pub fn new(kernels: KgeKernels, hyper: KgeHyper) -> Self {
        KgeDeviceModel { kernels, hyper, recent: std::collections::VecDeque::new() }
    }
}

impl Model for KgeDeviceModel {
    type Data = KgeBatch;
    type Error = GpuError;

    fn row_width(&self) -> usize {
        2 * self.kernels.shape().dim
    }

    /// The same kernels on host rows: upload, step, copy back (blocking).
    fn step(&mut self, data: &KgeBatch, rows: &mut BatchRows<'_>) -> Result<(), GpuError> {
        let stream = self.kernels.stream().clone();
        let b = DeviceKgeBatch::upload(&stream, self.kernels.shape(), data)?;
        let mut values = stream.clone_htod(rows.values())?;
        self.kernels.step(&b, &mut values, &self.hyper)?;
        stream.memcpy_dtoh(&values, rows.values_mut())?;
        stream.synchronize()?;
        Ok(())
    }

    /// The relation rows (parameters and Adagrad sums); empty if the copy fails.
    fn dense(&self) -> Vec<f32> {
        self.kernels.relations().unwrap_or_default()
    }
}

impl DeviceModel for KgeDeviceModel {
    fn step_on_device(
        &mut self,
        streams: &Streams,
        data: &KgeBatch,
        batch: &mut DeviceBatch,
    ) -> Result<(), SubmitError<GpuError>> {
        crate::cache::check_len("KGE batch rows", batch.rows().len(), data.rows)
            .map_err(|e| on_device(e.into()))?;
        let b =
            DeviceKgeBatch::upload(&streams.h2d, self.kernels.shape(), data).map_err(on_device)?;
        self.kernels.step(&b, batch.values_mut(), &self.hyper).map_err(on_device)?;
        if self.recent.len() == 16 {
            self.recent.pop_front();
        }
        self.recent.push_back(b);
        Ok(())
    }
}

/// Sizes of a [`Pipeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Batches in flight at most (staging slots).
    pub depth: usize,
    /// Rows per batch at most.
    pub max_rows: usize,
    /// Floats per row.
    pub width: usize,
    /// The validation cache (needed for `Oac`; without it a batch asking for validation is
    /// refused).
    pub cache: Option<CacheConfig>,
    /// Record timing events around each batch's compute ([`Pipeline::compute_busy_ms`]).
    pub timing: bool,
}

impl PipelineConfig {
    /// Device bytes of the pipeline's own buffers, `(staging, cache)`: per slot a device batch
    /// (ids, read versions, replacing versions: 8 bytes each per row; `width` floats per row),
    /// and the cache's table (`slots` × (key + version + `width` floats)). Pinned host staging
    /// is not device memory and is not counted.
    pub fn device_bytes(&self) -> (u64, u64) {
        let row = 24 + 4 * self.width as u64;
        let staging = self.depth as u64 * self.max_rows as u64 * row;
        let cache = self.cache.map_or(0, |c| c.slots() as u64 * (16 + 4 * c.width as u64));
        (staging, cache)
    }
}

/// Refuse, with the figures, a run whose device buffers (`need` bytes, made of `what`) do not
/// fit in the device's free memory (`free`), keeping a tenth of it for the driver, cuBLAS
/// workspaces and fragmentation.
pub fn check_fits(need: u64, free: u64, what: String) -> Result<(), GpuError> {
    if need > free - free / 10 {
        return Err(GpuError::DeviceMemory { need, free, what });
    }
    Ok(())
}

/// The engine's [`DeviceQueue`] on CUDA for a [`DeviceModel`]: up to `depth` batches in flight
/// through H2D → (validate) → step → (insert) → D2H, with the eviction the sequencer asks for
/// queued on the compute stream ahead of the next batch's validation.
///
/// **Stamps are the session's.** The pipeline keeps no counter of its own: it caches a batch
/// at the `ts` of its [`Submission`] and picks its staging slot as `ts mod depth` (a session
/// stamps `0, 1, 2, …` and collects in stamp order, so the slot of `ts` was collected before
/// `ts + depth` is submitted).
///
/// **Steady state.** Every buffer (pinned staging, device batch, cache table) is allocated by
/// [`new`](Pipeline::new); a batch allocates nothing of its own (its step may: the KGE step
/// uploads its triples). The host blocks once per batch, in `collect`, on the slot's
/// `downloaded` event ([`waits`](Pipeline::waits) counts them); the events are blocking-sync,
/// so the host thread sleeps instead of spinning.
#[derive(Debug)]
pub struct Pipeline {
    streams: Streams,
    slots: Vec<Slot>,
    cache: Option<CudaValidationCache>,
    /// `(ts, slot)` of the batches submitted and not collected, oldest first.
    in_flight: std::collections::VecDeque<(u64, usize)>,
    busy_ms: f64,
    waits: u64,
}

impl Pipeline {
    /// Build the pipeline, launching its kernels on `compute` (the model's stream: the
    /// model's kernels and the cache's run in one order there).
    pub fn new(
        gpu: &Gpu,
        config: PipelineConfig,
        compute: Arc<CudaStream>,
    ) -> Result<Self, GpuError> {
        if config.depth == 0 {
            return Err(GpuError::Pipeline("depth must be at least 1"));
        }
        count_u32("batch rows", config.max_rows)?;
        let (staging, cache) = config.device_bytes();
        let (free, _) = gpu.context().mem_get_info()?;
        let what = format!("staging {staging} B, cache {cache} B");
        check_fits(staging + cache, free as u64, what)?;
        let streams = Streams { h2d: gpu.new_stream()?, compute, d2h: gpu.new_stream()? };
        let cache = match config.cache {
            Some(c) if c.width != config.width => {
                return Err(CacheError::LengthMismatch {
                    what: "cache width",
                    expected: config.width,
                    got: c.width,
                }
                .into());
            }
            Some(c) => Some(CudaValidationCache::new(gpu, streams.compute.clone(), c)?),
            None => None,
        };
        let slots = (0..config.depth)
            .map(|_| Slot::new(gpu, &streams, config.max_rows, config.width, config.timing))
            .collect::<Result<_, _>>()?;
        let in_flight = std::collections::VecDeque::with_capacity(config.depth);
        Ok(Pipeline { streams, slots, cache, in_flight, busy_ms: 0.0, waits: 0 })
    }

    /// Milliseconds the compute stream spent on the collected batches (validate to insert),
    /// when built with `timing`; the bench divides it by the wall time for "GPU busy".
    pub fn compute_busy_ms(&self) -> f64 {
        self.busy_ms
    }

    /// Times the host blocked on the device (one per collected batch).
    pub fn waits(&self) -> u64 {
        self.waits
    }

    /// The streams.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// Rows per batch at most.
    pub fn max_rows(&self) -> usize {
        self.slots[0].max_rows
    }

    /// Floats per row.
    pub fn width(&self) -> usize {
        self.slots[0].batch.width()
    }

    /// Check batch `job` whole (a refused batch queues nothing), then queue its upload and
    /// validation; the index of its slot.
    fn stage<D>(
        &mut self,
        job: &Submission<'_, D>,
        rows: &BatchRows<'_>,
    ) -> Result<usize, GpuError> {
        let taken = self.in_flight.iter().map(|&(_, s)| s);
        let index = admit(job, rows, self.cache.as_ref(), self.slots.len(), taken)?;
        let slot = &mut self.slots[index];
        slot.load(rows.ids(), version_words(job.read), rows.values())?;
        slot.upload(&self.streams)?;
        if let Some((start, _)) = &slot.timing {
            start.record(&self.streams.compute)?;
        }
        if let (Some(cache), true) = (self.cache.as_mut(), job.validate) {
            cache.validate(&mut slot.batch)?;
        }
        Ok(index)
    }

    /// After the step of the batch in slot `index`: queue its insert and its copy back.
    fn unstage<D>(&mut self, index: usize, job: &Submission<'_, D>) -> Result<(), GpuError> {
        let slot = &mut self.slots[index];
        if let (Some(cache), true) = (self.cache.as_mut(), job.insert) {
            cache.insert(&slot.batch, job.ts)?;
        }
        if let Some((_, end)) = &slot.timing {
            end.record(&self.streams.compute)?;
        }
        slot.download(&self.streams)?;
        self.in_flight.push_back((job.ts, index));
        Ok(())
    }
}

impl<M: DeviceModel> DeviceQueue<M> for Pipeline {
    fn reset(&mut self) -> Result<(), DeviceError> {
        if !self.in_flight.is_empty() {
            return Err(GpuError::Pipeline("a session needs an idle pipeline").into());
        }
        self.cache.clear()
    }

    fn depth(&self) -> usize {
        self.slots.len()
    }

    fn submit(
        &mut self,
        model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>> {
        let index = self.stage(&job, rows).map_err(on_device)?;
        model.step_on_device(&self.streams, job.data, &mut self.slots[index].batch)?;
        self.unstage(index, &job).map_err(on_device)
    }

    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        let (_, index) = *self.in_flight.front().ok_or(GpuError::Pipeline("nothing in flight"))?;
        self.waits += 1;
        self.slots[index].wait()?;
        let slot = &self.slots[index];
        let (out, replaced) = slot.results()?;
        if let Some((start, end)) = &slot.timing {
            self.busy_ms += f64::from(start.elapsed_ms(end)?);
        }
        crate::cache::check_len("collect rows", out.len(), rows.values().len())?;
        rows.values_mut().copy_from_slice(out);
        let staleness = repaired(slot.read_host.iter().copied(), replaced);
        self.in_flight.pop_front();
        Ok(staleness)
    }

    fn cache(&self) -> &dyn QueueCache {
        &self.cache
    }

    fn cache_mut(&mut self) -> &mut dyn QueueCache {
        &mut self.cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_memory_estimate_counts_staging_and_cache() {
        let cache = CacheConfig { width: 400, capacity: 1000 };
        let c = PipelineConfig {
            depth: 4,
            max_rows: 6000,
            width: 400,
            cache: Some(cache),
            timing: false,
        };
        // 4 slots × 6,000 rows × (24 + 1,600) B; 2,048 slots × (16 + 1,600) B.
        assert_eq!(c.device_bytes(), (4 * 6000 * 1624, 2048 * 1616));
        let none = PipelineConfig { cache: None, ..c };
        assert_eq!(none.device_bytes().1, 0);
    }

    #[test]
    fn a_run_that_does_not_fit_is_refused_with_its_figures() {
        assert!(check_fits(80, 100, String::new()).is_ok());
        let err = check_fits(95 << 20, 100 << 20, "cache 95 MiB".into()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, GpuError::DeviceMemory { .. }), "{msg}");
        assert!(
            msg.contains("95 MiB") && msg.contains("100 MiB") && msg.contains("cache"),
            "{msg}"
        );
    }
}
