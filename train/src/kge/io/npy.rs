//! Save and load embeddings as `.npy` files (readable with `numpy.load`).
//!
//! A saved directory holds `entities.npy` (`entities × dim`, f32), `relations.npy`
//! (`relations × dim`, f32), `entities.txt` / `relations.txt` (one name per line, in row
//! order), so `numpy.load("entities.npy")[i]` is the embedding of line `i` of `entities.txt`,
//! and `manifest.json` ([`super::manifest`]: the run, the model and its options, the dataset and
//! a CRC-32 of every file).
//!
//! **All or nothing:** the files are written into a temporary directory beside the target and
//! the whole directory is put in place in one step ([`crate::atomic_fs`]), so `--save DIR` names
//! either the previous complete save or the new one. **Verified:** [`load`] checks every file
//! against the manifest, the saved names against the dataset's (line by line: a save is refused
//! for a dataset whose entities or relations are other, or in another order), and hands back the
//! saved model so `kge eval` cannot score the tables with another one. A save from before
//! manifests (format 0: the same files without `manifest.json`) still loads, unverified except
//! for its names.

use super::manifest::{ManifestError, SaveManifest, same_names};
use crate::atomic_fs::Staged;
use crate::kge::data::dataset::Dataset;
use crate::kge::eval::eval_stream::{DenseParts, EntityParts};
use crate::kge::eval::ranking::{Filter, Metrics, evaluate, evaluate_sampled};
use crate::kge::model::score::ScoreFn;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::results::RunResult;
use ndarray::{Array2, ArrayView2};
use npyz::WriterBuilder;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;
use thiserror::Error;

/// Why embeddings could not be saved or loaded.
#[derive(Debug, Error)]
pub enum NpyError {
    /// File-system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// An `.npy` file could not be read (missing, not f32, not 2-D, cut short…).
    #[error("{path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The loaded arrays do not fit the dataset or each other.
    #[error("embeddings do not fit: {0}")]
    Shape(String),
    /// The directory does not agree with its manifest, or was written for another dataset.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The embeddings are of another model than the one asked for.
    #[error("{path}: embeddings of model {saved}, but --model {given} was given")]
    Model {
        /// The manifest.
        path: String,
        /// The saved model.
        saved: String,
        /// The one asked for.
        given: String,
    },
    /// Reading the embeddings to save failed (a partition of a partitioned run).
    #[error("reading the embeddings to save: {0}")]
    Source(String),
    /// A staged directory could not be written or published.
    #[error(transparent)]
    Staged(#[from] crate::atomic_fs::StagedError),
}

impl NpyError {
    /// Whether the saved directory (or the request) is at fault, not the writing of a save (a
    /// full disk, an unwritable directory).
    pub fn is_bad_input(&self) -> bool {
        match self {
            NpyError::Io { .. } | NpyError::Staged(_) | NpyError::Source(_) => false,
            NpyError::Manifest(m) => !matches!(m, ManifestError::Io(_)),
            NpyError::Read { .. } | NpyError::Shape(_) | NpyError::Model { .. } => true,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> NpyError + '_ {
    move |source| NpyError::Io { path: path.display().to_string(), source }
}

/// A `rows × cols` f32 `.npy` file (C order) being written to `file`, one value at a time (the
/// writer refuses to finish with fewer or more values than the shape). Shared with
/// [`super::checkpoint`], which streams a table through it row by row.
pub(crate) type NpyOut = npyz::NpyWriter<f32, BufWriter<File>>;

/// Start an [`NpyOut`] of `rows × cols` on `file`.
pub(crate) fn npy_writer(file: File, rows: usize, cols: usize) -> std::io::Result<NpyOut> {
    npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[rows as u64, cols as u64])
        .writer(BufWriter::with_capacity(1 << 20, file))
        .begin_nd()
}

/// The values of an f32 `.npy` file, in order, read as they are consumed.
pub(crate) type NpyIn = npyz::NpyReader<f32, BufReader<File>>;

/// The shape of a 2-D f32 `.npy` file (C order) and its values; why not, as text.
pub(crate) fn npy_reader(file: File) -> Result<([u64; 2], NpyIn), String> {
    let npy =
        npyz::NpyFile::new(BufReader::with_capacity(1 << 20, file)).map_err(|e| e.to_string())?;
    let shape = npy.shape().to_vec();
    let [rows, cols] = shape[..] else {
        return Err(format!("shape {shape:?}, expected 2-D"));
    };
    if npy.order() != npyz::Order::C {
        return Err("Fortran order, expected C order".into());
    }
    Ok(([rows, cols], npy.data::<f32>().map_err(|e| e.to_string())?))
}

/// Write `a` to `path` (in a staged directory: no temporary name of its own).
fn write_array(path: &Path, a: &Array2<f32>) -> Result<(), NpyError> {
    let f = File::create(path).map_err(io(path))?;
    let mut out = npy_writer(f, a.nrows(), a.ncols()).map_err(io(path))?;
    // `iter` walks the array in logical (row-major) order, which the header declares.
    out.extend(a.iter().copied()).map_err(io(path))?;
    out.finish().map_err(io(path))
}

/// A 2-D f32 `.npy` file (C order) as an array, read straight into its one buffer (reserved
/// whole before the first value, so a table too large for memory is an error, not an abort,
/// and never a second copy while it grows).
fn read_array(path: &Path) -> Result<Array2<f32>, NpyError> {
    let bad = |why: String| NpyError::Read { path: path.display().to_string(), why };
    let f = File::open(path).map_err(|e| bad(e.to_string()))?;
    let ([rows, cols], values) = npy_reader(f).map_err(bad)?;
    let (rows, cols) = (rows as usize, cols as usize);
    let len = rows.checked_mul(cols).ok_or_else(|| bad(format!("shape [{rows}, {cols}]")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| bad(format!("{len} values: {e}")))?;
    for x in values {
        v.push(x.map_err(|e| bad(e.to_string()))?);
    }
    Array2::from_shape_vec((rows, cols), v).map_err(|e| bad(e.to_string()))
}

/// Where the values of a 2-D f32 `.npy` file are, if they can be used in place: the shape and
/// the byte offset of the values, for a little-endian f32 (`<f4`) C-order file on a
/// little-endian machine whose values start 4-byte aligned and fill the file to its end.
/// `Ok(None)`: a file that must be read and converted instead ([`read_array`]).
fn in_place(path: &Path) -> Result<(usize, usize, Option<usize>), NpyError> {
    let bad = |why: String| NpyError::Read { path: path.display().to_string(), why };
    let mut f = File::open(path).map_err(|e| bad(e.to_string()))?;
    let len = f.metadata().map_err(|e| bad(e.to_string()))?.len();
    // Unbuffered: the header read leaves the file at the first value.
    let header = npyz::NpyHeader::from_reader(&mut f).map_err(|e| bad(e.to_string()))?;
    let offset = std::io::Seek::stream_position(&mut f).map_err(|e| bad(e.to_string()))?;
    let npy = npyz::NpyFile::with_header(header, &mut f);
    let [rows, cols] = npy.shape()[..] else {
        return Err(bad(format!("shape {:?}, expected 2-D", npy.shape())));
    };
    let (rows, cols) = (rows as usize, cols as usize);
    let f4 = matches!(npy.dtype(), npyz::DType::Plain(t) if t.to_string() == "<f4");
    let bytes = rows.checked_mul(cols).and_then(|x| x.checked_mul(4)).map(|b| b as u64);
    let usable = f4
        && cfg!(target_endian = "little")
        && npy.order() == npyz::Order::C
        // The values fill the file from an aligned offset to its end.
        && bytes.and_then(|b| b.checked_add(offset)) == Some(len)
        && offset % 4 == 0;
    Ok((rows, cols, usable.then_some(offset as usize)))
}

/// An entity table of a save: `entities.npy` mapped into memory, its values read where they
/// lie (the page cache holds them: no anonymous memory, and a table larger than memory is
/// read from the disk as evaluation touches it), or, for a file that cannot be used in place
/// (another dtype or byte order), read and converted into one buffer.
#[derive(Debug)]
pub enum Table {
    /// The file mapped; its values are `rows × cols` f32 from byte `offset`.
    Mapped {
        /// The mapping of the whole file.
        map: memmap2::Mmap,
        /// Where the values start (after the header).
        offset: usize,
        /// Rows (entities).
        rows: usize,
        /// Columns (the dimension).
        cols: usize,
    },
    /// The values read into memory.
    Read(Array2<f32>),
}

impl Table {
    /// Map `path` if its values can be used in place, else read it.
    fn open(path: &Path) -> Result<Table, NpyError> {
        let bad = |why: String| NpyError::Read { path: path.display().to_string(), why };
        let (rows, cols, Some(offset)) = in_place(path)? else {
            return read_array(path).map(Table::Read);
        };
        let f = File::open(path).map_err(|e| bad(e.to_string()))?;
        // SAFETY: the mapping is read-only and saves are never written in place: a save is a
        // new directory put in place of the old one (`crate::atomic_fs`), so the mapped file
        // keeps its contents (a process truncating it by hand would fault this one, as it
        // would any reader of a mapped file).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| bad(e.to_string()))?;
        // The values are read once each per query block, in row order.
        let _ = map.advise(memmap2::Advice::Sequential);
        let table = Table::Mapped { map, offset, rows, cols };
        // `in_place` checked the length and the alignment; a file changed in between is bad.
        match table.try_view() {
            Some(_) => Ok(table),
            None => Err(bad("changed while opened".into())),
        }
    }

    fn try_view(&self) -> Option<ArrayView2<'_, f32>> {
        match self {
            Table::Read(a) => Some(a.view()),
            Table::Mapped { map, offset, rows, cols } => {
                let bytes = map.get(*offset..)?;
                // SAFETY: every bit pattern is an f32, and `align_to` puts in `values` only
                // aligned whole f32s.
                let (before, values, _) = unsafe { bytes.align_to::<f32>() };
                if !before.is_empty() || values.len() != rows.checked_mul(*cols)? {
                    return None;
                }
                ArrayView2::from_shape((*rows, *cols), values).ok()
            }
        }
    }

    /// The table, `entities × dim`, row-major.
    pub fn view(&self) -> ArrayView2<'_, f32> {
        self.try_view().expect("checked when opened")
    }

    /// Rows (entities) and columns (the dimension).
    pub fn dim(&self) -> (usize, usize) {
        self.view().dim()
    }

    /// The table as an owned array (a mapped one copied out of its file once).
    pub fn into_array(self) -> Array2<f32> {
        match self {
            Table::Read(a) => a,
            mapped => mapped.view().to_owned(),
        }
    }

    /// Whether the table is mapped from its file rather than read into memory.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Table::Mapped { .. })
    }
}

/// The shape of the entity table of the save in `dir` and whether [`load`] will map it (`true`)
/// or read it into memory: what `kge eval` checks its memory with before loading.
pub fn entities_shape(dir: &Path) -> Result<(usize, usize, bool), NpyError> {
    let (rows, cols, offset) = in_place(&dir.join("entities.npy"))?;
    Ok((rows, cols, offset.is_some()))
}

fn write_text<S: AsRef<str>>(path: &Path, lines: impl Iterator<Item = S>) -> Result<(), NpyError> {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    for l in lines {
        writeln!(w, "{}", l.as_ref()).map_err(io(path))?;
    }
    w.into_inner().map_err(|e| e.into_error()).map_err(io(path))?;
    Ok(())
}

/// The files of a save, all listed in its manifest.
const FILES: [&str; 4] = ["entities.npy", "relations.npy", "entities.txt", "relations.txt"];

/// Save the run's final embeddings (not the optimizer state), names and manifest as the
/// directory `dir`, replacing the one there all at once (see the module docs). The caller holds
/// `dir`'s lock ([`crate::outdir::OutputLock`]).
pub fn save(dir: &Path, d: &Dataset, cfg: &TrainConfig, r: &RunResult) -> Result<(), NpyError> {
    let table = r.entity_embeddings(cfg.dim);
    let whole = DenseParts { table: &table, dim: cfg.dim, part: d.entities.len().max(1) };
    save_parts(dir, d, cfg, &whole, (&r.relations, r.relation_dim))
}

/// [`save`] with the entity embeddings read one part at a time from `entities` (a partitioned
/// run's storage: its parts in ascending order, the file written as each arrives), so the
/// table is never in memory at once; `relations` is the relation parameters and their width.
pub fn save_parts<S: EntityParts>(
    dir: &Path,
    d: &Dataset,
    cfg: &TrainConfig,
    entities: &S,
    (relations, rdim): (&[f32], usize),
) -> Result<(), NpyError>
where
    S::Error: std::fmt::Display,
{
    let (rows, dim) = (entities.entities(), entities.dim());
    if rows != d.entities.len() || dim != cfg.dim {
        return Err(NpyError::Shape(format!(
            "{rows} × {dim} entity embeddings for {} entities of dim {}",
            d.entities.len(),
            cfg.dim
        )));
    }
    let rdim = rdim.max(1);
    let rels = Array2::from_shape_vec((relations.len() / rdim, rdim), relations.to_vec())
        .map_err(|e| NpyError::Shape(e.to_string()))?;
    // Its size is known: a full disk is found before anything is written.
    ensure_space(dir, d, rows * dim + relations.len())?;
    let staged = Staged::new(dir)?;
    let tmp = staged.path();
    let path = tmp.join("entities.npy");
    let mut out =
        npy_writer(File::create(&path).map_err(io(&path))?, rows, dim).map_err(io(&path))?;
    let mut next = 0;
    for k in 0..entities.parts() {
        let (first, part) = entities.part(k).map_err(|e| NpyError::Source(e.to_string()))?;
        if first != next {
            return Err(NpyError::Shape(format!("part {k} starts at row {first}, not {next}")));
        }
        next += part.len() / dim.max(1);
        out.extend(part).map_err(io(&path))?;
    }
    out.finish().map_err(io(&path))?;
    write_array(&tmp.join("relations.npy"), &rels)?;
    write_text(&tmp.join("entities.txt"), d.entities.iter())?;
    write_text(&tmp.join("relations.txt"), relation_names(d, rels.nrows()).iter())?;
    let model = super::manifest::model_name(cfg.score);
    SaveManifest::new("embeddings", &model, cfg.shaping(), cfg.precision, d).write(tmp)?;
    staged.publish()?;
    Ok(())
}

/// Refuse a save into `dir` of `floats` parameters and `d`'s names that does not fit its
/// filesystem ([`crate::space::ensure`]; the npy headers and the manifest are in its margin).
/// Called before training too, with the run's sizes, so a full disk is found before the work.
pub fn ensure_space(dir: &Path, d: &Dataset, floats: usize) -> Result<(), NpyError> {
    // Each relation name twice at most (with inverse relations), with its `⁻¹`.
    let names: usize = d.entities.iter().map(|n| n.len() + 1).sum::<usize>()
        + d.relations.iter().map(|n| 2 * n.len() + 7).sum::<usize>();
    crate::space::ensure(dir, 4 * floats as u64 + names as u64, FILES.len() as u64 + 1)
        .map_err(|e| NpyError::Staged(e.into()))
}

/// Names of the model's relation rows: the dataset's, then (with inverse relations) each name
/// with a `⁻¹` suffix.
pub fn relation_names(d: &Dataset, rows: usize) -> Vec<String> {
    let mut names: Vec<String> = d.relations.iter().map(String::from).collect();
    if rows == 2 * d.relations.len() {
        names.extend(d.relations.iter().map(|n| format!("{n}⁻¹")));
    }
    names
}

/// Embeddings loaded by [`load`].
#[derive(Debug)]
pub struct Saved {
    /// `entities × dim`, mapped from the file where it can be ([`Table`]).
    pub entities: Table,
    /// `relation rows × dim`.
    pub relations: Array2<f32>,
    /// The manifest (`None` for a save from before manifests).
    pub manifest: Option<SaveManifest>,
}

impl Saved {
    /// The model to score these embeddings with: the saved one, which `given` (`--model`), if
    /// any, must equal; `given` or `default` for a save from before manifests.
    pub fn model(
        &self,
        dir: &Path,
        given: Option<ScoreFn>,
        default: ScoreFn,
    ) -> Result<ScoreFn, NpyError> {
        let Some(m) = &self.manifest else { return Ok(given.unwrap_or(default)) };
        let path = dir.join(super::manifest::MANIFEST).display().to_string();
        let saved = super::manifest::model_of(&m.model).ok_or_else(|| NpyError::Read {
            path: path.clone(),
            why: format!("unknown model {:?}", m.model),
        })?;
        match given {
            Some(g) if g != saved => Err(NpyError::Model {
                path,
                saved: m.model.clone(),
                given: super::manifest::model_name(g),
            }),
            _ => Ok(saved),
        }
    }
}

/// Load the save in `dir` for the dataset `d`: every file checked against `manifest.json`, the
/// saved names against `d`'s (the first differing line is named), and the arrays' shapes
/// against each other.
pub fn load(dir: &Path, d: &Dataset) -> Result<Saved, NpyError> {
    let manifest = SaveManifest::read(dir, "embeddings", &FILES)?;
    same_names(&dir.join("entities.txt"), false, d.entities.iter())?;
    // The widths are checked against the model that scores them (`evaluate_loaded`): RotatE's
    // relations are half as wide as its entities.
    let e = Table::open(&dir.join("entities.npy"))?;
    let r = read_array(&dir.join("relations.npy"))?;
    same_names(&dir.join("relations.txt"), false, relation_names(d, r.nrows()).iter())?;
    Ok(Saved { entities: e, relations: r, manifest })
}

/// Filtered test metrics of loaded embeddings on `d` (its ids must match the saved names'
/// order, which they do for the dataset the embeddings were trained on): the first
/// `cfg.eval_limit` test triples (0: all), full ranking or sampled against `cfg.eval_sample`
/// entities (seeded by `cfg.seed`) as a run evaluates.
///
/// **Memory** (what `kge eval` holds beside the dataset; estimated before loading by the run
/// layer's `check_eval_memory`, in `kge::job`): the entity table is read where [`load`] mapped it (page cache, not the
/// process's own memory; a [`Table::Read`] one is held once), the relation table, the filter
/// of the evaluated queries only ([`Filter::for_queries`]: the same ranks as the filter of
/// every triple), and per rayon thread the scores of one query block against every entity
/// (`2 · 64 × entities` f32 in full ranking) or the sample's ids.
pub fn evaluate_loaded(
    d: &Dataset,
    score: ScoreFn,
    ents: ArrayView2<'_, f32>,
    rels: ArrayView2<'_, f32>,
    cfg: &TrainConfig,
) -> Result<Metrics, NpyError> {
    let r = d.relations.len();
    if ents.nrows() != d.entities.len() || (rels.nrows() != r && rels.nrows() != 2 * r) {
        return Err(NpyError::Shape(format!(
            "{}×{} entities and {}×{} relations for a dataset of {} entities and {} relations",
            ents.nrows(),
            ents.ncols(),
            rels.nrows(),
            rels.ncols(),
            d.entities.len(),
            d.relations.len()
        )));
    }
    score.check_dim(ents.ncols()).map_err(|e| NpyError::Shape(e.to_string()))?;
    let want = score.relation_dim(ents.ncols());
    if rels.ncols() != want {
        return Err(NpyError::Shape(format!(
            "entities are {} wide, relations {}: {} needs relations {want} wide",
            ents.ncols(),
            rels.ncols(),
            super::manifest::model_name(score)
        )));
    }
    let model = (score, rels.nrows() == 2 * d.relations.len());
    let limit = if cfg.eval_limit == 0 { d.test.len() } else { cfg.eval_limit.min(d.test.len()) };
    let test = &d.test[..limit];
    let filter = Filter::for_queries(d, test);
    Ok(match cfg.eval_sample {
        0 => evaluate(model, ents, rels, test, &filter),
        k => evaluate_sampled(model, ents, rels, test, &filter, (k, cfg.seed)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file of `descr` with `values` (already in that byte order) after a 128-byte
    /// header, and `extra` bytes after them.
    fn npy(dir: &Path, descr: &str, values: &[u8], extra: usize) -> std::path::PathBuf {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3, 2), }}");
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        let pad = 128 - 10 - dict.len() - 1;
        bytes.extend((118u16).to_le_bytes());
        bytes.extend(dict.bytes().chain(std::iter::repeat_n(b' ', pad)).chain([b'\n']));
        bytes.extend(values);
        bytes.extend(std::iter::repeat_n(0u8, extra));
        let path = dir.join(format!("{descr}-{extra}.npy").replace(['<', '>'], "_"));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_little_endian_f32_table_is_mapped_and_any_other_is_read_to_the_same_values() {
        let dir = tempfile::tempdir().unwrap();
        let want = [1.5f32, -2.0, 0.25, 3.0, f32::MIN_POSITIVE, 7.0];
        let le: Vec<u8> = want.iter().flat_map(|x| x.to_le_bytes()).collect();
        let be: Vec<u8> = want.iter().flat_map(|x| x.to_be_bytes()).collect();
        let mapped = Table::open(&npy(dir.path(), "<f4", &le, 0)).unwrap();
        assert!(mapped.is_mapped());
        assert_eq!(mapped.view().as_slice().unwrap(), want);
        assert_eq!(mapped.dim(), (3, 2));
        let read = Table::open(&npy(dir.path(), ">f4", &be, 0)).unwrap();
        assert!(!read.is_mapped());
        assert_eq!(read.view().as_slice().unwrap(), want);
        // Bytes after the values (aligned or not): not a plain table, so not mapped (the reader
        // takes the declared values).
        for extra in [2, 4] {
            let longer = npy(dir.path(), "<f4", &le, extra);
            assert_eq!(in_place(&longer).unwrap(), (3, 2, None));
            assert_eq!(Table::open(&longer).unwrap().view().as_slice().unwrap(), want);
        }
        assert_eq!(in_place(&npy(dir.path(), "<f4", &le, 0)).unwrap(), (3, 2, Some(128)));
        assert!(entities_shape(dir.path()).is_err(), "no entities.npy here");
        // Cut short: an error naming the file, not a panic.
        let short = npy(dir.path(), "<f4", &le[..20], 0);
        let err = Table::open(&short).unwrap_err();
        assert!(matches!(err, NpyError::Read { .. }), "{err}");
    }
}
