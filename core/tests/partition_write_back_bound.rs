//! The partition buffer's memory bound under a slow disk: an evicted partition stays in memory
//! until its write-back is written, and write-backs run after loads, so `evict` waits for the
//! previous write-back before it queues its own. Beside the walk's `c + 1` resident or loading
//! partitions at most one evicted partition is held: the `c + 2` a run's memory check counts.
//! The mutant `partition-evict-skips-write-back-wait` (core's mutation catalog) drops the wait;
//! this test is the checker that kills it.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

#[path = "fixtures/hooked_files.rs"]
mod hooked_files;

use hooked_files::{Call, Hook, HookedFiles};
use ordo::partition::{Geometry, PartitionedStorage};
use ordo::storage::RowStorage;
use std::io;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

/// In-memory files whose partition writes wait while the gate is closed: a disk slower than
/// the trainer.
type Gated = HookedFiles<Gate>;

/// Closed (`true`) or open, and the signal that it opened.
#[derive(Clone, Debug, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn set(&self, closed: bool) {
        *self.0.0.lock().unwrap() = closed;
        self.0.1.notify_all();
    }
}

impl Hook for Gate {
    fn before(&self, call: Call) -> io::Result<()> {
        if let Call::Write(_) = call {
            let (closed, opened) = &*self.0;
            drop(opened.wait_while(closed.lock().unwrap(), |c| *c).unwrap());
        }
        Ok(())
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
    files.hook.set(true);
    s.evict(0).unwrap(); // its write-back now waits at the gate
    let (done, evicted) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            s.evict(1).unwrap();
            done.send(()).unwrap();
        });
        let early = evicted.recv_timeout(Duration::from_secs(1)).is_ok();
        // Open the gate before judging, so a failure ends the test instead of leaving the
        // I/O threads (which the storage joins when dropped) waiting at it.
        files.hook.set(false);
        assert!(
            !early,
            "evict(1) returned while partition 0's write-back could not finish: two evicted \
             partitions in memory"
        );
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
