//! A run's files: embeddings saved and loaded ([`npy`]), checkpoints written and resumed
//! ([`checkpoint`]), the manifest that ties their files together ([`manifest`]), the CSV and
//! figures ([`plot`]), and time-to-accuracy tables ([`compare`]).
//!
//! May import [`data`](super::data), [`model`](super::model), [`eval`](super::eval) and
//! [`run`](super::run).

pub mod checkpoint;
pub mod compare;
pub mod manifest;
pub mod npy;
pub mod plot;
