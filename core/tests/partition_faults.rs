//! The partition store under faults its files can throw at it (issue 61): a full file system on
//! a write-back, and a panic inside an I/O job. Each ends in a typed error that reaches whoever
//! waits, never a hang or stale rows, and the last checkpoint stays whole and loadable.
#![cfg(not(any(ordo_loom, ordo_shuttle)))]

#[path = "fixtures/hooked_files.rs"]
mod hooked_files;

use hooked_files::{Call, Hook, HookedFiles};
use ordo::partition::{
    Cursor, FileName, Geometry, MemoryFiles, PartitionError, PartitionFiles, PartitionedStorage,
};
use ordo::storage::RowStorage;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const G: Geometry = Geometry { rows: 40, width: 3, partitions: 4 };
type Error = Box<dyn std::error::Error + Send + Sync>;

fn init(r: usize, out: &mut [f32]) {
    out.iter_mut().enumerate().for_each(|(c, v)| *v = (r * 10 + c) as f32);
}

/// What [`Faulty`] does when armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Writes fail as on a full file system.
    Full,
    /// Reads panic.
    PanicOnRead,
    /// Writes panic.
    PanicOnWrite,
}

/// Memory files that, once armed, fail or panic as their fault says.
type Faulty = HookedFiles<Faults>;

/// The hook of [`Faulty`] files: its fault, and whether it is armed.
#[derive(Clone, Debug)]
struct Faults {
    fault: Fault,
    armed: Arc<AtomicBool>,
}

fn faulty(fault: Fault) -> Faulty {
    HookedFiles { files: MemoryFiles::default(), hook: Faults { fault, armed: Arc::default() } }
}

impl Faults {
    fn arm(&self, on: bool) {
        // Relaxed: set between the storage's calls; the queue's lock that hands the next job to
        // an I/O thread orders it before that thread's reads.
        self.armed.store(on, Ordering::Relaxed);
    }

    fn is(&self, fault: Fault) -> bool {
        // Relaxed: as in `arm`.
        self.armed.load(Ordering::Relaxed) && self.fault == fault
    }
}

impl Hook for Faults {
    fn before(&self, call: Call) -> io::Result<()> {
        match call {
            Call::Read(name) => assert!(!self.is(Fault::PanicOnRead), "a read of {name} panics"),
            Call::Write(name) => {
                assert!(!self.is(Fault::PanicOnWrite), "a write of {name} panics");
                if self.is(Fault::Full) {
                    return Err(io::ErrorKind::StorageFull.into());
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// `f(storage)`'s answer within 20 s, with the storage back; a failure (not a hang) if none
/// comes.
fn within<T: Send + 'static>(
    storage: PartitionedStorage,
    f: impl FnOnce(&PartitionedStorage) -> T + Send + 'static,
) -> (PartitionedStorage, T) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let answer = f(&storage);
        let _ = tx.send((storage, answer));
    });
    rx.recv_timeout(Duration::from_secs(20)).expect("no answer in 20 s: the load waits forever")
}

fn name(partition: usize, generation: u64) -> FileName {
    FileName { partition, generation }
}

/// More loads than I/O threads, every one panicking: each waiting load gets the panic as an
/// error naming its partition's file (the threads used to die with their first job, and the
/// loads still queued waited forever), and the threads serve the next load once the fault is
/// gone.
#[test]
fn panicking_loads_reach_their_waiters_and_the_threads_live_on() -> Result<(), Error> {
    let files = faulty(Fault::PanicOnRead);
    let s = PartitionedStorage::create(files.clone(), G, 2, "panic", init)?;
    files.hook.arm(true);
    for p in 0..3 {
        s.prefetch(p)?;
    }
    let (s, got) = within(s, |s| (0..3).map(|p| s.admit(p)).collect::<Vec<_>>());
    for (p, got) in got.into_iter().enumerate() {
        match got {
            Err(PartitionError::IoPanicked { job: "load", path, message }) => {
                assert_eq!(path, files.describe(Some(name(p, 0))));
                assert!(message.contains("panics"), "{message}");
            }
            other => panic!("partition {p}: {other:?}"),
        }
    }
    files.hook.arm(false);
    let (s, got) = within(s, |s| s.admit(3));
    got?;
    let mut row = [0.0; 3];
    s.read(39, &mut row)?;
    assert_eq!(row, [390.0, 391.0, 392.0]);
    Ok(())
}

/// A write-back that panics: the load of its partition, which waits for its write-backs, gets
/// the panic (it used to wait forever for a write-back that never ended), and so does every
/// later admit and checkpoint: the partition's changes are lost.
#[test]
fn a_panicking_write_back_reaches_the_next_load_of_its_partition() -> Result<(), Error> {
    let files = faulty(Fault::PanicOnWrite);
    let s = PartitionedStorage::create(files.clone(), G, 2, "panic", init)?;
    files.hook.arm(true);
    s.admit(0)?;
    s.write_if_newer(0, 0, &[1.0; 3])?;
    s.evict(0)?;
    let (s, got) = within(s, |s| s.admit(0));
    match got {
        Err(PartitionError::IoPanicked { job: "write-back", path, .. }) => {
            assert_eq!(path, files.describe(Some(name(0, 1))));
        }
        other => panic!("{other:?}"),
    }
    files.hook.arm(false);
    let (_, got) = within(s, |s| s.checkpoint(Cursor::default()));
    assert!(matches!(got, Err(PartitionError::WriteBackLost { .. })), "{got:?}");
    Ok(())
}

/// A write-back into a full file system: the checkpoint after it fails with
/// [`PartitionError::NoSpace`] naming the file and the bytes it needed, the torn generation is
/// deleted, the partition is not loaded stale from its older file, and the last checkpoint's
/// files are whole: reopened, the storage holds the checkpoint's rows.
#[test]
fn a_full_disk_on_a_write_back_names_the_file_and_keeps_the_last_checkpoint() -> Result<(), Error> {
    let files = faulty(Fault::Full);
    let s = PartitionedStorage::create(files.clone(), G, 2, "full", init)?;
    s.admit(0)?;
    s.admit(1)?;
    s.write_if_newer(0, 0, &[1.0; 3])?;
    s.write_if_newer(10, 1, &[2.0; 3])?;
    s.checkpoint(Cursor { epoch: 1, state: 0 })?;
    let saved = s.snapshot()?;

    files.hook.arm(true);
    s.write_if_newer(11, 2, &[3.0; 3])?;
    s.evict(1)?; // written back as p1.g2, which does not fit
    let (s, got) = within(s, |s| s.checkpoint(Cursor { epoch: 2, state: 0 }));
    match got {
        Err(PartitionError::NoSpace { path, needed, .. }) => {
            assert_eq!(path, files.describe(Some(name(1, 2))));
            assert_eq!(needed, G.file_len(1));
        }
        other => panic!("{other:?}"),
    }
    assert!(!files.list()?.contains(&name(1, 2)), "the torn generation is left");
    files.hook.arm(false);
    let (s, got) = within(s, |s| s.admit(1));
    assert!(matches!(got, Err(PartitionError::WriteBackLost { .. })), "stale rows: {got:?}");
    drop(s);

    let (s, cursor) = PartitionedStorage::open(files.clone(), "full", 2)?;
    assert_eq!(cursor, Cursor { epoch: 1, state: 0 });
    assert_eq!(s.snapshot()?, saved, "the last checkpoint is whole");
    Ok(())
}
