//! The tables of an `ordo.Engine` (or of `ordo.replay`): one `ordo.Table`, or several named
//! ones as a dict, run as one storage ([`ordo::tables::Tables`]).
//!
//! With one table, a batch's ids are an array and the step gets `ids` and `rows` as arrays, as
//! always. With a dict of tables, a batch's ids are a dict `{name: ids}` (a table may be left
//! out), and the step gets `ids` and `rows` as dicts with every table's name, in the dict's
//! order: each table's row ids within it, and its rows at its own width (a view of the rows
//! lent for the call, so the same rules hold: valid only during the call).

use crate::errors::InvalidBatch;
use crate::table::{Table, TableHeld};
use numpy::PyArray1;
use ordo::storage::RowStorage;
use ordo::tables::Tables;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

/// One table, or several named ones.
pub(crate) enum EngineTables {
    One(Py<Table>),
    Named { tables: Vec<(String, Py<Table>)>, storage: Arc<Tables> },
}

impl EngineTables {
    /// From what the caller passed: an `ordo.Table`, or a dict (any mapping) of names to
    /// `ordo.Table`s, each table once.
    pub(crate) fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(t) = obj.cast::<Table>() {
            return Ok(EngineTables::One(t.clone().unbind()));
        }
        let Ok(map) = obj.cast::<pyo3::types::PyMapping>() else {
            return Err(PyTypeError::new_err(format!(
                "tables must be an ordo.Table or a dict of names to ordo.Table, not {}",
                obj.get_type().name()?
            )));
        };
        let mut tables: Vec<(String, Py<Table>)> = Vec::new();
        for item in map.items()?.try_iter()? {
            let (name, table): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
            let name: String = name.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "a table's name must be a str, not {}",
                    name.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            let table = table.cast::<Table>().map_err(|_| {
                PyTypeError::new_err(format!("table {name:?} must be an ordo.Table"))
            })?;
            if let Some((other, _)) =
                tables.iter().find(|(_, t)| Arc::ptr_eq(&t.get().store, &table.get().store))
            {
                return Err(PyValueError::new_err(format!(
                    "tables {other:?} and {name:?} are the same ordo.Table: give each table once"
                )));
            }
            tables.push((name, table.clone().unbind()));
        }
        let parts = tables
            .iter()
            .map(|(n, t)| (n.clone(), t.get().store.clone() as Arc<dyn RowStorage>))
            .collect();
        let storage = Tables::new(parts).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(EngineTables::Named { tables, storage: Arc::new(storage) })
    }

    /// Take every table for one writer (see [`Table::take`]), or refuse naming what holds one.
    pub(crate) fn take(&self, what: &str) -> PyResult<Vec<TableHeld>> {
        match self {
            EngineTables::One(t) => Ok(vec![t.get().take(what)?]),
            EngineTables::Named { tables, .. } => {
                tables.iter().map(|(_, t)| t.get().take(what)).collect()
            }
        }
    }

    /// The width of the rows the engine moves (the widest table's).
    pub(crate) fn width(&self) -> usize {
        match self {
            EngineTables::One(t) => t.get().store.width(),
            EngineTables::Named { storage, .. } => storage.width(),
        }
    }

    /// The named tables' layout, for the step to split its rows by; `None` for one table.
    pub(crate) fn layout(&self) -> Option<Arc<Tables>> {
        match self {
            EngineTables::One(_) => None,
            EngineTables::Named { storage, .. } => Some(storage.clone()),
        }
    }

    /// `Engine.table`: the one table.
    pub(crate) fn one(&self, py: Python<'_>) -> PyResult<Py<Table>> {
        match self {
            EngineTables::One(t) => Ok(t.clone_ref(py)),
            EngineTables::Named { storage, .. } => Err(crate::errors::OrdoError::new_err(format!(
                "this engine has several tables ({:?}): see Engine.tables",
                storage.names()
            ))),
        }
    }

    /// `Engine.tables`: the named tables as a dict, or `None` for one table.
    pub(crate) fn named<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let EngineTables::Named { tables, .. } = self else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        for (n, t) in tables {
            d.set_item(n, t.clone_ref(py))?;
        }
        Ok(Some(d))
    }

    /// How the engine prints its tables.
    pub(crate) fn describe(&self) -> String {
        let one = |t: &Table| format!("Table(rows={}, width={})", t.store.rows(), t.store.width());
        match self {
            EngineTables::One(t) => one(t.get()),
            EngineTables::Named { tables, .. } => {
                let each: Vec<String> =
                    tables.iter().map(|(n, t)| format!("{n:?}: {}", one(t.get()))).collect();
                format!("{{{}}}", each.join(", "))
            }
        }
    }
}

/// The step's `ids` and `rows` for a batch over named tables: dicts with every table, each
/// table's ids within it and its rows made by `part(its rows of the batch, its columns)` (a view
/// of the rows lent for the call).
pub(crate) fn split_for_step<'py>(
    py: Python<'py>,
    layout: &Tables,
    ids: &[u64],
    mut part: impl FnMut(std::ops::Range<usize>, usize) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let ranges = layout.groups(ids).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let (id_dict, row_dict) = (PyDict::new(py), PyDict::new(py));
    for (k, range) in ranges.into_iter().enumerate() {
        let name = &layout.names()[k];
        let offset = layout.offset(k);
        let local: Vec<u64> = ids[range.clone()].iter().map(|&id| id - offset).collect();
        id_dict.set_item(name, PyArray1::from_vec(py, local))?;
        row_dict.set_item(name, part(range, layout.table(k).width())?)?;
    }
    Ok((id_dict.into_any(), row_dict.into_any()))
}

/// A batch's engine ids from the caller's `ids` (see the module docs), over `layout` (`None`:
/// one table); a name or row id
/// that does not fit the tables is `InvalidBatch`, before the batch enters the pipeline.
pub(crate) fn batch_ids(
    layout: Option<&Tables>,
    batch_id: u64,
    ids: &Bound<'_, PyAny>,
) -> PyResult<Vec<u64>> {
    let Some(storage) = layout else {
        if ids.cast::<PyDict>().is_ok() {
            return Err(PyTypeError::new_err(
                "this engine has one table: a batch's ids are an array, not a dict",
            ));
        }
        return crate::row_ids(ids);
    };
    let Ok(map) = ids.cast::<pyo3::types::PyMapping>() else {
        return Err(PyTypeError::new_err(format!(
            "this engine has tables {:?}: a batch's ids are a dict of table names to ids",
            storage.names()
        )));
    };
    let mut parts: Vec<(String, Vec<u64>)> = Vec::new();
    for item in map.items()?.try_iter()? {
        let (name, rows): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        let name: String = name
            .extract()
            .map_err(|_| PyTypeError::new_err("a batch's table names must be str"))?;
        parts.push((name, crate::row_ids(&rows)?));
    }
    let borrowed: Vec<(&str, &[u64])> =
        parts.iter().map(|(n, r)| (n.as_str(), r.as_slice())).collect();
    let py = ids.py();
    storage.batch_ids(&borrowed).map_err(|e| {
        let err = InvalidBatch::new_err(e.to_string());
        let v = err.value(py);
        let _ = v.setattr("batch_id", batch_id);
        let _ = v.setattr("position", py.None());
        let _ = v.setattr("reason", e.to_string());
        err
    })
}
