//! Save and load embeddings as `.npy` files (readable with `numpy.load`).
//!
//! A saved directory holds `entities.npy` (`entities × dim`, f32), `relations.npy`
//! (`relations × dim`, f32) and `entities.txt` / `relations.txt` (one name per line, in row
//! order), so `numpy.load("entities.npy")[i]` is the embedding of line `i` of `entities.txt`.
//! Files are written to a temporary name and renamed, so a directory never holds a half-written
//! file.

use super::data::Dataset;
use super::eval::{Filter, Metrics, evaluate};
use super::score::ScoreFn;
use super::train::RunResult;
use ndarray::Array2;
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

fn write_array(path: &Path, a: &Array2<f32>) -> Result<(), NpyError> {
    let tmp = path.with_extension("npy.tmp");
    let f = File::create(&tmp).map_err(io(&tmp))?;
    let mut out = npy_writer(f, a.nrows(), a.ncols()).map_err(io(&tmp))?;
    // `iter` walks the array in logical (row-major) order, which the header declares.
    out.extend(a.iter().copied()).map_err(io(&tmp))?;
    out.finish().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// A 2-D f32 `.npy` file (C order) as an array.
fn read_array(path: &Path) -> Result<Array2<f32>, NpyError> {
    let bad = |why: String| NpyError::Read { path: path.display().to_string(), why };
    let f = File::open(path).map_err(|e| bad(e.to_string()))?;
    let ([rows, cols], values) = npy_reader(f).map_err(bad)?;
    let values = values.collect::<std::io::Result<Vec<f32>>>().map_err(|e| bad(e.to_string()))?;
    Array2::from_shape_vec((rows as usize, cols as usize), values).map_err(|e| bad(e.to_string()))
}

fn write_text<S: AsRef<str>>(path: &Path, lines: impl Iterator<Item = S>) -> Result<(), NpyError> {
    use std::io::Write;
    let tmp = path.with_extension("txt.tmp");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io(&tmp))?);
    for l in lines {
        writeln!(w, "{}", l.as_ref()).map_err(io(&tmp))?;
    }
    w.into_inner().map_err(|e| e.into_error()).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Save the run's final embeddings (not the Adagrad sums) and names under `dir`.
pub fn save(dir: &Path, d: &Dataset, dim: usize, r: &RunResult) -> Result<(), NpyError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let ents = Array2::from_shape_vec((d.entities.len(), dim), r.entity_embeddings(dim))
        .map_err(|e| NpyError::Shape(e.to_string()))?;
    let rdim = r.relation_dim.max(1);
    let rels = Array2::from_shape_vec((r.relations.len() / rdim, rdim), r.relations.clone())
        .map_err(|e| NpyError::Shape(e.to_string()))?;
    write_array(&dir.join("entities.npy"), &ents)?;
    write_array(&dir.join("relations.npy"), &rels)?;
    write_text(&dir.join("entities.txt"), d.entities.iter())?;
    write_text(&dir.join("relations.txt"), relation_names(d, rels.nrows()).iter())
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

/// Load `entities.npy` and `relations.npy` from `dir`.
pub fn load(dir: &Path) -> Result<(Array2<f32>, Array2<f32>), NpyError> {
    let (e, r) = (read_array(&dir.join("entities.npy"))?, read_array(&dir.join("relations.npy"))?);
    if e.ncols() != r.ncols() {
        return Err(NpyError::Shape(format!(
            "entities are {} wide, relations {}",
            e.ncols(),
            r.ncols()
        )));
    }
    Ok((e, r))
}

/// Filtered test metrics of loaded embeddings on `d` (its ids must match the saved names'
/// order, which they do for the dataset the embeddings were trained on).
pub fn evaluate_loaded(
    d: &Dataset,
    score: ScoreFn,
    ents: &Array2<f32>,
    rels: &Array2<f32>,
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
    let reciprocal = rels.nrows() == 2 * d.relations.len();
    Ok(evaluate((score, reciprocal), ents.view(), rels.view(), &d.test, &Filter::of(d)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kge::train::{Mode, TrainConfig, train};

    #[test]
    fn saved_embeddings_are_numpy_f32_and_load_back_with_the_same_metrics() {
        let d = Dataset::load("nations").unwrap();
        let cfg = TrainConfig { dim: 8, epochs: 2, ..TrainConfig::default() };
        let r = train(&d, &cfg, Mode::Sync, &mut |_| {}, None).unwrap();
        let dir = std::env::temp_dir().join(format!("ordo-kge-npy-{}", std::process::id()));
        save(&dir, &d, cfg.dim, &r).unwrap();
        let bytes = std::fs::read(dir.join("entities.npy")).unwrap();
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let header = String::from_utf8_lossy(&bytes[10..80]);
        assert!(
            header.contains("'descr': '<f4'") && header.contains("'shape': (14, 8"),
            "{header}"
        );
        let (e, rel) = load(&dir).unwrap();
        assert_eq!(e.as_slice().unwrap(), r.entity_embeddings(8).as_slice());
        assert_eq!(rel.as_slice().unwrap(), r.relations.as_slice());
        assert_eq!(evaluate_loaded(&d, cfg.score, &e, &rel).unwrap(), r.test);
        let names = std::fs::read_to_string(dir.join("entities.txt")).unwrap();
        assert!(names.lines().eq(d.entities.iter()));
        let umls = Dataset::load("umls").unwrap();
        assert!(matches!(evaluate_loaded(&umls, cfg.score, &e, &rel), Err(NpyError::Shape(_))));
        std::fs::remove_file(dir.join("relations.npy")).unwrap();
        assert!(matches!(load(&dir), Err(NpyError::Read { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
