//! An output directory held by one run for its whole duration: `--save`, `--checkpoint` and
//! `--out` of every subcommand.
//!
//! [`OutputLock::take`] is called before any work starts. It creates the directory, checks that
//! files can be created in it, and takes an exclusive lock on the file `PARENT/.NAME.lock` beside
//! it (holding the pid of the run, for the message another run gets). The lock is beside the
//! directory, not inside, because a save replaces the directory itself ([`crate::atomic_fs`]); it
//! is released when the process ends, however it ends. A run that ends cleanly (the lock
//! dropped) removes the lock file while it still holds it; one killed leaves it, and the next
//! run takes it. A run that opened the file before it was removed finds, once it holds the lock,
//! that the path no longer names the file it locked, and opens the path again.
//!
//! **Invariant:** while a run holds the lock of `DIR`, no other run of this program writes `DIR`
//! or its temporaries; so every temporary found when the lock is taken — `PARENT/.NAME.tmp-*`
//! (a staged save) and `DIR/.*.tmp-*` (a staged checkpoint, a `latest` or marker being
//! replaced) — belongs to a run that died, and is removed.
//!
//! `--out` is written while the run goes (people watch it), so it is not staged: instead
//! [`OutputLock::take_out`] removes the marker file [`COMPLETE`] before anything is written, and
//! [`OutputLock::complete`] writes it after the last file. A directory holds a complete set of
//! one run's outputs exactly when it has `COMPLETE`.

use crate::atomic_fs::{self, StagedError};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The marker `--out DIR/COMPLETE`, written last: the run id, then a newline.
pub const COMPLETE: &str = "COMPLETE";

/// Why an output directory could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The directory (or its lock file beside it) cannot be created or written.
    #[error("{path}: cannot write this output directory: {source}")]
    Unwritable {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Another running process holds it.
    #[error(
        "{path}: in use by another run (process {holder}, lock file {lock}); wait for it or choose another directory"
    )]
    Held {
        /// The directory.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The holder's pid as its lock file says (`unknown` while it is being written).
        holder: String,
    },
    /// `--resume DIR` names no directory.
    #[error("{path}: no such directory to resume from")]
    Missing {
        /// The directory.
        path: PathBuf,
    },
    /// A temporary of a dead run could not be removed, or the marker written.
    #[error(transparent)]
    Staged(#[from] StagedError),
}

/// This process's run id: 16 random hex digits, drawn once. It names the run in manifests and
/// markers, so two runs' files are never taken for one another's.
pub fn run_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| format!("{:016x}", rand::random::<u64>()))
}

/// An output directory this process holds exclusively until it is dropped (or the process ends).
#[derive(Debug)]
pub struct OutputLock {
    dir: PathBuf,
    /// The lock file beside `dir`, removed on drop.
    lock: PathBuf,
    /// Holds the lock (`flock`-style, released on close).
    _file: File,
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Still held: a run that opened the file meanwhile re-opens the path once it holds it
        // (`is_named`), so no two runs ever hold one directory.
        let _ = std::fs::remove_file(&self.lock);
    }
}

/// Whether `file` (open) is the file the path `at` names now: the lock taken on it counts only
/// then, since a run that held it may have removed the name meanwhile.
#[cfg(unix)]
fn is_named(file: &File, at: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(at)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(not(unix))]
fn is_named(_file: &File, at: &Path) -> bool {
    at.exists()
}

impl OutputLock {
    /// Create `dir` if needed, check it is writable, lock it, and remove its stale temporaries.
    ///
    /// ```no_run
    /// let held = ordo_train::outdir::OutputLock::take("runs/a".as_ref())?;
    /// // A second `take` of `runs/a`, by any process, fails until `held` is dropped.
    /// # Ok::<(), ordo_train::outdir::LockError>(())
    /// ```
    pub fn take(dir: &Path) -> Result<Self, LockError> {
        let unwritable = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Unwritable { path, source }
        };
        std::fs::create_dir_all(dir).map_err(unwritable(dir))?;
        Self::lock(dir)
    }

    /// [`take`](Self::take) for `--out`: also removes its [`COMPLETE`] marker (durably) before
    /// returning, so the directory is marked incomplete before the run writes into it.
    pub fn take_out(dir: &Path) -> Result<Self, LockError> {
        let held = Self::take(dir)?;
        let marker = dir.join(COMPLETE);
        match std::fs::remove_file(&marker) {
            Ok(()) => atomic_fs::fsync_dir(dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(LockError::Unwritable { path: marker, source }),
        }
        Ok(held)
    }

    /// Lock the existing directory `dir` (one to resume from) without creating it.
    pub fn take_existing(dir: &Path) -> Result<Self, LockError> {
        if !dir.is_dir() {
            return Err(LockError::Missing { path: dir.to_path_buf() });
        }
        Self::lock(dir)
    }

    fn lock(dir: &Path) -> Result<Self, LockError> {
        let unwritable = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Unwritable { path, source }
        };
        // The real parent and name: `dir` may be `.`, `a/..` or a link.
        let real = dir.canonicalize().map_err(unwritable(dir))?;
        let (parent, name) = match (real.parent(), real.file_name()) {
            (Some(p), Some(n)) => (p.to_path_buf(), n.to_string_lossy().into_owned()),
            _ => {
                let source = std::io::Error::other("the root directory cannot be an output");
                return Err(LockError::Unwritable { path: dir.to_path_buf(), source });
            }
        };
        let lock = parent.join(format!(".{name}.lock"));
        let mut file = loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock)
                .map_err(unwritable(&lock))?;
            match file.try_lock() {
                // Removed by its last holder between our open and our lock: open it again.
                Ok(()) if !is_named(&file, &lock) => continue,
                Ok(()) => break file,
                Err(TryLockError::WouldBlock) => {
                    let mut pid = String::new();
                    let _ = file.read_to_string(&mut pid);
                    let holder = match pid.trim() {
                        "" => "unknown".to_string(),
                        p => p.to_string(),
                    };
                    return Err(LockError::Held { path: dir.to_path_buf(), lock, holder });
                }
                Err(TryLockError::Error(source)) => {
                    return Err(LockError::Unwritable { path: lock, source });
                }
            }
        };
        let record = |f: &mut File| -> std::io::Result<()> {
            f.set_len(0)?;
            f.rewind()?;
            writeln!(f, "{}", std::process::id())
        };
        record(&mut file).map_err(unwritable(&lock))?;
        // Files can be created inside (a checkpoint's or --out's), found now rather than after
        // training.
        let probe = real.join(format!(".probe.tmp-{}", std::process::id()));
        File::create(&probe).map_err(unwritable(dir))?;
        std::fs::remove_file(&probe).map_err(unwritable(dir))?;
        // Holding the lock, every temporary is a dead run's.
        let stale_beside = format!(".{name}.tmp-");
        for (place, is_stale) in [
            (&parent, &(|n: &str| n.starts_with(&stale_beside)) as &dyn Fn(&str) -> bool),
            (&real, &|n: &str| n.starts_with('.') && n.contains(".tmp-")),
        ] {
            for e in std::fs::read_dir(place).map_err(unwritable(place))?.flatten() {
                if is_stale(&e.file_name().to_string_lossy()) {
                    atomic_fs::remove_any(&e.path())?;
                }
            }
        }
        Ok(OutputLock { dir: dir.to_path_buf(), lock, _file: file })
    }

    /// The directory held.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Mark `--out` complete: write [`COMPLETE`] (atomically, holding the run id).
    pub fn complete(&self) -> Result<(), StagedError> {
        atomic_fs::write_atomic(&self.dir.join(COMPLETE), format!("{}\n", run_id()).as_bytes())
    }
}

/// The output directories of one run, each locked once (`--resume DIR --checkpoint DIR` names one
/// directory twice; a second lock by the same process would refuse it).
#[derive(Debug, Default)]
pub struct Held(Vec<(PathBuf, OutputLock)>);

impl Held {
    /// Hold `dir` ([`OutputLock::take`], or [`OutputLock::take_existing`] when `existing`),
    /// unless this run holds it already.
    pub fn hold(&mut self, dir: &Path, existing: bool) -> Result<(), LockError> {
        let key = |d: &Path| d.canonicalize().ok();
        if key(dir).is_some_and(|k| self.0.iter().any(|(p, _)| *p == k)) {
            return Ok(());
        }
        let lock = if existing { OutputLock::take_existing(dir)? } else { OutputLock::take(dir)? };
        let k = key(dir).unwrap_or_else(|| dir.to_path_buf());
        self.0.push((k, lock));
        Ok(())
    }
}
