//! The partition buffer's memory bound under a slow disk: an evicted partition stays in memory
//! until its write-back is written, and write-backs run after loads, so `evict` waits for the
//! previous write-back before it queues its own. Beside the walk's `c + 1` resident or loading
//! partitions at most one evicted partition is held: the `c + 2` a run's memory check counts.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

use ordo::partition::{FileName, Geometry, MemoryFiles, PartitionFiles, PartitionedStorage};
use ordo::storage::RowStorage;
use std::io;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

/// In-memory files whose partition writes wait while the gate is closed: a disk slower than
/// the trainer.
#[derive(Clone, Default)]
struct Gated {
    inner: MemoryFiles,
    closed: Arc<(Mutex<bool>, Condvar)>,
}

impl Gated {
    fn set(&self, closed: bool) {
        *self.closed.0.lock().unwrap() = closed;
        self.closed.1.notify_all();
    }
}

impl PartitionFiles for Gated {
    fn len(&self, name: FileName) -> io::Result<Option<u64>> {
        self.inner.len(name)
    }
    fn read_at(&self, name: FileName, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(name, offset, buf)
    }
    fn write_at(&self, name: FileName, offset: u64, buf: &[u8]) -> io::Result<()> {
        let (closed, opened) = &*self.closed;
        drop(opened.wait_while(closed.lock().unwrap(), |c| *c).unwrap());
        self.inner.write_at(name, offset, buf)
    }
    fn sync(&self, name: FileName) -> io::Result<()> {
        self.inner.sync(name)
    }
    fn remove(&self, name: FileName) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn list(&self) -> io::Result<Vec<FileName>> {
        self.inner.list()
    }
    fn read_manifest(&self) -> io::Result<Option<Vec<u8>>> {
        self.inner.read_manifest()
    }
    fn write_manifest(&self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_manifest(bytes)
    }
    fn describe(&self, name: Option<FileName>) -> String {
        self.inner.describe(name)
    }
}

/// Two dirty partitions evicted while the first one's write-back cannot finish: the second
/// `evict` returns only once the first partition is written, so never two evicted partitions
/// wait in memory; and both write-backs land.
#[test]
fn evict_waits_for_the_previous_write_back() {
    let files = Gated::default();
    let g = Geometry { rows: 40, width: 2, partitions: 4 };
    let s =
        PartitionedStorage::create(files.clone(), g, 2, "bound", |_, out| out.fill(0.0)).unwrap();
    s.admit(0).unwrap();
    s.admit(1).unwrap();
    assert!(s.write_if_newer(0, 1, &[1.0, 1.0]).unwrap()); // partition 0
    assert!(s.write_if_newer(10, 2, &[2.0, 2.0]).unwrap()); // partition 1
    files.set(true);
    s.evict(0).unwrap(); // its write-back now waits at the gate
    let (done, evicted) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            s.evict(1).unwrap();
            done.send(()).unwrap();
        });
        assert!(
            evicted.recv_timeout(Duration::from_millis(300)).is_err(),
            "evict(1) returned while partition 0's write-back could not finish: two evicted \
             partitions in memory"
        );
        files.set(false);
        evicted.recv_timeout(Duration::from_secs(30)).expect("evict(1) returns once p0 is written");
    });
    s.admit(0).unwrap();
    s.admit(1).unwrap();
    let mut row = [0.0; 2];
    s.read(0, &mut row).unwrap();
    assert_eq!(row, [1.0, 1.0]);
    s.read(10, &mut row).unwrap();
    assert_eq!(row, [2.0, 2.0]);
}
