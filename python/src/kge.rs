//! `ordo.kge`'s native part: the knowledge-graph datasets and the filtered evaluator of the
//! `ordo-train` CLI, on numpy arrays.

use crate::errors::OrdoError;
use clap::ValueEnum;
use numpy::{IntoPyArray, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use ordo_train::kge::backends::partitioned::{self, PartitionedRun, StoredEntities};
use ordo_train::kge::data::dataset::{Dataset, Triple};
use ordo_train::kge::eval::eval_stream::EntityParts;
use ordo_train::kge::eval::ranking::{Filter, Metrics, evaluate as filtered};
use ordo_train::kge::io::npy;
use ordo_train::kge::job::{OneRun, Options, exit_code, save_partitioned};
use ordo_train::kge::model::score::ScoreFn;
use ordo_train::kge::run::config::TrainConfig;
use ordo_train::kge::run::event::Event;
use ordo_train::kge::run::results::{EpochStats, RunResult};
use ordo_train::kge::training::train::train_resumable;
use ordo_train::outdir::Held;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often `kge_train` takes the interpreter lock back to check for signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

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
    metrics_dict(py, &m)
}

fn metrics_dict<'py>(py: Python<'py>, m: &Metrics) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("mrr", m.mrr)?;
    out.set_item("hits1", m.hits1)?;
    out.set_item("hits3", m.hits3)?;
    out.set_item("hits10", m.hits10)?;
    out.set_item("queries", m.queries)?;
    Ok(out)
}

/// A finished `ordo.kge.train` run: the trained tables, the history, the test metrics and
/// the computation order, with what `save` needs to write the CLI's layout.
#[pyclass(module = "ordo.kge", frozen)]
pub(crate) struct KgeRun {
    dataset: Dataset,
    config: TrainConfig,
    trained: Trained,
}

/// What a run trained: a table in memory, or (with `storage`) a partition buffer.
enum Trained {
    Table(RunResult),
    Parts {
        run: Box<PartitionedRun>,
        mode: &'static str,
        /// Per epoch trained by this call.
        history: Vec<Epoch>,
    },
}

/// One entry of `Run.history`.
struct Epoch {
    epoch: usize,
    /// `None` in a partitioned run (it does not sum its loss).
    loss: Option<f64>,
    valid_mrr: Option<f64>,
    wall_s: f64,
    epoch_s: f64,
}

impl Epoch {
    fn of(e: &EpochStats, has_valid: bool) -> Epoch {
        let valid_mrr = has_valid.then_some(e.valid.mrr);
        Epoch {
            epoch: e.epoch,
            loss: Some(e.loss),
            valid_mrr,
            wall_s: e.wall_s,
            epoch_s: e.epoch_s,
        }
    }
}

#[pymethods]
impl KgeRun {
    /// Entity embeddings, `entities x dim` float32 (without the optimizer state); a
    /// partitioned run's are read from its storage, one partition at a time.
    #[getter]
    fn entities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let dim = self.config.dim;
        let table = match &self.trained {
            Trained::Table(r) => r.entity_embeddings(dim),
            Trained::Parts { run, .. } => {
                let parts = StoredEntities { storage: &run.storage, dim };
                let mut table = Vec::with_capacity(parts.entities() * dim);
                for k in 0..parts.parts() {
                    table.extend(parts.part(k).map_err(|e| OrdoError::new_err(e.to_string()))?.1);
                }
                table
            }
        };
        numpy::PyArray1::from_vec(py, table).reshape([self.dataset.entities.len(), dim])
    }

    /// Relation embeddings, `rows x relation_dim` float32.
    #[getter]
    fn relations<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let (table, rdim) = match &self.trained {
            Trained::Table(r) => (r.relations.clone(), r.relation_dim),
            Trained::Parts { run, .. } => {
                (run.model.relations().to_vec(), self.config.step_config().relation_dim())
            }
        };
        let rdim = rdim.max(1);
        let rows = table.len() / rdim;
        numpy::PyArray1::from_vec(py, table).reshape([rows, rdim])
    }

    /// Per epoch: a dict of `epoch`, `loss` (None in a partitioned run), `valid_mrr` (None
    /// without a validation split), `wall_s` (since the run started) and `epoch_s`.
    #[getter]
    fn history<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        match &self.trained {
            Trained::Table(r) => {
                let has_valid = !self.dataset.valid.is_empty();
                r.epochs.iter().map(|e| epoch_dict(py, &Epoch::of(e, has_valid))).collect()
            }
            Trained::Parts { history, .. } => history.iter().map(|e| epoch_dict(py, e)).collect(),
        }
    }

    /// Filtered test metrics: `mrr`, `hits1`, `hits3`, `hits10`, `queries`.
    #[getter]
    fn test<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        match &self.trained {
            Trained::Table(r) => metrics_dict(py, &r.test),
            Trained::Parts { run, .. } => metrics_dict(py, &run.test),
        }
    }

    /// The computation order, one `uint64` array of batch ids per epoch (in a partitioned
    /// run, per epoch trained by this call).
    #[getter]
    fn order<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, numpy::PyArray1<u64>>> {
        let orders = match &self.trained {
            Trained::Table(r) => &r.order,
            Trained::Parts { run, .. } => &run.orders,
        };
        orders.iter().map(|o| numpy::PyArray1::from_slice(py, o)).collect()
    }

    /// The mode's name.
    #[getter]
    fn mode(&self) -> &'static str {
        match &self.trained {
            Trained::Table(r) => r.mode.name(),
            Trained::Parts { mode, .. } => mode,
        }
    }

    /// Save in the CLI's layout (`entities.npy`, `relations.npy`, names, manifest), as `--save`
    /// does: the directory locked for the write (a concurrent run is refused, naming it), the
    /// files staged in a temporary directory and moved into place whole (a partitioned run's
    /// streamed from its storage). Bad input (a directory that is no save, or held by another
    /// run) is a `ValueError`; a failed write, a full disk among them (naming the path and the
    /// bytes it needs), an `OrdoError`, and the previous save is left whole.
    fn save(&self, py: Python<'_>, dir: std::path::PathBuf) -> PyResult<()> {
        py.detach(|| {
            let saved = (|| -> Result<(), Box<dyn std::error::Error>> {
                let mut held = Held::default();
                held.hold(&dir, false)?;
                match &self.trained {
                    Trained::Table(r) => npy::save(&dir, &self.dataset, &self.config, r)?,
                    Trained::Parts { run, .. } => {
                        save_partitioned(&dir, &self.dataset, &self.config, run)?
                    }
                }
                Ok(())
            })();
            saved.map_err(|e| described(&*e))
        })
        .map_err(cli_error)
    }
}

fn epoch_dict<'py>(py: Python<'py>, e: &Epoch) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("epoch", e.epoch)?;
    out.set_item("loss", e.loss)?;
    out.set_item("valid_mrr", e.valid_mrr)?;
    out.set_item("wall_s", e.wall_s)?;
    out.set_item("epoch_s", e.epoch_s)?;
    Ok(out)
}

/// An error of the run layer as the CLI's exit status and message (made without the interpreter
/// lock; its errors need not be `Send`).
fn described(e: &(dyn std::error::Error + 'static)) -> (u8, String) {
    (exit_code(e), e.to_string())
}

/// The Python exception of a [`described`] error: bad input (the CLI's exit status 2) is a
/// `ValueError`, any other failure an `OrdoError`.
fn cli_error((code, message): (u8, String)) -> PyErr {
    match code {
        2 => PyValueError::new_err(message),
        _ => OrdoError::new_err(message),
    }
}

/// `flags` (without the program and `kge`) parsed as `ordo-train kge FLAGS` parses them, then
/// checked for one run in one process ([`OneRun::new`]).
fn plan_run(flags: Vec<String>) -> Result<OneRun, Box<dyn std::error::Error>> {
    #[derive(clap::Parser)]
    #[command(name = "kge")]
    struct Flags {
        #[command(flatten)]
        opts: Options,
    }
    let argv = std::iter::once("kge".to_string()).chain(flags);
    OneRun::new(<Flags as clap::Parser>::try_parse_from(argv)?.opts)
}

/// Train as `ordo-train kge FLAGS` does, for one mode: `flags` are the CLI's (parsed into the
/// run layer's [`Options`], so a misspelt option is clap's error, a `ValueError`, and checked by
/// [`OneRun::new`]), and its output directories (`--save`, `--checkpoint`, `--resume`, `--out`)
/// are locked, checked and written by the run layer ([`OneRun::prepare`] before training,
/// [`Prepared::finish`](ordo_train::kge::job::Prepared::finish) after). Bad input is a
/// `ValueError` (the CLI's exit status 2), any other failure an `OrdoError`.
///
/// The run trains on a thread of its own while this thread waits without the interpreter lock,
/// checking for signals every [`SIGNAL_POLL`]: on Ctrl-C the run is stopped (no batch submitted
/// after, the pipeline's written, its threads joined, the epoch neither ended nor checkpointed,
/// nothing saved) and `KeyboardInterrupt` propagates. `on_event`, if given, is called with
/// `("epoch_start", epoch, batches)`, `("batches", n)` and `("epoch_end", history_entry)`; its
/// first exception stops the run the same way and is raised.
#[pyfunction]
#[pyo3(signature = (flags, on_event = None))]
fn kge_train(py: Python<'_>, flags: Vec<String>, on_event: Option<Py<PyAny>>) -> PyResult<KgeRun> {
    // Every error of the plan is one of the options (clap's, a configuration file's, a range).
    let plan = plan_run(flags).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let dataset = py
        .detach(|| Dataset::load(&plan.dataset))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if plan.partitions.is_some() {
        return train_parts(py, plan, dataset, on_event);
    }
    let mut prepared =
        py.detach(|| plan.prepare(&dataset).map_err(|e| described(&*e))).map_err(cli_error)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut resumable = std::mem::take(&mut prepared.resumable);
    resumable.stop = Some(stop.clone());
    let has_valid = !dataset.valid.is_empty();
    // The first exception of the callback; it stops the run.
    let mut raised: Option<PyErr> = None;
    let mut observe = |event: Event<'_>| {
        let Some(f) = &on_event else { return };
        if raised.is_some() {
            return;
        }
        let called = Python::attach(|py| -> PyResult<()> {
            match event {
                Event::EpochStart { epoch, batches } => {
                    f.call1(py, ("epoch_start", epoch, batches))?
                }
                Event::Batches(n) => f.call1(py, ("batches", n))?,
                Event::EpochEnd(stats) => {
                    f.call1(py, ("epoch_end", epoch_dict(py, &Epoch::of(stats, has_valid))?))?
                }
                // An event this binding does not know yet is not passed on.
                _ => return Ok(()),
            };
            Ok(())
        });
        if let Err(e) = called {
            raised = Some(e);
            // Release: pairs with the Acquire of the training loop; only the flag is read.
            stop.store(true, Ordering::Release);
        }
    };
    let (config, mode) = (&plan.config, plan.mode);
    let mut interrupted: Option<PyErr> = None;
    let result = std::thread::scope(|scope| {
        let worker =
            scope.spawn(|| train_resumable(&dataset, config, mode, resumable, &mut observe, None));
        loop {
            py.detach(|| {
                let until = Instant::now() + SIGNAL_POLL;
                while !worker.is_finished() && Instant::now() < until {
                    std::thread::sleep(SIGNAL_POLL / 10);
                }
            });
            if worker.is_finished() {
                break;
            }
            if interrupted.is_none()
                && let Err(e) = py.check_signals()
            {
                interrupted = Some(e);
                // Release: as above.
                stop.store(true, Ordering::Release);
            }
        }
        // The worker has finished: joining does not wait.
        worker.join()
    });
    if let Some(e) = interrupted.or(raised) {
        return Err(e);
    }
    let result = match result {
        Ok(r) => r.map_err(|e| cli_error(described(&e)))?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    py.detach(|| prepared.finish(&dataset, &plan.config, &result).map_err(|e| described(&*e)))
        .map_err(cli_error)?;
    Ok(KgeRun { dataset, config: plan.config, trained: Trained::Table(result) })
}

/// `kge_train` of a `--storage` run: checked, trained and saved by the run layer's
/// [`OneRun::prepare_parts`] and [`PreparedParts`](ordo_train::kge::job::PreparedParts), as
/// `ordo-train kge --storage` does, without the interpreter lock. `on_event` is called with
/// `("epoch_end", history_entry)` after each epoch; its first exception is raised once the run
/// has ended (a partitioned run is not stopped early: a disk run killed or stopped resumes from
/// its folder's last epoch).
fn train_parts(
    py: Python<'_>,
    plan: OneRun,
    dataset: Dataset,
    on_event: Option<Py<PyAny>>,
) -> PyResult<KgeRun> {
    let prepared = py
        .detach(|| plan.prepare_parts(&dataset).map_err(|e| described(&*e)))
        .map_err(cli_error)?;
    let has_valid = !dataset.valid.is_empty();
    let (mut history, mut wall_s, mut raised) = (Vec::new(), 0.0, None::<PyErr>);
    let mut observe = |e: partitioned::Event| {
        let partitioned::Event::Epoch { epoch, seconds, valid, .. } = e else { return };
        wall_s += seconds;
        let valid_mrr = valid.filter(|_| has_valid).map(|m| m.mrr);
        let entry = Epoch { epoch, loss: None, valid_mrr, wall_s, epoch_s: seconds };
        if let (Some(f), None) = (&on_event, &raised) {
            let called = Python::attach(|py| -> PyResult<()> {
                f.call1(py, ("epoch_end", epoch_dict(py, &entry)?))?;
                Ok(())
            });
            raised = called.err();
        }
        history.push(entry);
    };
    let (config, mode) = (&plan.config, plan.mode);
    let run = py
        .detach(|| {
            let run = prepared.train(&dataset, config, mode, &mut observe);
            let run = run.and_then(|run| prepared.finish(&dataset, config, &run).map(|()| run));
            run.map_err(|e| described(&*e))
        })
        .map_err(cli_error);
    if let Some(e) = raised {
        return Err(e);
    }
    let trained = Trained::Parts { run: Box::new(run?), mode: mode.name(), history };
    Ok(KgeRun { dataset, config: plan.config, trained })
}

/// A float32 table handed to Python.
type Table<'py> = Bound<'py, PyArray2<f32>>;

/// Load embeddings saved by `--save` (or `Run.save`) in `dir`, checked against the dataset
/// `dataset` (its names and the manifest's checksums): `(entities, relations)` float32.
#[pyfunction]
fn kge_load<'py>(
    py: Python<'py>,
    dir: std::path::PathBuf,
    dataset: &str,
) -> PyResult<(Table<'py>, Table<'py>)> {
    let d =
        py.detach(|| Dataset::load(dataset)).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let saved =
        py.detach(|| npy::load(&dir, &d)).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((saved.entities.into_array().into_pyarray(py), saved.relations.into_pyarray(py)))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KgeRun>()?;
    m.add_function(wrap_pyfunction!(load_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(kge_train, m)?)?;
    m.add_function(wrap_pyfunction!(kge_load, m)?)?;
    Ok(())
}
