//! Knowledge-graph embeddings (link prediction) on the OAC engine.
//!
//! [`data`] loads datasets, [`score`] holds the scoring functions, losses and regularizers,
//! [`init`] the initial embeddings, [`optim`] Adagrad and Adam, [`batch`] cuts batches and
//! draws negatives, [`step`] is the [`ordo::engine::Model`] the engine runs, [`eval`] computes
//! filtered metrics, [`train`] is the epoch loop over the engine's modes, [`npy`] saves and loads
//! embeddings, [`checkpoint`] writes and resumes checkpoints, [`manifest`] ties their files together, [`plot`] writes the CSV and figures, [`compare`] tabulates time-to-accuracy,
//! [`gpu`] runs the step on a CUDA GPU (`--device cuda`), [`pm`] trains with the parameters in
//! AdaPM (`--pm`, its own asynchronous regime, not the engine), [`cli`] is `ordo-train kge`.

pub mod batch;
pub mod checkpoint;
pub mod cli;
pub mod compare;
pub mod data;
pub mod eval;
pub mod gpu;
pub mod init;
pub mod manifest;
pub mod npy;
pub mod optim;
pub mod plot;
pub mod pm;
pub mod score;
pub mod step;
pub mod synth;
pub mod train;
pub mod vocab;
