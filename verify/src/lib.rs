//! ordo-verify: checkers of ordo's protocols.
//!
//! - [`model`]: the OAC and interval models as stateright models (BFS/DFS, symmetry, threads).
//! - [`explore`]: stateright's Explorer web UI on a model (`ordo-verify explore`).
//! - [`oac`]: the OAC protocol (readers, device, writers) as a transition system.
//! - [`interval`]: the interval dispatcher (Interval-Asynchrony, Algorithm 2) as one.
//! - [`passm`]: PASSM+ block ownership (one writer per block) as a stateright model.
//! - [`ampnet`]: AMPNet's controller and joins as a stateright model.
//! - [`swap`]: the partition buffer's protocol at a swap (drain, FIFO I/O, write-back).
//! - [`mutants`]: the mutation table: every crate's catalog run against every checker.
//! - [`suite`]: the models at a bound (the CI bound), as the `check` command runs them.
//!
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod ampnet;
pub mod explore;
pub mod interval;
pub mod model;
pub mod mutants;
pub mod oac;
pub mod passm;
pub mod suite;
pub mod swap;
