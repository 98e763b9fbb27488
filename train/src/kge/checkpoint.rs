//! Checkpoints: `--checkpoint DIR --checkpoint-every N` and `--resume DIR`.
//!
//! A checkpoint is everything the next epoch depends on: the entity rows (embeddings and their
//! optimizer state), the relation parameters and their state, the epochs done, and the recorded
//! computation orders and epoch records so far. The RNG needs no state of its own: every batch
//! is a pure function of `(seed, epoch, index)` (see [`super::batch`]), so the seed in the
//! configuration and the epoch count fix every later shuffle and negative. Hence a run of
//! `a + b` epochs equals, bit for bit, a run of `a` epochs resumed for `b` more (in `sync`
//! directly; in `oac`, both equal the replay of their recorded orders).
//!
//! **Layout** (readable from Python without ordo: `numpy.load` and a TSV reader):
//! `DIR/latest` names the current checkpoint directory `DIR/epoch-NNNNNN/`, which holds
//! `entities.npy` (`entities × dim`), `entity_state.npy`, `relations.npy`
//! (`relation rows × relation dim`), `relation_state.npy`, `entities.tsv` / `relations.tsv`
//! (`id<TAB>name`, row order) and `meta.json` (the configuration it belongs to, the epoch, the
//! orders, the epoch records and a CRC-32 of every other file).
//!
//! **Atomicity:** a checkpoint is written into a temporary directory, each file fsynced, the
//! directory renamed to its final name and fsynced, and only then `latest` is replaced (temporary
//! name, fsync, rename). A crash at any point leaves `latest` naming the previous, complete
//! checkpoint; older checkpoint directories are removed only after `latest` moved on.

use super::data::Dataset;
use super::train::{EpochStats, TrainConfig};
use ndarray::Array2;
use ndarray_npy::{read_npy, write_npy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The version of the layout this code writes and reads.
const FORMAT: u32 = 1;

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
            config: format!(
                "model {:?} dim {} optimizer {:?} reciprocal {} seed {} batch {} negatives {} chunk {} sampling {:?}",
                cfg.score,
                cfg.dim,
                cfg.optimizer,
                cfg.reciprocal,
                cfg.seed,
                cfg.batch_size,
                cfg.negatives,
                cfg.chunk,
                cfg.neg_sampling
            ),
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
    crc32: BTreeMap<String, u32>,
}

/// The state of a run after `epoch` epochs.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// What it belongs to.
    pub identity: Identity,
    /// Epochs done.
    pub epoch: usize,
    /// Entity rows, `entities × row_width` (embedding, then optimizer state).
    pub entity_rows: Vec<f32>,
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

fn fsync(path: &Path) -> Result<(), CheckpointError> {
    std::fs::File::open(path).and_then(|f| f.sync_all()).map_err(io(path))
}

fn matrix(v: &[f32], cols: usize) -> Array2<f32> {
    let cols = cols.max(1);
    Array2::from_shape_vec((v.len() / cols, cols), v.to_vec()).expect("whole rows")
}

/// Split `rows × width` into the first `left` columns and the rest.
fn split_cols(v: &[f32], width: usize, left: usize) -> (Vec<f32>, Vec<f32>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in v.chunks(width.max(1)) {
        a.extend_from_slice(&r[..left]);
        b.extend_from_slice(&r[left..]);
    }
    (a, b)
}

fn tsv<S: AsRef<str>>(names: impl Iterator<Item = S>) -> String {
    names.enumerate().map(|(i, n)| format!("{i}\t{}\n", n.as_ref())).collect()
}

impl Checkpoint {
    /// Write this checkpoint under `dir` atomically (see the module docs) and make it `latest`.
    pub fn write(&self, dir: &Path, d: &Dataset, cfg: &TrainConfig) -> Result<(), CheckpointError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let name = format!("epoch-{:06}", self.epoch);
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let sc = cfg.step_config();
        let (dim, rdim) = (cfg.dim, sc.relation_dim());
        let (emb, state) = split_cols(&self.entity_rows, sc.row_width(), dim);
        let n_rel = sc.relation_rows(d.relations.len()) * rdim;
        let (rel, rel_state) = self.dense.split_at(n_rel.min(self.dense.len()));
        let state_w = sc.optimizer.state_width(dim);
        let rel_state_w = sc.optimizer.state_width(rdim);
        let arrays = [
            ("entities.npy", matrix(&emb, dim)),
            ("entity_state.npy", matrix(&state, state_w)),
            ("relations.npy", matrix(rel, rdim)),
            ("relation_state.npy", matrix(rel_state, rel_state_w)),
        ];
        let mut crc32 = BTreeMap::new();
        for (f, a) in &arrays {
            let path = tmp.join(f);
            write_npy(&path, a).map_err(|e| CheckpointError::Io {
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        let rel_names = super::npy::relation_names(d, sc.relation_rows(d.relations.len()));
        for (f, text) in
            [("entities.tsv", tsv(d.entities.iter())), ("relations.tsv", tsv(rel_names.iter()))]
        {
            let path = tmp.join(f);
            std::fs::write(&path, text).map_err(io(&path))?;
        }
        for f in ["entities.npy", "entity_state.npy", "relations.npy", "relation_state.npy"]
            .into_iter()
            .chain(["entities.tsv", "relations.tsv"])
        {
            let path = tmp.join(f);
            fsync(&path)?;
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            crc32.insert(f.to_string(), crc32fast::hash(&bytes));
        }
        let meta = Meta {
            format: FORMAT,
            identity: self.identity.clone(),
            epoch: self.epoch,
            orders: self.orders.clone(),
            epochs: self.epochs.clone(),
            rows_replaced: self.rows_replaced,
            crc32,
        };
        let path = tmp.join("meta.json");
        let json = serde_json::to_string(&meta).expect("meta serializes");
        std::fs::write(&path, json).map_err(io(&path))?;
        fsync(&path)?;
        fsync(&tmp)?;
        let fin = dir.join(&name);
        if fin.exists() {
            std::fs::remove_dir_all(&fin).map_err(io(&fin))?;
        }
        std::fs::rename(&tmp, &fin).map_err(io(&fin))?;
        fsync(dir)?;
        let latest_tmp = dir.join(format!(".latest.tmp-{}", std::process::id()));
        std::fs::write(&latest_tmp, format!("{name}\n")).map_err(io(&latest_tmp))?;
        fsync(&latest_tmp)?;
        let latest = dir.join("latest");
        std::fs::rename(&latest_tmp, &latest).map_err(io(&latest))?;
        fsync(dir)?;
        // Only now may older checkpoints go.
        for e in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("epoch-") && n != name {
                std::fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
            }
        }
        Ok(())
    }

    /// Read the `latest` checkpoint under `dir`, checking every file's checksum and shape and
    /// that it belongs to a run of `cfg` on `d`.
    pub fn read(dir: &Path, d: &Dataset, cfg: &TrainConfig) -> Result<Self, CheckpointError> {
        let latest = dir.join("latest");
        let name = std::fs::read_to_string(&latest).map_err(io(&latest))?;
        let sub = dir.join(name.trim());
        let corrupt =
            |path: &Path, why: String| CheckpointError::Corrupt { path: path.to_path_buf(), why };
        let meta_path = sub.join("meta.json");
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
        for (f, want) in &meta.crc32 {
            let path = sub.join(f);
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let got = crc32fast::hash(&bytes);
            if got != *want {
                return Err(corrupt(&path, format!("CRC-32 {got:08x}, recorded {want:08x}")));
            }
        }
        let read = |f: &str| {
            let path = sub.join(f);
            read_npy::<_, Array2<f32>>(&path).map_err(|e| corrupt(&path, e.to_string()))
        };
        let sc = cfg.step_config();
        let (emb, state) = (read("entities.npy")?, read("entity_state.npy")?);
        let (rel, rel_state) = (read("relations.npy")?, read("relation_state.npy")?);
        let n = d.entities.len();
        let want = [
            (&emb, n, cfg.dim, "entities.npy"),
            (&state, n, sc.optimizer.state_width(cfg.dim), "entity_state.npy"),
        ];
        for (a, rows, cols, f) in want {
            if a.dim() != (rows, cols) {
                return Err(corrupt(
                    &sub.join(f),
                    format!("shape {:?}, expected ({rows}, {cols})", a.dim()),
                ));
            }
        }
        let entity_rows = emb
            .rows()
            .into_iter()
            .zip(state.rows())
            .flat_map(|(e, s)| e.iter().chain(s.iter()).copied().collect::<Vec<_>>())
            .collect();
        let dense = rel.iter().chain(rel_state.iter()).copied().collect();
        Ok(Checkpoint {
            identity: meta.identity,
            epoch: meta.epoch,
            entity_rows,
            dense,
            orders: meta.orders,
            epochs: meta.epochs,
            rows_replaced: meta.rows_replaced,
        })
    }
}
