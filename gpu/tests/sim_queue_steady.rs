//! The host twin of the CUDA pipeline ([`SimQueue`]) in steady state, driven as the sequencer
//! drives a device (evict, submit, collect): no allocation in the queue's own buffers once its
//! slots are warm, and one host wait per batch. A counting allocator sees every allocation of
//! this test binary's thread.

#![cfg(not(ordo_loom))]

use ordo::engine::{BatchRows, DeviceQueue, Model, StepError, Submission};
use ordo_gpu::cache::CacheConfig;
use ordo_gpu::queue::{QueueCounts, SimQueue};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations of the thread that set [`COUNTING`].
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is thread-local and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCS.with(|a| a.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get)
}

/// Adds 1 to every float.
struct Add;

impl Model for Add {
    type Data = ();
    type Error = StepError;
    fn row_width(&self) -> usize {
        2
    }
    fn step(&mut self, _: &(), rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        rows.values_mut().iter_mut().for_each(|v| *v += 1.0);
        Ok(())
    }
    fn dense(&self) -> Vec<f32> {
        Vec::new()
    }
}

const DEPTH: usize = 4;

/// Batch `ts`: 8 rows, overlapping the previous batches', read one batch late.
fn ids(ts: u64) -> Vec<u64> {
    (0..8)
        .map(|i| (ts + 3 * i) % 64)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Run batches `range` through `q` as the sequencer does, keeping `DEPTH` in flight; the
/// buffers are made before, so only the queue's allocations are counted.
fn drive(q: &mut SimQueue, range: std::ops::Range<u64>, cache: bool) -> u64 {
    let batches: Vec<(Vec<u64>, Vec<Option<u64>>)> =
        range.clone().map(|ts| (ids(ts), vec![ts.checked_sub(2); ids(ts).len()])).collect();
    let mut values: Vec<Vec<f32>> = batches.iter().map(|(r, _)| vec![0.0; 2 * r.len()]).collect();
    let mut out = [0.0f32; 16];
    let first = range.start;
    allocations(|| {
        let mut collected = first;
        // Collect the batches in flight, oldest first, until the one stamped `end` is next.
        let mut collect_until = |q: &mut SimQueue, end: u64| {
            while collected < end {
                let (r, _) = &batches[(collected - first) as usize];
                let mut b = BatchRows::new(r, 2, &mut out[..2 * r.len()]).unwrap();
                DeviceQueue::<Add>::collect(q, &mut b).unwrap();
                collected += 1;
            }
        };
        for (k, ((rows, read), v)) in batches.iter().zip(values.iter_mut()).enumerate() {
            let ts = first + k as u64;
            collect_until(q, (ts + 1).saturating_sub(DEPTH as u64));
            DeviceQueue::<Add>::evict(q, ts.saturating_sub(2 * DEPTH as u64)).unwrap();
            let job =
                Submission { ts, batch_id: ts, validate: cache, insert: cache, read, data: &() };
            let mut b = BatchRows::new(rows, 2, v).unwrap();
            DeviceQueue::<Add>::submit(q, &mut Add, job, &mut b).unwrap();
        }
        collect_until(q, first + batches.len() as u64);
    })
}

#[test]
fn the_queue_allocates_nothing_in_steady_state_and_waits_once_a_batch() {
    let mut q = SimQueue::new(DEPTH, 8, 2, None).unwrap();
    drive(&mut q, 0..16, false);
    assert_eq!(drive(&mut q, 16..216, false), 0, "allocations in 200 batches (no cache)");
    assert_eq!(q.counts(), QueueCounts { batches: 216, waits: 216 });
}

/// With the validation cache, the table and the staging are fixed too; what remains is the
/// host ledger's list of each cached batch's row ids (one list per inserted batch, freed at its
/// eviction), which the CUDA pipeline shares, and the host port's table rebuild at a rehash
/// (every few dozen batches here): 206 in 200 batches when this was written.
#[test]
fn with_the_cache_at_most_the_ledgers_list_is_allocated_per_batch() {
    let config = CacheConfig::for_in_flight(4 * DEPTH, 8, 2).unwrap();
    let mut q = SimQueue::new(DEPTH, 8, 2, Some(config)).unwrap();
    // Warm: every row id (0..64) has been cached once, so the ledger's index has its size.
    drive(&mut q, 0..64, true);
    let n = drive(&mut q, 64..264, true);
    assert!(n <= 210, "{n} allocations in 200 batches with the cache");
    assert_eq!(q.counts(), QueueCounts { batches: 264, waits: 264 });
}
