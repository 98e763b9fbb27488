//! Batches in flight on a device queue: the interface a queue offers ([`BatchQueue`],
//! implemented by the CUDA [`Pipeline`](crate::pipeline::Pipeline)), its adapter to the engine's
//! [`DeviceQueue`] ([`QueueDevice`]), [`run_over`], which runs batches through a queue with the
//! engine's own reader → device → writer driver, and [`SimQueue`], the same queue on the host
//! (host step, host port of the cache) so the driver and the "Oac at any depth equals Sync"
//! claim are tested without a GPU.

use crate::cache::{CacheConfig, CacheError, HostBatch, SimValidationCache, check_len, check_rows};
use crate::cache_device::{repaired, version_words};
use crate::error::GpuError;
use ordo::engine::{
    Batch, BatchRows, DeviceError, DeviceQueue, Engine, EngineConfig, Mode, Model, Staleness,
    StepError, Submission, SubmitError, validate_batch,
};
use ordo::storage::RowStorage;
use std::collections::VecDeque;
use std::marker::PhantomData;

/// A finished batch handed back by [`BatchQueue::collect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    /// The batch's timestamp (submission order from 0).
    pub ts: u64,
    /// Its number of rows (the values are in the caller's buffer).
    pub rows: usize,
    /// What validation repaired: the rows replaced from the cache, and the largest version gap
    /// among them, as the engine counts them.
    pub staleness: Staleness,
}

impl Collected {
    /// Batch `ts` of `rows` rows, with the staleness its validation repaired: per row the
    /// version read and the version that replaced it (`0`: kept).
    pub(crate) fn new(ts: u64, rows: usize, read_versions: &[u64], replaced: &[u64]) -> Self {
        Collected { ts, rows, staleness: repaired(read_versions.iter().copied(), replaced) }
    }
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
    /// The ts the next submission gets.
    fn next_ts(&self) -> u64;
    /// Whether it has a validation cache (evicts, validates and inserts: `Oac`).
    fn validates(&self) -> bool;
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

/// A [`BatchQueue`] as the engine's [`DeviceQueue`]: the engine stamps, reads, admits and
/// writes; the queue evicts, validates, steps and inserts on the device, in submission order.
///
/// The queue's stamps must be the engine's: a fresh queue per session (both count from 0), or
/// one whose [`next_ts`](BatchQueue::next_ts) is the session's. A mismatch is refused before
/// the batch is queued, and so is a mode that disagrees with the queue's cache (`Oac` needs
/// one; the other modes must not validate).
#[derive(Debug)]
pub struct QueueDevice<'q, Q> {
    queue: &'q mut Q,
}

impl<'q, Q: BatchQueue> QueueDevice<'q, Q> {
    /// The engine's view of `queue`.
    pub fn new(queue: &'q mut Q) -> Self {
        QueueDevice { queue }
    }
}

impl<M: Model<Data = Q::Data>, Q: BatchQueue> DeviceQueue<M> for QueueDevice<'_, Q> {
    fn reset(&mut self) -> Result<(), DeviceError> {
        if self.queue.in_flight() != 0 {
            return Err(GpuError::Pipeline("a session needs an idle queue").into());
        }
        Ok(())
    }

    fn depth(&self) -> usize {
        self.queue.depth()
    }

    fn submit(
        &mut self,
        _model: &mut M,
        job: Submission<'_, M::Data>,
        rows: &mut BatchRows<'_>,
    ) -> Result<(), SubmitError<M::Error>> {
        let refuse = |why| Err(SubmitError::Device(GpuError::Pipeline(why).into()));
        if job.ts != self.queue.next_ts() {
            return refuse("the queue's stamps are not the engine's: use a fresh queue");
        }
        if job.validate != self.queue.validates() || job.insert != self.queue.validates() {
            return refuse(
                "Oac needs a queue with a validation cache, the other modes one without; \
                 a batch of Session::submit_inline is not validated: submit it with submit",
            );
        }
        let read: Vec<u64> = version_words(job.read).collect();
        let dev = |e: GpuError| SubmitError::Device(e.into());
        self.queue.submit(rows.ids(), &read, rows.values(), job.ste, job.data).map_err(dev)?;
        Ok(())
    }

    fn collect(&mut self, rows: &mut BatchRows<'_>) -> Result<Staleness, DeviceError> {
        let c = self
            .queue
            .collect(rows.values_mut())?
            .ok_or(GpuError::Pipeline("nothing in flight"))?;
        Ok(c.staleness)
    }

    fn cache_len(&self) -> usize {
        0
    }
}

/// The engine's model for a step that runs inside the queue: it names the row width and the
/// batch payload; the host never steps (a call is an error), and it has no dense parameters on
/// the host (a device step keeps its own, e.g. [`KgeDeviceStep`](crate::pipeline::KgeDeviceStep)'s
/// relations).
pub struct OnDevice<D> {
    width: usize,
    data: PhantomData<fn(&D)>,
}

impl<D> OnDevice<D> {
    /// Rows of `width` floats.
    pub fn new(width: usize) -> Self {
        OnDevice { width, data: PhantomData }
    }
}

impl<D: Send + Sync + 'static> Model for OnDevice<D> {
    type Data = D;
    type Error = StepError;
    fn row_width(&self) -> usize {
        self.width
    }
    fn step(&mut self, _: &D, _: &mut BatchRows<'_>) -> Result<(), StepError> {
        Err("the step runs on the device queue, not on the host".into())
    }
    fn dense(&self) -> Vec<f32> {
        Vec::new()
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

/// Run `batches` (`(rows, data)`, rows strictly increasing) through `q` against `store`, with
/// the engine's driver (one epoch of an [`Engine::session`]) in `mode`: one reader gathers rows and versions
/// ahead of the device in the given order (`read_ahead` batches queued between them, at least
/// 1), so the computation order is the order of `batches`; the queue keeps up to its depth in
/// flight; two writers write collected batches back. `Mode::Oac` needs a queue
/// with a validation cache; then any depth and read-ahead give the store of `Mode::Sync` bit for
/// bit (for a deterministic step); `Async` promises nothing.
pub fn run_over<Q, S>(
    q: &mut Q,
    mode: Mode,
    store: &S,
    batches: &[(Vec<u64>, Q::Data)],
    read_ahead: usize,
) -> Result<RunStats, GpuError>
where
    Q: BatchQueue,
    Q::Data: Clone + Send + Sync + 'static,
    S: RowStorage + ?Sized,
{
    check_len("store width", q.width(), store.width())?;
    if let Some((rows, _)) = batches.iter().find(|(rows, _)| rows.len() > q.max_rows()) {
        return Err(GpuError::TooLarge { what: "batch rows (above max_rows)", elems: rows.len() });
    }
    let config = EngineConfig::new(mode).threads(1, 2).depths(read_ahead.max(1), q.depth());
    let engine = Engine::new(config)?;
    let mut model = OnDevice::new(q.width());
    // Every batch is checked before anything runs, so a refused one leaves the store as it was.
    // The engine takes rows in any order; the device's validation cache takes them sorted.
    for (position, batch) in numbered(batches).enumerate() {
        validate_batch::<_, StepError>(position, &batch, store.rows())?;
        check_rows(&batch.rows)?;
    }
    let report = engine.session(&mut QueueDevice::new(q), &mut model, store, |s| {
        // Every batch was checked above: a submit fails only once the pipeline stopped, and
        // `finish` then says why.
        let _ = s.submit_all(numbered(batches));
        s.finish()
    })?;
    Ok(RunStats {
        batches: report.order.len(),
        replaced: report.rows_replaced as usize,
        max_gap: report.max_gap(),
    })
}

/// `batches` as engine batches, numbered by position.
fn numbered<D: Clone>(batches: &[(Vec<u64>, D)]) -> impl Iterator<Item = Batch<D>> + '_ {
    batches.iter().enumerate().map(|(i, (rows, data))| Batch {
        id: i as u64,
        rows: rows.clone(),
        data: data.clone(),
    })
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

    fn next_ts(&self) -> u64 {
        self.next_ts
    }

    fn validates(&self) -> bool {
        self.cache.is_some()
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
        let c = Collected::new(ts, rows.len(), read_versions, &b.replaced);
        self.done.push_back((c, b.values));
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
    use ordo::engine::AsyncWrite;
    use ordo::engine::simulation::Simulation;
    use ordo::store::RowStore;

    const ROWS: usize = 60;
    const WIDTH: usize = 3;

    /// Runs `batches` with the "pull" step (a dense bias updated in order, like a relation
    /// parameter) at `depth`, with or without the cache, through the engine's driver in the
    /// deterministic simulation: `ahead` batches may wait read between the readers and the
    /// device, and `schedule` picks the stages' actions. Returns the table, the bias and the
    /// largest version gap validation repaired.
    fn run(
        batches: &[(Vec<u64>, f32)],
        depth: usize,
        ahead: usize,
        mode: Mode,
        schedule: &[u8],
    ) -> (Vec<f32>, f32, u64) {
        let mut bias = 0.0f32;
        let live = 2 * depth + ahead + 2;
        let cache =
            (mode == Mode::Oac).then(|| CacheConfig::for_in_flight(live, 16, WIDTH).unwrap());
        let mut q = pull_queue(depth, cache, &mut bias);
        let store = initial_store();
        let work = numbered(batches);
        // One reader: the computation order is the order of `batches`, as in Sync.
        let config = EngineConfig::new(mode).threads(1, 2).depths(ahead.max(1), depth);
        let device = Box::new(QueueDevice::new(&mut q));
        let sim =
            Simulation::with_device(config, device, OnDevice::new(WIDTH), &store, work).unwrap();
        let (_, report) = sim.run(schedule).unwrap();
        assert_eq!(report.order.len(), batches.len());
        for st in report.order.iter().map(|s| s.staleness) {
            assert_eq!(st.replaced > 0, st.max_gap > 0, "a replaced row is at least 1 behind");
        }
        drop(q);
        (store.snapshot(), bias, report.max_gap())
    }

    /// A host queue of `depth` slots whose step pulls each row towards the batch's target and
    /// adds the dense `bias`, which it then advances (a relation parameter updated in order).
    fn pull_queue(depth: usize, cache: Option<CacheConfig>, bias: &mut f32) -> SimQueue<'_, f32> {
        let step = Box::new(move |target: &f32, v: &mut [f32]| {
            v.iter_mut().for_each(|x| *x += 0.5 * (target - *x) + *bias);
            *bias += 0.01;
        });
        SimQueue::new(depth, 16, WIDTH, cache, step).unwrap()
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
    /// driver and the host port of the cache: Oac at any depth and read-ahead equals Sync bit
    /// for bit; Async does not.
    #[test]
    fn oac_at_any_depth_equals_sync_and_async_does_not() {
        for seed in [1, 2, 3] {
            let b = batches(seed);
            let schedule = readers_first(seed);
            let (sync, sync_bias, _) = run(&b, 1, 0, Mode::Sync, &schedule);
            for (depth, ahead) in [(1, 3), (2, 0), (3, 2), (4, 4), (8, 1)] {
                let (t, bias, gap) = run(&b, depth, ahead, Mode::Oac, &schedule);
                assert_eq!(t, sync, "seed {seed} depth {depth} read-ahead {ahead}");
                assert_eq!(bias.to_bits(), sync_bias.to_bits());
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
        let (sync, _, _) = run(&b, 1, 0, Mode::Sync, &[]);
        let cache = Some(CacheConfig::for_in_flight(2 * 4 + 4 + 2, 16, WIDTH).unwrap());
        let mut bias = 0.0f32;
        let mut q = pull_queue(4, cache, &mut bias);
        let store = initial_store();
        let stats = run_over(&mut q, Mode::Oac, &store, &b, 4).unwrap();
        assert_eq!(stats.batches, b.len());
        assert_eq!(stats.replaced > 0, stats.max_gap > 0, "{stats:?}");
        assert_eq!(store.snapshot(), sync);
    }

    /// A mode that disagrees with the queue's cache, or a queue whose stamps are not the
    /// engine's, is refused before anything is queued.
    #[test]
    fn a_queue_that_cannot_keep_the_claim_is_refused() {
        let store = RowStore::zeros(ROWS, WIDTH);
        let b = batches(5);
        let no_cache = |_: &f32, _: &mut [f32]| {};
        let mut q = SimQueue::new(2, 16, WIDTH, None, Box::new(no_cache)).unwrap();
        let err = run_over(&mut q, Mode::Oac, &store, &b, 1).unwrap_err();
        assert!(matches!(err, GpuError::Engine(_)), "{err}");
        assert_eq!(q.in_flight(), 0);
        assert_eq!(store.snapshot(), vec![0.0; ROWS * WIDTH], "nothing written");
        // A used queue counts from 1: its stamps would not be the engine's.
        q.submit(&[1], &[0], &[0.0; WIDTH], 0, &0.0).unwrap();
        q.collect(&mut [0.0; WIDTH]).unwrap();
        let err = run_over(&mut q, Mode::Async(AsyncWrite::Overwrite), &store, &b, 1).unwrap_err();
        assert!(matches!(err, GpuError::Engine(_)), "{err}");
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
        let mut bias = 0.0f32;
        let mut q = pull_queue(4, cache, &mut bias);
        let store = initial_store();
        let before = store.snapshot();
        let err = run_over(&mut q, Mode::Oac, &store, &b, 4).unwrap_err();
        assert!(matches!(err, GpuError::Cache(CacheError::RowsNotSorted { .. })), "{err}");
        assert_eq!(q.in_flight(), 0);
        assert_eq!(store.snapshot(), before, "nothing written");
    }

    /// A collected batch carries the staleness its validation repaired, gap included, and the
    /// engine's view of the queue reports it as the CPU path does.
    #[test]
    fn a_collected_batch_reports_its_version_gap() {
        let cache = Some(CacheConfig { width: 1, capacity: 8 });
        let mut q =
            SimQueue::new(4, 2, 1, cache, Box::new(|_: &(), v: &mut [f32]| v[0] += 1.0)).unwrap();
        // Three batches all read row 1 before the run (version 0), row 2 at version 0 too.
        for _ in 0..3 {
            q.submit(&[1, 2], &[0, 0], &[0.0, 0.0], 0, &()).unwrap();
        }
        // Only row 2 of the last one is kept: it reads version 3 = ts 2, the newest.
        q.submit(&[1, 2], &[0, 3], &[0.0, 0.0], 0, &()).unwrap();
        let mut got = Vec::new();
        let mut v = [0.0; 2];
        while let Some(c) = q.collect(&mut v).unwrap() {
            got.push((c.ts, c.staleness.replaced, c.staleness.max_gap));
        }
        // ts 1: both rows replaced by ts 0's (version 1), 1 behind; ts 2: by ts 1's (version 2).
        assert_eq!(got, [(0, 0, 0), (1, 2, 1), (2, 2, 2), (3, 1, 3)]);
        assert_eq!(v, [4.0, 0.0], "ts 3's row 1 came from the cache, its row 2 as read");
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
