//! The partition buffer keeps the engine's claim: on a graph that fits in memory, an `Oac` run on
//! the disk-backed storage ends with tables equal, bit for bit, to the synchronous replay of its
//! recorded order on the in-memory twin (same partitions, same bucket order, no disk), also when
//! the run is resumed from a checkpoint after a crash; an `Async` run does not. Bad geometry and
//! bad files are typed errors before anything trains.
//!
//! The model is KGE-like (a diagonal bilinear score, logistic loss, Adagrad state in the row),
//! written here so the check does not depend on the trainer crate.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

#[path = "fixtures/hooked_files.rs"]
mod hooked_files;

use hooked_files::{Call, Hook, HookedFiles};
use ordo::engine::{
    AsyncWrite, Batch, BatchRows, CpuDevice, Engine, EngineConfig, Mode, Model, StepError,
    replay_into,
};
use ordo::partition::ordering::{Plan, beta};
use ordo::partition::{
    Cursor, DiskFiles, Geometry, MemoryFiles, PartitionError, PartitionFiles, PartitionedStorage,
    Walk,
};
use ordo::row_store::RowStore;
use ordo::storage::RowStorage;
use std::collections::HashMap;

const DIM: usize = 8;
const WIDTH: usize = 2 * DIM; // embedding, then its Adagrad sums
const ENTITIES: usize = 240;
const PARTITIONS: usize = 4;
const BUFFER: usize = 2;
const EDGES: usize = 1500;
const BATCH: usize = 12;
const NEGATIVES: usize = 3;
type Error = Box<dyn std::error::Error + Send + Sync>;

/// SplitMix64 (Steele, Lea, Flood 2014): the fixed generator of the graph and the negatives.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Edges `(head, tail, negative tails)`.
type Edges = Vec<(u64, u64, [u64; NEGATIVES])>;

struct Kge {
    relation: [f32; DIM],
}

impl Kge {
    fn new() -> Self {
        Kge { relation: std::array::from_fn(|k| 0.5 + 0.1 * k as f32) }
    }
}

impl Model for Kge {
    type Data = Edges;
    type Error = StepError;
    fn row_width(&self) -> usize {
        WIDTH
    }
    fn step(&mut self, edges: &Edges, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        for &(h, t, negs) in edges {
            let ph = rows.position(h).ok_or("head not in batch")?;
            for (other, label) in std::iter::once((t, 1.0f32)).chain(negs.iter().map(|&n| (n, 0.0)))
            {
                let po = rows.position(other).ok_or("tail not in batch")?;
                if po == ph {
                    continue;
                }
                let (eh, eo) = rows.pair_mut(ph, po).ok_or("same row")?;
                let score: f32 = (0..DIM).map(|k| eh[k] * self.relation[k] * eo[k]).sum();
                let g = 1.0 / (1.0 + (-score).exp()) - label;
                for k in 0..DIM {
                    let (gh, go) = (g * self.relation[k] * eo[k], g * self.relation[k] * eh[k]);
                    eh[DIM + k] += gh * gh;
                    eo[DIM + k] += go * go;
                    eh[k] -= 0.1 * gh / (eh[DIM + k].sqrt() + 1e-6);
                    eo[k] -= 0.1 * go / (eo[DIM + k].sqrt() + 1e-6);
                }
            }
        }
        Ok(())
    }
}

fn init(row: usize, out: &mut [f32]) {
    let mut s = row as u64 ^ 0xD1CE;
    for (k, v) in out.iter_mut().enumerate() {
        *v = if k < DIM { (splitmix(&mut s) % 1000) as f32 / 2000.0 - 0.25 } else { 0.0 };
    }
}

fn geometry() -> Geometry {
    Geometry { rows: ENTITIES, width: WIDTH, partitions: PARTITIONS }
}

/// The graph's batches by id, and each state's batch ids in order, for `epochs` epochs of
/// `plan`: a bucket's edges in batches of `BATCH`, negatives from the bucket's two partitions.
struct Work {
    batches: HashMap<u64, Batch<Edges>>,
    /// Per (epoch, state), its batch ids.
    states: Vec<Vec<u64>>,
}

fn work(plan: &Plan, epochs: usize) -> Work {
    let g = geometry();
    let mut s = 7u64;
    let edges: Vec<(u64, u64)> = (0..EDGES)
        .map(|_| (splitmix(&mut s) % ENTITIES as u64, splitmix(&mut s) % ENTITIES as u64))
        .filter(|(h, t)| h != t)
        .collect();
    let mut by_bucket: HashMap<(usize, usize), Vec<(u64, u64)>> = HashMap::new();
    for &(h, t) in &edges {
        by_bucket
            .entry((g.partition_of(h as usize), g.partition_of(t as usize)))
            .or_default()
            .push((h, t));
    }
    let (mut batches, mut states) = (HashMap::new(), Vec::new());
    for epoch in 0..epochs {
        for state in &plan.states {
            let mut ids = Vec::new();
            for b in &state.buckets {
                let pool: Vec<u64> = [b.src, b.dst]
                    .iter()
                    .flat_map(|&p| g.start(p) as u64..g.start(p + 1) as u64)
                    .collect();
                for chunk in
                    by_bucket.get(&(b.src, b.dst)).map(Vec::as_slice).unwrap_or(&[]).chunks(BATCH)
                {
                    let id = batches.len() as u64;
                    let mut r = id ^ (epoch as u64) << 32;
                    let data: Edges = chunk
                        .iter()
                        .map(|&(h, t)| {
                            (
                                h,
                                t,
                                std::array::from_fn(|_| {
                                    pool[(splitmix(&mut r) % pool.len() as u64) as usize]
                                }),
                            )
                        })
                        .collect();
                    let mut rows: Vec<u64> = data
                        .iter()
                        .flat_map(|(h, t, n)| [*h, *t].into_iter().chain(n.iter().copied()))
                        .collect();
                    rows.sort_unstable();
                    rows.dedup();
                    batches.insert(id, Batch { id, rows, data });
                    ids.push(id);
                }
            }
            states.push(ids);
        }
    }
    Work { batches, states }
}

/// Two epochs of the beta plan, for a run checkpointed and resumed: `total` global states, and
/// the checkpoint after state `stop`, inside the second epoch.
struct Resumable {
    plan: Plan,
    work: Work,
    total: usize,
    stop: usize,
}

impl Resumable {
    fn new() -> Result<Self, Error> {
        let plan = beta(PARTITIONS, BUFFER)?;
        let epochs = 2;
        let work = work(&plan, epochs);
        let total = plan.states.len() * epochs;
        let stop = plan.states.len() + 1;
        Ok(Resumable { plan, work, total, stop })
    }
}

/// Train the global states `range` (over the epochs of `plan`) through one engine session in
/// `mode`, draining at every state's end; checkpoint after state `checkpoint_after` if given.
/// Returns the recorded order of batch ids.
fn train(
    storage: &PartitionedStorage,
    plan: &Plan,
    work: &Work,
    mode: Mode,
    range: std::ops::Range<usize>,
    checkpoint_after: Option<usize>,
) -> Result<Vec<u64>, Error> {
    let n = plan.states.len();
    let engine = Engine::new(EngineConfig::new(mode).threads(3, 3))?;
    engine.session(&mut CpuDevice::new(), &mut Kge::new(), storage, |s| {
        let mut order = Vec::new();
        for k in range {
            storage.enter(&plan.states[k % n], plan.states.get((k + 1) % n))?;
            s.submit_all(work.states[k].iter().map(|id| work.batches[id].clone()))?;
            // The drain: every batch of this state is written before the buffer moves on.
            order.extend(s.finish()?.batch_ids());
            if checkpoint_after == Some(k) {
                storage.checkpoint(Cursor { epoch: (k / n) as u64, state: (k + 1) as u64 })?;
            }
        }
        Ok::<_, Error>(order)
    })
}

/// Train the global states `range` through one `Oac` session without a drain at the swaps:
/// a state enters once its partitions fit beside those its predecessors' batches in flight
/// touch, and a partition leaves once no batch in flight touches it ([`Walk`], fed the
/// session's completions). Returns the recorded order and how many states entered while an
/// earlier state still had batches in flight.
fn train_pipelined(
    storage: &PartitionedStorage,
    plan: &Plan,
    work: &Work,
    range: std::ops::Range<usize>,
) -> Result<(Vec<u64>, usize), Error> {
    let state_of: HashMap<u64, usize> = work
        .states
        .iter()
        .enumerate()
        .flat_map(|(k, ids)| ids.iter().map(move |&id| (id, k)))
        .collect();
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(3, 3))?;
    engine.session(&mut CpuDevice::new(), &mut Kge::new(), storage, |s| {
        let mut walk = Walk::new(storage, plan);
        let (mut order, mut overlapped) = (Vec::new(), 0);
        for k in range {
            while !walk.try_enter(k, work.states[k].len())? {
                let done = s.completions();
                if done.is_empty() {
                    order.extend(s.finish()?.batch_ids());
                    walk.drained()?;
                }
                for c in done {
                    walk.finished(state_of[&c.batch_id])?;
                }
            }
            if walk.open().iter().any(|&(j, _)| j != k) {
                overlapped += 1;
            }
            for id in &work.states[k] {
                s.submit(work.batches[id].clone())?;
                for c in s.completions() {
                    walk.finished(state_of[&c.batch_id])?;
                }
            }
        }
        order.extend(s.finish()?.batch_ids());
        walk.drained()?;
        Ok::<_, Error>((order, overlapped))
    })
}

/// The synchronous run of `order` on the in-memory twin: each state's part of the order
/// replayed batch by batch, the twin's buffer moved exactly as the plan moves it.
fn twin_replay(plan: &Plan, work: &Work, order: &[u64]) -> Result<Vec<f32>, Error> {
    let twin =
        PartitionedStorage::create(MemoryFiles::default(), geometry(), BUFFER, "twin", init)?;
    let n = plan.states.len();
    let mut at = 0;
    for (k, ids) in work.states.iter().enumerate() {
        let part = &order[at..(at + ids.len()).min(order.len())];
        if part.is_empty() {
            break;
        }
        twin.enter(&plan.states[k % n], plan.states.get((k + 1) % n))?;
        let mut sorted = part.to_vec();
        sorted.sort_unstable();
        let mut expect = ids.clone();
        expect.sort_unstable();
        assert_eq!(sorted, expect, "state {k}: the order holds exactly its batches");
        replay_into(&mut Kge::new(), &twin, part, |id| work.batches.get(&id))?;
        at += part.len();
    }
    assert_eq!(at, order.len());
    Ok(twin.snapshot()?)
}

/// The same order replayed on one plain in-memory table (no partitions): the reference that
/// does not share the partition buffer's code with the runs it checks.
fn plain_replay(work: &Work, order: &[u64]) -> Result<Vec<f32>, Error> {
    let store = RowStore::from_fn(ENTITIES, WIDTH, |r, c| {
        let mut row = [0.0; WIDTH];
        init(r, &mut row);
        row[c]
    });
    replay_into(&mut Kge::new(), &store, order, |id| work.batches.get(&id))?;
    Ok(store.snapshot())
}

#[test]
fn oac_on_disk_equals_the_twins_sync_replay_bit_for_bit_and_async_differs() -> Result<(), Error> {
    let plan = beta(PARTITIONS, BUFFER)?;
    let epochs = 2;
    let work = work(&plan, epochs);
    let all = 0..plan.states.len() * epochs;

    let dir = tempfile::tempdir()?;
    let disk =
        PartitionedStorage::create(DiskFiles::new(dir.path())?, geometry(), BUFFER, "oac", init)?;
    let order = train(&disk, &plan, &work, Mode::Oac, all.clone(), None)?;
    let oac = disk.snapshot()?;
    let initial: Vec<f32> = (0..ENTITIES)
        .flat_map(|r| {
            let mut row = vec![0.0; WIDTH];
            init(r, &mut row);
            row
        })
        .collect();
    assert_ne!(oac, initial, "training changed the table");
    assert_eq!(oac, twin_replay(&plan, &work, &order)?, "oac on disk == sync replay on the twin");
    assert_eq!(oac, plain_replay(&work, &order)?, "oac on disk == sync replay on one table");
    let stats = disk.io_stats();
    assert!(stats.bytes_read > 0 && stats.bytes_written > 0, "{stats:?}");
    assert!(stats.busy > std::time::Duration::ZERO, "the I/O threads' busy time: {stats:?}");

    // The column reader (evaluation's): every partition's embedding columns, resident ones
    // from the buffer, the others streamed from their files, equal the snapshot's; it moves
    // nothing and a range wider than a row is a typed error.
    let resident = disk.resident();
    assert!(!resident.is_empty() && resident.len() < PARTITIONS, "{resident:?}");
    let streamed: Vec<f32> =
        (0..PARTITIONS).map(|p| disk.columns(p, 0..DIM)).collect::<Result<Vec<_>, _>>()?.concat();
    let columns: Vec<f32> = oac.chunks(WIDTH).flat_map(|r| r[..DIM].to_vec()).collect();
    assert_eq!(streamed, columns, "the columns of the trained table, partition by partition");
    assert_eq!(disk.resident(), resident, "reading columns moves no partition");
    assert!(disk.io_stats().bytes_streamed > 0 && disk.io_stats().bytes_read == stats.bytes_read);
    assert!(matches!(disk.columns(0, DIM..WIDTH + 1), Err(PartitionError::NoSuchColumns { .. })));

    // Async on the twin promises nothing: its table is not the replay of its own order.
    let twin =
        PartitionedStorage::create(MemoryFiles::default(), geometry(), BUFFER, "async", init)?;
    let order = train(&twin, &plan, &work, Mode::Async(AsyncWrite::Overwrite), all, None)?;
    assert_ne!(twin.snapshot()?, twin_replay(&plan, &work, &order)?, "async lost no update?");
    Ok(())
}

/// Without a drain at the swaps (eviction on the finished batches, [`Walk`]), `Oac` on disk
/// still equals the synchronous replay of its recorded order on one plain table, bit for bit,
/// and states really overlap. Kills `partition-evict-unfinished` (a partition evicted under a
/// batch in flight: the batch finds its rows gone, or its writes are lost).
#[test]
fn pipelined_swaps_without_a_drain_equal_the_sync_replay() -> Result<(), Error> {
    let plan = beta(PARTITIONS, BUFFER)?;
    let epochs = 2;
    let work = work(&plan, epochs);
    let dir = tempfile::tempdir()?;
    let disk =
        PartitionedStorage::create(DiskFiles::new(dir.path())?, geometry(), BUFFER, "pipe", init)?;
    let (order, overlapped) = train_pipelined(&disk, &plan, &work, 0..plan.states.len() * epochs)?;
    assert_eq!(order.len(), work.batches.len(), "every batch once");
    assert!(overlapped > 0, "no state entered while an earlier one was in flight");
    assert_eq!(disk.snapshot()?, plain_replay(&work, &order)?, "pipelined oac == sync replay");
    Ok(())
}

#[test]
fn a_run_resumed_from_a_checkpoint_after_a_crash_equals_the_sync_replay() -> Result<(), Error> {
    let Resumable { plan, work, total, stop } = Resumable::new()?;

    let dir = tempfile::tempdir()?;
    let disk = PartitionedStorage::create(
        DiskFiles::new(dir.path())?,
        geometry(),
        BUFFER,
        "resume",
        init,
    )?;
    let mut order = train(&disk, &plan, &work, Mode::Oac, 0..stop + 1, Some(stop))?;
    let at_checkpoint = disk.snapshot()?;
    // Train on past the checkpoint and crash: new generations were written, no checkpoint.
    train(&disk, &plan, &work, Mode::Oac, stop + 1..stop + 3, None)?;
    drop(disk);

    let (disk, cursor) = PartitionedStorage::open(DiskFiles::new(dir.path())?, "resume", BUFFER)?;
    assert_eq!(cursor, Cursor { epoch: 1, state: stop as u64 + 1 });
    assert_eq!(disk.snapshot()?, at_checkpoint, "the files are the checkpoint's");
    order.extend(train(&disk, &plan, &work, Mode::Oac, cursor.state as usize..total, None)?);
    let resumed = disk.snapshot()?;
    assert_eq!(
        resumed,
        twin_replay(&plan, &work, &order)?,
        "resumed oac == sync replay on the twin"
    );
    assert_eq!(resumed, plain_replay(&work, &order)?, "resumed oac == sync replay on one table");
    Ok(())
}

/// Write-backs are not synced; a checkpoint syncs what it names. A crash that loses every
/// write not synced (`MemoryFiles::crash`), after a checkpoint and more training, then a resume
/// from that checkpoint, ends equal bit for bit to the same run without the crash.
#[test]
fn a_crash_losing_unsynced_writes_resumes_equal_to_an_uninterrupted_run() -> Result<(), Error> {
    let Resumable { plan, work, total, stop } = Resumable::new()?;

    let whole = PartitionedStorage::create(MemoryFiles::default(), geometry(), BUFFER, "c", init)?;
    let uninterrupted = train(&whole, &plan, &work, Mode::Sync, 0..total, None)?;

    let files = MemoryFiles::crashable();
    let disk = PartitionedStorage::create(files.clone(), geometry(), BUFFER, "c", init)?;
    let mut order = train(&disk, &plan, &work, Mode::Sync, 0..stop + 1, Some(stop))?;
    // Train on past the checkpoint: write-backs land as new generations, none synced.
    train(&disk, &plan, &work, Mode::Sync, stop + 1..stop + 3, None)?;
    drop(disk);
    let before = files.list()?.len();
    files.crash();
    assert!(files.list()?.len() < before, "the crash lost the unsynced generations");

    let (disk, cursor) = PartitionedStorage::open(files.clone(), "c", BUFFER)?;
    assert_eq!(cursor, Cursor { epoch: 1, state: stop as u64 + 1 });
    order.extend(train(&disk, &plan, &work, Mode::Sync, cursor.state as usize..total, None)?);
    assert_eq!(order, uninterrupted, "the same batches in the same order");
    assert_eq!(disk.snapshot()?, whole.snapshot()?, "resumed after the crash == uninterrupted");
    Ok(())
}

/// Crashable memory files that lose power at their `at`th durability point (counted from 1):
/// after a partition file's sync, before the manifest is replaced (its temporary synced) and
/// after. From then on every call fails, as in a process that is gone; [`MemoryFiles::crash`]
/// then keeps only what was synced.
type PowerLoss = HookedFiles<Power>;

/// The hook of [`PowerLoss`] files.
#[derive(Clone, Debug)]
struct Power {
    /// Points seen, the point to lose power at, and whether it was reached.
    state: std::sync::Arc<std::sync::Mutex<(u64, u64, bool)>>,
}

fn power_loss(files: &MemoryFiles, at: u64) -> PowerLoss {
    HookedFiles {
        files: files.clone(),
        hook: Power { state: std::sync::Arc::new((0, at, false).into()) },
    }
}

impl Power {
    fn lost(&self) -> bool {
        self.state.lock().unwrap().2
    }

    /// An error once the power is lost.
    fn alive(&self) -> std::io::Result<()> {
        if self.lost() { Err(std::io::Error::other("the power is lost")) } else { Ok(()) }
    }

    /// A durability point: the power is lost here if it is the `at`th.
    fn point(&self) -> std::io::Result<()> {
        let mut state = self.state.lock().unwrap();
        state.0 += 1;
        state.2 |= state.0 == state.1;
        drop(state);
        self.alive()
    }
}

impl Hook for Power {
    fn before(&self, call: Call) -> std::io::Result<()> {
        match call {
            Call::WriteManifest => self.point(), // its temporary is synced, not yet renamed
            _ => self.alive(),
        }
    }

    fn after(&self, call: Call) -> std::io::Result<()> {
        match call {
            Call::Sync(_) | Call::WriteManifest => self.point(), // synced; renamed
            _ => Ok(()),
        }
    }
}

/// Create (or open) the storage in `files` and train the global states from its checkpoint's
/// cursor to `total`, checkpointing at each epoch's end as the trainer does. Returns the
/// recorded order of what it trained.
fn run_with_checkpoints(
    files: impl PartitionFiles + Clone,
    plan: &Plan,
    work: &Work,
    total: usize,
) -> Result<(PartitionedStorage, Vec<u64>), Error> {
    let (storage, from) = match PartitionedStorage::open(files.clone(), "power", BUFFER) {
        Ok((s, cursor)) => (s, cursor.state as usize),
        Err(PartitionError::NoManifest { .. }) => {
            (PartitionedStorage::create(files, geometry(), BUFFER, "power", init)?, 0)
        }
        Err(e) => return Err(e.into()),
    };
    let n = plan.states.len();
    let mut order = Vec::new();
    let mut k = from;
    while k < total {
        let end = (k / n + 1) * n;
        order.extend(train(&storage, plan, work, Mode::Sync, k..end, Some(end - 1))?);
        k = end;
    }
    Ok((storage, order))
}

/// Power lost at each of the store's fsyncs and renames in turn (creating the files, and each
/// epoch's checkpoint), losing every write not synced: the run restarted from what survived
/// ends with the uninterrupted run's table, bit for bit, having trained each batch once after
/// its last checkpoint.
#[test]
fn power_lost_at_every_fsync_and_rename_resumes_to_the_uninterrupted_table() -> Result<(), Error> {
    let plan = beta(PARTITIONS, BUFFER)?;
    let epochs = 2;
    let work = work(&plan, epochs);
    let total = plan.states.len() * epochs;
    let (whole, order) = run_with_checkpoints(MemoryFiles::default(), &plan, &work, total)?;
    let whole = whole.snapshot()?;
    let mut losses = 0;
    for at in 1.. {
        let files = MemoryFiles::crashable();
        let faulty = power_loss(&files, at);
        match run_with_checkpoints(faulty.clone(), &plan, &work, total) {
            Ok((s, got)) => {
                assert!(!faulty.hook.lost(), "point {at}: the power was lost, yet the run went on");
                assert_eq!(got, order);
                assert_eq!(s.snapshot()?, whole);
                break;
            }
            Err(e) => assert!(faulty.hook.lost(), "point {at}: {e}"),
        }
        losses += 1;
        files.crash();
        let (s, _) = run_with_checkpoints(files.clone(), &plan, &work, total)?;
        assert_eq!(s.snapshot()?, whole, "power lost at point {at}: the resumed table differs");
    }
    // Creating the files: 4 syncs and the manifest's 2 points; each epoch's checkpoint: the
    // partitions written since the last one and the manifest's 2.
    assert!(losses >= 4 + 2 + 2 * 3, "only {losses} durability points");
    eprintln!("power lost at {losses} fsyncs and renames, each resumed to the uninterrupted table");
    Ok(())
}

#[test]
fn bad_geometry_and_bad_files_are_typed_errors_before_training() -> Result<(), Error> {
    let g = geometry();
    let dir = tempfile::tempdir()?;
    let err = PartitionedStorage::create(DiskFiles::new(dir.path())?, g, PARTITIONS + 1, "x", init)
        .unwrap_err();
    assert!(matches!(err, PartitionError::Plan(_)), "{err}");
    assert_eq!(DiskFiles::new(dir.path())?.list()?, vec![], "nothing written");
    let err =
        PartitionedStorage::create(MemoryFiles::default(), Geometry { rows: 3, ..g }, 2, "x", init)
            .unwrap_err();
    assert!(matches!(err, PartitionError::TooManyPartitions { .. }), "{err}");

    drop(PartitionedStorage::create(DiskFiles::new(dir.path())?, g, BUFFER, "run-a", init)?);
    let err = PartitionedStorage::open(DiskFiles::new(dir.path())?, "run-b", BUFFER).unwrap_err();
    assert!(
        matches!(err, PartitionError::ForeignRun { ref found, .. } if found == "run-a"),
        "{err}"
    );
    let err = PartitionedStorage::create(DiskFiles::new(dir.path())?, g, BUFFER, "run-b", init)
        .unwrap_err();
    assert!(matches!(err, PartitionError::ForeignRun { .. }), "{err}");
    let err = PartitionedStorage::create(DiskFiles::new(dir.path())?, g, BUFFER, "run-a", init)
        .unwrap_err();
    assert!(matches!(err, PartitionError::AlreadyCreated { .. }), "{err}");
    let err =
        PartitionedStorage::open(DiskFiles::new(dir.path())?, "run-a", PARTITIONS + 1).unwrap_err();
    assert!(matches!(err, PartitionError::Plan(_)), "{err}");

    let p2 = dir.path().join("p2.g0");
    let bytes = std::fs::read(&p2)?;
    std::fs::write(&p2, &bytes[..bytes.len() - 3])?;
    let err = PartitionedStorage::open(DiskFiles::new(dir.path())?, "run-a", BUFFER).unwrap_err();
    assert!(matches!(err, PartitionError::TruncatedPartition { .. }), "{err}");
    let mut flipped = bytes.clone();
    flipped[20] ^= 1;
    std::fs::write(&p2, &flipped)?;
    let (s, _) = PartitionedStorage::open(DiskFiles::new(dir.path())?, "run-a", BUFFER)?;
    assert!(matches!(s.admit(2).unwrap_err(), PartitionError::Checksum { .. }));
    drop(s);
    std::fs::remove_file(&p2)?;
    let err = PartitionedStorage::open(DiskFiles::new(dir.path())?, "run-a", BUFFER).unwrap_err();
    assert!(matches!(err, PartitionError::MissingPartition { .. }), "{err}");
    let err = PartitionedStorage::open(DiskFiles::new(dir.path().join("none"))?, "run-a", BUFFER)
        .unwrap_err();
    assert!(matches!(err, PartitionError::NoManifest { .. }), "{err}");
    Ok(())
}

#[test]
fn rows_outside_the_buffer_are_errors_and_the_buffer_holds_c_plus_one() -> Result<(), Error> {
    let s = PartitionedStorage::create(MemoryFiles::default(), geometry(), BUFFER, "r", init)?;
    let mut row = vec![0.0; WIDTH];
    assert!(s.read(0, &mut row).is_err());
    s.admit(0)?;
    s.admit(3)?;
    assert_eq!(s.resident(), vec![0, 3]);
    s.admit(1)?; // c + 1: a state's c and one crossing a swap
    assert!(matches!(s.admit(2).unwrap_err(), PartitionError::BufferFull { .. }));
    let mut expect = vec![0.0; WIDTH];
    init(ENTITIES - 1, &mut expect);
    s.read(ENTITIES as u64 - 1, &mut row)?;
    assert_eq!(row, expect);
    assert!(s.write_if_newer(130, 0, &row).is_err(), "partition 2 is not resident");
    Ok(())
}

/// A partition swapped out again and again between checkpoints keeps at most two files, the
/// checkpoint's generation and the current one: the in-memory twin never checkpoints, and a
/// disk run checkpoints once an epoch, so superseded generations must not pile up until then.
#[test]
fn repeated_swaps_between_checkpoints_keep_two_generations_per_partition() -> Result<(), Error> {
    let files = MemoryFiles::default();
    let s = PartitionedStorage::create(files.clone(), geometry(), BUFFER, "gens", init)?;
    let row = vec![1.0; WIDTH];
    for ts in 0..20 {
        s.admit(0)?;
        s.write_if_newer(0, ts, &row)?;
        s.evict(0)?;
    }
    // A load of a partition waits for its write-backs: once this one returns, all are done.
    s.admit(0)?;
    s.evict(0)?; // unchanged since the load: nothing to write back
    let generations = files.list()?.into_iter().filter(|n| n.partition == 0).count();
    assert!(generations <= 2, "partition 0 has {generations} files after 20 write-backs");
    s.checkpoint(Cursor::default())?;
    let generations = files.list()?.into_iter().filter(|n| n.partition == 0).count();
    assert_eq!(generations, 1, "a checkpoint leaves one file per partition");
    drop(s);
    let (s, _) = PartitionedStorage::open(files, "gens", BUFFER)?;
    s.admit(0)?;
    let mut out = vec![0.0; WIDTH];
    s.read(0, &mut out)?;
    assert_eq!(out, row, "the checkpoint kept the last write-back");
    Ok(())
}

/// One step of the swap protocol as a caller drives it.
#[derive(Debug, Clone)]
enum Op {
    Admit(usize),
    Evict(usize),
    Prefetch(usize),
    Write(u64, f32),
    Read(u64),
    Checkpoint,
    /// Drop the storage without a checkpoint and open it again: a crash and a resume.
    Crash,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let p = 0..SMALL.partitions;
    let row = 0..SMALL.rows as u64;
    prop_oneof![
        3 => p.clone().prop_map(Op::Admit),
        2 => p.clone().prop_map(Op::Evict),
        1 => p.prop_map(Op::Prefetch),
        4 => (row.clone(), -4.0f32..4.0).prop_map(|(r, v)| Op::Write(r, v)),
        3 => row.prop_map(Op::Read),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Crash),
    ]
}

const SMALL: Geometry = Geometry { rows: 11, width: 3, partitions: 4 };

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 96, ..Default::default() })]

    /// Any sequence of swaps, writes, reads, checkpoints and crashes behaves like one plain
    /// table of versioned rows whose state is saved at each checkpoint: a resident row reads
    /// the last value written to it (never a stale or unloaded copy), a row outside the buffer
    /// is an error, a full buffer refuses a partition, and a crash returns to the checkpoint.
    #[test]
    fn random_swaps_behave_like_one_table_saved_at_checkpoints(ops in proptest::collection::vec(op(), 1..60)) {
        let files = MemoryFiles::crashable();
        let initial = |r: usize, out: &mut [f32]| out.iter_mut().enumerate().for_each(|(c, v)| *v = (r * 10 + c) as f32);
        let mut storage = PartitionedStorage::create(files.clone(), SMALL, 2, "model", initial).unwrap();
        let mut table: Vec<(Option<u64>, Vec<f32>)> = (0..SMALL.rows).map(|r| {
            let mut row = vec![0.0; SMALL.width];
            initial(r, &mut row);
            (None, row)
        }).collect();
        let (mut saved, mut resident, mut ts) = (table.clone(), Vec::<usize>::new(), 0u64);
        // Partitions prefetched and not yet admitted: they count against the buffer's c + 1.
        let mut loading = Vec::<usize>::new();
        for op in ops {
            match op {
                Op::Admit(p) => {
                    let others = loading.iter().filter(|&&q| q != p).count();
                    let full = resident.len() + others >= 3 && !resident.contains(&p);
                    let got = storage.admit(p);
                    proptest::prop_assert_eq!(got.is_err(), full, "{:?}", got);
                    if !full && !resident.contains(&p) {
                        resident.push(p);
                        loading.retain(|&q| q != p);
                    }
                }
                Op::Evict(p) => {
                    storage.evict(p).unwrap();
                    resident.retain(|&x| x != p);
                }
                Op::Prefetch(p) => {
                    storage.prefetch(p).unwrap();
                    if !resident.contains(&p) && !loading.contains(&p) {
                        loading.push(p);
                    }
                }
                Op::Write(row, v) => {
                    let here = resident.contains(&SMALL.partition_of(row as usize));
                    let values = vec![v; SMALL.width];
                    let got = storage.write_if_newer(row, ts, &values);
                    proptest::prop_assert_eq!(got.is_ok(), here);
                    if here {
                        proptest::prop_assert_eq!(got.unwrap(), true);
                        table[row as usize] = (Some(ts), values);
                        ts += 1;
                    }
                }
                Op::Read(row) => {
                    let here = resident.contains(&SMALL.partition_of(row as usize));
                    let mut out = vec![0.0; SMALL.width];
                    let got = storage.read(row, &mut out);
                    proptest::prop_assert_eq!(got.is_ok(), here);
                    if here {
                        let (version, values) = &table[row as usize];
                        proptest::prop_assert_eq!(got.unwrap().ts(), *version);
                        proptest::prop_assert_eq!(&out, values);
                    }
                }
                Op::Checkpoint => {
                    storage.checkpoint(Cursor::default()).unwrap();
                    saved = table.clone();
                }
                Op::Crash => {
                    drop(storage);
                    files.crash(); // lose every write not synced
                    storage = PartitionedStorage::open(files.clone(), "model", 2).unwrap().0;
                    table = saved.clone();
                    resident.clear();
                    loading.clear();
                    ts = storage.next_version().unwrap().max(ts);
                }
            }
        }
        let flat: Vec<f32> = table.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        proptest::prop_assert_eq!(storage.snapshot().unwrap(), flat);
    }
}
