//! Dense SGD with Interval-Asynchrony (paper 001) on Fashion-MNIST.
//!
//! - [`idx`]: Fashion-MNIST from IDX files (plain or gzipped), with errors naming the file.
//! - [`net`], [`mlp`], [`cnn`]: the classifiers (MLP 784-h-10 and a LeNet-like CNN) as
//!   [`ordo::sgd::GradientModel`]s, their gradients checked against finite differences.
//! - [`dispatchers`]: Sync / Async / ElAsync / Interval (fixed, decay, probe) from a [`dispatchers::Spec`].
//! - [`train`]: one run over the `ordo::sgd` runtime, evaluated on the test split as it goes.
//! - [`output`]: `--out DIR` (CSV + PNG); [`cli`]: `ordo-train sgd`.
//!
//! The experiments of the paper are the `interval_experiments` binary (BENCHMARKS.md).
//!
//! Two folders are named `sgd`: `core/src/sgd` is the runtime (paper 001's Algorithm 1 and
//! paper 003's ASSM/PASSM), this one the models, data and CLI that run on it. The crate path
//! (`ordo::sgd`, `ordo_train::sgd`) tells them apart.

pub mod cli;
pub mod cnn;
pub mod dispatchers;
pub mod idx;
pub mod mlp;
pub mod net;
pub mod output;
pub mod train;
