//! `manifest.json`: what ties the files of a save (`--save`) or a checkpoint together.
//!
//! It records the format version, what the directory is (`embeddings` or `checkpoint`), the run
//! that wrote it (a random run id), the model and its options, the dataset it was trained on
//! ([`DatasetId`]: sizes and CRC-32s of the entity names, the relation names and the training
//! triples in file order) and the CRC-32 of every other file in the directory. It is written
//! last into the staged directory ([`crate::atomic_fs`]); a reader checks it first and refuses a
//! directory whose files do not match it, naming the file.

use crate::atomic_fs::StagedError;
use crate::kge::data::dataset::Dataset;
use crate::kge::model::precision::Precision;
use crate::kge::model::score::ScoreFn;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The precision of a manifest that names none: every run before `--precision` stored `f32`.
fn f32_name() -> String {
    Precision::F32.name().into()
}

/// The file name.
pub const MANIFEST: &str = "manifest.json";

/// The version of the manifest this code writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// The dataset a directory was written for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetId {
    /// Its name as given (the embedded name or the directory).
    pub name: String,
    /// Entities.
    pub entities: usize,
    /// Relations.
    pub relations: usize,
    /// Training triples.
    pub train: usize,
    /// CRC-32 of the entity names in id order, each followed by a newline.
    pub entity_names: u32,
    /// CRC-32 of the relation names in id order, each followed by a newline.
    pub relation_names: u32,
    /// CRC-32 of the training triples in file order (ids as little-endian `u32`).
    pub train_triples: u32,
}

impl DatasetId {
    /// The identity of `d`.
    pub fn of(d: &Dataset) -> Self {
        let names = |it: &mut dyn Iterator<Item = &str>| {
            let mut h = crc32fast::Hasher::new();
            for n in it {
                h.update(n.as_bytes());
                h.update(b"\n");
            }
            h.finalize()
        };
        let mut t = crc32fast::Hasher::new();
        for x in &d.train {
            for id in [x.h, x.r, x.t] {
                t.update(&id.to_le_bytes());
            }
        }
        DatasetId {
            name: d.name.clone(),
            entities: d.entities.len(),
            relations: d.relations.len(),
            train: d.train.len(),
            entity_names: names(&mut d.entities.iter()),
            relation_names: names(&mut d.relations.iter()),
            train_triples: t.finalize(),
        }
    }
}

/// The contents of a save's or a checkpoint's `manifest.json` (the partition store's own
/// manifest is `ordo::partition::Manifest`, another thing).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaveManifest {
    /// [`MANIFEST_FORMAT`] when written.
    pub format: u32,
    /// `embeddings` or `checkpoint`.
    pub kind: String,
    /// The id of the run that wrote it ([`crate::outdir::run_id`]).
    pub run: String,
    /// The scoring function (`--model` value).
    pub model: String,
    /// The options that shape the tables and batches, as text.
    pub options: String,
    /// The number format the run stored its entity rows in (`--precision`: `f32` or `bf16`;
    /// a manifest written before the option is `f32`). The `.npy` files are `f32` either way.
    #[serde(default = "f32_name")]
    pub precision: String,
    /// The dataset.
    pub dataset: DatasetId,
    /// CRC-32 of every other file of the directory, by name.
    pub files: BTreeMap<String, u32>,
}

/// A directory's files do not agree with its manifest, or its manifest with this run.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file is missing, unreadable, not listed, or its checksum differs; or the manifest
    /// itself cannot be read.
    #[error("{path}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A saved name differs from the dataset's at the same row.
    #[error(
        "{path}:{line}: saved name {saved:?}, but the dataset's row {row} is {ours:?}: written for another dataset (or one whose lines were reordered)"
    )]
    Names {
        /// The names file.
        path: PathBuf,
        /// Its first differing line (1-based).
        line: usize,
        /// The row (0-based) of that line.
        row: usize,
        /// The saved name (empty if the file ends early).
        saved: String,
        /// The dataset's (empty if the dataset has fewer).
        ours: String,
    },
    /// Written for another dataset, model or configuration.
    #[error("{path}: written for {theirs}, but this run has {ours}")]
    Mismatch {
        /// The manifest.
        path: PathBuf,
        /// What it records.
        theirs: String,
        /// This run's.
        ours: String,
    },
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] StagedError),
}

/// The CRC-32 of a file, read in 1 MiB pieces.
pub fn crc32_of(path: &Path) -> std::io::Result<u32> {
    let mut f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut h = crc32fast::Hasher::new();
    loop {
        let piece = f.fill_buf()?;
        if piece.is_empty() {
            return Ok(h.finalize());
        }
        h.update(piece);
        let n = piece.len();
        f.consume(n);
    }
}

impl SaveManifest {
    /// A manifest of this run for `d`, listing no file yet.
    pub fn new(
        kind: &str,
        model: &str,
        options: String,
        precision: Precision,
        d: &Dataset,
    ) -> Self {
        SaveManifest {
            format: MANIFEST_FORMAT,
            kind: kind.into(),
            run: crate::outdir::run_id().into(),
            model: model.into(),
            options,
            precision: precision.name().into(),
            dataset: DatasetId::of(d),
            files: BTreeMap::new(),
        }
    }

    /// Checksum every file in `dir` (written, not yet synced) and write `dir/manifest.json`.
    pub fn write(mut self, dir: &Path) -> Result<(), ManifestError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ManifestError::Io(StagedError { path, source })
        };
        for e in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = e.map_err(io(dir))?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            if name != MANIFEST {
                self.files.insert(name, crc32_of(&path).map_err(io(&path))?);
            }
        }
        let path = dir.join(MANIFEST);
        let json = serde_json::to_string_pretty(&self).expect("a manifest serializes");
        std::fs::write(&path, json).map_err(io(&path))?;
        Ok(())
    }

    /// Read `dir/manifest.json` (`Ok(None)` if there is none: a directory written before
    /// manifests) and check every file it lists against its checksum, and that `want` (the
    /// files a reader will open) are all listed.
    pub fn read(dir: &Path, kind: &str, want: &[&str]) -> Result<Option<Self>, ManifestError> {
        let path = dir.join(MANIFEST);
        let corrupt = |path: &Path, why: String| ManifestError::Corrupt { path: path.into(), why };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(corrupt(&path, e.to_string())),
        };
        let m: SaveManifest =
            serde_json::from_str(&text).map_err(|e| corrupt(&path, e.to_string()))?;
        if m.format != MANIFEST_FORMAT {
            return Err(corrupt(
                &path,
                format!("manifest format {} (this build reads {MANIFEST_FORMAT})", m.format),
            ));
        }
        if m.kind != kind {
            return Err(corrupt(&path, format!("a manifest of {}, expected {kind}", m.kind)));
        }
        for f in want {
            if !m.files.contains_key(*f) {
                return Err(corrupt(&dir.join(f), "not listed in manifest.json".into()));
            }
        }
        for (f, want) in &m.files {
            let file = dir.join(f);
            let got = crc32_of(&file).map_err(|e| corrupt(&file, e.to_string()))?;
            if got != *want {
                return Err(corrupt(
                    &file,
                    format!("CRC-32 {got:08x}, manifest.json records {want:08x}"),
                ));
            }
        }
        Ok(Some(m))
    }

    /// Refuse a manifest written for a dataset with other training triples than `d`'s (names
    /// are compared line by line with [`same_names`], which says where they differ).
    pub fn check_train(&self, dir: &Path, d: &Dataset) -> Result<(), ManifestError> {
        let ours = DatasetId::of(d);
        let (a, b) = (&self.dataset, &ours);
        if (a.train, a.train_triples) != (b.train, b.train_triples) {
            return Err(ManifestError::Mismatch {
                path: dir.join(MANIFEST),
                theirs: format!(
                    "{} training triples (CRC-32 {:08x}) of {}",
                    a.train, a.train_triples, a.name
                ),
                ours: format!(
                    "{} (CRC-32 {:08x}) of {}: train.txt differs or its lines are in another order",
                    b.train, b.train_triples, b.name
                ),
            });
        }
        Ok(())
    }
}

/// Check that the names file `path` (one name per line; with `tsv`, `id<TAB>name` lines) lists
/// exactly `ours`, in order; [`ManifestError::Names`] with the first differing line otherwise.
pub fn same_names<S: AsRef<str>>(
    path: &Path,
    tsv: bool,
    ours: impl Iterator<Item = S>,
) -> Result<(), ManifestError> {
    use std::io::BufRead;
    let corrupt =
        |e: std::io::Error| ManifestError::Corrupt { path: path.into(), why: e.to_string() };
    // Line by line against `ours`: neither list is held whole (tens of millions of names on a
    // large graph).
    let mut saved = std::io::BufReader::new(std::fs::File::open(path).map_err(corrupt)?).lines();
    let mut ours = ours;
    for row in 0.. {
        let s = saved.next().transpose().map_err(corrupt)?;
        let o = ours.next();
        let s =
            s.as_deref().map(|l| if tsv { l.split_once('\t').map_or(l, |(_, n)| n) } else { l });
        if s.is_none() && o.is_none() {
            break;
        }
        if s != o.as_ref().map(AsRef::as_ref) {
            return Err(ManifestError::Names {
                path: path.into(),
                line: row + 1,
                row,
                saved: s.unwrap_or("").into(),
                ours: o.as_ref().map_or("", AsRef::as_ref).into(),
            });
        }
    }
    Ok(())
}

/// The `--model` value naming `score` (as the manifest records it).
pub fn model_name(score: ScoreFn) -> String {
    use clap::ValueEnum;
    score.to_possible_value().map_or_else(|| format!("{score:?}"), |v| v.get_name().to_string())
}

/// The scoring function a manifest's `model` names.
pub fn model_of(name: &str) -> Option<ScoreFn> {
    use clap::ValueEnum;
    ScoreFn::from_str(name, false).ok()
}
