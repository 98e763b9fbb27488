//! The background I/O threads: [`IO_THREADS`] of them load partitions into fresh row stores and
//! write evicted ones back, loads first.
//!
//! **Order.** A load runs ahead of every queued write-back of *other* partitions (the next
//! state waits for its load; nothing waits for a write-back until a checkpoint), but never ahead
//! of a write-back of its own partition: a load of `p` is served only once no write-back of `p`
//! is queued or running, so it reads the generation that write-back produced and a partition is
//! never read from a stale file. At most one write-back of a partition runs at a time. A
//! write-back updates the partition's [`FileEntry`] after its file is written.
//!
//! **Durability.** Write-backs are not synced: a file only needs to be durable once a manifest
//! names it, so [`PartitionedStorage::checkpoint`](super::PartitionedStorage::checkpoint) syncs
//! the generations written since the last checkpoint (listed in [`Shared::unsynced`]) before it
//! replaces the manifest. A crash loses at most unsynced generations, which no manifest names.

use super::error::PartitionError;
use super::files::{FileName, PartitionFiles};
use super::geometry::Geometry;
use super::manifest::FileEntry;
use crate::mutation::{Mutant, active};
use crate::row_store::{RowStore, StoreError, Version};
use crate::sync::blocking::{Condvar, Mutex, Sender};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// I/O threads per storage: a load can run while another thread writes a partition back.
pub(crate) const IO_THREADS: usize = 2;

/// Bytes a load or write-back moves per call: partitions stream through a buffer this size.
const CHUNK_BYTES: usize = 1 << 20;

/// A partition in the buffer.
#[derive(Debug)]
pub(crate) struct Resident {
    pub(crate) rows: RowStore,
    /// A write landed since the partition was loaded or last written back.
    pub(crate) dirty: std::sync::atomic::AtomicBool,
}

/// What the storage shares with its I/O threads.
pub(crate) struct Shared {
    pub(crate) files: Arc<dyn PartitionFiles>,
    pub(crate) geometry: Geometry,
    /// Per partition, its current file (updated by write-backs after their sync).
    pub(crate) entries: Mutex<Vec<FileEntry>>,
    /// Per partition, the generation the manifest on disk names (set when a manifest is
    /// written), or `u64::MAX` for a creation's file that need not be kept
    /// ([`PartitionedStorage::discard_initial`](super::PartitionedStorage::discard_initial)).
    pub(crate) checkpointed: Mutex<Vec<u64>>,
    /// Generations the manifest on disk names that a write-back has superseded: deleted after
    /// the next checkpoint, since until then they are what a crash returns to.
    pub(crate) garbage: Mutex<Vec<FileName>>,
    /// The first write-back failure, reported at the next swap or checkpoint.
    pub(crate) failed: Mutex<Option<PartitionError>>,
    /// The rows of evicted partitions once written back, for the next loads to fill
    /// ([`recycle`]): a swap then moves no partition's memory through the allocator.
    pub(crate) spare: Mutex<Vec<RowStore>>,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    /// Bytes read by [`stream_columns`] (evaluation, saves), not by loads into the buffer.
    pub(crate) bytes_streamed: AtomicU64,
    /// Bytes read by [`gather_columns`] (single rows: the queries of an evaluation).
    pub(crate) bytes_gathered: AtomicU64,
    /// Files written since the last checkpoint, not yet synced.
    pub(crate) unsynced: Mutex<Vec<FileName>>,
    /// The I/O threads' work.
    pub(crate) queue: Mutex<Queue>,
    /// Signalled when work is queued, a write-back ends, or the queue closes.
    pub(crate) changed: Condvar,
}

/// The I/O threads' work: loads and write-backs waiting, and the write-backs running.
#[derive(Default)]
pub(crate) struct Queue {
    loads: VecDeque<(usize, Sender<Loaded>)>,
    write_backs: VecDeque<(usize, Arc<Resident>)>,
    /// Partitions whose write-back a thread is running.
    running: Vec<usize>,
    /// No more requests: the threads finish the queued ones and exit.
    closed: bool,
    /// The I/O-bound time: how long at least one thread ran a job, and when the threads last
    /// went from none running to one.
    busy: BusyClock,
}

/// Wall time during which at least one I/O thread ran a load or write-back: the union of the
/// jobs' intervals (two threads overlapping count once), so bytes over it is the rate the
/// storage moved data at while it moved any, comparable with a plain sequential read.
#[derive(Default)]
struct BusyClock {
    running: usize,
    since: Option<Instant>,
    total: Duration,
}

impl BusyClock {
    fn start(&mut self) {
        if self.running == 0 {
            self.since = Some(Instant::now());
        }
        self.running += 1;
    }

    fn stop(&mut self) {
        self.running = self.running.saturating_sub(1);
        if self.running == 0
            && let Some(since) = self.since.take()
        {
            self.total += since.elapsed();
        }
    }

    fn read(&self) -> Duration {
        self.total + self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

impl Queue {
    /// Whether a write-back of `p` is queued or running.
    fn writing(&self, p: usize) -> bool {
        self.running.contains(&p) || self.write_backs.iter().any(|(q, _)| *q == p)
    }

    /// Whether every write-back sent is done.
    pub(crate) fn written(&self) -> bool {
        self.write_backs.is_empty() && self.running.is_empty()
    }

    /// The I/O-bound time so far ([`BusyClock`]).
    pub(crate) fn busy(&self) -> Duration {
        self.busy.read()
    }
}

pub(crate) type Loaded = Result<RowStore, PartitionError>;

pub(crate) enum Request {
    Load { partition: usize, reply: Sender<Loaded> },
    WriteBack { partition: usize, resident: Arc<Resident> },
}

/// Queue `request` for the I/O threads; an error once the queue is closed.
pub(crate) fn send(shared: &Shared, request: Request) -> Result<(), PartitionError> {
    let mut q = shared.queue.lock().map_err(|_| PartitionError::IoThreadGone)?;
    if q.closed {
        return Err(PartitionError::IoThreadGone);
    }
    match request {
        Request::Load { partition, reply } => q.loads.push_back((partition, reply)),
        Request::WriteBack { partition, resident } => {
            q.write_backs.push_back((partition, resident))
        }
    }
    shared.changed.notify_all();
    Ok(())
}

/// Wait until every write-back sent so far is done.
pub(crate) fn flush(shared: &Shared) -> Result<(), PartitionError> {
    let q = shared.queue.lock().map_err(|_| PartitionError::IoThreadGone)?;
    let _q =
        shared.changed.wait_while(q, |q| !q.written()).map_err(|_| PartitionError::IoThreadGone)?;
    Ok(())
}

/// Close the queue: the threads finish what was sent, then exit.
pub(crate) fn close(shared: &Shared) {
    if let Ok(mut q) = shared.queue.lock() {
        q.closed = true;
    }
    shared.changed.notify_all();
}

fn io_error(
    files: &dyn PartitionFiles,
    name: FileName,
) -> impl Fn(std::io::Error) -> PartitionError + '_ {
    move |source| PartitionError::Io { path: files.describe(Some(name)), source }
}

/// As [`io_error`], for a write or sync of `needed` bytes: a full file system is
/// [`PartitionError::NoSpace`], naming the bytes.
pub(crate) fn write_error(
    files: &dyn PartitionFiles,
    name: Option<FileName>,
    needed: u64,
) -> impl Fn(std::io::Error) -> PartitionError + '_ {
    move |source| PartitionError::on_write(files.describe(name), needed, source)
}

/// Rows per chunk for rows of `row_bytes` bytes.
fn chunk_rows(row_bytes: usize) -> usize {
    (CHUNK_BYTES / row_bytes).max(1)
}

/// Encode one row: its version word (0: initial, `ts + 1`: written), then its floats, little
/// endian.
pub(crate) fn encode_row(version: Version, values: &[f32], out: &mut [u8]) {
    let word = version.ts().map_or(0, |ts| ts + 1);
    out[..8].copy_from_slice(&word.to_le_bytes());
    for (v, b) in values.iter().zip(out[8..].chunks_exact_mut(4)) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

fn decode_row(bytes: &[u8], out: &mut [f32]) -> Version {
    let word = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    for (v, b) in out.iter_mut().zip(bytes[8..].chunks_exact(4)) {
        *v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
    match word {
        0 => Version::Initial,
        w => Version::Written(w - 1),
    }
}

/// Write partition `p`'s rows, as `row(r, out)` encodes row `r`, to file `name` (not synced);
/// return the checksum and the bytes written.
pub(crate) fn write_partition(
    files: &dyn PartitionFiles,
    geometry: &Geometry,
    p: usize,
    name: FileName,
    mut row: impl FnMut(usize, &mut [u8]) -> Result<(), PartitionError>,
) -> Result<(u32, u64), PartitionError> {
    let rb = geometry.row_bytes();
    let (rows, per) = (geometry.len(p), chunk_rows(rb));
    let mut buf = vec![0u8; per.min(rows) * rb];
    let mut hasher = crc32fast::Hasher::new();
    let err = write_error(files, Some(name), geometry.file_len(p));
    let mut r = 0;
    while r < rows {
        let n = per.min(rows - r);
        for (k, out) in buf[..n * rb].chunks_exact_mut(rb).enumerate() {
            row(r + k, out)?;
        }
        hasher.update(&buf[..n * rb]);
        files.write_at(name, (r * rb) as u64, &buf[..n * rb]).map_err(&err)?;
        r += n;
    }
    if rows == 0 {
        files.write_at(name, 0, &[]).map_err(&err)?;
    }
    Ok((hasher.finalize(), (rows * rb) as u64))
}

/// Check that file `name` exists with partition `p`'s length.
pub(crate) fn check_file(
    files: &dyn PartitionFiles,
    geometry: &Geometry,
    p: usize,
    name: FileName,
) -> Result<(), PartitionError> {
    let expected = geometry.file_len(p);
    match files.len(name).map_err(io_error(files, name))? {
        None => Err(PartitionError::MissingPartition { path: files.describe(Some(name)) }),
        Some(got) if got != expected => Err(PartitionError::TruncatedPartition {
            path: files.describe(Some(name)),
            expected,
            got,
        }),
        Some(_) => Ok(()),
    }
}

/// Partition `p`'s current file, read row by row in order a chunk at a time: its length is
/// checked when it is opened and its checksum by [`CurrentFile::finish`], so memory is one
/// chunk whatever the partition's size.
struct CurrentFile<'a> {
    files: &'a dyn PartitionFiles,
    name: FileName,
    crc32: u32,
    rows: usize,
    row_bytes: usize,
    per_chunk: usize,
    buf: Vec<u8>,
    hasher: crc32fast::Hasher,
}

impl<'a> CurrentFile<'a> {
    fn open(shared: &'a Shared, p: usize) -> Result<Self, PartitionError> {
        let (files, geometry) = (&*shared.files, &shared.geometry);
        let entry = shared.entries.lock().map_err(|_| PartitionError::IoThreadGone)?[p];
        let name = FileName { partition: p, generation: entry.generation };
        check_file(files, geometry, p, name)?;
        let row_bytes = geometry.row_bytes();
        let (rows, per_chunk) = (geometry.len(p), chunk_rows(row_bytes));
        Ok(CurrentFile {
            files,
            name,
            crc32: entry.crc32,
            rows,
            row_bytes,
            per_chunk,
            buf: vec![0u8; per_chunk.min(rows) * row_bytes],
            hasher: crc32fast::Hasher::new(),
        })
    }

    /// Row `r`'s bytes (its version word, then its floats); rows are asked for in order
    /// `0, 1, 2, …`, and the next chunk is read at each chunk's first row.
    fn row(&mut self, r: usize) -> Result<&[u8], PartitionError> {
        let (rb, k) = (self.row_bytes, r % self.per_chunk);
        if k == 0 {
            let n = self.per_chunk.min(self.rows - r);
            let chunk = &mut self.buf[..n * rb];
            self.files
                .read_at(self.name, (r * rb) as u64, chunk)
                .map_err(io_error(self.files, self.name))?;
            self.hasher.update(chunk);
        }
        Ok(&self.buf[k * rb..(k + 1) * rb])
    }

    /// After the last row: the bytes read match the checksum the file's entry names.
    fn finish(self) -> Result<(), PartitionError> {
        if self.hasher.finalize() != self.crc32 {
            return Err(PartitionError::Checksum { path: self.files.describe(Some(self.name)) });
        }
        Ok(())
    }
}

/// Keep `resident`'s rows as a spare for a later load if no one else holds them (an evicted
/// partition, once written back; a checkpoint's write-back shares them with the buffer).
///
/// **Why.** A partition's rows are one large allocation. Freed at every swap and allocated
/// again at the next load, they went through the allocator, and mimalloc keeps freed memory
/// committed for its purge delay (1 s) and may place the next partition elsewhere: an oac
/// epoch at 38M entities swapped about once a second and held a partition or two more than
/// the buffer's. Recycled, the rows of `c + 2` partitions are all the partition memory a
/// storage ever allocates, whatever the allocator: a load takes a spare whenever one is kept,
/// so it allocates only when none is, and then at most `c + 1` partitions are resident or
/// loading (counting it) and one is being written back ([`Walk`](super::Walk)'s bound); the
/// number of partitions' rows alive only grows at such a load, so it never passes `c + 2`.
pub(crate) fn recycle(shared: &Shared, resident: Arc<Resident>) {
    if let Ok(resident) = Arc::try_unwrap(resident)
        && let Ok(mut spare) = shared.spare.lock()
    {
        spare.push(resident.rows);
    }
}

/// A spare's rows for a load of `rows` rows ([`recycle`]): one of that size if one is kept,
/// else any (the load frees it before it allocates, so what is alive does not grow).
fn take_spare(shared: &Shared, rows: usize) -> Option<RowStore> {
    let mut spare = shared.spare.lock().ok()?;
    let last = spare.len().checked_sub(1)?;
    let i = spare.iter().position(|s| s.rows() == rows).unwrap_or(last);
    Some(spare.swap_remove(i))
}

/// Read partition `p` from its current file into a row store, checking its length and
/// checksum: into a spare's memory ([`recycle`]) if `reuse` and one is kept, else fresh.
pub(crate) fn load_partition(shared: &Shared, p: usize, reuse: bool) -> Loaded {
    let geometry = &shared.geometry;
    let mut file = CurrentFile::open(shared, p)?;
    let rows = file.rows;
    let spare = if reuse { take_spare(shared, rows) } else { None };
    let mut failure = None;
    let store =
        RowStore::try_from_rows_reusing(spare, rows, geometry.width, |r, out| match file.row(r) {
            Ok(bytes) => Ok(decode_row(bytes, out)),
            Err(e) => {
                failure = Some(e);
                Err(StoreError::TooLarge { rows, width: 0 }) // replaced below
            }
        });
    if let Some(e) = failure {
        return Err(e);
    }
    let store = store?;
    shared.bytes_read.fetch_add(geometry.file_len(p), Ordering::Relaxed); // Relaxed: a counter.
    file.finish()?;
    Ok(store)
}

/// Columns `columns` of partition `p`'s rows (`len × columns.len()`, row-major) from its
/// current file, a chunk at a time, checking its length and checksum: memory is the columns
/// and one chunk, never the partition's whole rows. Counted in `bytes_streamed`.
pub(crate) fn stream_columns(
    shared: &Shared,
    p: usize,
    columns: std::ops::Range<usize>,
) -> Result<Vec<f32>, PartitionError> {
    let mut file = CurrentFile::open(shared, p)?;
    let mut out = Vec::with_capacity(file.rows * columns.len());
    for r in 0..file.rows {
        let floats = &file.row(r)?[8 + 4 * columns.start..8 + 4 * columns.end];
        out.extend(floats.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4"))));
    }
    shared.bytes_streamed.fetch_add(shared.geometry.file_len(p), Ordering::Relaxed); // Relaxed: a counter.
    file.finish()?;
    Ok(out)
}

/// Columns `columns` of partition `p`'s rows `rows` (local indices, ascending), read row by
/// row from its current file (`rows.len() × columns.len()`, row-major). The file's length is
/// checked, not its checksum (that needs the whole file: [`stream_columns`] checks it).
/// Counted in `bytes_gathered`.
pub(crate) fn gather_columns(
    shared: &Shared,
    p: usize,
    rows: &[usize],
    columns: std::ops::Range<usize>,
) -> Result<Vec<f32>, PartitionError> {
    let (files, geometry) = (&*shared.files, &shared.geometry);
    let entry = shared.entries.lock().map_err(|_| PartitionError::IoThreadGone)?[p];
    let name = FileName { partition: p, generation: entry.generation };
    check_file(files, geometry, p, name)?;
    let mut buf = vec![0u8; 4 * columns.len()];
    let mut out = Vec::with_capacity(rows.len() * columns.len());
    for &r in rows {
        let offset = (r * geometry.row_bytes() + 8 + 4 * columns.start) as u64;
        files.read_at(name, offset, &mut buf).map_err(io_error(files, name))?;
        out.extend(buf.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4"))));
    }
    // Relaxed: a counter.
    shared.bytes_gathered.fetch_add(buf.len() as u64 * rows.len() as u64, Ordering::Relaxed);
    Ok(out)
}

/// Write `resident` back as partition `p`'s next generation.
fn write_back(shared: &Shared, p: usize, resident: &Resident) -> Result<(), PartitionError> {
    let files = &*shared.files;
    let old = shared.entries.lock().map_err(|_| PartitionError::IoThreadGone)?[p];
    let name = FileName { partition: p, generation: old.generation + 1 };
    let old_name = FileName { partition: p, generation: old.generation };
    let width = shared.geometry.width;
    let rb = shared.geometry.row_bytes();
    let mut values = vec![0.0; width];
    let written = write_partition(files, &shared.geometry, p, name, |r, out| {
        if active(Mutant::PartitionWriteBackStale) {
            // The bug: write back the copy as it was loaded (the old file), not the buffer's.
            return files
                .read_at(old_name, (r * rb) as u64, out)
                .map_err(io_error(files, old_name));
        }
        let version = resident.rows.read(r as u64, &mut values)?;
        encode_row(version, &values, out);
        Ok(())
    });
    let (crc, len) = written.inspect_err(|_| {
        // A part of a generation nothing names (a full disk): its space back, and the
        // partition's current file stays what it was.
        let _ = files.remove(name);
    })?;
    shared.bytes_written.fetch_add(len, Ordering::Relaxed); // Relaxed: a counter.
    shared.unsynced.lock().map_err(|_| PartitionError::IoThreadGone)?.push(name);
    shared.entries.lock().map_err(|_| PartitionError::IoThreadGone)?[p] =
        FileEntry { generation: name.generation, crc32: crc };
    // The superseded generation: kept until the next checkpoint if the manifest names it, else
    // no crash can return to it and no reader can still want it (loads read the current
    // generation, and after the FIFO queue this write-back is in; streams flush first), so it
    // goes now (as does a creation's file its caller can write again: `discard_initial`). A
    // partition has at most two files between checkpoints, however often it is swapped out:
    // the checkpoint's and the current one.
    let checkpointed = shared.checkpointed.lock().map_err(|_| PartitionError::IoThreadGone)?[p];
    if old.generation == checkpointed {
        shared.garbage.lock().map_err(|_| PartitionError::IoThreadGone)?.push(old_name);
    } else {
        files.remove(old_name).map_err(io_error(files, old_name))?;
    }
    Ok(())
}

enum Job {
    Load(usize, Sender<Loaded>),
    WriteBack(usize, Arc<Resident>),
}

/// The next job: the oldest load whose partition has no write-back queued or running, else the
/// oldest write-back of a partition with none running; `None` once the queue is closed and
/// empty.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut q = shared.queue.lock().ok()?;
    loop {
        if let Some(i) = q.loads.iter().position(|(p, _)| !q.writing(*p)) {
            let (p, reply) = q.loads.remove(i).expect("a position in the queue");
            q.busy.start();
            return Some(Job::Load(p, reply));
        }
        if let Some(i) = q.write_backs.iter().position(|(p, _)| !q.running.contains(p)) {
            let (p, resident) = q.write_backs.remove(i).expect("a position in the queue");
            q.running.push(p);
            q.busy.start();
            return Some(Job::WriteBack(p, resident));
        }
        if q.closed && q.loads.is_empty() && q.written() {
            return None;
        }
        q = shared.changed.wait(q).ok()?;
    }
}

/// Run one job's I/O, turning a panic inside it (a bug, or a [`PartitionFiles`] that panics)
/// into [`PartitionError::IoPanicked`] naming the job and its partition's current file: the
/// thread lives on and serves the next job, and whoever waits for this one gets the error,
/// never a wait without end (a load of the partition waits for its write-backs, and every
/// queued load for a thread to take it).
fn guarded<T>(
    shared: &Shared,
    job: &'static str,
    partition: usize,
    io: impl FnOnce() -> Result<T, PartitionError>,
) -> Result<T, PartitionError> {
    // A write-back writes the generation after the current one.
    let next = u64::from(job == "write-back");
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(io)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        let generation =
            shared.entries.lock().map_or(0, |e| e.get(partition).map_or(0, |e| e.generation));
        let name = FileName { partition, generation: generation + next };
        Err(PartitionError::IoPanicked { job, path: shared.files.describe(Some(name)), message })
    })
}

/// An I/O thread's loop: serve jobs until the queue is closed and empty.
pub(crate) fn run(shared: Arc<Shared>) {
    while let Some(job) = next_job(&shared) {
        match job {
            Job::Load(partition, reply) => {
                let loaded = guarded(&shared, "load", partition, || {
                    load_partition(&shared, partition, true)
                });
                if let Ok(mut q) = shared.queue.lock() {
                    q.busy.stop();
                }
                // The storage may have stopped waiting (dropped); nothing to do then.
                let _ = reply.send(loaded);
            }
            Job::WriteBack(partition, resident) => {
                let written = guarded(&shared, "write-back", partition, || {
                    write_back(&shared, partition, &resident)
                });
                recycle(&shared, resident);
                if let Err(e) = written
                    && let Ok(mut failed) = shared.failed.lock()
                {
                    failed.get_or_insert(e);
                }
                if let Ok(mut q) = shared.queue.lock() {
                    q.busy.stop();
                    if let Some(i) = q.running.iter().position(|&p| p == partition) {
                        q.running.swap_remove(i);
                    }
                }
                shared.changed.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BusyClock;
    use std::time::Duration;

    /// Two jobs running at once count once, and time with no job running is not counted.
    #[test]
    fn the_busy_clock_counts_the_union_of_the_jobs() {
        let nap = Duration::from_millis(20);
        let mut clock = BusyClock::default();
        clock.start();
        clock.start();
        std::thread::sleep(nap);
        clock.stop();
        std::thread::sleep(nap);
        clock.stop();
        let busy = clock.read();
        assert!(busy >= 2 * nap, "{busy:?}");
        std::thread::sleep(nap);
        assert_eq!(clock.read(), busy, "idle time is not busy time");
        clock.start();
        std::thread::sleep(nap);
        assert!(clock.read() >= busy + nap, "a running job counts before it ends");
    }
}
