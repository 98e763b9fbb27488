//! Dense SGD with Interval-Asynchrony.

pub mod cli;
