//! `ordo.kge`'s native part: the knowledge-graph datasets and the filtered evaluator of the
//! `ordo-train` CLI, on numpy arrays.

use clap::ValueEnum;
use numpy::{PyArray2, PyReadonlyArray2, PyUntypedArrayMethods};
use ordo_train::kge::data::{Dataset, Triple};
use ordo_train::kge::eval::{Filter, evaluate as filtered};
use ordo_train::kge::score::ScoreFn;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn triples_array<'py>(py: Python<'py>, t: &[Triple]) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let rows: Vec<Vec<i64>> = t.iter().map(|t| vec![t.h as i64, t.r as i64, t.t as i64]).collect();
    if rows.is_empty() {
        return Ok(PyArray2::zeros(py, [0, 3], false));
    }
    Ok(PyArray2::from_vec2(py, &rows)?)
}

fn triples_of(a: &PyReadonlyArray2<'_, i64>, what: &str) -> PyResult<Vec<Triple>> {
    if a.shape()[1] != 3 {
        return Err(PyValueError::new_err(format!(
            "{what} must be an n x 3 array of (head, relation, tail)"
        )));
    }
    a.as_array()
        .rows()
        .into_iter()
        .map(|r| {
            let id = |x: i64| {
                u32::try_from(x)
                    .map_err(|_| PyValueError::new_err(format!("{what} holds the id {x}")))
            };
            Ok(Triple { h: id(r[0])?, r: id(r[1])?, t: id(r[2])? })
        })
        .collect()
}

/// Load a dataset as the CLI does: `umls`, `kinships`, `nations` (vendored) or a directory
/// with `train.txt`, `valid.txt`, `test.txt` (tab-separated head, relation, tail). A dict of
/// `name`, `entities`, `relations` (counts) and `train`, `valid`, `test` (`n x 3` int64 ids).
#[pyfunction]
fn load_dataset<'py>(py: Python<'py>, name_or_path: &str) -> PyResult<Bound<'py, PyDict>> {
    let d = py
        .detach(|| Dataset::load(name_or_path))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out = PyDict::new(py);
    out.set_item("name", &d.name)?;
    out.set_item("entities", d.entities.len())?;
    out.set_item("relations", d.relations.len())?;
    out.set_item("train", triples_array(py, &d.train)?)?;
    out.set_item("valid", triples_array(py, &d.valid)?)?;
    out.set_item("test", triples_array(py, &d.test)?)?;
    Ok(out)
}

/// Filtered link prediction as the CLI evaluates it (both directions, realistic rank of
/// ties): `entities` (`n x dim`) and `relations` (`m x dim`) float32, `queries` and `known`
/// (the triples to filter out, usually train + valid + test) `k x 3` int64. `score`: the CLI's
/// names (`distmult`, `complex`, `transe-l1`, ...); ComplEx rows are `[real half | imaginary
/// half]`. With `reciprocal`, relations are `2m` rows and head queries use the inverse ones.
/// A dict of `mrr`, `hits1`, `hits3`, `hits10`, `queries`.
#[pyfunction]
#[pyo3(signature = (score, entities, relations, queries, known, reciprocal = false))]
fn evaluate<'py>(
    py: Python<'py>,
    score: &str,
    entities: PyReadonlyArray2<'py, f32>,
    relations: PyReadonlyArray2<'py, f32>,
    queries: PyReadonlyArray2<'py, i64>,
    known: PyReadonlyArray2<'py, i64>,
    reciprocal: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let score = ScoreFn::from_str(score, true).map_err(PyValueError::new_err)?;
    let (e, r) = (entities.as_array(), relations.as_array());
    if e.ncols() != r.ncols() {
        return Err(PyValueError::new_err("entities and relations must have the same width"));
    }
    let queries = triples_of(&queries, "queries")?;
    let known = triples_of(&known, "known")?;
    for t in queries.iter().chain(&known) {
        let rel = if reciprocal { 2 * t.r as usize + 1 } else { t.r as usize };
        if t.h as usize >= e.nrows() || t.t as usize >= e.nrows() || rel > r.nrows() {
            return Err(PyValueError::new_err(format!(
                "the triple ({}, {}, {}) is out of range",
                t.h, t.r, t.t
            )));
        }
    }
    let (e, r) = (e.to_owned(), r.to_owned());
    let m = py.detach(|| {
        filtered((score, reciprocal), e.view(), r.view(), &queries, &Filter::new(&known))
    });
    let out = PyDict::new(py);
    out.set_item("mrr", m.mrr)?;
    out.set_item("hits1", m.hits1)?;
    out.set_item("hits3", m.hits3)?;
    out.set_item("hits10", m.hits10)?;
    out.set_item("queries", m.queries)?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    Ok(())
}
