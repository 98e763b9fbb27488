//! Batches in flight over a host table: the driver that runs a device stage with `depth`
//! batches in flight against a table standing in for the store ([`run_over`]), the interface
//! it drives ([`BatchQueue`], implemented by the CUDA [`Pipeline`](crate::pipeline::Pipeline)),
//! and [`SimQueue`], the same queue on the host (host step, host port of the cache) so the
//! driver and the "Oac at any depth equals Sync" claim are tested without a GPU.

use crate::cache::{CacheConfig, CacheError, HostBatch, SimValidationCache, check_len, check_rows};
use crate::error::GpuError;
use std::collections::VecDeque;

/// A finished batch handed back by [`BatchQueue::collect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    /// The batch's timestamp (submission order from 0).
    pub ts: u64,
    /// Its number of rows (the values are in the caller's buffer).
    pub rows: usize,
    /// Rows validation replaced from the cache.
    pub replaced: usize,
}

/// A device stage that takes batches in order and hands them back in order, with up to
/// `depth` in flight. Compute happens in submission order (that is the computation order);
/// `ts` counts submissions from 0.
pub trait BatchQueue {
    /// The per-batch payload of the step.
    type Data;
    /// Batches in flight at most.
    fn depth(&self) -> usize;
    /// Rows per batch at most.
    fn max_rows(&self) -> usize;
    /// Floats per row.
    fn width(&self) -> usize;
    /// Batches submitted and not yet collected.
    fn in_flight(&self) -> usize;
    /// Queue a batch (rows strictly increasing, the versions it read, its values, the STE to
    /// evict with before it validates); returns its ts. Fails when `depth` are in flight.
    fn submit(
        &mut self,
        rows: &[u64],
        read_versions: &[u64],
        values: &[f32],
        ste: u64,
        data: &Self::Data,
    ) -> Result<u64, GpuError>;
    /// The oldest batch in flight, its stepped values copied into `values`; `None` if idle.
    fn collect(&mut self, values: &mut [f32]) -> Result<Option<Collected>, GpuError>;
}

/// What [`run_over`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Batches run.
    pub batches: usize,
    /// Rows replaced by validation, over all batches.
    pub replaced: usize,
}

/// Run `batches` (`(rows, data)`, rows strictly increasing) through `q` against a host table
/// standing in for the store: `table` (`rows × width`, e.g. pinned memory) and `versions` (one
/// version word per row).
///
/// Like the engine's readers, the driver reads batches ahead: batch `k + read_ahead` is read
/// (gathered from the table with its versions) before batch `k` is submitted, so a batch waits
/// between its read and its validation while later-read and earlier-submitted batches change
/// the rows. A collected batch is written back stamped `ts + 1` (in order, so always the newest).
/// Every read batch records its read prefix (batches written back when it read); the STE handed
/// with a submission is the minimum prefix over every batch read and not yet collected — what
/// `ordo::outstanding::Outstanding::ste` computes.
///
/// With `depth = 1, read_ahead = 0` this is the sequential run; with a validation cache
/// (`Oac`) any depth and read-ahead give the same table bit for bit (for a deterministic step);
/// without one (`Async`) overlapping batches lose updates.
pub fn run_over<Q: BatchQueue>(
    q: &mut Q,
    table: &mut [f32],
    versions: &mut [u64],
    batches: &[(Vec<u64>, Q::Data)],
    read_ahead: usize,
) -> Result<RunStats, GpuError> {
    let w = q.width();
    check_len("table", versions.len() * w, table.len())?;
    if q.in_flight() != 0 {
        return Err(GpuError::Pipeline("run_over needs an idle queue"));
    }
    let (depth, max_rows) = (q.depth(), q.max_rows());
    for (rows, _) in batches {
        if rows.len() > max_rows {
            return Err(GpuError::TooLarge {
                what: "batch rows (above max_rows)",
                elems: rows.len(),
            });
        }
        if rows.iter().any(|&r| r as usize >= versions.len()) {
            return Err(GpuError::Pipeline("batch row outside the table"));
        }
    }
    let mut stats = RunStats::default();
    // Read and not yet submitted: (values, read versions, read prefix), in batch order.
    let mut pending: VecDeque<(Vec<f32>, Vec<u64>, u64)> = VecDeque::new();
    // Read prefixes of the submitted, not yet collected batches, oldest first.
    let mut submitted: VecDeque<u64> = VecDeque::with_capacity(depth);
    let mut spare: Vec<(Vec<f32>, Vec<u64>)> = Vec::new();
    let mut written = 0u64;
    let mut out = vec![0.0; max_rows * w];
    let mut first_ts = None;
    let mut next_read = 0;
    for k in 0..batches.len() {
        if q.in_flight() == depth {
            collect_and_write_back(q, table, versions, batches, first_ts, &mut out, &mut stats)?;
            submitted.pop_front();
            written += 1;
        }
        while next_read < batches.len() && next_read <= k + read_ahead {
            let rows = &batches[next_read].0;
            let (mut values, mut read) = spare.pop().unwrap_or_default();
            values.clear();
            read.clear();
            for &r in rows {
                let r = r as usize;
                values.extend_from_slice(&table[r * w..(r + 1) * w]);
                read.push(versions[r]);
            }
            pending.push_back((values, read, written));
            next_read += 1;
        }
        let (values, read, prefix) =
            pending.pop_front().ok_or(GpuError::Pipeline("batch not read"))?;
        submitted.push_back(prefix);
        let ste = submitted.iter().chain(pending.iter().map(|p| &p.2)).copied().min();
        let ts = q.submit(&batches[k].0, &read, &values, ste.unwrap_or(prefix), &batches[k].1)?;
        first_ts.get_or_insert(ts);
        spare.push((values, read));
    }
    while q.in_flight() > 0 {
        collect_and_write_back(q, table, versions, batches, first_ts, &mut out, &mut stats)?;
    }
    Ok(stats)
}

/// Collect the oldest batch in flight and write its rows back, stamped `ts + 1`.
fn collect_and_write_back<Q: BatchQueue>(
    q: &mut Q,
    table: &mut [f32],
    versions: &mut [u64],
    batches: &[(Vec<u64>, Q::Data)],
    first_ts: Option<u64>,
    out: &mut [f32],
    stats: &mut RunStats,
) -> Result<(), GpuError> {
    let w = q.width();
    let c = q.collect(out)?.ok_or(GpuError::Pipeline("nothing in flight"))?;
    let rows = &batches[(c.ts - first_ts.unwrap_or(0)) as usize].0;
    for (i, &r) in rows.iter().enumerate() {
        let r = r as usize;
        table[r * w..(r + 1) * w].copy_from_slice(&out[i * w..(i + 1) * w]);
        versions[r] = c.ts + 1;
    }
    stats.batches += 1;
    stats.replaced += c.replaced;
    Ok(())
}

/// A step on host rows (`rows × width` floats, in place), for [`SimQueue`].
pub type HostStep<'a, D> = dyn FnMut(&D, &mut [f32]) + 'a;

/// [`BatchQueue`] on the host: the step runs at submission (as the GPU's compute stream runs
/// kernels in submission order), results wait in a queue until collected; with a cache, each
/// batch is evicted, validated and inserted exactly as the CUDA pipeline does it.
pub struct SimQueue<'a, D> {
    depth: usize,
    max_rows: usize,
    width: usize,
    cache: Option<SimValidationCache>,
    step: Box<HostStep<'a, D>>,
    done: VecDeque<(Collected, Vec<f32>)>,
    next_ts: u64,
}

impl<'a, D> SimQueue<'a, D> {
    /// A queue of `depth` slots; `cache: Some(config)` for `Oac`.
    pub fn new(
        depth: usize,
        max_rows: usize,
        width: usize,
        cache: Option<CacheConfig>,
        step: Box<HostStep<'a, D>>,
    ) -> Result<Self, GpuError> {
        if depth == 0 {
            return Err(GpuError::Pipeline("depth must be at least 1"));
        }
        let cache = cache.map(SimValidationCache::new_host).transpose()?;
        Ok(SimQueue { depth, max_rows, width, cache, step, done: VecDeque::new(), next_ts: 0 })
    }
}

impl<D> BatchQueue for SimQueue<'_, D> {
    type Data = D;

    fn depth(&self) -> usize {
        self.depth
    }

    fn max_rows(&self) -> usize {
        self.max_rows
    }

    fn width(&self) -> usize {
        self.width
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn submit(
        &mut self,
        rows: &[u64],
        read_versions: &[u64],
        values: &[f32],
        ste: u64,
        data: &D,
    ) -> Result<u64, GpuError> {
        if self.done.len() == self.depth {
            return Err(GpuError::Pipeline("all slots are in flight: collect first"));
        }
        check_rows(rows)?;
        check_len("read versions", rows.len(), read_versions.len())?;
        if rows.len() > self.max_rows {
            return Err(GpuError::TooLarge {
                what: "batch rows (above max_rows)",
                elems: rows.len(),
            });
        }
        let mut b = HostBatch::new(rows.to_vec(), read_versions.to_vec(), values.to_vec());
        let ts = self.next_ts;
        if let Some(cache) = self.cache.as_mut() {
            cache.evict(ste)?;
            cache.check_insert(rows, ts)?;
            cache.validate(&mut b)?;
        }
        (self.step)(data, &mut b.values);
        if let Some(cache) = self.cache.as_mut() {
            cache.insert(&b, ts)?;
        }
        let replaced = b.replaced.iter().filter(|&&v| v != 0).count();
        self.done.push_back((Collected { ts, rows: rows.len(), replaced }, b.values));
        self.next_ts += 1;
        Ok(ts)
    }

    fn collect(&mut self, values: &mut [f32]) -> Result<Option<Collected>, GpuError> {
        let Some((c, v)) = self.done.front() else { return Ok(None) };
        if values.len() < v.len() {
            let e = CacheError::LengthMismatch {
                what: "collect buffer",
                expected: v.len(),
                got: values.len(),
            };
            return Err(e.into());
        }
        values[..v.len()].copy_from_slice(v);
        let c = *c;
        self.done.pop_front();
        Ok(Some(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Rng;

    const ROWS: usize = 60;
    const WIDTH: usize = 3;

    /// Runs `batches` with the "pull" step (a dense bias updated in order, like a relation
    /// parameter) at `depth`, with or without the cache; returns the table and the bias.
    fn run(batches: &[(Vec<u64>, f32)], depth: usize, ahead: usize, oac: bool) -> (Vec<f32>, f32) {
        let mut bias = 0.0f32;
        let live = 2 * depth + ahead + 2;
        let cache = oac.then(|| CacheConfig::for_in_flight(live, 16, WIDTH).unwrap());
        let step = Box::new(|target: &f32, v: &mut [f32]| {
            v.iter_mut().for_each(|x| *x += 0.5 * (target - *x) + bias);
            bias += 0.01;
        });
        let mut q = SimQueue::new(depth, 16, WIDTH, cache, step).unwrap();
        let mut table: Vec<f32> = (0..ROWS * WIDTH).map(|i| i as f32 * 0.1).collect();
        let mut versions = vec![0; ROWS];
        let stats = run_over(&mut q, &mut table, &mut versions, batches, ahead).unwrap();
        assert_eq!(stats.batches, batches.len());
        let stale = depth > 1 || ahead > 0;
        assert_eq!(stats.replaced > 0, oac && stale, "validation replaces stale rows");
        drop(q);
        (table, bias)
    }

    fn batches(seed: u64) -> Vec<(Vec<u64>, f32)> {
        let mut rng = Rng::new(seed);
        (0..120)
            .map(|i| {
                let n = 1 + rng.below(12) as usize;
                (rng.distinct_rows(n, ROWS as u64), i as f32)
            })
            .collect()
    }

    /// The claim the CUDA pipeline test checks on the GPU, checked here with the same driver
    /// and the host port of the cache: Oac at any depth and read-ahead equals Sync bit for bit;
    /// Async does not.
    #[test]
    fn oac_at_any_depth_equals_sync_and_async_does_not() {
        for seed in [1, 2, 3] {
            let b = batches(seed);
            let (sync, sync_bias) = run(&b, 1, 0, false);
            for (depth, ahead) in [(1, 3), (2, 0), (3, 2), (4, 4), (8, 1)] {
                let (t, bias) = run(&b, depth, ahead, true);
                assert_eq!(t, sync, "seed {seed} depth {depth} read-ahead {ahead}");
                assert_eq!(bias.to_bits(), sync_bias.to_bits());
            }
            assert_ne!(run(&b, 4, 4, false).0, sync, "Async must lose updates (seed {seed})");
        }
    }

    #[test]
    fn an_overflow_is_refused_before_the_step_runs() {
        let mut steps = 0;
        let cache = Some(CacheConfig { width: 1, capacity: 2 });
        let step = Box::new(|_: &(), _: &mut [f32]| steps += 1);
        let mut q = SimQueue::new(4, 2, 1, cache, step).unwrap();
        q.submit(&[1, 2], &[0, 0], &[0.0, 0.0], 0, &()).unwrap();
        let err = q.submit(&[3], &[0], &[0.0], 0, &()).unwrap_err();
        assert!(matches!(err, GpuError::Cache(CacheError::Overflow { .. })), "{err}");
        assert_eq!(q.in_flight(), 1);
        // Evicting ts 0 (STE 1) makes room.
        q.submit(&[3], &[0], &[0.0], 1, &()).unwrap();
        drop(q);
        assert_eq!(steps, 2, "the refused batch never reached the step");
    }

    #[test]
    fn queue_misuse_is_a_typed_error() {
        let mut q = SimQueue::new(1, 2, 1, None, Box::new(|_: &(), _: &mut [f32]| {})).unwrap();
        q.submit(&[1], &[0], &[0.0], 0, &()).unwrap();
        assert!(matches!(q.submit(&[2], &[0], &[0.0], 0, &()), Err(GpuError::Pipeline(_))));
        assert!(matches!(q.collect(&mut []), Err(GpuError::Cache(_))));
        assert_eq!(q.collect(&mut [0.0]).unwrap().map(|c| c.ts), Some(0));
        assert!(matches!(
            q.submit(&[1, 2, 3], &[0; 3], &[0.0; 3], 0, &()),
            Err(GpuError::TooLarge { .. })
        ));
        assert!(matches!(q.submit(&[2, 1], &[0; 2], &[0.0; 2], 0, &()), Err(GpuError::Cache(_))));
    }
}
