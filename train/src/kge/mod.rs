//! Knowledge-graph embeddings (link prediction) on the OAC engine.
//!
//! [`data`] loads datasets, [`score`] holds the scoring functions, losses and regularizers,
//! [`init`] the initial embeddings, [`optim`] Adagrad and Adam, [`batch`] cuts batches and
//! draws negatives, [`step`] is the [`ordo::engine::Model`] the engine runs (its products in
//! [`matmul`]), [`eval`] computes
//! filtered metrics, [`eval_stream`] the same metrics over a table read one part at a time.
//!
//! A run: [`config`] holds its hyper-parameters ([`TrainConfig`]) and [`mode`] the trainer's
//! modes ([`Mode`]); [`start`] builds the model and store a run starts from;
//! [`train`](mod@train) is the epoch loop in one engine session ([`train()`],
//! [`train_resumable`]) and [`replay`](mod@replay) steps recorded orders sequentially
//! ([`replay()`]); both keep their epochs' evaluation, records and
//! checkpoints in one bookkeeping (the private `epochs` module), step through the private
//! `stepper`, tell their observer
//! [`Event`]s ([`event`]) and answer a [`RunResult`] ([`results`]) or a [`TrainError`]
//! ([`error`]); [`measure`] evaluates a run's embeddings.
//!
//! Around it: [`npy`] saves and loads embeddings, [`checkpoint`] writes and resumes
//! checkpoints, [`manifest`] ties their files together, [`plot`] writes the CSV and figures,
//! [`compare`] tabulates time-to-accuracy, [`gpu`] runs the step on a CUDA GPU
//! (`--device cuda`), [`partitioned`] trains with the entity table in a partition buffer on
//! disk (`--storage`), [`pm`] trains with the parameters in AdaPM (`--pm`, its own asynchronous
//! regime, not the engine), [`cli`] is `ordo-train kge`.

pub mod batch;
pub mod checkpoint;
pub mod cli;
pub mod compare;
pub mod config;
pub mod data;
mod epochs;
pub mod error;
pub mod eval;
pub mod eval_stream;
pub mod event;
pub mod gpu;
pub mod init;
pub mod manifest;
pub mod matmul;
pub mod measure;
pub mod mode;
pub mod npy;
pub mod optim;
pub mod partitioned;
pub mod plot;
pub mod pm;
pub mod replay;
pub mod results;
pub mod score;
pub mod stages;
pub mod start;
pub mod step;
pub mod step_threads;
mod stepper;
pub mod synth;
pub mod train;
pub mod two_way;
pub mod vocab;

pub use config::TrainConfig;
pub use error::TrainError;
pub use event::Event;
pub use measure::{metrics, metrics_of_embeddings};
pub use mode::Mode;
pub use replay::replay;
pub use results::{EpochStats, RunResult};
pub use train::{Resumable, Tune, train, train_resumable};
