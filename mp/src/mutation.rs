//! The mutation catalog of `ordo-mp`: AMPNet's seeded bugs, with the test files that must kill
//! them (see `ordo::mutation` for the mechanism and `ordo-verify mutants` for the table). The
//! hooks are in [`crate::controller`], [`crate::nodes`] and [`crate::accumulate`]; ordo-verify's
//! AMPNet model and ordo-mp's equivalence, gradient and replay tests must each kill every one.

ordo::mutation_catalog! {
    package: "ordo-mp", dir: "mp", feature: "mutants",
    suites: [Proptest => "mp/tests/*.rs"],
    /// The AMPNet controller pumps while `active <= max_active_keys` instead of `<`: one instance
    /// more than the bound is in flight, which breaks *in-flight instances never exceed mak*.
    AmpMakOffByOne = "amp-mak-off-by-one", killed_by: [Model, Proptest];
    /// The AMPNet `Phi` join sends a backward message to the input its *latest* forward came from
    /// instead of the origin recorded for the message's state, which breaks *every forward gets
    /// exactly one backward, on the edge it came from*.
    AmpPhiForgetsOrigin = "amp-phi-forgets-origin", killed_by: [Model, Proptest];
    /// An AMPNet parameterized node asks for its update one gradient before
    /// `min_update_interval` gradients have accumulated.
    AmpUpdateBeforeInterval = "amp-update-before-interval", killed_by: [Model, Proptest];
}
