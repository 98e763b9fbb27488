//! Evaluation: filtered metrics ([`ranking`]), and the same metrics over a table read one part at
//! a time ([`eval_stream`]).
//!
//! May import [`data`](super::data) and [`model`](super::model).

pub mod eval_stream;
pub mod ranking;
