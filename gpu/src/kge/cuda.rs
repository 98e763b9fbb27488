//! The KGE step on the GPU: the kernels of `src/kernels/kge.cu`, launched on one stream.

use super::{Contributions, KgeBatch, KgeHyper, KgeShape, check_params, check_shape};
use crate::buffers::{count_u32, ensure, upload, zeros};
use crate::cuda_context::Gpu;
use crate::error::GpuError;
use crate::kernels;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

const MAX_BLOCKS: u32 = 1 << 16;

fn cfg(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks.clamp(1, MAX_BLOCKS as usize) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A checked KGE batch in device memory: the scored triples and the contribution lists that fix
/// the gradient kernels' summation order.
#[derive(Debug)]
pub struct DeviceKgeBatch {
    rows: u32,
    triples_n: u32,
    group: u32,
    triples: CudaSlice<u32>,
    entity_offsets: CudaSlice<u32>,
    entity_items: CudaSlice<u32>,
    relation_offsets: CudaSlice<u32>,
    relation_items: CudaSlice<u32>,
}

impl DeviceKgeBatch {
    /// Check `batch` against `shape`, build its contribution lists and upload both.
    pub fn upload(
        stream: &Arc<CudaStream>,
        shape: &KgeShape,
        batch: &KgeBatch,
    ) -> Result<Self, GpuError> {
        batch.check(shape)?;
        let c = Contributions::build(batch, shape.relations);
        let flat: Vec<u32> = batch.triples.iter().flatten().copied().collect();
        Ok(DeviceKgeBatch {
            rows: count_u32("batch rows", batch.rows)?,
            triples_n: count_u32("scored triples", batch.triples.len())?,
            group: count_u32("group", batch.group)?,
            triples: upload(stream, &flat)?,
            entity_offsets: upload(stream, &c.entity_offsets)?,
            entity_items: upload(stream, &c.entity_items)?,
            relation_offsets: upload(stream, &c.relation_offsets)?,
            relation_items: upload(stream, &c.relation_items)?,
        })
    }

    /// Number of entity rows.
    pub fn rows(&self) -> usize {
        self.rows as usize
    }
}

/// The KGE step on the device. The relation parameters (dense: every batch may touch them) live
/// here, on the device, and are updated in the order steps are called — the computation order.
///
/// ```no_run
/// use ordo_gpu::kge::{DeviceKgeBatch, KgeHyper, KgeKernels, KgeModel, KgeShape};
/// let gpu = ordo_gpu::Gpu::open(0)?;
/// let stream = gpu.new_stream()?;
/// let shape = KgeShape { model: KgeModel::ComplEx, dim: 64, relations: 18 };
/// let mut k = KgeKernels::new(&gpu, stream.clone(), shape, &vec![0.1; 18 * 128])?;
/// # let batch = ordo_gpu::kge::KgeBatch { rows: 2, triples: vec![[0, 0, 1]], group: 1 };
/// let b = DeviceKgeBatch::upload(&stream, &shape, &batch)?;
/// let mut rows = stream.clone_htod(&vec![0.1f32; 2 * 128])?;
/// k.step(&b, &mut rows, &KgeHyper::new(0.1))?;
/// println!("loss {}", k.last_loss()?);
/// # Ok::<(), ordo_gpu::GpuError>(())
/// ```
#[derive(Debug)]
pub struct KgeKernels {
    shape: KgeShape,
    stream: Arc<CudaStream>,
    f_scores: CudaFunction,
    f_loss: CudaFunction,
    f_entity_grad: CudaFunction,
    f_relation_grad: CudaFunction,
    f_adagrad: CudaFunction,
    relations: CudaSlice<f32>,
    scores: CudaSlice<f32>,
    coef: CudaSlice<f32>,
    losses: CudaSlice<f32>,
    entity_grad: CudaSlice<f32>,
    relation_grad: CudaSlice<f32>,
    last: Option<(usize, usize, usize)>,
}

impl KgeKernels {
    /// Compile the kernels and upload the relation rows (`relations × 2·dim`: parameters, then
    /// Adagrad sums).
    pub fn new(
        gpu: &Gpu,
        stream: Arc<CudaStream>,
        shape: KgeShape,
        relations: &[f32],
    ) -> Result<Self, GpuError> {
        check_shape(&shape)?;
        check_params(&shape, 0, 0, relations.len())?;
        count_u32("embedding size", 2 * shape.dim)?;
        count_u32("relations", shape.relations)?;
        let f = kernels::load(gpu, "kge.cu", kernels::KGE_SRC, &kernels::KGE_KERNELS)?;
        let [f_scores, f_loss, f_entity_grad, f_relation_grad, f_adagrad]: [CudaFunction; 5] =
            f.try_into().map_err(|_| GpuError::Pipeline("kernel count"))?;
        Ok(KgeKernels {
            relations: upload(&stream, relations)?,
            scores: zeros(&stream, 1)?,
            coef: zeros(&stream, 1)?,
            losses: zeros(&stream, 1)?,
            entity_grad: zeros(&stream, 1)?,
            relation_grad: zeros(&stream, shape.relations * shape.dim)?,
            stream,
            shape,
            f_scores,
            f_loss,
            f_entity_grad,
            f_relation_grad,
            f_adagrad,
            last: None,
        })
    }

    /// The shapes.
    pub fn shape(&self) -> &KgeShape {
        &self.shape
    }

    /// The stream the kernels run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// One step: scores, loss coefficients, gradients, then Adagrad on the batch's entity
    /// rows (`entities`: `batch.rows() × 2·dim` floats on the device, updated in place) and on
    /// every relation row.
    pub fn step(
        &mut self,
        batch: &DeviceKgeBatch,
        entities: &mut CudaSlice<f32>,
        hyper: &KgeHyper,
    ) -> Result<(), GpuError> {
        let d = self.shape.dim;
        let rows = batch.rows();
        let need = rows * 2 * d;
        if entities.len() < need {
            return Err(super::KgeError::LengthMismatch {
                what: "entity rows",
                expected: need,
                got: entities.len(),
            }
            .into());
        }
        let n = batch.triples_n as usize;
        let groups = n.checked_div(batch.group as usize).unwrap_or(0);
        self.last = Some((n, groups, rows));
        if n == 0 {
            return Ok(());
        }
        ensure(&self.stream, &mut self.scores, n)?;
        ensure(&self.stream, &mut self.coef, n)?;
        ensure(&self.stream, &mut self.losses, groups)?;
        ensure(&self.stream, &mut self.entity_grad, rows * d)?;

        let (model, dim) = (self.shape.model.code(), d as u32);
        let nrel = self.shape.relations as u32;
        let groups_u = groups as u32;
        let loss_kind = hyper.loss.code();
        let s = &self.stream;
        let grad_threads = (dim.div_ceil(32) * 32).min(256);

        let mut l = s.launch_builder(&self.f_scores);
        l.arg(&model).arg(&dim).arg(&batch.triples_n).arg(&batch.triples).arg(&*entities);
        l.arg(&self.relations).arg(&mut self.scores);
        // SAFETY: matches `kge_scores`; triples index rows < batch.rows (checked at upload) and
        // relations < shape.relations; `entities`/`relations` hold those rows of 2·dim floats;
        // `scores` holds ≥ n floats.
        unsafe { l.launch(cfg(n.div_ceil(4), 128)) }?;

        let mut l = s.launch_builder(&self.f_loss);
        l.arg(&groups_u).arg(&batch.group).arg(&loss_kind).arg(&hyper.reg).arg(&dim);
        l.arg(&batch.triples).arg(&*entities).arg(&self.relations);
        l.arg(&self.scores).arg(&mut self.coef).arg(&mut self.losses);
        // SAFETY: matches `kge_loss`; `groups × group = n` scores and coefficients, `groups`
        // losses; the positives' triples index rows and relations as for `kge_scores`.
        unsafe { l.launch(cfg(groups.div_ceil(128), 128)) }?;

        let mut l = s.launch_builder(&self.f_entity_grad);
        l.arg(&model).arg(&dim).arg(&batch.rows).arg(&batch.group).arg(&hyper.reg);
        l.arg(&batch.entity_offsets);
        l.arg(&batch.entity_items).arg(&batch.triples).arg(&self.coef).arg(&*entities);
        l.arg(&self.relations).arg(&mut self.entity_grad);
        // SAFETY: matches `kge_entity_grad`; offsets has rows + 1 entries bounding items, whose
        // score indices are < n; `entity_grad` holds rows × dim floats.
        unsafe { l.launch(cfg(rows, grad_threads)) }?;

        let mut l = s.launch_builder(&self.f_relation_grad);
        l.arg(&model).arg(&dim).arg(&nrel).arg(&batch.group).arg(&hyper.reg);
        l.arg(&batch.relation_offsets).arg(&batch.relation_items).arg(&batch.triples);
        l.arg(&self.coef).arg(&*entities).arg(&self.relations).arg(&mut self.relation_grad);
        // SAFETY: matches `kge_relation_grad`; offsets has relations + 1 entries;
        // `relation_grad` holds relations × dim floats.
        unsafe { l.launch(cfg(self.shape.relations, grad_threads)) }?;

        for (params, grad, count) in [
            (&mut *entities, &self.entity_grad, rows),
            (&mut self.relations, &self.relation_grad, self.shape.relations),
        ] {
            let count_u = count as u32;
            let mut l = s.launch_builder(&self.f_adagrad);
            l.arg(&count_u).arg(&dim).arg(params).arg(grad).arg(&hyper.lr).arg(&hyper.eps);
            // SAFETY: matches `kge_adagrad`; `params` holds count rows of 2·dim floats and
            // `grad` count × dim floats; both gradient kernels are ordered before on `s`.
            unsafe { l.launch(cfg((count * d).div_ceil(256), 256)) }?;
        }
        Ok(())
    }

    fn download(&self, buf: &CudaSlice<f32>, len: usize) -> Result<Vec<f32>, GpuError> {
        let mut v = self.stream.clone_dtoh(buf)?;
        v.truncate(len);
        Ok(v)
    }

    /// The relation rows (blocking copy).
    pub fn relations(&self) -> Result<Vec<f32>, GpuError> {
        self.download(&self.relations, self.shape.relations * 2 * self.shape.dim)
    }

    /// The last step's loss, summed over the groups on the host in group order (blocking).
    pub fn last_loss(&self) -> Result<f64, GpuError> {
        let (_, groups, _) = self.last.ok_or(GpuError::Pipeline("no step yet"))?;
        let losses = self.download(&self.losses, groups)?;
        Ok(losses.iter().map(|&x| f64::from(x)).sum::<f64>())
    }

    /// The last step's scores, coefficients, entity and relation gradients (blocking; tests).
    pub fn last_intermediates(&self) -> Result<[Vec<f32>; 4], GpuError> {
        let (n, _, rows) = self.last.ok_or(GpuError::Pipeline("no step yet"))?;
        let d = self.shape.dim;
        Ok([
            self.download(&self.scores, n)?,
            self.download(&self.coef, n)?,
            self.download(&self.entity_grad, rows * d)?,
            self.download(&self.relation_grad, self.shape.relations * d)?,
        ])
    }
}
