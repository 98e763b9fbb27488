//! The chunked step on the GPU: the kernels of `src/kernels/kge_chunked.cu` around the chunk
//! products of [`ChunkBlas`], in buffers allocated once for the step's [`ChunkLimits`].
//!
//! Per batch only the packed ids go up (one copy from pinned memory, kilobytes) and the rows'
//! losses come down (one copy into pinned memory) on the same stream: the caller's one wait
//! (for its rows' download) covers both. Nothing is allocated after [`ChunkedKernels::new`]:
//! a step only copies, launches and calls cuBLAS on the fixed buffers and workspace (the GPU
//! test checks the device's free memory does not move over many batches). Every batch runs the same launches and the same
//! cuBLAS calls over the same fixed shapes (a smaller batch is padded with zero rows), so the
//! same batch from the same state gives the same bits (`gpu/README.md`, "Bit-exact on the GPU").
//!
//! **What a replay must share to match bit for bit:** the GPU model and its SM count (the
//! grids and cuBLAS's choice of kernel and split depend on them), the driver and NVRTC that
//! JIT-compile the same PTX, the cuBLAS build, the limits (so the same shapes, leading
//! dimensions and strides reach cuBLAS) and the recorded order of batches. Within one process
//! the handle is fixed as [`ChunkBlas`] sets it up: bound to the step's one stream, its own
//! workspace allocated once (`cublasSetWorkspace`), TF32 and reduced-precision reductions off.
//! Outside the products the kernels are written with the `_rn` intrinsics (no FMA
//! contraction), own every output with one thread, and use no atomics.

use super::chunked_ids::{ChunkLimits, ChunkedIds};
use super::{KgeError, KgeHyper, KgeShape, check_params, check_shape};
use crate::blas::ChunkBlas;
use crate::buffers::count_u32;
use crate::cuda_context::Gpu;
use crate::error::GpuError;
use crate::kernels;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, LaunchConfig, PinnedHostSlice, PushKernelArg,
};
use std::sync::Arc;

const THREADS: u32 = 256;

/// Pinned id buffers, used in turn: filling one waits only for the upload from it
/// `IDS_RING` batches ago, not for the last batch's (which waits behind that batch's kernels),
/// so the host can enqueue several batches ahead of the device.
const IDS_RING: usize = 4;

fn cfg(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(THREADS as usize).clamp(1, 1 << 16) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// The chunked step's kernels, cuBLAS handle, relation rows and every buffer, for batches up to
/// its [`ChunkLimits`].
///
/// ```no_run
/// use ordo_gpu::kge::{ChunkLimits, ChunkedBatch, ChunkedIds, ChunkedKernels, KgeHyper};
/// use ordo_gpu::kge::{KgeModel, KgeShape};
/// let gpu = ordo_gpu::Gpu::open(0)?;
/// let stream = gpu.new_stream()?;
/// let shape = KgeShape { model: KgeModel::ComplEx, dim: 4, relations: 1 };
/// let limits =
///     ChunkLimits { max_positives: 2, chunk: 2, negatives: 1, max_rows: 3, relations: 1 };
/// let mut k = ChunkedKernels::new(&gpu, stream.clone(), shape, limits, &[0.1; 8])?;
/// let batch = ChunkedBatch {
///     rows: 3,
///     positives: vec![[0, 0, 1], [1, 0, 2]],
///     chunk: 2,
///     negatives: 1,
///     chunk_negatives: vec![2, 0],
/// };
/// // On a loader thread: the ids, packed.
/// let ids = ChunkedIds::build(&batch, &shape, &limits)?;
/// let mut rows = stream.clone_htod(&[0.1f32; 3 * 8])?;
/// k.step(&ids, &mut rows, &KgeHyper::new(0.1))?;
/// let values = stream.clone_dtoh(&rows)?; // the one wait
/// println!("loss {}", k.loss(&ids)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ChunkedKernels {
    shape: KgeShape,
    limits: ChunkLimits,
    stream: Arc<CudaStream>,
    blas: ChunkBlas,
    functions: [CudaFunction; 5],
    relations: CudaSlice<f32>,
    ids_host: Vec<PinnedHostSlice<u32>>,
    next_ids: usize,
    ids: CudaSlice<u32>,
    /// Q, T, dQ, EC, RC (row slots × dim).
    rows: [CudaSlice<f32>; 5],
    /// N, dN (negative slots × dim).
    negs: [CudaSlice<f32>; 2],
    /// S, then G in place (row slots × negatives).
    scores: CudaSlice<f32>,
    g0: CudaSlice<f32>,
    losses: CudaSlice<f32>,
    losses_host: PinnedHostSlice<f32>,
}

impl ChunkedKernels {
    /// Compile the kernels, open cuBLAS on `stream`, upload the relation rows
    /// (`relations × 2·dim`) and allocate every buffer for batches up to `limits`.
    pub fn new(
        gpu: &Gpu,
        stream: Arc<CudaStream>,
        shape: KgeShape,
        limits: ChunkLimits,
        relations: &[f32],
    ) -> Result<Self, GpuError> {
        check_shape(&shape)?;
        check_params(&shape, 0, 0, relations.len())?;
        limits.check()?;
        if limits.relations != shape.relations {
            let (got, limit) = (shape.relations, limits.relations);
            return Err(KgeError::OverLimits { what: "relations", got, limit }.into());
        }
        count_u32("entity floats per batch", limits.max_rows * 2 * shape.dim)?;
        count_u32("slot floats", limits.slot_rows() * shape.dim.max(limits.negatives))?;
        let f = kernels::load(
            gpu,
            "kge_chunked",
            kernels::KGE_CHUNKED_SRC,
            &kernels::KGE_CHUNKED_KERNELS,
        )?;
        let functions: [CudaFunction; 5] =
            f.try_into().map_err(|_| GpuError::Pipeline("kernel count"))?;
        let zeros = |len: usize| -> Result<CudaSlice<f32>, GpuError> {
            Ok(stream.alloc_zeros::<f32>(len.max(1))?)
        };
        let d = shape.dim;
        let [lq, ln, ls] = limits.blas_shape(d).lens();
        let rows = [zeros(lq)?, zeros(lq)?, zeros(lq)?, zeros(lq)?, zeros(lq)?];
        let negs = [zeros(ln)?, zeros(ln)?];
        let scores = zeros(ls)?;
        let g0 = zeros(limits.slot_rows())?;
        let losses = zeros(2 * limits.slot_rows())?;
        let blas = ChunkBlas::new(gpu, stream.clone())?;
        let ids = stream.alloc_zeros::<u32>(limits.id_words().max(1))?;
        // SAFETY: uninitialised pinned memory; `ids_host` is written (a whole batch's words)
        // before each copy from it, and `losses_host` is read only after the copy into it.
        let ids_host = (0..IDS_RING)
            .map(|_| unsafe { gpu.context().alloc_pinned::<u32>(limits.id_words().max(1)) })
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: as above.
        let losses_host =
            unsafe { gpu.context().alloc_pinned::<f32>(2 * limits.slot_rows().max(1)) }?;
        let relations = stream.clone_htod(relations)?;
        Ok(ChunkedKernels {
            shape,
            limits,
            stream,
            blas,
            functions,
            relations,
            ids_host,
            next_ids: 0,
            ids,
            rows,
            negs,
            scores,
            g0,
            losses,
            losses_host,
        })
    }

    /// The shapes.
    pub fn shape(&self) -> &KgeShape {
        &self.shape
    }

    /// The stream everything runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Enqueue one step on the batch's entity rows (`entities`: at least `ids.rows() × 2·dim`
    /// floats on the device, updated in place) and on the relation rows: the ids' upload, the
    /// kernels and products, and the rows' losses' download. Returns without waiting.
    pub fn step(
        &mut self,
        ids: &ChunkedIds,
        entities: &mut CudaSlice<f32>,
        hyper: &KgeHyper,
    ) -> Result<(), GpuError> {
        let (l, d) = (self.limits, self.shape.dim);
        if *ids.limits() != l {
            return Err(KgeError::OverLimits {
                what: "id layout (limits other than the step's)",
                got: ids.words().len(),
                limit: l.id_words(),
            }
            .into());
        }
        let need = ids.rows() * 2 * d;
        if entities.len() < need {
            let got = entities.len();
            return Err(
                KgeError::LengthMismatch { what: "entity rows", expected: need, got }.into()
            );
        }
        let s = &self.stream;
        let staged = &mut self.ids_host[self.next_ids];
        self.next_ids = (self.next_ids + 1) % IDS_RING;
        staged.as_mut_slice()?.copy_from_slice(ids.words());
        // The device buffer is overwritten in stream order, after the last batch's kernels.
        s.memcpy_htod(&*staged, &mut self.ids)?;
        let at = l.layout();
        let part = |i: usize| self.ids.slice(at[i]..at[i + 1]);
        let (pos, negv) = (part(0), part(1));
        let (ent_off, ent_items, rel_off, rel_items) = (part(2), part(3), part(4), part(5));
        let u = |x: usize| x as u32;
        let (model, dim, chunk, nneg) = (self.shape.model.code(), u(d), u(l.chunk), u(l.negatives));
        let (positives, side_chunks, slot_rows) =
            (u(ids.positives()), u(ids.side_chunks()), u(l.slot_rows()));
        let (rows_n, relations_n) = (u(ids.rows()), u(l.relations));
        let [f_gather, f_loss, f_back, f_entity, f_relation] = &self.functions;
        let [q, t, dq, ec, rc] = &mut self.rows;
        let [nm, dn] = &mut self.negs;

        let mut b = s.launch_builder(f_gather);
        b.arg(&model).arg(&dim).arg(&chunk).arg(&nneg).arg(&positives).arg(&side_chunks);
        b.arg(&slot_rows).arg(&pos).arg(&negv).arg(&*entities).arg(&self.relations);
        b.arg(&mut *q).arg(&mut *t).arg(&mut *nm);
        // SAFETY: matches `kc_gather`; the ids were checked against the limits the buffers are
        // sized for (ids index rows < ids.rows() ≤ entities' rows, relations < limits.relations);
        // q, t hold slot_rows × dim floats, nm negative slots × dim.
        unsafe { b.launch(cfg(l.slot_rows().max(l.negative_slots()) * d)) }?;

        let shape = l.blas_shape(d);
        self.blas.scores(&shape, q, nm, &mut self.scores)?;

        let loss_kind = hyper.loss.code();
        let mut b = s.launch_builder(f_loss);
        b.arg(&loss_kind).arg(&hyper.reg).arg(&dim).arg(&chunk).arg(&nneg);
        b.arg(&positives).arg(&side_chunks).arg(&slot_rows).arg(&pos).arg(&*entities);
        b.arg(&self.relations).arg(&*q).arg(&*t).arg(&mut self.scores).arg(&mut self.g0);
        b.arg(&mut self.losses);
        // SAFETY: matches `kc_row_loss`; scores holds slot_rows × negatives floats, g0
        // slot_rows, losses 2 × slot_rows.
        unsafe { b.launch(cfg(l.slot_rows())) }?;

        self.blas.query_grads(&shape, &self.scores, nm, dq)?;
        self.blas.negative_grads(&shape, &self.scores, q, dn)?;

        let mut b = s.launch_builder(f_back);
        b.arg(&model).arg(&dim).arg(&chunk).arg(&positives).arg(&side_chunks).arg(&slot_rows);
        b.arg(&hyper.reg).arg(&pos).arg(&*entities).arg(&self.relations).arg(&*t).arg(&*dq);
        b.arg(&self.g0).arg(&mut *ec).arg(&mut *rc);
        // SAFETY: matches `kc_query_back`; every slot buffer holds slot_rows × dim floats.
        unsafe { b.launch(cfg(l.slot_rows() * d)) }?;

        let mut b = s.launch_builder(f_entity);
        b.arg(&dim).arg(&rows_n).arg(&hyper.reg).arg(&hyper.lr).arg(&hyper.eps);
        b.arg(&ent_off).arg(&ent_items).arg(&*ec).arg(&*q).arg(&self.g0).arg(&*dn);
        b.arg(&mut *entities);
        // SAFETY: matches `kc_entity_update`; the offsets have rows + 1 entries bounding the
        // items, whose slots index the slot buffers (built by `ChunkedIds` for these limits).
        unsafe { b.launch(cfg(ids.rows() * d)) }?;

        let mut b = s.launch_builder(f_relation);
        b.arg(&dim).arg(&relations_n).arg(&hyper.lr).arg(&hyper.eps).arg(&rel_off);
        b.arg(&rel_items).arg(&*rc).arg(&mut self.relations);
        // SAFETY: matches `kc_relation_update`; relations + 1 offsets, items are row slots.
        unsafe { b.launch(cfg(l.relations * d)) }?;

        s.memcpy_dtoh(&self.losses, &mut self.losses_host)?;
        Ok(())
    }

    /// The last step's loss ([`ChunkedIds::total_loss`] of its rows' losses): waits for the
    /// losses' copy, which the caller's wait for its rows has usually covered. Read it before
    /// the next step, which overwrites it.
    pub fn loss(&self, ids: &ChunkedIds) -> Result<f64, GpuError> {
        Ok(ids.total_loss(self.losses_host.as_slice()?))
    }

    /// The relation rows (blocking copy).
    pub fn relations(&self) -> Result<Vec<f32>, GpuError> {
        Ok(self.stream.clone_dtoh(&self.relations)?)
    }
}
