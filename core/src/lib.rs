//! # ordo — asynchronous training with the exact result of synchronous training
//!
//! The crate holds the lock-free primitives of Optimistic Asynchrony Control (OAC, paper 000)
//! and Interval-Asynchrony (paper 001), and the pipeline engine that composes them.
//!
//! Every primitive states its invariant in the doc comment of the type that keeps it.

#![warn(missing_docs)]

pub mod dispatcher;
pub mod engine;
pub mod mft;
pub mod mutation;
pub mod outstanding;
pub mod sgd;
pub mod storage;
pub mod store;
pub mod sync;
pub mod validation_cache;
