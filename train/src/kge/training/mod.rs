//! Training on the engine: the epoch loop in one engine session ([`train`](mod@train)), the
//! sequential replay of recorded orders ([`replay`](mod@replay)), the epochs' evaluation, records
//! and checkpoints both keep (the private `epochs` module), the step they drive (the private
//! `device_step`), the state a run starts from ([`initial_state`]), whether a batch goes through the
//! engine's reader and writer threads or runs inline ([`stage_choice`]), and their error ([`error`]).
//!
//! May import [`data`](super::data), [`model`](super::model), [`eval`](super::eval),
//! [`run`](super::run) and [`io`](super::io).

mod device_step;
mod epochs;
pub mod error;
pub mod initial_state;
pub mod replay;
pub mod stage_choice;
pub mod train;
