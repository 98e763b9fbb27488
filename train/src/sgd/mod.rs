//! Dense SGD with Interval-Asynchrony (paper 001) on Fashion-MNIST.

pub mod cli;
pub mod cnn;
pub mod dispatchers;
pub mod idx;
pub mod mlp;
pub mod net;
pub mod output;
pub mod train;
