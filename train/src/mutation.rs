//! The mutation catalog of `ordo-train`: the trainers' seeded bugs, with the test files that must
//! kill them (see `ordo::mutation` for the mechanism and `ordo-verify mutants` for the table).

ordo::mutation_catalog! {
    package: "ordo-train", dir: "train", feature: "mutants",
    suites: [Proptest => "train/tests/bf16_*.rs"],
    /// `--precision bf16` (`kge::model::bf16_rounding`): the stochastic rounding is keyed by a
    /// per-thread counter instead of the write's version (the batch), so how a row rounds
    /// depends on which thread rounded it and what it rounded before: OAC no longer equals the
    /// synchronous replay, nor a replay itself.
    Bf16RoundingKeyedByThread = "bf16-rounding-keyed-by-thread", killed_by: [Proptest];
}
