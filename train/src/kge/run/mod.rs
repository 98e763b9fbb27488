//! What a run is and what it answers: its hyper-parameters ([`config`]), the trainer's modes
//! ([`mode`]), the events it tells its observer ([`event`]), its results ([`results`]), and the
//! metrics of its embeddings as its configuration evaluates them ([`measure`]).
//!
//! May import [`data`](super::data), [`model`](super::model) and [`eval`](super::eval).

pub mod config;
pub mod event;
pub mod measure;
pub mod mode;
pub mod results;
