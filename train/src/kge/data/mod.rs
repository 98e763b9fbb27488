//! The data a run trains on: datasets ([`dataset`]), their vocabularies ([`vocab`]), batches
//! and their negatives ([`batch`]), and synthetic graphs ([`synth`]).
//!
//! Imports no other room of [`crate::kge`].

pub mod batch;
pub mod dataset;
pub mod synth;
pub mod vocab;
