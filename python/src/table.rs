//! `ordo.Table`: one row store. A row is a parameter (an embedding) followed by its per-row
//! optimizer state, so the state travels with the row and the equivalence covers it.

use numpy::{PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use ordo::row_store::RowStore;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A table of `rows` rows of `width` float32 values, shared by the engine's threads.
#[pyclass(module = "ordo", frozen)]
pub struct Table {
    pub(crate) store: Arc<RowStore>,
    /// Set while a session or a replay writes the table: a second one is refused (two writers
    /// stamping one table would interleave their versions and neither result would hold).
    pub(crate) in_use: Arc<AtomicBool>,
}

impl Table {
    /// Take the table for one writer, or refuse naming what holds it.
    pub(crate) fn take(&self, what: &str) -> PyResult<TableHeld> {
        // Acquire/Release: the holder's writes to the store happen before the next holder's.
        self.in_use
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| TableHeld(self.in_use.clone()))
            .map_err(|_| {
                crate::errors::OrdoError::new_err(format!(
                    "the table already has a session (or a replay) writing it: close that one before {what}"
                ))
            })
    }
}

/// A table taken by [`Table::take`], given back when dropped.
pub(crate) struct TableHeld(Arc<AtomicBool>);

impl Drop for TableHeld {
    fn drop(&mut self) {
        // Release: pairs with the Acquire of the next `take`.
        self.0.store(false, Ordering::Release);
    }
}

#[pymethods]
impl Table {
    #[new]
    #[pyo3(signature = (rows, width, init = None))]
    fn new(rows: usize, width: usize, init: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        if rows == 0 || width == 0 {
            return Err(PyValueError::new_err(format!(
                "a table needs rows and width >= 1, got {rows} x {width}"
            )));
        }
        let store = match init {
            None => RowStore::try_from_fn(rows, width, |_, _| 0.0),
            Some(v) => {
                // A float, not an array of one element (that must be rows x width too).
                let array = v.cast::<numpy::PyUntypedArray>().is_ok();
                if let (false, Ok(c)) = (array, v.extract::<f32>()) {
                    RowStore::try_from_fn(rows, width, |_, _| c)
                } else {
                    let a: PyReadonlyArrayDyn<'_, f32> = v.extract().map_err(|_| {
                        PyValueError::new_err(
                            "init must be None, a float, or a float32 array of rows x width",
                        )
                    })?;
                    // The shape itself, not only the count: a transposed array is a mistake.
                    if a.shape() != [rows, width] {
                        return Err(PyValueError::new_err(format!(
                            "init is an array of shape {:?}, the table is {rows} x {width}",
                            a.shape()
                        )));
                    }
                    let values = a.as_array().iter().copied().collect::<Vec<f32>>();
                    RowStore::from_values(rows, width, &values)
                }
            }
        }
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Table { store: Arc::new(store), in_use: Arc::default() })
    }

    /// Rows.
    #[getter]
    fn rows(&self) -> usize {
        self.store.rows()
    }

    /// Floats per row.
    #[getter]
    fn width(&self) -> usize {
        self.store.width()
    }

    /// A copy of the table as a `rows x width` float32 array.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let (rows, width) = (self.store.rows(), self.store.width());
        let values = py.detach(|| self.store.snapshot());
        numpy::PyArray1::from_vec(py, values).reshape([rows, width])
    }

    fn __repr__(&self) -> String {
        format!("Table(rows={}, width={})", self.store.rows(), self.store.width())
    }
}
