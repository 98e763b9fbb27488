//! Reference trainers built on ordo, as libraries; `ordo-train` is their command line.
//!
//! How this crate fits with the others: `docs/ARCHITECTURE.md` in the repository; the terms
//! and the papers it cites: `docs/GLOSSARY.md` and `docs/PAPERS.md`.

#![warn(missing_docs)]

pub mod amp;
pub mod atomic_fs;
pub mod cli;
pub mod cpu_clock;
pub mod kge;
pub mod memory;
pub mod mutation;
pub mod option_error;
pub mod outdir;
pub mod plot;
pub mod pool;
pub mod rng;
pub mod sgd;
pub mod space;
