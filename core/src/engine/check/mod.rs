//! What checks the engine and is no part of a run (feature `testing`): the deterministic
//! simulation, the model checkers' harness, a CPU device with batches in flight, and the test
//! models and hooks.

pub mod deferred_device;
#[cfg(any(ordo_loom, ordo_shuttle))]
pub mod model_harness;
pub mod simulation;
pub mod testing;
