//! Free space on the filesystem a write goes to, checked before a write whose size is known (a
//! save, a checkpoint), so that a full disk is found before anything is written and the error
//! names the bytes needed; the previous save or checkpoint is then untouched.
//!
//! The check is advisory (another process may fill the disk meanwhile): a write that still
//! runs out of space fails with the system's error naming its file, and the staged write it is
//! part of is removed, leaving the previous directory whole ([`crate::atomic_fs`]).

use crate::atomic_fs::StagedError;
use std::path::{Path, PathBuf};

/// A write of `needed` bytes would not fit in the `available` bytes of its filesystem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{path}: needs {needed} bytes, but its filesystem has {available} free: free some space or write elsewhere"
)]
pub struct NoSpace {
    /// Where the write goes.
    pub path: PathBuf,
    /// Bytes it needs (its files, and a margin for the file system's own blocks).
    pub needed: u64,
    /// Bytes free to an unprivileged writer.
    pub available: u64,
}

/// As a staged write's error: the path, then why (an [`std::io::ErrorKind::StorageFull`]).
impl From<NoSpace> for StagedError {
    fn from(e: NoSpace) -> Self {
        let why = format!(
            "needs {} bytes, but its filesystem has {} free: free some space or write elsewhere",
            e.needed, e.available
        );
        StagedError {
            path: e.path,
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, why),
        }
    }
}

/// Blocks of slack per file written: a file's last block is partly empty, and a directory
/// entry costs a block on some file systems.
const PER_FILE: u64 = 8 << 10;

/// Bytes free to an unprivileged writer on the filesystem of `path` (or of its nearest
/// existing ancestor); `None` where it cannot be asked.
pub fn available(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let existing = if existing.as_os_str().is_empty() { Path::new(".") } else { existing };
    free(existing)
}

#[cfg(unix)]
fn free(path: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(not(unix))]
fn free(_path: &Path) -> Option<u64> {
    None
}

/// Refuse a write of `bytes` in `files` files at `path` that does not fit its filesystem (with
/// a margin of a few KiB a file). Passes where the free space cannot be asked.
///
/// ```
/// let tmp = std::env::temp_dir();
/// assert!(ordo_train::space::ensure(&tmp, 1, 1).is_ok());
/// let e = ordo_train::space::ensure(&tmp, u64::MAX / 2, 1).unwrap_err();
/// assert!(e.to_string().contains(&format!("needs {} bytes", u64::MAX / 2 + 8192)));
/// ```
pub fn ensure(path: &Path, bytes: u64, files: u64) -> Result<(), NoSpace> {
    let needed = bytes.saturating_add(files.saturating_mul(PER_FILE));
    match available(path) {
        Some(available) if available < needed => {
            Err(NoSpace { path: path.to_path_buf(), needed, available })
        }
        _ => Ok(()),
    }
}
