//! `ordo._ordo`: the Python extension behind the `ordo` package (see `ordo/__init__.py`).
//!
//! A Python step runs inside the OAC engine ([`ordo::engine::Engine::start`]): the readers and
//! writers are Rust threads that never take the interpreter lock; the device thread takes it
//! only to call the step. The modules bind one concept each:
//!
//! * `table`: `ordo.Table`, a row store (parameters and per-row optimizer state).
//! * `tables`: an engine's one table or several named ones, and a batch's ids over them.
//! * `step`: the Python step as an [`ordo::engine::Model`], with its rows lent as numpy.
//! * `session`: `ordo.Engine` and `ordo.Session`, the owned session Python holds across calls.
//! * `replay`: the sequential replay of a recorded order.
//! * `errors`: the engine's typed errors as Python exceptions.
//! * `device`: `device=` and `rows=`, checked at construction (CUDA's checks and memory estimate).
//! * `lent`: the step's rows lent through DLPack (`rows="torch"`, `rows="dlpack"`).
//! * `kge`: the CLI's datasets and filtered evaluator on numpy arrays.

// `EngineError` comes back at most once per run or epoch and is turned into a Python exception
// at once; its size costs nothing that matters (as in ordo itself).
#![allow(clippy::result_large_err)]

mod device;
mod errors;
mod kge;
mod lent;
mod replay;
mod session;
mod step;
mod table;
mod tables;

use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Row ids as the engine takes them (unique, in the order the step sees its rows): from a
/// one-dimensional numpy array of any integer dtype (any layout or byte order) or any sequence
/// of ints. A negative id, or one of 2**64 or more, is a `ValueError`; a sequence of
/// non-integers (floats, bools of numpy, strings) or an array of more dimensions than one is a
/// `TypeError` or a `ValueError`. Ranges and duplicates are the engine's to check
/// (`InvalidBatch`).
pub(crate) fn row_ids(ids: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    use pyo3::exceptions::{PyTypeError, PyValueError};
    if let Ok(a) = ids.cast::<PyArray1<u64>>() {
        return Ok(a
            .readonly()
            .as_slice()
            .map(<[u64]>::to_vec)
            .unwrap_or_else(|_| a.to_vec().unwrap_or_default()));
    }
    if let Ok(a) = ids.cast::<PyArray1<i64>>() {
        let v = a.to_vec()?;
        return v
            .into_iter()
            .map(|x| {
                u64::try_from(x)
                    .map_err(|_| PyValueError::new_err(format!("row id {x} is negative")))
            })
            .collect();
    }
    if let Ok(a) = ids.cast::<numpy::PyUntypedArray>() {
        if a.ndim() != 1 {
            return Err(PyValueError::new_err("row ids must be one-dimensional"));
        }
        // Any other integer dtype (narrower, or not in the machine's byte order) as one of the
        // two above; an array of Python objects as the sequence it is; anything else is not a
        // row id.
        let wide = match a.dtype().kind() {
            b'u' => Some("uint64"),
            b'i' => Some("int64"),
            b'O' => None,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "row ids must be integers, got an array of {}",
                    a.dtype()
                )));
            }
        };
        if let Some(wide) = wide {
            return row_ids(&a.call_method1("astype", (wide,))?);
        }
    }
    let mut v = Vec::new();
    for item in ids.try_iter()? {
        let item = item?;
        v.push(item.extract::<u64>().map_err(|e| match item.extract::<i128>() {
            Ok(x) if x < 0 => PyValueError::new_err(format!("row id {x} is negative")),
            Ok(x) => PyValueError::new_err(format!("row id {x} does not fit in 64 bits")),
            Err(_) if item.is_instance_of::<pyo3::types::PyInt>() => {
                PyValueError::new_err(format!("row id {item} does not fit in 64 bits"))
            }
            Err(_) => e,
        })?);
    }
    Ok(v)
}

/// Sorted, de-duplicated row ids as a `uint64` array: a batch's ids from any list of ids.
#[pyfunction]
fn unique_rows<'py>(
    py: Python<'py>,
    ids: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let mut v = row_ids(ids)?;
    v.sort_unstable();
    v.dedup();
    Ok(PyArray1::from_vec(py, v))
}

/// `ordo._ordo._device_memory(mode, depth, batch_rows, width, free)`: the device memory a CUDA
/// engine's buffers need, in bytes, or the `OrdoError` it gets when they do not fit in `free`
/// bytes; a pure function of its arguments, for the tests.
#[pyfunction]
#[pyo3(name = "_device_memory")]
fn device_memory(
    mode: &str,
    depth: usize,
    batch_rows: usize,
    width: usize,
    free: u64,
) -> PyResult<u64> {
    let mode = session::parse_mode(mode, None)?;
    device::check_device_memory(mode, depth, batch_rows, width, free)
}

#[pymodule]
fn _ordo(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<table::Table>()?;
    m.add_class::<session::Engine>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::Report>()?;
    m.add_function(wrap_pyfunction!(unique_rows, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add_class::<lent::LentRows>()?;
    m.add_function(wrap_pyfunction!(lent::stream_order, m)?)?;
    m.add_function(wrap_pyfunction!(device_memory, m)?)?;
    m.add("BUILT_WITH_CUDA", device::BUILT_WITH_CUDA)?;
    errors::register(m)?;
    kge::register(m)?;
    Ok(())
}
