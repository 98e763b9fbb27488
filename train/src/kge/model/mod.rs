//! The model: the step the engine runs ([`step`], its products in [`matmul`]), the scoring
//! functions, losses and regularizers ([`score`]; the softmax's exps in [`softmax_exp`]), the
//! initial embeddings ([`init`]), Adagrad and Adam ([`optim`]), the rows' number format
//! ([`precision`]; bf16's stochastic rounding in [`bf16_rounding`]), how many threads a step runs on
//! ([`step_threads`], its two-way chooser in [`way_choice`]), and the same step on a CUDA GPU
//! ([`gpu`]; where a step runs: [`device`]).
//!
//! May import [`data`](super::data).

pub mod bf16_rounding;
pub mod device;
pub mod gpu;
pub mod init;
pub mod matmul;
pub mod optim;
pub mod precision;
pub mod score;
pub mod softmax_exp;
pub mod step;
pub mod step_threads;
pub mod way_choice;
