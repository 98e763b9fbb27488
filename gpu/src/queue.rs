//! Batches in flight on a device queue without a GPU: [`SimQueue`], the host twin of the CUDA
//! [`Pipeline`](crate::pipeline::Pipeline) (the model's host step, the host port of the cache,
//! the same slots and the same order), and [`run_over`], which runs batches through either
//! with the engine's own reader → device → writer driver. Both are the engine's
//! [`DeviceQueue`] directly: the session stamps, and the queue keeps no stamp of its own.

use crate::admission::admit;
use crate::cache::{CacheConfig, HostBatch, SimValidationCache, check_len, check_rows};
use crate::cache_device::{repaired, version_words};
use crate::error::GpuError;
use ordo::engine::{
    Batch, BatchRows, DeviceError, DeviceQueue, Engine, EngineConfig, Mode, Model, QueueCache,
    Staleness, Submission, SubmitError, host_step, validate_batch,
};
use ordo::storage::RowStorage;
use std::collections::VecDeque;

/// The sizes a queue's staging was built for.
pub trait Staging {
    /// Rows per batch at most.
    fn max_rows(&self) -> usize;
    /// Floats per row.
    fn width(&self) -> usize;
}

impl Staging for crate::pipeline::Pipeline {
    fn max_rows(&self) -> usize {
        crate::pipeline::Pipeline::max_rows(self)
    }
    fn width(&self) -> usize {
        crate::pipeline::Pipeline::width(self)
    }
}

/// What [`run_over`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Batches run.
    pub batches: usize,
    /// Rows replaced by validation, over all batches.
    pub replaced: usize,
    /// The largest version gap validation repaired in any batch ([`Staleness::max_gap`]).
    pub max_gap: u64,
}

/// Run `batches` (`(rows, data)`, rows strictly increasing) through `q` with `model` against
/// `store`, with the engine's driver (one epoch of an [`Engine::session`]) in `mode`: one reader
/// gathers rows and versions ahead of the device in the given order (`read_ahead` batches
/// queued between them, at least 1), the device keeps up to its depth in flight, two writers
/// scatter. Every batch is checked before anything runs, so a refused one leaves the store as
/// it was.
pub fn run_over<M, Q, S>(
    q: &mut Q,
    model: &mut M,
    mode: Mode,
    store: &S,
    batches: &[(Vec<u64>, M::Data)],
    read_ahead: usize,
) -> Result<RunStats, GpuError>
where
    M: Model,
    M::Data: Clone,
    Q: DeviceQueue<M> + Staging,
    S: RowStorage + ?Sized,
{
    check_len("store width", q.width(), store.width())?;
    if let Some((rows, _)) = batches.iter().find(|(rows, _)| rows.len() > q.max_rows()) {
        return Err(GpuError::TooLarge { what: "batch rows (above max_rows)", elems: rows.len() });
    }
    let config = EngineConfig::new(mode).threads(1, 2).depths(read_ahead.max(1), q.depth());
    let engine = Engine::new(config).map_err(engine_error)?;
    // The engine takes rows in any order; the device's validation cache takes them sorted.
    for (position, batch) in numbered(batches).enumerate() {
        validate_batch::<_, M::Error>(position, &batch, store.rows()).map_err(engine_error)?;
        check_rows(&batch.rows)?;
    }
    let report = engine
        .session(q, model, store, |s| {
            // Every batch was checked above: a submit fails only once the pipeline stopped,
            // and `finish` then says why.
            let _ = s.submit_all(numbered(batches));
            s.finish()
        })
        .map_err(engine_error)?;
    Ok(RunStats {
        batches: report.order.len(),
        replaced: report.rows_replaced as usize,
        max_gap: report.max_gap(),
    })
}

/// The engine's error, its model's step error boxed, as a [`GpuError`].
fn engine_error<E: std::error::Error + Send + Sync + 'static>(
    e: ordo::engine::EngineError<E>,
) -> GpuError {
    GpuError::Engine(Box::new(e.map_step(ordo::engine::StepError::new)))
}

/// `batches` as engine batches, numbered by position.
fn numbered<D: Clone>(batches: &[(Vec<u64>, D)]) -> impl Iterator<Item = Batch<D>> + '_ {
    batches.iter().enumerate().map(|(i, (rows, data))| Batch {
        id: i as u64,
        rows: rows.clone(),
        data: data.clone(),
    })
}

/// What [`SimQueue`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounts {
    /// Batches collected.
    pub batches: u64,
    /// Times the host would block on the device (one per collect, as the CUDA pipeline's).
    pub waits: u64,
}

/// The CUDA pipeline's orchestration on the host, as the engine's [`DeviceQueue`]: `depth`
/// preallocated staging slots picked by `ts mod depth`, the batch validated, stepped (the
/// model's host step, on the slot's copy: the engine's rows stay as read until collected)
/// and inserted at submission, as the compute stream runs them in submission order; the
/// stepped rows wait in their slot until collected. With a cache (`Oac`) each batch is
/// evicted (by the sequencer), validated and inserted exactly as the CUDA pipeline does it.
#[derive(Debug)]
pub struct SimQueue {
    max_rows: usize,
    width: usize,
    cache: Option<SimValidationCache>,
    slots: Vec<HostBatch>,
    /// `(slot, staleness)` of the batches submitted and not collected, oldest first.
    in_flight: VecDeque<(usize, Staleness)>,
    counts: QueueCounts,
}

impl SimQueue {
    /// A queue of `depth` slots of `max_rows` rows of `width` floats; `cache: Some(config)`
    /// for `Oac`.
    pub fn new(
        depth: usize,
        max_rows: usize,
        width: usize,
        cache: Option<CacheConfig>,
    ) -> Result<Self, GpuError> {
        if depth == 0 {
            return Err(GpuError::Pipeline("depth must be at least 1"));
        }
        let cache = cache.map(SimValidationCache::new_host).transpose()?;
        let slot = || HostBatch {
            rows: Vec::with_capacity(max_rows),
            read_versions: Vec::with_capacity(max_rows),
            values: Vec::with_capacity(max_rows * width),
            replaced: Vec::with_capacity(max_rows),
        };
        Ok(SimQueue {
            max_rows,
            width,
            cache,
            slots: (0..depth).map(|_| slot()).collect(),
            in_flight: VecDeque::with_capacity(depth),
            counts: QueueCounts::default(),
        })
    }

    /// What it counted so far.
    pub fn counts(&self) -> QueueCounts {
        self.counts
    }

    /// Batches submitted and not collected.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Check batch `job` whole and load it into its slot; the slot's index.
    fn load(
        &mut self,
        job: &Submission<'_, impl Sized>,
        rows: &BatchRows<'_>,
    ) -> Result<usize, GpuError> {
        if rows.len() > self.max_rows {
            return Err(GpuError::TooLarge {
                what: "batch rows (above max_rows)",
                elems: rows.len(),
            });
        }
        let taken = self.in_flight.iter().map(|&(s, _)| s);
        let index = admit(job, rows, self.cache.as_ref(), self.slots.len(), taken)?;
        let b = &mut self.slots[index];
        b.rows.clear();
        b.rows.extend_from_slice(rows.ids());
        b.read_versions.clear();
        b.read_versions.extend(version_words(job.read));
        b.values.clear();
        b.values.extend_from_slice(rows.values());
        b.replaced.clear();
        b.replaced.resize(rows.len(), 0);
        Ok(index)
    }
}

impl Staging for SimQueue {
    fn max_rows(&self) -> usize {
        self.max_rows
    }
    fn width(&self) -> usize {
        self.width
    }
}

impl<M: Model> DeviceQueue<M> for SimQueue {
    fn reset(&mut self) -> Result<(), DeviceError> {
        if !self.in_flight.is_empty() {
            return Err(GpuError::Pipeline("a session needs an idle queue").into());
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
        let device = |e: GpuError| SubmitError::Device(e.into());
        let index = self.load(&job, rows).map_err(device)?;
        let b = &mut self.slots[index];
        if let (Some(cache), true) = (self.cache.as_mut(), job.validate) {
            cache.validate(b).map_err(|e| device(e.into()))?;
        }
        let mut stepped = BatchRows::new(&b.rows, self.width, &mut b.values)
            .ok_or_else(|| device(GpuError::Pipeline("slot of another shape")))?;
        host_step(model, job.data, &mut stepped)?;
        if let (Some(cache), true) = (self.cache.as_mut(), job.insert) {
            cache.insert(b, job.ts).map_err(|e| device(e.into()))?;
        }
        let staleness = repaired(b.read_versions.iter().copied(), &b.replaced);
        self.in_flight.push_back((index, staleness));
        Ok(())
    }

    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        let &(index, staleness) =
            self.in_flight.front().ok_or(GpuError::Pipeline("nothing in flight"))?;
        self.counts.waits += 1;
        let values = &self.slots[index].values;
        check_len("collect rows", values.len(), rows.values().len())?;
        rows.values_mut().copy_from_slice(values);
        self.in_flight.pop_front();
        self.counts.batches += 1;
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
    use crate::cache::CacheError;
    use crate::workload::Rng;
    use ordo::engine::simulation::Simulation;
    use ordo::engine::{AsyncWrite, StepError};
    use ordo::row_store::RowStore;

    const ROWS: usize = 60;
    const WIDTH: usize = 3;

    /// Pull each row towards the batch's target and add the dense `bias`, which then advances
    /// (a relation parameter updated in order).
    struct Pull {
        bias: f32,
    }

    impl Model for Pull {
        type Data = f32;
        type Error = StepError;
        fn row_width(&self) -> usize {
            WIDTH
        }
        fn step(&mut self, target: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
            let bias = self.bias;
            rows.values_mut().iter_mut().for_each(|x| *x += 0.5 * (target - *x) + bias);
            self.bias += 0.01;
            Ok(())
        }
        fn dense(&self) -> Vec<f32> {
            vec![self.bias]
        }
    }

    /// Runs `batches` with [`Pull`] through a [`SimQueue`] of `depth` slots, with or without
    /// the cache, through the engine's driver in the deterministic simulation: `ahead` batches
    /// may wait read between the readers and the device, and `schedule` picks the stages'
    /// actions. Returns the table, the bias, the largest version gap validation repaired and
    /// the queue's counts.
    fn run(
        batches: &[(Vec<u64>, f32)],
        depth: usize,
        ahead: usize,
        mode: Mode,
        schedule: &[u8],
    ) -> (Vec<f32>, f32, u64, QueueCounts) {
        let live = 2 * depth + ahead + 2;
        let cache =
            (mode == Mode::Oac).then(|| CacheConfig::for_in_flight(live, 16, WIDTH).unwrap());
        let mut q = SimQueue::new(depth, 16, WIDTH, cache).unwrap();
        let store = initial_store();
        // One reader: the computation order is the order of `batches`, as in Sync.
        let config = EngineConfig::new(mode).threads(1, 2).depths(ahead.max(1), depth);
        let device = Box::new(&mut q);
        let sim =
            Simulation::with_device(config, device, Pull { bias: 0.0 }, &store, numbered(batches))
                .unwrap();
        let (model, report) = sim.run(schedule).unwrap();
        assert_eq!(report.order.len(), batches.len());
        for st in report.order.iter().map(|s| s.staleness) {
            assert_eq!(st.replaced > 0, st.max_gap > 0, "a replaced row is at least 1 behind");
        }
        (store.snapshot(), model.bias, report.max_gap(), q.counts())
    }

    /// The table every run starts from.
    fn initial_store() -> RowStore {
        RowStore::from_fn(ROWS, WIDTH, |r, c| (r * WIDTH + c) as f32 * 0.1)
    }

    /// Readers first: every reader action before any other, so batches are read long before
    /// the device takes them (the stalest schedule).
    fn readers_first(seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        (0..4000).map(|i| if i % 7 == 0 { rng.below(256) as u8 } else { 0 }).collect()
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

    /// The claim the CUDA pipeline test checks on the GPU, checked here with the engine's
    /// driver and the host twin of the pipeline: Oac at every depth 1–8 and several read-aheads
    /// equals Sync bit for bit; Async does not. The host waits once per batch.
    #[test]
    fn oac_at_any_depth_equals_sync_and_async_does_not() {
        for seed in [1, 2, 3] {
            let b = batches(seed);
            let schedule = readers_first(seed);
            let (sync, sync_bias, _, _) = run(&b, 1, 0, Mode::Sync, &schedule);
            for depth in 1..=8 {
                let ahead = [3, 0, 2, 4, 1][depth % 5];
                let (t, bias, gap, counts) = run(&b, depth, ahead, Mode::Oac, &schedule);
                assert_eq!(t, sync, "seed {seed} depth {depth} read-ahead {ahead}");
                assert_eq!(bias.to_bits(), sync_bias.to_bits());
                assert_eq!(counts, QueueCounts { batches: 120, waits: 120 }, "one wait a batch");
                // Readers first: with more than two batches between a read and its validation,
                // some row is more than one version behind, and the queue says by how much.
                if depth + ahead > 2 {
                    assert!(gap >= 2, "seed {seed} depth {depth} read-ahead {ahead}: gap {gap}");
                }
            }
            let asy = run(&b, 4, 4, Mode::Async(AsyncWrite::Overwrite), &schedule).0;
            assert_ne!(asy, sync, "Async must lose updates (seed {seed})");
        }
    }

    /// The threaded engine over the queue ([`run_over`]) gives the same store as Sync.
    #[test]
    fn run_over_on_threads_equals_sync() {
        let b = batches(4);
        let (sync, _, _, _) = run(&b, 1, 0, Mode::Sync, &[]);
        let cache = Some(CacheConfig::for_in_flight(2 * 4 + 4 + 2, 16, WIDTH).unwrap());
        let mut q = SimQueue::new(4, 16, WIDTH, cache).unwrap();
        let store = initial_store();
        let stats = run_over(&mut q, &mut Pull { bias: 0.0 }, Mode::Oac, &store, &b, 4).unwrap();
        assert_eq!(stats.batches, b.len());
        assert_eq!(stats.replaced > 0, stats.max_gap > 0, "{stats:?}");
        assert_eq!(store.snapshot(), sync);
    }

    /// `Oac` on a queue without a validation cache is refused at its first batch, and nothing
    /// is written.
    #[test]
    fn oac_without_a_cache_is_refused() {
        let store = RowStore::zeros(ROWS, WIDTH);
        let b = batches(5);
        let mut q = SimQueue::new(2, 16, WIDTH, None).unwrap();
        let err = run_over(&mut q, &mut Pull { bias: 0.0 }, Mode::Oac, &store, &b, 1).unwrap_err();
        assert!(matches!(err, GpuError::Engine(_)), "{err}");
        assert_eq!(q.in_flight(), 0);
        assert_eq!(store.snapshot(), vec![0.0; ROWS * WIDTH], "nothing written");
    }

    /// A batch whose rows are not increasing is refused before anything is queued: the engine
    /// takes rows in any order, the device's validation cache only sorted ones.
    #[test]
    fn rows_out_of_order_are_refused_before_anything_runs() {
        let mut b = batches(4);
        let k = b.iter().position(|(rows, _)| rows.len() > 1).expect("a batch of two rows");
        b[k].0.reverse();
        let cache = Some(CacheConfig::for_in_flight(2 * 4 + 4 + 2, 16, WIDTH).unwrap());
        let mut q = SimQueue::new(4, 16, WIDTH, cache).unwrap();
        let store = initial_store();
        let before = store.snapshot();
        let err = run_over(&mut q, &mut Pull { bias: 0.0 }, Mode::Oac, &store, &b, 4).unwrap_err();
        assert!(matches!(err, GpuError::Cache(CacheError::RowsNotSorted { .. })), "{err}");
        assert_eq!(q.in_flight(), 0);
        assert_eq!(store.snapshot(), before, "nothing written");
    }

    /// Drive the queue as the sequencer does: evict, submit at `ts`, later collect.
    fn submit(q: &mut SimQueue, ts: u64, ids: &[u64], read: &[Option<u64>]) -> Result<(), String> {
        let mut values = vec![0.0; ids.len()];
        let mut rows = BatchRows::new(ids, 1, &mut values).unwrap();
        let job = Submission { ts, batch_id: ts, validate: true, insert: true, read, data: &() };
        DeviceQueue::<Count>::submit(q, &mut Count, job, &mut rows).map_err(|e| format!("{e:?}"))
    }

    /// Adds 1 to row 0's first float.
    struct Count;

    impl Model for Count {
        type Data = ();
        type Error = StepError;
        fn row_width(&self) -> usize {
            1
        }
        fn step(&mut self, _: &(), rows: &mut BatchRows<'_>) -> Result<(), StepError> {
            rows.values_mut()[0] += 1.0;
            Ok(())
        }
        fn dense(&self) -> Vec<f32> {
            Vec::new()
        }
    }

    /// A collected batch carries the staleness its validation repaired, gap included.
    #[test]
    fn a_collected_batch_reports_its_version_gap() {
        let cache = Some(CacheConfig { width: 1, capacity: 8 });
        let mut q = SimQueue::new(4, 2, 1, cache).unwrap();
        // Three batches all read row 1 before the run, row 2 too.
        for ts in 0..3 {
            submit(&mut q, ts, &[1, 2], &[None, None]).unwrap();
        }
        // Only row 2 of the last one is kept: it read ts 2, the newest.
        submit(&mut q, 3, &[1, 2], &[None, Some(2)]).unwrap();
        let mut got = Vec::new();
        let mut v = [0.0; 2];
        while q.in_flight() > 0 {
            let mut rows = BatchRows::new(&[1, 2], 1, &mut v).unwrap();
            let st = DeviceQueue::<Count>::collect(&mut q, &mut rows).unwrap();
            got.push((st.replaced, st.max_gap));
        }
        // ts 1: both rows replaced by ts 0's, 1 behind; ts 2: by ts 1's, 2 behind.
        assert_eq!(got, [(0, 0), (2, 1), (2, 2), (1, 3)]);
        assert_eq!(v, [4.0, 0.0], "ts 3's row 1 came from the cache, its row 2 as read");
    }

    #[test]
    fn an_overflow_is_refused_before_the_step_runs() {
        let cache = Some(CacheConfig { width: 1, capacity: 2 });
        let mut q = SimQueue::new(4, 2, 1, cache).unwrap();
        submit(&mut q, 0, &[1, 2], &[None, None]).unwrap();
        let err = submit(&mut q, 1, &[3], &[None]).unwrap_err();
        assert!(err.contains("Overflow"), "{err}");
        assert_eq!(q.in_flight(), 1);
        // Evicting ts 0 (STE 1) makes room.
        DeviceQueue::<Count>::evict(&mut q, 1).unwrap();
        submit(&mut q, 1, &[3], &[None]).unwrap();
        assert_eq!(q.in_flight(), 2);
    }

    #[test]
    fn queue_misuse_is_a_typed_error() {
        let mut q = SimQueue::new(1, 2, 1, Some(CacheConfig { width: 1, capacity: 8 })).unwrap();
        submit(&mut q, 0, &[1], &[None]).unwrap();
        assert!(submit(&mut q, 1, &[2], &[None]).unwrap_err().contains("in flight"));
        let mut v = [0.0; 2];
        let mut rows = BatchRows::new(&[1, 2], 1, &mut v).unwrap();
        assert!(DeviceQueue::<Count>::collect(&mut q, &mut rows).is_err(), "another shape");
        let mut v = [0.0];
        let mut rows = BatchRows::new(&[1], 1, &mut v).unwrap();
        assert!(DeviceQueue::<Count>::collect(&mut q, &mut rows).is_ok());
        assert!(DeviceQueue::<Count>::collect(&mut q, &mut rows).is_err(), "nothing in flight");
        assert!(submit(&mut q, 1, &[1, 2, 3], &[None; 3]).unwrap_err().contains("TooLarge"));
        assert!(submit(&mut q, 1, &[2, 1], &[None; 2]).unwrap_err().contains("RowsNotSorted"));
    }
}
