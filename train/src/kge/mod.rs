//! Knowledge-graph embeddings (link prediction) on the OAC engine.
//!
//! The trainer lives in rooms, each importing only the rooms listed before it:
//!
//! - [`data`]: datasets ([`data::dataset`]), their vocabularies, batches and negatives, and
//!   synthetic graphs.
//! - [`model`]: the step the engine runs ([`model::step`], its products in [`model::matmul`]),
//!   the scoring functions, losses and regularizers ([`model::score`]), the initial embeddings,
//!   Adagrad and Adam, how many threads a step runs on, and the same step on a CUDA GPU
//!   ([`model::gpu`], `--device cuda`).
//! - [`eval`]: filtered metrics ([`eval::ranking`]), and the same metrics over a table read one
//!   part at a time ([`eval::eval_stream`]).
//! - [`run`]: what a run is and answers: its hyper-parameters ([`TrainConfig`]), the trainer's
//!   modes ([`TrainMode`]), the [`Event`]s it tells its observer, its [`RunResult`], and the metrics of
//!   its embeddings ([`run::measure`]).
//! - [`io`]: embeddings saved and loaded ([`io::npy`]), checkpoints ([`io::checkpoint`]) and the
//!   manifest that ties their files together, the CSV and figures ([`io::plot`]), and
//!   time-to-accuracy tables ([`io::compare`]).
//! - [`training`]: the epoch loop in one engine session ([`train()`], [`train_resumable`]), the
//!   sequential replay of recorded orders ([`replay()`]), the bookkeeping both share, the state
//!   a run starts from, whether a batch runs inline or through the pipeline, and
//!   [`TrainError`].
//! - [`backends`]: training with the entity table in a partition buffer on disk
//!   ([`backends::partitioned`], `--storage`) and with the parameters in AdaPM
//!   ([`backends::pm`], `--pm`, its own asynchronous regime, not the engine).
//! - [`job`]: the run layer, the top room: a [`job::Job`] (the options, checked) and
//!   [`job::run`], which does it; what the command line, the Python package and the benches
//!   call.
//! - [`cli`] is `ordo-train kge`: clap's parsing, then [`job::run`].

pub mod backends;
pub mod cli;
pub mod data;
pub mod eval;
pub mod io;
pub mod job;
pub mod model;
pub mod run;
pub mod training;

pub use run::config::TrainConfig;
pub use run::event::Event;
pub use run::measure::{metrics, metrics_of_embeddings};
pub use run::mode::TrainMode;
pub use run::results::{EpochStats, RunResult};
pub use training::error::TrainError;
pub use training::replay::replay;
pub use training::train::{Resumable, Tune, train, train_resumable};
