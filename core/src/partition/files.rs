//! Where partition files live: a directory on disk ([`DiskFiles`]) or memory ([`MemoryFiles`],
//! the in-memory twin's backing, same names and bytes without a disk).
//!
//! A file is named by its partition and its *generation* (`p3.g7`): a write-back never
//! overwrites the generation the last checkpoint names, it writes the next one, so a crash at
//! any point leaves the checkpoint's files whole (see [`super`]); a generation no manifest
//! names is deleted once its successor is written, so a partition has at most two files
//! between checkpoints (`io_thread::write_back` keeps this). The manifest is replaced
//! atomically (write a temporary file, sync it, rename it over the old one, sync the folder).

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A partition file's name: partition `partition`, generation `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileName {
    /// The partition.
    pub partition: usize,
    /// How many write-backs of the partition came before this one.
    pub generation: u64,
}

impl std::fmt::Display for FileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p{}.g{}", self.partition, self.generation)
    }
}

/// Storage of partition files and the manifest. Reads and writes take owned buffers at an
/// offset, so a partition streams through a buffer of a chunk, never a copy of its file.
pub trait PartitionFiles: Send + Sync + 'static {
    /// The file's length, `None` if it does not exist.
    fn len(&self, name: FileName) -> io::Result<Option<u64>>;
    /// Fill `buf` from `offset` of the file (an error if the file ends first).
    fn read_at(&self, name: FileName, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Write `buf` at `offset`, creating the file if needed.
    fn write_at(&self, name: FileName, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Make the file's contents durable.
    fn sync(&self, name: FileName) -> io::Result<()>;
    /// Delete the file (no error if it is already gone).
    fn remove(&self, name: FileName) -> io::Result<()>;
    /// Every partition file present.
    fn list(&self) -> io::Result<Vec<FileName>>;
    /// The manifest, `None` if there is none.
    fn read_manifest(&self) -> io::Result<Option<Vec<u8>>>;
    /// Replace the manifest atomically and durably.
    fn write_manifest(&self, bytes: &[u8]) -> io::Result<()>;
    /// Where the files are, for messages.
    fn describe(&self, name: Option<FileName>) -> String;
}

/// Partition files in a directory: `p{partition}.g{generation}` and `manifest.json`.
#[derive(Clone)]
pub struct DiskFiles {
    dir: PathBuf,
    /// Called after each fsync and rename (see [`DiskFiles::with_durability_point`]).
    point: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for DiskFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskFiles").field("dir", &self.dir).finish_non_exhaustive()
    }
}

const MANIFEST: &str = "manifest.json";

impl DiskFiles {
    /// Files in `dir`, which is created if missing.
    pub fn new(dir: impl AsRef<Path>) -> io::Result<Self> {
        std::fs::create_dir_all(dir.as_ref())?;
        Ok(DiskFiles { dir: dir.as_ref().to_path_buf(), point: None })
    }

    /// These files, calling `point` after each fsync and each rename they make (a partition
    /// file's sync at a checkpoint; the manifest's sync, rename and folder sync): a
    /// fault-injection point, where a test can kill the process to check that every instant
    /// leaves a checkpoint that resumes. `ordo-train` counts them with its saves' points.
    pub fn with_durability_point(self, point: impl Fn() + Send + Sync + 'static) -> Self {
        DiskFiles { point: Some(Arc::new(point)), ..self }
    }

    /// After an fsync or a rename.
    fn durable(&self) {
        if let Some(point) = &self.point {
            point();
        }
    }

    fn path(&self, name: FileName) -> PathBuf {
        self.dir.join(name.to_string())
    }
}

impl PartitionFiles for DiskFiles {
    fn len(&self, name: FileName) -> io::Result<Option<u64>> {
        match std::fs::metadata(self.path(name)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_at(&self, name: FileName, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::fs::File::open(self.path(name))?.read_exact_at(buf, offset)
    }

    fn write_at(&self, name: FileName, offset: u64, buf: &[u8]) -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(self.path(name))?;
        file.write_all_at(buf, offset)
    }

    fn sync(&self, name: FileName) -> io::Result<()> {
        std::fs::File::open(self.path(name))?.sync_all()?;
        self.durable();
        Ok(())
    }

    fn remove(&self, name: FileName) -> io::Result<()> {
        match std::fs::remove_file(self.path(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn list(&self) -> io::Result<Vec<FileName>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str().and_then(parse_name) {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn read_manifest(&self) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.dir.join(MANIFEST)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_manifest(&self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{MANIFEST}.tmp"));
        let file = std::fs::File::create(&tmp)?;
        file.write_all_at(bytes, 0)?;
        file.sync_all()?;
        self.durable();
        std::fs::rename(&tmp, self.dir.join(MANIFEST))?;
        self.durable();
        // The rename is durable once the folder is.
        std::fs::File::open(&self.dir)?.sync_all()?;
        self.durable();
        Ok(())
    }

    fn describe(&self, name: Option<FileName>) -> String {
        match name {
            Some(n) => self.path(n).display().to_string(),
            None => self.dir.join(MANIFEST).display().to_string(),
        }
    }
}

/// `p{partition}.g{generation}` back to its name.
fn parse_name(s: &str) -> Option<FileName> {
    let (p, g) = s.strip_prefix('p')?.split_once(".g")?;
    Some(FileName { partition: p.parse().ok()?, generation: g.parse().ok()? })
}

/// Partition files in memory: the in-memory twin's backing. Clones share the files, so a
/// storage reopened on a clone sees what the first one wrote (a resume without a disk).
///
/// [`MemoryFiles::crashable`] files also keep what a disk would keep through a power loss: the
/// contents of each file as of its last [`sync`](PartitionFiles::sync), and the manifest (whose
/// replacement is durable). [`MemoryFiles::crash`] then returns every file to that: written
/// bytes not synced are lost, files never synced vanish.
///
/// ```
/// use ordo::partition::{FileName, MemoryFiles, PartitionFiles};
///
/// let files = MemoryFiles::crashable();
/// let (a, b) = (FileName { partition: 0, generation: 0 }, FileName { partition: 1, generation: 0 });
/// files.write_at(a, 0, b"synced")?;
/// files.sync(a)?;
/// files.write_at(a, 0, b"lost!!")?;
/// files.write_at(b, 0, b"never synced")?;
/// files.crash();
/// let mut buf = [0u8; 6];
/// files.read_at(a, 0, &mut buf)?;
/// assert_eq!(&buf, b"synced");
/// assert_eq!(files.len(b)?, None);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryFiles {
    files: Shared,
    manifest: Arc<Mutex<Option<Vec<u8>>>>,
    /// For crashable files: each file as of its last sync.
    durable: Option<Shared>,
}

/// Files by name, shared by clones.
type Shared = Arc<Mutex<HashMap<FileName, Vec<u8>>>>;

impl MemoryFiles {
    /// Files that remember what was synced, for [`crash`](Self::crash) (twice the memory of
    /// the synced files).
    pub fn crashable() -> Self {
        MemoryFiles { durable: Some(Arc::default()), ..MemoryFiles::default() }
    }

    /// Lose everything not synced, as a power loss would: each file returns to its contents at
    /// its last sync, and files never synced vanish. Nothing changes for files made with
    /// [`MemoryFiles::default`], which keep no synced copy (their `sync` does nothing).
    pub fn crash(&self) {
        if let (Some(durable), Ok(mut files)) = (&self.durable, self.files.lock())
            && let Ok(durable) = durable.lock()
        {
            *files = durable.clone();
        }
    }
}

fn poisoned<T>(_: T) -> io::Error {
    io::Error::other("memory files poisoned by a panic")
}

impl PartitionFiles for MemoryFiles {
    fn len(&self, name: FileName) -> io::Result<Option<u64>> {
        Ok(self.files.lock().map_err(poisoned)?.get(&name).map(|f| f.len() as u64))
    }

    fn read_at(&self, name: FileName, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let files = self.files.lock().map_err(poisoned)?;
        let file = files.get(&name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let src = usize::try_from(offset)
            .ok()
            .and_then(|o| file.get(o..o.checked_add(buf.len())?))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&self, name: FileName, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut files = self.files.lock().map_err(poisoned)?;
        let file = files.entry(name).or_default();
        let at = usize::try_from(offset).map_err(io::Error::other)?;
        if file.len() < at + buf.len() {
            file.resize(at + buf.len(), 0);
        }
        file[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self, name: FileName) -> io::Result<()> {
        if let Some(durable) = &self.durable {
            let files = self.files.lock().map_err(poisoned)?;
            let file = files.get(&name).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            durable.lock().map_err(poisoned)?.insert(name, file.clone());
        }
        Ok(())
    }

    fn remove(&self, name: FileName) -> io::Result<()> {
        self.files.lock().map_err(poisoned)?.remove(&name);
        if let Some(durable) = &self.durable {
            durable.lock().map_err(poisoned)?.remove(&name);
        }
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<FileName>> {
        Ok(self.files.lock().map_err(poisoned)?.keys().copied().collect())
    }

    fn read_manifest(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.manifest.lock().map_err(poisoned)?.clone())
    }

    fn write_manifest(&self, bytes: &[u8]) -> io::Result<()> {
        *self.manifest.lock().map_err(poisoned)? = Some(bytes.to_vec());
        Ok(())
    }

    fn describe(&self, name: Option<FileName>) -> String {
        match name {
            Some(n) => format!("memory:{n}"),
            None => "memory:manifest".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = FileName { partition: 12, generation: 7 };
        assert_eq!(parse_name(&n.to_string()), Some(n));
        assert_eq!(parse_name("manifest.json"), None);
    }
}
