//! A swap moves no partition's memory through the allocator: an evicted partition's rows, once
//! written back, are what the next load fills. Over an epoch's walk the storage allocates the
//! rows of at most `c + 2` partitions (the `c + 1` resident or loading and the one being written
//! back), however many swaps the walk makes; before, every load allocated a partition and every
//! write-back freed one, and mimalloc kept freed partitions committed for its purge delay, so an
//! oac run swapping about once a second held a partition or two more than its buffer.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

use ordo::partition::ordering::beta;
use ordo::partition::{DiskFiles, Geometry, PartitionedStorage, Walk};
use ordo::storage::RowStorage;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

const PARTITIONS: usize = 8;
const BUFFER: usize = 2;
const ROWS: usize = 8 * 64;
/// Three floats a row: a row store's row is three words (a version word and two of values),
/// 24 bytes; a file's row is 20 bytes, so no I/O buffer has a partition's rows' size.
const WIDTH: usize = 3;
const PARTITION_BYTES: usize = ROWS / PARTITIONS * 3 * 8;

/// The system allocator, counting the allocations of a partition's rows (their size, in
/// 8-byte words) from every thread.
struct Counting;

static PARTITION_ALLOCS: AtomicUsize = AtomicUsize::new(0);

fn count(layout: Layout) {
    if layout.size() == PARTITION_BYTES && layout.align() == 8 {
        // Relaxed: a counter, read after the I/O threads are joined.
        PARTITION_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(Layout::from_size_align(new_size, layout.align()).expect("a valid layout"));
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Two epochs' walks of `beta(8, 2)` on disk, every partition written in every state that holds
/// it (so each eviction writes back): at most `c + 2` partitions' rows allocated over the
/// walks' dozens of loads, and every row ends with the last value written to it.
#[test]
fn a_walk_allocates_at_most_c_plus_2_partitions_rows() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskFiles::new(dir.path()).unwrap();
    let g = Geometry { rows: ROWS, width: WIDTH, partitions: PARTITIONS };
    let s =
        PartitionedStorage::create(files, g, BUFFER, "recycle", |_, out| out.fill(0.0)).unwrap();
    let plan = beta(PARTITIONS, BUFFER).unwrap();
    let mut walk = Walk::new(&s, &plan);
    let mut expected = vec![0.0f32; ROWS];
    let mut ts = 0;
    for _epoch in 0..2 {
        for k in 0..plan.states.len() {
            assert!(walk.try_enter(k, 1).unwrap(), "state {k} enters after the last finished");
            for &p in &plan.states[k].resident {
                let first = g.start(p);
                for (r, e) in expected.iter_mut().enumerate().skip(first).take(g.len(p)) {
                    let v = ts as f32;
                    assert!(s.write_if_newer(r as u64, ts, &[v; WIDTH]).unwrap());
                    *e = v;
                    ts += 1;
                }
            }
            walk.finished(k).unwrap();
        }
    }
    walk.drained().unwrap();
    // Before the snapshot, which reads the partitions outside the buffer into fresh rows.
    let allocated = PARTITION_ALLOCS.load(Ordering::Relaxed); // Relaxed: see `count`.
    let loads = s.io_stats().bytes_read / g.file_len(0);
    let table = s.snapshot().unwrap();
    assert!(loads > 4 * (BUFFER + 2) as u64, "the walks swapped: {loads} loads");
    assert!(allocated >= BUFFER, "the count sees the rows' allocations: {allocated}");
    assert!(
        allocated <= BUFFER + 2,
        "{allocated} partitions' rows allocated over {loads} loads: a swap allocated a partition"
    );
    for (r, &v) in expected.iter().enumerate() {
        assert_eq!(table[r * WIDTH..(r + 1) * WIDTH], [v; WIDTH], "row {r}");
    }
}
