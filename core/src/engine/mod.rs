//! The OAC pipeline engine (paper 000): parallel readers, one device stage that fixes the
//! computation order, parallel writers; modes Sync, Async, Bounded(k) and Oac behind one API.

pub mod model;

pub use model::{Batch, BatchRows, Model, StepError};
