//! Checkpoints: `--checkpoint DIR --checkpoint-every N` and `--resume DIR`.
//!
//! A checkpoint is everything the next epoch depends on: the entity rows (embeddings and their
//! optimizer state), the relation parameters and their state, the epochs done, and the recorded
//! computation orders and epoch records so far. The RNG needs no state of its own: every batch
//! is a pure function of `(seed, epoch, index)` (see [`crate::kge::data::batch`]), so the seed in
//! the configuration and the epoch count fix every later shuffle and negative. Hence a run of
//! `a + b` epochs equals, bit for bit, a run of `a` epochs resumed for `b` more (in `sync`
//! directly; in `oac`, both equal the replay of their recorded orders).
//!
//! **Layout** (readable from Python without ordo: `numpy.load` and a TSV reader):
//! `DIR/latest` names the current checkpoint directory `DIR/epoch-NNNNNN/`, which holds
//! `entities.npy` (`entities × dim`), `entity_state.npy`, `relations.npy`
//! (`relation rows × relation dim`), `relation_state.npy`, `entities.tsv` / `relations.tsv`
//! (`id<TAB>name`, row order), `meta.json` (the configuration it belongs to, the epoch, the
//! orders and the epoch records) and `manifest.json` ([`super::manifest`]: the run, model,
//! options, dataset and a CRC-32 of every other file, `meta.json` included).
//!
//! **Atomicity:** a checkpoint is written into a uniquely named temporary directory beside its
//! final name, each file and the directory fsynced, and put in place in one step
//! ([`crate::atomic_fs`]); only then is `latest` replaced (temporary name, fsync, rename). A crash
//! at any point leaves `latest` naming a complete checkpoint; older checkpoint directories are
//! removed only after `latest` moved on. A run holds `DIR`'s lock ([`crate::outdir`]) while it
//! writes, and the next holder removes the temporaries of a run that died.
//!
//! **What a resume checks** ([`Checkpoint::read`]): every file against the manifest; the format
//! (2; a checkpoint of format 1, from before manifests, is refused naming its format); the
//! configuration and dataset sizes ([`Identity`]); the training triples in file order; the
//! saved entity and relation names against the dataset's, line by line (a dataset whose lines
//! were reordered has other ids, and is refused naming the first differing line); the epoch in
//! `meta.json` against the directory's name, the recorded orders and epoch records; that
//! the run's `--epochs` is not below it; and, first after the files, that the run asks for the
//! `--precision` its manifest names ([`CheckpointError::Precision`]: a bf16 checkpoint resumes
//! only as bf16, an `f32` one only as `f32`). Its `.npy` files are `f32` in either precision.
//!
//! **Memory:** writing and reading stream the entity table one row at a time (rows read from the
//! store or replay table into `.npy` writers; `.npy` readers into a new [`RowStore`]), and the
//! checksums are computed over the files in 1 MiB pieces, so a checkpoint needs no copy of the
//! table beside the store: a large graph's run stays at tables + optimizer state + batches.

use super::manifest::{MANIFEST, ManifestError, SaveManifest, same_names};
use super::npy::{NpyIn, NpyOut, npy_reader, npy_writer};
use crate::atomic_fs::{Staged, StagedError, write_atomic};
use crate::kge::data::dataset::Dataset;
use crate::kge::model::precision::Precision;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::results::EpochStats;
use ordo::row_store::RowStore;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The version of the layout this code writes and reads (1: before `manifest.json`).
const FORMAT: u32 = 2;

/// The files of a checkpoint directory besides `manifest.json`, all listed in it.
const FILES: [&str; 7] = [
    "entities.npy",
    "entity_state.npy",
    "relations.npy",
    "relation_state.npy",
    "entities.tsv",
    "relations.tsv",
    "meta.json",
];

/// Why a checkpoint could not be written or used.
#[derive(Debug, Error)]
pub enum CheckpointError {
    /// File-system error.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is missing, unreadable, or does not match its recorded checksum or shape.
    #[error("{path}: corrupt checkpoint: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The checkpoint belongs to another model, dataset or configuration.
    #[error("{path}: checkpoint of another run: it has {theirs}, this run has {ours}")]
    Mismatch {
        /// Its `meta.json`.
        path: PathBuf,
        /// The checkpoint's setting.
        theirs: String,
        /// This run's.
        ours: String,
    },
    /// Its files do not match its manifest, or its names or training triples the dataset's.
    #[error("corrupt checkpoint or one of another dataset: {0}")]
    Manifest(#[from] ManifestError),
    /// The checkpoint's rows are stored in another precision than this run asks for
    /// (`--precision`): resuming would change every row's rounding.
    #[error(
        "{path}: the checkpoint was trained with --precision {saved}, this run asks for --precision {asked}: give --precision {saved} to resume it"
    )]
    Precision {
        /// Its `manifest.json`.
        path: PathBuf,
        /// The checkpoint's precision, as its manifest names it.
        saved: String,
        /// This run's.
        asked: Precision,
    },
    /// The run asks for fewer epochs than the checkpoint has done.
    #[error(
        "{path}: the checkpoint has done {epoch} epochs, more than --epochs {epochs}: give --epochs {epoch} or more"
    )]
    Ahead {
        /// Its `meta.json`.
        path: PathBuf,
        /// Epochs it has done.
        epoch: usize,
        /// Epochs asked for.
        epochs: usize,
    },
    /// A staged directory or file could not be written.
    #[error(transparent)]
    Staged(#[from] StagedError),
}

impl CheckpointError {
    /// Whether the checkpoint itself is bad or not this run's (rather than the file system
    /// failing while writing).
    pub fn is_bad_input(&self) -> bool {
        match self {
            CheckpointError::Corrupt { .. }
            | CheckpointError::Mismatch { .. }
            | CheckpointError::Precision { .. }
            | CheckpointError::Ahead { .. } => true,
            CheckpointError::Manifest(m) => !matches!(m, ManifestError::Io(_)),
            CheckpointError::Io { .. } | CheckpointError::Staged(_) => false,
        }
    }
}

/// What a checkpoint must agree with to be resumed: everything that shapes the tables or the
/// sequence of batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// Dataset entities and relations.
    pub entities: usize,
    /// Dataset relations.
    pub relations: usize,
    /// Training triples.
    pub train: usize,
    /// `TrainConfig`'s shaping fields, as text (model, dim, optimizer, reciprocal, seed, batch
    /// size, negatives, chunk, negative sampling).
    pub config: String,
}

impl Identity {
    /// The identity of a run of `cfg` on `d`.
    pub fn of(d: &Dataset, cfg: &TrainConfig) -> Self {
        Identity {
            entities: d.entities.len(),
            relations: d.relations.len(),
            train: d.train.len(),
            config: cfg.shaping(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    format: u32,
    identity: Identity,
    epoch: usize,
    orders: Vec<Vec<u64>>,
    epochs: Vec<EpochStats>,
    rows_replaced: u64,
}

/// The entity rows a checkpoint is written from, read one row at a time (so writing needs no
/// copy of the table): the store itself, or a plain table (a replay's).
pub trait EntityRows {
    /// Rows.
    fn count(&self) -> usize;
    /// Row `r` (embedding, then optimizer state) into `out`, `out.len()` floats wide.
    fn read_row(&self, r: usize, out: &mut [f32]);
}

impl EntityRows for RowStore {
    fn count(&self) -> usize {
        self.rows()
    }
    fn read_row(&self, r: usize, out: &mut [f32]) {
        self.read(r as u64, out).expect("a row of the store, read at its own width");
    }
}

/// The state of a run after `epoch` epochs, its entity rows in `E`: a [`RowStore`] when read
/// back, any [`EntityRows`] when written.
#[derive(Debug)]
pub struct Checkpoint<E = RowStore> {
    /// What it belongs to.
    pub identity: Identity,
    /// Epochs done.
    pub epoch: usize,
    /// Entity rows, `entities × row_width` (embedding, then optimizer state).
    pub entities: E,
    /// The model's dense state (relation parameters, then their optimizer state).
    pub dense: Vec<f32>,
    /// Computation order of each epoch done.
    pub orders: Vec<Vec<u64>>,
    /// Records of the epochs done.
    pub epochs: Vec<EpochStats>,
    /// OAC's repaired stale reads so far.
    pub rows_replaced: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io { path: path.to_path_buf(), source }
}

/// A `rows × cols` f32 `.npy` file being written at `path`.
fn npy_out(path: &Path, rows: usize, cols: usize) -> Result<NpyOut, CheckpointError> {
    npy_writer(File::create(path).map_err(io(path))?, rows, cols).map_err(io(path))
}

/// A `rows × cols` f32 `.npy` file at `path`, its values in order; the shape and dtype checked.
fn npy_in(path: &Path, rows: usize, cols: usize) -> Result<NpyIn, CheckpointError> {
    let corrupt = |why: String| CheckpointError::Corrupt { path: path.to_path_buf(), why };
    let (shape, values) = npy_reader(File::open(path).map_err(io(path))?).map_err(corrupt)?;
    let want = [rows as u64, cols as u64];
    if shape != want {
        return Err(corrupt(format!("shape {shape:?}, expected {want:?}")));
    }
    Ok(values)
}

fn tsv<S: AsRef<str>>(names: impl Iterator<Item = S>) -> String {
    names.enumerate().map(|(i, n)| format!("{i}\t{}\n", n.as_ref())).collect()
}

impl<E: EntityRows> Checkpoint<E> {
    /// Write this checkpoint under `dir` atomically (see the module docs) and make it `latest`.
    pub fn write(&self, dir: &Path, d: &Dataset, cfg: &TrainConfig) -> Result<(), CheckpointError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let name = format!("epoch-{:06}", self.epoch);
        let sc = cfg.step_config();
        let (dim, rdim) = (cfg.dim, sc.relation_dim());
        let (n, state_w) = (self.entities.count(), sc.optimizer.state_width(dim));
        let n_rel = sc.relation_rows(d.relations.len());
        // The tables' size is known: a full disk is found before anything is written, and the
        // last checkpoint stays (it goes only once this one is in place). The names and
        // `meta.json` are estimated (an order's id is at most 21 characters of JSON).
        let floats = (n * (dim + state_w) + self.dense.len()) as u64;
        let names: usize = d.entities.iter().chain(d.relations.iter()).map(|s| s.len() + 16).sum();
        let ids: usize = self.orders.iter().map(|o| o.len()).sum();
        let bytes = 4 * floats + 2 * names as u64 + 21 * ids as u64;
        crate::space::ensure(dir, bytes, 9).map_err(crate::atomic_fs::StagedError::from)?;
        let staged = Staged::new(&dir.join(&name))?;
        let tmp = staged.path();
        let (rel, rel_state) = self.dense.split_at((n_rel * rdim).min(self.dense.len()));
        let rel_state_w = sc.optimizer.for_relations().state_width(rdim);
        // The entity table, one row at a time into its two files.
        let (emb_path, state_path) = (tmp.join("entities.npy"), tmp.join("entity_state.npy"));
        let mut emb = npy_out(&emb_path, n, dim)?;
        let mut state = npy_out(&state_path, n, state_w)?;
        let mut row = vec![0.0; dim + state_w];
        for r in 0..n {
            self.entities.read_row(r, &mut row);
            emb.extend(row[..dim].iter().copied()).map_err(io(&emb_path))?;
            state.extend(row[dim..].iter().copied()).map_err(io(&state_path))?;
        }
        emb.finish().map_err(io(&emb_path))?;
        state.finish().map_err(io(&state_path))?;
        for (f, values, cols) in
            [("relations.npy", rel, rdim), ("relation_state.npy", rel_state, rel_state_w)]
        {
            let path = tmp.join(f);
            let mut out = npy_out(&path, values.len() / cols.max(1), cols)?;
            out.extend(values.iter().copied()).map_err(io(&path))?;
            out.finish().map_err(io(&path))?;
        }
        let rel_names = super::npy::relation_names(d, sc.relation_rows(d.relations.len()));
        for (f, text) in
            [("entities.tsv", tsv(d.entities.iter())), ("relations.tsv", tsv(rel_names.iter()))]
        {
            let path = tmp.join(f);
            std::fs::write(&path, text).map_err(io(&path))?;
        }
        let meta = Meta {
            format: FORMAT,
            identity: self.identity.clone(),
            epoch: self.epoch,
            orders: self.orders.clone(),
            epochs: self.epochs.clone(),
            rows_replaced: self.rows_replaced,
        };
        let path = tmp.join("meta.json");
        let json = serde_json::to_string(&meta).expect("meta serializes");
        std::fs::write(&path, json).map_err(io(&path))?;
        let model = super::manifest::model_name(cfg.score);
        SaveManifest::new("checkpoint", &model, cfg.shaping(), cfg.precision, d).write(tmp)?;
        staged.publish()?;
        write_atomic(&dir.join("latest"), format!("{name}\n").as_bytes())?;
        // Only now may older checkpoints go.
        for e in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("epoch-") && n != name {
                std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
            }
        }
        Ok(())
    }
}

impl Checkpoint {
    /// Check the `latest` checkpoint under `dir` as [`read`](Self::read) does, without
    /// loading its tables: to refuse a bad resume before any output is touched.
    pub fn verify(dir: &Path, d: &Dataset, cfg: &TrainConfig) -> Result<(), CheckpointError> {
        Self::checked_meta(dir, d, cfg).map(drop)
    }

    /// The `latest` checkpoint's directory and `meta.json`, after every check of the module
    /// docs' "What a resume checks".
    fn checked_meta(
        dir: &Path,
        d: &Dataset,
        cfg: &TrainConfig,
    ) -> Result<(PathBuf, Meta), CheckpointError> {
        let latest = dir.join("latest");
        let name = std::fs::read_to_string(&latest).map_err(io(&latest))?;
        let corrupt =
            |path: &Path, why: String| CheckpointError::Corrupt { path: path.to_path_buf(), why };
        let name = name.trim();
        let Some(named_epoch) = name.strip_prefix("epoch-").and_then(|n| n.parse::<usize>().ok())
        else {
            return Err(corrupt(&latest, format!("names {name:?}, not an epoch-NNNNNN directory")));
        };
        let sub = dir.join(name);
        let meta_path = sub.join("meta.json");
        let Some(manifest) = SaveManifest::read(&sub, "checkpoint", &FILES)? else {
            return Err(corrupt(
                &sub.join(MANIFEST),
                "missing: a checkpoint of format 1 (written before manifests), which this build \
                 cannot verify; it resumes format 2 only (start the run again)"
                    .into(),
            ));
        };
        if manifest.precision != cfg.precision.name() {
            return Err(CheckpointError::Precision {
                path: sub.join(MANIFEST),
                saved: manifest.precision,
                asked: cfg.precision,
            });
        }
        let text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
        let meta: Meta =
            serde_json::from_str(&text).map_err(|e| corrupt(&meta_path, e.to_string()))?;
        if meta.format != FORMAT {
            return Err(corrupt(
                &meta_path,
                format!("format {} (this build reads {FORMAT})", meta.format),
            ));
        }
        let ours = Identity::of(d, cfg);
        if meta.identity != ours {
            let show = |i: &Identity| {
                format!(
                    "{} entities, {} relations, {} train triples, {}",
                    i.entities, i.relations, i.train, i.config
                )
            };
            return Err(CheckpointError::Mismatch {
                path: meta_path,
                theirs: show(&meta.identity),
                ours: show(&ours),
            });
        }
        same_names(&sub.join("entities.tsv"), true, d.entities.iter())?;
        let rel_rows = cfg.step_config().relation_rows(d.relations.len());
        same_names(
            &sub.join("relations.tsv"),
            true,
            super::npy::relation_names(d, rel_rows).iter(),
        )?;
        manifest.check_train(&sub, d)?;
        // The epoch, four ways: the directory's name, meta.json's field, the recorded orders and
        // the epoch records (1, 2, …).
        let records_ok = meta.epochs.iter().enumerate().all(|(i, e)| e.epoch == i + 1);
        if meta.epoch != named_epoch
            || meta.orders.len() != meta.epoch
            || meta.epochs.len() != meta.epoch
            || !records_ok
        {
            return Err(corrupt(
                &meta_path,
                format!(
                    "epoch {} in directory {name}, with {} recorded orders and {} epoch records",
                    meta.epoch,
                    meta.orders.len(),
                    meta.epochs.len()
                ),
            ));
        }
        if meta.epoch > cfg.epochs {
            return Err(CheckpointError::Ahead {
                path: meta_path,
                epoch: meta.epoch,
                epochs: cfg.epochs,
            });
        }
        Ok((sub, meta))
    }

    /// Read the `latest` checkpoint under `dir`, after every check of the module docs' "What a
    /// resume checks", and every array's shape.
    pub fn read(dir: &Path, d: &Dataset, cfg: &TrainConfig) -> Result<Self, CheckpointError> {
        let (sub, meta) = Self::checked_meta(dir, d, cfg)?;
        let corrupt =
            |path: &Path, why: String| CheckpointError::Corrupt { path: path.to_path_buf(), why };
        let sc = cfg.step_config();
        let (n, dim, state_w) = (d.entities.len(), cfg.dim, sc.optimizer.state_width(cfg.dim));
        let (rdim, rel_rows) = (sc.relation_dim(), sc.relation_rows(d.relations.len()));
        let rel_state_w = sc.optimizer.for_relations().state_width(rdim);
        // The entity table straight into the store, one row at a time: a row's embedding from
        // one file, then its state from the other (`from_fn` asks in row order).
        let (emb_path, state_path) = (sub.join("entities.npy"), sub.join("entity_state.npy"));
        let mut emb = npy_in(&emb_path, n, dim)?;
        let mut state = npy_in(&state_path, n, state_w)?;
        let mut failed: Option<CheckpointError> = None;
        // In the run's precision: a bf16 run's values are bf16s, kept exactly (the resume
        // refused any other precision above).
        let precision = cfg.precision.store();
        let entities = RowStore::try_from_fn_in(precision, n, dim + state_w, |_, c| {
            let (values, path) =
                if c < dim { (&mut emb, &emb_path) } else { (&mut state, &state_path) };
            match values.next() {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    failed.get_or_insert_with(|| corrupt(path, e.to_string()));
                    0.0
                }
                None => {
                    failed
                        .get_or_insert_with(|| corrupt(path, "fewer values than its shape".into()));
                    0.0
                }
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(e) = failed {
            return Err(e);
        }
        let mut dense = Vec::new();
        for (f, rows, cols) in
            [("relations.npy", rel_rows, rdim), ("relation_state.npy", rel_rows, rel_state_w)]
        {
            let path = sub.join(f);
            for v in npy_in(&path, rows, cols)? {
                dense.push(v.map_err(|e| corrupt(&path, e.to_string()))?);
            }
        }
        Ok(Checkpoint {
            identity: meta.identity,
            epoch: meta.epoch,
            entities,
            dense,
            orders: meta.orders,
            epochs: meta.epochs,
            rows_replaced: meta.rows_replaced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file of the wrong shape, or one cut short, is a [`CheckpointError::Corrupt`]
    /// naming it, whatever its checksum says (the streamed reader checks both).
    #[test]
    fn a_streamed_array_of_the_wrong_shape_or_length_is_refused() {
        let dir = std::env::temp_dir().join(format!("ordo-ck-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.npy");
        let mut out = npy_out(&path, 3, 2).unwrap();
        out.extend((0..6).map(|i| i as f32)).unwrap();
        out.finish().unwrap();
        let back: Vec<f32> = npy_in(&path, 3, 2).unwrap().map(Result::unwrap).collect();
        assert_eq!(back, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let e = npy_in(&path, 2, 3).err().unwrap();
        assert!(matches!(&e, CheckpointError::Corrupt { path: p, .. } if *p == path), "{e}");
        assert!(e.to_string().contains("shape [3, 2]"), "{e}");
        // Cut off the last float: the reader fails on it instead of inventing a value.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        let read: Vec<_> = npy_in(&path, 3, 2).unwrap().collect();
        assert!(read[..5].iter().all(Result::is_ok) && read[5].is_err());
        // Too few values for the declared shape is refused when writing, too.
        let mut short = npy_out(&path, 3, 2).unwrap();
        short.extend([1.0f32]).unwrap();
        assert!(short.finish().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
