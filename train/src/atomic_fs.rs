//! All-or-nothing directories and files: a directory is filled under a temporary name beside its
//! target, every file and the directory fsynced, and only then put in place by one atomic rename
//! (or, when the target exists, one atomic exchange with it on Linux); a small file is replaced
//! the same way ([`write_atomic`]).
//!
//! **Invariant:** at every instant the target path names either nothing, the complete old
//! directory, or the complete new one — never a mix. (Outside Linux, where there is no atomic
//! exchange, the old directory is first moved aside, so a crash between the two renames leaves
//! the target absent, never mixed.) A temporary's name is `.NAME.tmp-PID-RANDOM`, unique to the
//! process and the call, so two runs never write one file; a crash leaves it for the next holder
//! of the directory's lock to remove ([`crate::outdir`]).
//!
//! **Fault injection:** with `ORDO_CRASH_AT=N` in the environment the process aborts at its
//! `N`th durability point (each fsync and each rename made here or by a `--storage disk` run's
//! partition files, counted from 1), so a test can kill a save, a checkpoint or a partitioned
//! run at every one of them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file-system step of a staged write failed.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct StagedError {
    /// The file or directory.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StagedError + '_ {
    move |source| StagedError { path: path.to_path_buf(), source }
}

/// Count a durability point (call it after an fsync or a rename); abort the process at the
/// `ORDO_CRASH_AT`th.
pub fn crash_point() {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let at = *AT.get_or_init(|| std::env::var("ORDO_CRASH_AT").ok().and_then(|v| v.parse().ok()));
    // Relaxed: a counter of this process's own points; it orders no other memory.
    let n = SEEN.fetch_add(1, Ordering::Relaxed) + 1;
    if at == Some(n) {
        std::process::abort();
    }
}

/// fsync the file at `path`.
pub fn fsync_file(path: &Path) -> Result<(), StagedError> {
    File::open(path).and_then(|f| f.sync_all()).map_err(io(path))?;
    crash_point();
    Ok(())
}

/// fsync the directory at `path` (its entries: names created, removed or renamed in it).
pub fn fsync_dir(path: &Path) -> Result<(), StagedError> {
    // Opened and synced as a file is: the call is the same, what it makes durable differs.
    fsync_file(path)
}

fn rename(from: &Path, to: &Path) -> Result<(), StagedError> {
    std::fs::rename(from, to).map_err(io(to))?;
    crash_point();
    Ok(())
}

/// Remove a file or a directory tree; absent is fine.
pub fn remove_any(path: &Path) -> Result<(), StagedError> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(io(path))
}

/// `PARENT/.NAME.tmp-PID-RANDOM` for `target = PARENT/NAME`.
fn temporary(target: &Path) -> PathBuf {
    let name = target.file_name().map_or_else(|| "out".into(), |n| n.to_string_lossy());
    let tag = format!(".{name}.tmp-{}-{:016x}", std::process::id(), rand::random::<u64>());
    target.with_file_name(tag)
}

fn parent(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Replace the file `path` with `bytes`, all or nothing (temporary, fsync, rename, fsync of the
/// directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StagedError> {
    replace_file(path, |tmp| std::fs::write(tmp, bytes).map_err(io(tmp)))
}

/// Replace the file `path` with what `write` writes at the path it is given, all or nothing: a
/// temporary beside `path` that keeps its extension (for writers that pick a format by it, as
/// plotters does), fsynced and renamed over `path`, then the directory fsynced. On an error the
/// temporary is removed and `path` is as it was.
pub fn replace_file<E: From<StagedError>>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let mut tmp = temporary(path).into_os_string();
    if let Some(ext) = path.extension() {
        tmp.push(".");
        tmp.push(ext);
    }
    let tmp = PathBuf::from(tmp);
    let put = || -> Result<(), E> {
        write(&tmp)?;
        fsync_file(&tmp)?;
        rename(&tmp, path)?;
        Ok(fsync_dir(parent(path))?)
    };
    put().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A directory being filled under a temporary name beside its target, until [`publish`]ed.
/// Dropped unpublished (an error on the way), it is removed.
///
/// [`publish`]: Staged::publish
#[derive(Debug)]
pub struct Staged {
    target: PathBuf,
    tmp: PathBuf,
    published: bool,
}

impl Staged {
    /// Start filling a directory that [`publish`](Self::publish) will put at `target`.
    pub fn new(target: &Path) -> Result<Self, StagedError> {
        let tmp = temporary(target);
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        Ok(Staged { target: target.to_path_buf(), tmp, published: false })
    }

    /// Where to write its files now.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// fsync every file written and the directory, then put it at the target in one step; the
    /// directory it replaces is removed after.
    pub fn publish(mut self) -> Result<(), StagedError> {
        for e in std::fs::read_dir(&self.tmp).map_err(io(&self.tmp))? {
            let e = e.map_err(io(&self.tmp))?;
            fsync_file(&e.path())?;
        }
        fsync_dir(&self.tmp)?;
        let displaced = if self.target.exists() {
            exchange(&self.tmp, &self.target)?
        } else {
            rename(&self.tmp, &self.target)?;
            None
        };
        self.published = true;
        fsync_dir(parent(&self.target))?;
        if let Some(old) = displaced {
            remove_any(&old)?;
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.published {
            let _ = remove_any(&self.tmp);
        }
    }
}

/// Put `new` at `target` (which exists) in one step; return where the old directory now is.
#[cfg(target_os = "linux")]
fn exchange(new: &Path, target: &Path) -> Result<Option<PathBuf>, StagedError> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, new, CWD, target, RenameFlags::EXCHANGE)
        .map_err(|e| io(target)(e.into()))?;
    crash_point();
    // The old directory now has the temporary's name.
    Ok(Some(new.to_path_buf()))
}

/// Without an atomic exchange: the old directory is moved aside first (a crash between the two
/// renames leaves the target absent, never mixed).
#[cfg(not(target_os = "linux"))]
fn exchange(new: &Path, target: &Path) -> Result<Option<PathBuf>, StagedError> {
    let aside = temporary(target);
    rename(target, &aside)?;
    rename(new, target)?;
    Ok(Some(aside))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_replaces_the_whole_directory_and_leaves_no_temporary() {
        let root = std::env::temp_dir().join(format!("ordo-staged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let target = root.join("save");
        for (round, files) in [["a", "b"], ["b", "c"]].into_iter().enumerate() {
            let s = Staged::new(&target).unwrap();
            for f in files {
                std::fs::write(s.path().join(f), format!("{round}")).unwrap();
            }
            s.publish().unwrap();
            let mut names: Vec<String> = std::fs::read_dir(&target)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(names, files, "round {round}: only the new directory's files");
            assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1, "a temporary was left");
        }
        // Dropped before publishing: nothing is left beside the target.
        let s = Staged::new(&target).unwrap();
        std::fs::write(s.path().join("x"), "x").unwrap();
        drop(s);
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
        write_atomic(&root.join("latest"), b"one\n").unwrap();
        assert_eq!(std::fs::read_to_string(root.join("latest")).unwrap(), "one\n");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
