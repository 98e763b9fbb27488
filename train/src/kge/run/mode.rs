//! The trainer's modes: how batches go through the engine's pipeline, and the engine mode
//! each runs as.

use ordo::engine;

/// How batches go through the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainMode {
    /// One batch in flight: the reference.
    Sync,
    /// Hogwild: no validation; lost updates possible.
    Async,
    /// Async with a staleness bound (`--staleness`), as in Marius.
    Bounded,
    /// Optimistic Asynchrony Control: async throughput, equal to a synchronous order.
    Oac,
}

impl TrainMode {
    /// All modes, in the order `compare` runs them.
    pub const ALL: [TrainMode; 4] =
        [TrainMode::Sync, TrainMode::Async, TrainMode::Bounded, TrainMode::Oac];

    /// The lower-case name used on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            TrainMode::Sync => "sync",
            TrainMode::Async => "async",
            TrainMode::Bounded => "bounded",
            TrainMode::Oac => "oac",
        }
    }
}

impl TrainMode {
    /// The engine mode this runs as (`Bounded` with the staleness bound `staleness`, the
    /// configuration's `staleness`, at least 1; `Async` adds each step's delta to the store like
    /// Marius' and DGL-KE's `+=`).
    pub fn engine_mode(self, staleness: usize) -> engine::Mode {
        match self {
            TrainMode::Sync => engine::Mode::Sync,
            TrainMode::Async => engine::Mode::Async(engine::AsyncWrite::AddDelta),
            TrainMode::Bounded => engine::Mode::Bounded(staleness.max(1)),
            TrainMode::Oac => engine::Mode::Oac,
        }
    }
}
