//! [`PartitionedStorage`]: a [`RowStorage`] over `P` partition files with a buffer of `c`
//! partitions in memory.

use super::error::PartitionError;
use super::files::{FileName, PartitionFiles};
use super::geometry::Geometry;
use super::io_thread::{self, Loaded, Request, Resident, Shared};
use super::manifest::{Cursor, FORMAT, FileEntry, Manifest};
use super::ordering::{BufferState, check_geometry};
use crate::mutation::{Mutant, active};
use crate::row_store::{RowStore, StoreError, Version};
use crate::storage::RowStorage;
use crate::sync::blocking::{self, Condvar, JoinHandle, Mutex, Receiver, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the storage's I/O cost so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoStats {
    /// Time the caller waited in [`PartitionedStorage::admit`] for a partition to arrive (the
    /// step's I/O wait).
    pub wait: Duration,
    /// Bytes of partition files read.
    pub bytes_read: u64,
    /// Bytes of partition files written (write-backs and checkpoints).
    pub bytes_written: u64,
    /// Bytes of partition files read by [`PartitionedStorage::columns`] (evaluation, saves):
    /// not loads into the buffer, so not part of `bytes_read`.
    pub bytes_streamed: u64,
    /// Bytes of single rows read by [`PartitionedStorage::rows`] (an evaluation's queries).
    pub bytes_gathered: u64,
    /// The I/O-bound time: wall time during which at least one I/O thread was loading or
    /// writing back a partition (overlapping jobs count once). `bytes_read + bytes_written`
    /// over it is the rate the buffer's traffic ran at while there was any.
    pub busy: Duration,
}

/// Rows in `P` partition files, `c` partitions of them in memory.
///
/// **The protocol at a swap** (module docs of [`super`]): the caller evicts a partition only
/// once no batch in flight touches it ([`Walk`](super::Walk) does this from the engine's
/// completions), and a batch touches only resident partitions. Then a row's reads and writes
/// all go to the one in-memory copy of its partition while it is resident, eviction writes that
/// copy back before the partition can be loaded again (a load waits for its partition's
/// write-backs), and the storage
/// keeps [`RowStorage`]'s contract across swaps: a row's version and values leave and come back
/// together. A row of a partition that is not resident is
/// [`PartitionError::NotResident`] (as [`StoreError::Other`]), never a stale value.
///
/// **Slot reclamation.** A slot is an `RwLock<Option<Arc<Resident>>>`: a read or write holds
/// its read guard while it copies, and eviction takes the write guard, so a slot is never freed
/// under a reader whatever the caller does; under the walk's rule no batch in flight touches an
/// evicted partition, so the write guard never waits for a batch. [`Walk`](super::Walk)'s docs
/// say why this needs no epoch-based reclamation (crossbeam-epoch).
///
/// **Memory:** at most `c + 1` partitions resident or loading (`c` of a state and one crossing a
/// swap: prefetched, or leaving once its last batch is written), the copies being written back,
/// and a chunk of I/O buffer. An evicted partition's rows, once written back, are kept for a
/// later load to fill rather than freed: a load takes them before it would allocate, so the
/// storage allocates the rows of at most `c + 2` partitions in all, and a swap moves no
/// partition's memory through the allocator (which may keep freed memory committed a while).
///
/// ```
/// use ordo::partition::{Geometry, MemoryFiles, PartitionedStorage};
/// use ordo::storage::RowStorage;
///
/// let g = Geometry { rows: 10, width: 2, partitions: 4 };
/// let s = PartitionedStorage::create(MemoryFiles::default(), g, 2, "run-1", |r, out| out.fill(r as f32))?;
/// s.admit(1)?;
/// let mut row = [0.0; 2];
/// s.read(3, &mut row)?; // row 3 is in partition 1
/// assert_eq!(row, [3.0, 3.0]);
/// assert!(s.read(0, &mut row).is_err()); // partition 0 is not in the buffer
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PartitionedStorage {
    shared: Arc<Shared>,
    buffer: usize,
    run_id: String,
    /// Per partition, its copy in memory if resident.
    slots: Vec<RwLock<Option<Arc<Resident>>>>,
    next_version: AtomicU64,
    /// Loads sent to the I/O threads and not yet admitted.
    pending: Mutex<HashMap<usize, Receiver<Loaded>>>,
    wait_nanos: AtomicU64,
    threads: Vec<JoinHandle<()>>,
}

fn poisoned<T>(_: T) -> PartitionError {
    PartitionError::IoThreadGone
}

impl PartitionedStorage {
    fn check(geometry: Geometry, buffer: usize) -> Result<(), PartitionError> {
        check_geometry(geometry.partitions, buffer)?;
        if geometry.partitions > geometry.rows {
            return Err(PartitionError::TooManyPartitions {
                partitions: geometry.partitions,
                rows: geometry.rows,
            });
        }
        Ok(())
    }

    fn start(
        files: Arc<dyn PartitionFiles>,
        geometry: Geometry,
        buffer: usize,
        run_id: String,
        entries: Vec<FileEntry>,
        next_version: u64,
    ) -> Self {
        let shared = Arc::new(Shared {
            files,
            geometry,
            checkpointed: Mutex::new(entries.iter().map(|e| e.generation).collect()),
            entries: Mutex::new(entries),
            garbage: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
            spare: Mutex::new(Vec::new()),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_streamed: AtomicU64::new(0),
            bytes_gathered: AtomicU64::new(0),
            unsynced: Mutex::new(Vec::new()),
            queue: Mutex::new(io_thread::Queue::default()),
            changed: Condvar::new(),
        });
        let threads = (0..io_thread::IO_THREADS)
            .map(|i| {
                let shared = Arc::clone(&shared);
                blocking::Builder::new()
                    .name(format!("ordo-partition-io-{i}"))
                    .spawn(move || io_thread::run(shared))
                    .expect("spawn a partition I/O thread")
            })
            .collect();
        PartitionedStorage {
            shared,
            buffer,
            run_id,
            slots: (0..geometry.partitions).map(|_| RwLock::new(None)).collect(),
            next_version: AtomicU64::new(next_version),
            pending: Mutex::new(HashMap::new()),
            wait_nanos: AtomicU64::new(0),
            threads,
        }
    }

    /// A new storage in `files`: every row `r` starts as `init(r, row)` at the initial
    /// version, written partition by partition (one partition's chunk in memory at a time),
    /// with a checkpoint at [`Cursor::default`]. Nothing is resident.
    ///
    /// Checked first, before any file is written: the geometry (a buffer of `2 ≤ c ≤ P`,
    /// `P ≤ rows`), and that `files` holds no storage yet ([`PartitionError::AlreadyCreated`],
    /// or [`PartitionError::ForeignRun`] for another run's).
    pub fn create(
        files: impl PartitionFiles,
        geometry: Geometry,
        buffer: usize,
        run_id: &str,
        mut init: impl FnMut(usize, &mut [f32]),
    ) -> Result<Self, PartitionError> {
        Self::check(geometry, buffer)?;
        let files: Arc<dyn PartitionFiles> = Arc::new(files);
        let manifest_path = files.describe(None);
        if let Some(found) = read_manifest(&*files)? {
            return Err(if found.run_id == run_id {
                PartitionError::AlreadyCreated { manifest: manifest_path, run_id: found.run_id }
            } else {
                PartitionError::ForeignRun {
                    manifest: manifest_path,
                    expected: run_id.into(),
                    found: found.run_id,
                }
            });
        }
        let mut entries = Vec::with_capacity(geometry.partitions);
        let mut values = vec![0.0; geometry.width];
        for p in 0..geometry.partitions {
            let name = FileName { partition: p, generation: 0 };
            let first = geometry.start(p);
            let (crc32, _) = io_thread::write_partition(&*files, &geometry, p, name, |r, out| {
                init(first + r, &mut values);
                io_thread::encode_row(Version::Initial, &values, out);
                Ok(())
            })?;
            entries.push(FileEntry { generation: 0, crc32 });
        }
        let storage = Self::start(files, geometry, buffer, run_id.into(), entries, 0);
        storage.shared.unsynced.lock().map_err(poisoned)?.extend(
            (0..geometry.partitions).map(|partition| FileName { partition, generation: 0 }),
        );
        storage.sync_written()?;
        storage.write_manifest(Cursor::default())?;
        Ok(storage)
    }

    /// Keep no file [`create`](Self::create) wrote (generation 0) once a write-back supersedes
    /// it, until the next checkpoint: for a caller that can write its initial rows again (from
    /// a seed) and starts over when [`open`](Self::open) finds such a file gone
    /// ([`PartitionError::MissingPartition`] while the manifest's cursor is still the
    /// creation's, [`Cursor::default`]). A first epoch then needs one copy of the table on
    /// disk and a partition or two, not two copies. Call before the first checkpoint; a
    /// checkpoint ends it (its files are what a crash returns to).
    ///
    /// ```
    /// use ordo::partition::{FileName, Geometry, MemoryFiles, PartitionFiles, PartitionedStorage};
    /// use ordo::storage::RowStorage;
    ///
    /// let files = MemoryFiles::default();
    /// let g = Geometry { rows: 4, width: 1, partitions: 2 };
    /// let s = PartitionedStorage::create(files.clone(), g, 2, "run", |_, out| out.fill(0.0))?;
    /// s.discard_initial()?;
    /// s.admit(0)?;
    /// s.write_if_newer(0, 0, &[1.0])?;
    /// s.evict(0)?;
    /// s.admit(0)?; // after its write-back: generation 1 is the only file of partition 0
    /// assert_eq!(files.len(FileName { partition: 0, generation: 0 })?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn discard_initial(&self) -> Result<(), PartitionError> {
        let mut checkpointed = self.shared.checkpointed.lock().map_err(poisoned)?;
        checkpointed.iter_mut().filter(|g| **g == 0).for_each(|g| *g = u64::MAX);
        Ok(())
    }

    /// Open the storage in `files` at its last checkpoint, with a buffer of `buffer`; returns
    /// it (nothing resident) and the checkpoint's cursor. Checked before anything is loaded:
    /// the manifest exists and belongs to `run_id`, the geometry fits the buffer, and every
    /// partition file it names exists with its length (checksums are checked as each partition
    /// loads). Files of generations the manifest does not name (write-backs after the last
    /// checkpoint, cut short by a crash) are deleted.
    pub fn open(
        files: impl PartitionFiles,
        run_id: &str,
        buffer: usize,
    ) -> Result<(Self, Cursor), PartitionError> {
        let files: Arc<dyn PartitionFiles> = Arc::new(files);
        let manifest_path = files.describe(None);
        let m = read_manifest(&*files)?
            .ok_or(PartitionError::NoManifest { manifest: manifest_path.clone() })?;
        if m.run_id != run_id {
            return Err(PartitionError::ForeignRun {
                manifest: manifest_path,
                expected: run_id.into(),
                found: m.run_id,
            });
        }
        let geometry = Geometry { rows: m.rows, width: m.width, partitions: m.partitions };
        Self::check(geometry, buffer)?;
        if m.files.len() != m.partitions {
            return Err(PartitionError::BadManifest {
                manifest: manifest_path,
                reason: format!("{} files for {} partitions", m.files.len(), m.partitions),
            });
        }
        for (p, e) in m.files.iter().enumerate() {
            io_thread::check_file(
                &*files,
                &geometry,
                p,
                FileName { partition: p, generation: e.generation },
            )?;
        }
        let stray = files
            .list()
            .map_err(|source| PartitionError::Io { path: manifest_path.clone(), source })?;
        for name in stray {
            if m.files.get(name.partition).is_none_or(|e| e.generation != name.generation) {
                files.remove(name).map_err(|source| PartitionError::Io {
                    path: files.describe(Some(name)),
                    source,
                })?;
            }
        }
        let cursor = m.cursor;
        Ok((Self::start(files, geometry, buffer, m.run_id, m.files, m.next_version), cursor))
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.shared.geometry
    }

    /// The buffer's size `c`.
    pub fn buffer(&self) -> usize {
        self.buffer
    }

    /// The run id the files belong to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The resident partitions, ascending.
    pub fn resident(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&p| self.slots[p].read().map(|s| s.is_some()).unwrap_or(false))
            .collect()
    }

    /// Partitions whose load was sent and not yet admitted, ascending.
    pub fn loading_partitions(&self) -> Vec<usize> {
        let mut loading: Vec<usize> =
            self.pending.lock().map(|p| p.keys().copied().collect()).unwrap_or_default();
        loading.sort_unstable();
        loading
    }

    /// How many partitions are loading (sent, not yet admitted).
    pub fn loading(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// What I/O cost so far.
    pub fn io_stats(&self) -> IoStats {
        IoStats {
            // Relaxed: counters, read for reports.
            wait: Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed)),
            bytes_read: self.shared.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.shared.bytes_written.load(Ordering::Relaxed),
            bytes_streamed: self.shared.bytes_streamed.load(Ordering::Relaxed),
            bytes_gathered: self.shared.bytes_gathered.load(Ordering::Relaxed),
            busy: self.shared.queue.lock().map(|q| q.busy()).unwrap_or_default(),
        }
    }

    fn send(&self, request: Request) -> Result<(), PartitionError> {
        io_thread::send(&self.shared, request)
    }

    /// The row width, if `columns` lies within it.
    fn check_columns(&self, columns: &std::ops::Range<usize>) -> Result<usize, PartitionError> {
        let width = self.shared.geometry.width;
        if columns.start > columns.end || columns.end > width {
            return Err(PartitionError::NoSuchColumns {
                start: columns.start,
                end: columns.end,
                width,
            });
        }
        Ok(width)
    }

    fn check_partition(&self, partition: usize) -> Result<(), PartitionError> {
        let partitions = self.slots.len();
        if partition >= partitions {
            return Err(PartitionError::NoSuchPartition { partition, partitions });
        }
        Ok(())
    }

    /// The first write-back failure, if any: itself the first time, then
    /// [`PartitionError::WriteBackLost`] naming it (its partition's changes are lost, so
    /// nothing may go on from here).
    fn take_failure(&self) -> Result<(), PartitionError> {
        let mut failed = self.shared.failed.lock().map_err(poisoned)?;
        let Some(e) = failed.take() else { return Ok(()) };
        let first = match &e {
            PartitionError::WriteBackLost { first } => first.clone(),
            e => e.to_string(),
        };
        *failed = Some(PartitionError::WriteBackLost { first });
        Err(e)
    }

    /// Start loading `partition` in the background (into the spare slot) unless it is resident
    /// or already on its way. [`admit`](Self::admit) takes it.
    pub fn prefetch(&self, partition: usize) -> Result<(), PartitionError> {
        self.check_partition(partition)?;
        if self.slots[partition].read().map_err(poisoned)?.is_some() {
            return Ok(());
        }
        let mut pending = self.pending.lock().map_err(poisoned)?;
        if let std::collections::hash_map::Entry::Vacant(slot) = pending.entry(partition) {
            let (reply, rx) = blocking::bounded(1);
            self.send(Request::Load { partition, reply })?;
            slot.insert(rx);
        }
        Ok(())
    }

    /// Make `partition` resident: take its prefetched copy, or load it now, waiting for the
    /// load (the wait counts as I/O wait). An error if the buffer is full: `c + 1` partitions
    /// resident or loading, counting this one (`c` of a state and one crossing a swap, see
    /// [`Walk`](super::Walk)).
    pub fn admit(&self, partition: usize) -> Result<(), PartitionError> {
        self.check_partition(partition)?;
        self.take_failure()?;
        if self.slots[partition].read().map_err(poisoned)?.is_some() {
            return Ok(());
        }
        let loading_others = self.loading_partitions().iter().filter(|&&q| q != partition).count();
        if self.resident().len() + loading_others > self.buffer {
            return Err(PartitionError::BufferFull { partition, buffer: self.buffer });
        }
        self.prefetch(partition)?;
        let rx = self.pending.lock().map_err(poisoned)?.remove(&partition).expect("prefetched");
        let rows = if active(Mutant::PartitionReadBeforeLoad) {
            // The bug: take the slot before its load finished, as it is before the bytes
            // arrive (zeros at the initial version).
            drop(rx);
            RowStore::zeros(self.shared.geometry.len(partition), self.shared.geometry.width)
        } else {
            let t = Instant::now();
            let loaded = rx.recv().map_err(|_| PartitionError::IoThreadGone)?;
            // Relaxed: a counter, read for reports.
            self.wait_nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            let rows = loaded?;
            // The load followed the partition's write-backs; one that failed (a full disk, a
            // panic) left an older file, so the rows just read are stale: refuse them.
            self.take_failure()?;
            rows
        };
        let resident = Arc::new(Resident { rows, dirty: AtomicBool::new(false) });
        *self.slots[partition].write().map_err(poisoned)? = Some(resident);
        Ok(())
    }

    /// Take `partition` out of the buffer; its copy is written back in the background (as the
    /// partition's next file generation) if a row of it was written since it was loaded,
    /// after waiting for the write-backs sent before (so at most one evicted partition is in
    /// memory; the wait counts as I/O wait). Call only while no batch in flight touches the
    /// partition.
    pub fn evict(&self, partition: usize) -> Result<(), PartitionError> {
        self.check_partition(partition)?;
        let Some(resident) = self.slots[partition].write().map_err(poisoned)?.take() else {
            return Ok(());
        };
        // Relaxed: every writer's store of the flag happened under the slot's read guard, which
        // it released before the write guard taken above was granted (the lock orders them).
        if resident.dirty.load(Ordering::Relaxed) && !active(Mutant::PartitionEvictWithoutWriteBack)
        {
            // An evicted partition stays in memory until it is written, and write-backs run
            // after loads: unchecked they pile up behind a slow disk, a partition each. So
            // wait for the previous write-back first: beside the walk's `c + 1` at most one
            // evicted partition is held (the `c + 2` a run's memory check counts). The wait
            // is I/O wait of the step.
            if !active(Mutant::PartitionEvictSkipsWriteBackWait) {
                let t = Instant::now();
                self.flush()?;
                // Relaxed: a counter, read for reports.
                self.wait_nanos.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            self.send(Request::WriteBack { partition, resident })?;
        } else {
            // Unchanged since its load: its rows are the next load's (`io_thread::recycle`).
            io_thread::recycle(&self.shared, resident);
        }
        Ok(())
    }

    /// Move the buffer to `state`: evict its swap's outgoing partition, admit its partitions,
    /// and prefetch the partition `next` brings in. Call only while no batch is in flight.
    pub fn enter(
        &self,
        state: &BufferState,
        next: Option<&BufferState>,
    ) -> Result<(), PartitionError> {
        for p in self.resident() {
            if !state.resident.contains(&p) {
                self.evict(p)?;
            }
        }
        for &p in &state.resident {
            self.admit(p)?;
        }
        if let Some(swap) = next.and_then(|n| n.swap) {
            self.prefetch(swap.load)?;
        }
        Ok(())
    }

    /// Columns `columns` of partition `partition`'s rows, `len × columns.len()` floats
    /// row-major (e.g. an embedding without its optimizer state): from the buffer if the
    /// partition is resident, else streamed from its current file after the write-backs sent
    /// so far, a chunk at a time. The buffer does not move, and memory is the columns asked
    /// for: a reader (evaluation, a save) walks the partitions one at a time and never holds
    /// the table. Call only while no batch is in flight.
    pub fn columns(
        &self,
        partition: usize,
        columns: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, PartitionError> {
        self.check_partition(partition)?;
        let width = self.check_columns(&columns)?;
        if let Some(resident) = &*self.slots[partition].read().map_err(poisoned)? {
            let rows = self.shared.geometry.len(partition);
            let mut out = Vec::with_capacity(rows * columns.len());
            let mut row = vec![0.0; width];
            for r in 0..rows as u64 {
                resident.rows.read(r, &mut row)?;
                out.extend_from_slice(&row[columns.clone()]);
            }
            return Ok(out);
        }
        self.flush()?;
        io_thread::stream_columns(&self.shared, partition, columns)
    }

    /// Columns `columns` of rows `rows` of partition `partition` (indices inside the partition,
    /// ascending), `rows.len() × columns.len()` floats row-major: from the buffer if the
    /// partition is resident, else read row by row from its current file after the write-backs
    /// sent so far (not streamed: an evaluation reads its queries' rows this way, then streams
    /// each partition once to rank them). Call only while no batch is in flight.
    pub fn rows(
        &self,
        partition: usize,
        rows: &[usize],
        columns: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, PartitionError> {
        self.check_partition(partition)?;
        let width = self.check_columns(&columns)?;
        let len = self.shared.geometry.len(partition);
        if let Some(&r) = rows.iter().find(|&&r| r >= len) {
            let row = (self.shared.geometry.start(partition) + r) as u64;
            return Err(PartitionError::Store(StoreError::RowOutOfRange { row, rows: len }));
        }
        if let Some(resident) = &*self.slots[partition].read().map_err(poisoned)? {
            let mut out = Vec::with_capacity(rows.len() * columns.len());
            let mut row = vec![0.0; width];
            for &r in rows {
                resident.rows.read(r as u64, &mut row)?;
                out.extend_from_slice(&row[columns.clone()]);
            }
            return Ok(out);
        }
        self.flush()?;
        io_thread::gather_columns(&self.shared, partition, rows, columns)
    }

    /// Wait until every write-back sent so far is written (not synced: see
    /// [`checkpoint`](Self::checkpoint)).
    fn flush(&self) -> Result<(), PartitionError> {
        io_thread::flush(&self.shared)?;
        self.take_failure()
    }

    /// Sync every file written since the last checkpoint that is still a partition's current
    /// generation (the others are deleted, and no manifest will name them).
    fn sync_written(&self) -> Result<(), PartitionError> {
        let written = std::mem::take(&mut *self.shared.unsynced.lock().map_err(poisoned)?);
        let entries = self.shared.entries.lock().map_err(poisoned)?.clone();
        for name in written {
            if entries[name.partition].generation == name.generation {
                let needed = self.shared.geometry.file_len(name.partition);
                let files = &*self.shared.files;
                files.sync(name).map_err(io_thread::write_error(files, Some(name), needed))?;
            }
        }
        Ok(())
    }

    /// A checkpoint at `cursor`: write back every resident partition changed since it was
    /// loaded (new generations; nothing is copied or checksummed that did not change), wait for
    /// every write-back, sync the generations written since the last checkpoint (the only
    /// syncs of partition files), then replace the manifest atomically and delete the
    /// generations it no longer names. A crash at any point leaves either this checkpoint or
    /// the previous one whole. Call only while no batch is in flight.
    pub fn checkpoint(&self, cursor: Cursor) -> Result<(), PartitionError> {
        for (p, slot) in self.slots.iter().enumerate() {
            if let Some(resident) = &*slot.read().map_err(poisoned)? {
                // Relaxed: a checkpoint follows a drain, which joins the writers that set it.
                if resident.dirty.swap(false, Ordering::Relaxed) {
                    self.send(Request::WriteBack { partition: p, resident: Arc::clone(resident) })?;
                }
            }
        }
        self.flush()?;
        self.sync_written()?;
        self.write_manifest(cursor)?;
        let garbage = std::mem::take(&mut *self.shared.garbage.lock().map_err(poisoned)?);
        for name in garbage {
            self.shared.files.remove(name).map_err(|source| PartitionError::Io {
                path: self.shared.files.describe(Some(name)),
                source,
            })?;
        }
        Ok(())
    }

    fn write_manifest(&self, cursor: Cursor) -> Result<(), PartitionError> {
        let g = self.shared.geometry;
        let manifest = Manifest {
            format: FORMAT,
            run_id: self.run_id.clone(),
            rows: g.rows,
            width: g.width,
            partitions: g.partitions,
            // Acquire: pairs with the writers' fetch_max (drained before a checkpoint).
            next_version: self.next_version.load(Ordering::Acquire),
            cursor,
            files: self.shared.entries.lock().map_err(poisoned)?.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
        let files = &*self.shared.files;
        files.write_manifest(&bytes).map_err(io_thread::write_error(
            files,
            None,
            bytes.len() as u64,
        ))?;
        *self.shared.checkpointed.lock().map_err(poisoned)? =
            manifest.files.iter().map(|e| e.generation).collect();
        Ok(())
    }

    /// Row `row`'s partition and its index inside it.
    fn locate(&self, row: u64) -> Result<(usize, u64), StoreError> {
        let g = &self.shared.geometry;
        if row >= g.rows as u64 {
            return Err(StoreError::RowOutOfRange { row, rows: g.rows });
        }
        let p = g.partition_of(row as usize);
        Ok((p, row - g.start(p) as u64))
    }

    fn with_resident<R>(
        &self,
        row: u64,
        f: impl FnOnce(&Resident, u64) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let (p, local) = self.locate(row)?;
        let slot =
            self.slots[p].read().map_err(|_| StoreError::other(PartitionError::IoThreadGone))?;
        match &*slot {
            Some(resident) => f(resident, local),
            None => Err(StoreError::other(PartitionError::NotResident { row, partition: p })),
        }
    }
}

fn read_manifest(files: &dyn PartitionFiles) -> Result<Option<Manifest>, PartitionError> {
    let path = files.describe(None);
    let Some(bytes) = files
        .read_manifest()
        .map_err(|source| PartitionError::Io { path: path.clone(), source })?
    else {
        return Ok(None);
    };
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| PartitionError::BadManifest {
        manifest: path.clone(),
        reason: e.to_string(),
    })?;
    if m.format != FORMAT {
        return Err(PartitionError::BadManifest {
            manifest: path,
            reason: format!("format {} is not {FORMAT}", m.format),
        });
    }
    Ok(Some(m))
}

impl Drop for PartitionedStorage {
    /// Stops the I/O threads after the requests already sent. Resident changes since the last
    /// [`checkpoint`](PartitionedStorage::checkpoint) are not saved: dropping is a crash as far
    /// as the files are concerned.
    fn drop(&mut self) {
        io_thread::close(&self.shared);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for PartitionedStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedStorage")
            .field("geometry", &self.shared.geometry)
            .field("buffer", &self.buffer)
            .field("run_id", &self.run_id)
            .finish()
    }
}

impl RowStorage for PartitionedStorage {
    fn rows(&self) -> usize {
        self.shared.geometry.rows
    }

    fn width(&self) -> usize {
        self.shared.geometry.width
    }

    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        self.with_resident(row, |r, local| r.rows.read(local, out))
    }

    fn version(&self, row: u64) -> Result<Version, StoreError> {
        self.with_resident(row, |r, local| r.rows.version(local))
    }

    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        self.with_resident(row, |r, local| {
            let landed = r.rows.write_if_newer(local, ts, values)?;
            if landed {
                // Relaxed: read under the slot's write guard (see `evict`) or after a drain.
                r.dirty.store(true, Ordering::Relaxed);
                // AcqRel: a counter read at session start and checkpoints, after a drain.
                self.next_version.fetch_max(ts + 1, Ordering::AcqRel);
            }
            Ok(landed)
        })
    }

    fn prefetch(&self, row: u64) {
        let _ = self.with_resident(row, |r, local| {
            r.rows.prefetch(local);
            Ok(())
        });
    }

    /// The whole table: resident partitions from memory, the others streamed from their files
    /// (after the pending write-backs), one partition at a time.
    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        self.flush().map_err(StoreError::other)?;
        let g = self.shared.geometry;
        let mut all = Vec::with_capacity(g.rows * g.width);
        for p in 0..g.partitions {
            let slot = self.slots[p]
                .read()
                .map_err(|_| StoreError::other(PartitionError::IoThreadGone))?;
            let part = match &*slot {
                Some(r) => r.rows.snapshot(),
                None => io_thread::load_partition(&self.shared, p, false)
                    .map_err(StoreError::other)?
                    .snapshot(),
            };
            all.extend_from_slice(&part);
        }
        Ok(all)
    }

    fn next_version(&self) -> Result<u64, StoreError> {
        // Acquire: as in `write_manifest`.
        Ok(self.next_version.load(Ordering::Acquire))
    }

    fn read_unordered(&self, row: u64, out: &mut [f32]) -> Result<(), StoreError> {
        self.with_resident(row, |r, local| r.rows.hogwild().read(local, out))
    }

    fn overwrite_unordered(&self, row: u64, values: &[f32]) -> Result<(), StoreError> {
        self.with_resident(row, |r, local| {
            r.rows.hogwild().write(local, values)?;
            // Relaxed: as in `write_if_newer`.
            r.dirty.store(true, Ordering::Relaxed);
            Ok(())
        })
    }

    fn add_unordered(&self, row: u64, delta: &[f32]) -> Result<(), StoreError> {
        self.with_resident(row, |r, local| {
            r.rows.hogwild().add(local, delta)?;
            // Relaxed: as in `write_if_newer`.
            r.dirty.store(true, Ordering::Relaxed);
            Ok(())
        })
    }
}
