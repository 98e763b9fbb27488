//! The mutation catalog of `ordo-pm`: AdaPM's seeded protocol bugs, with the test files that
//! must kill them (see `ordo::mutation` for the mechanism and `ordo-verify mutants` for the
//! table). The hooks are in [`crate::node`]; `pm/tests/model_node.rs` (stateright over the
//! shipped [`crate::Node`]) and `pm/tests/prop_conservation.rs` must each kill every one.

ordo::mutation_catalog! {
    package: "ordo-pm", dir: "pm", feature: "mutants",
    suites: [Model => "pm/tests/model_*.rs", Proptest => "pm/tests/prop_*.rs"],
    /// AdaPM (`ordo-pm`): the owner relocates a key to one intent holder while another node
    /// also holds active intent, which breaks *relocation only with a single intent holder*.
    PmRelocateWithTwoHolders = "pm-relocate-with-two-holders", killed_by: [Model, Proptest];
    /// AdaPM: on relocation the new owner discards its replica's unflushed delta (pushes that
    /// arrived while the relocation was in flight), which breaks *conservation*.
    PmRelocateDropsReplicaDelta = "pm-relocate-drops-replica-delta", killed_by: [Model, Proptest];
    /// AdaPM: a replica whose last intent expires is dropped without sending its delta, which
    /// breaks *no replica outlives its intents without flushing its delta*.
    PmReplicaExpiresUnflushed = "pm-replica-expires-unflushed", killed_by: [Model, Proptest];
    /// AdaPM: a stale owner (which relocated the key away) takes a routed request as delivered
    /// instead of forwarding it, which breaks *conservation* and *routing terminates at the owner*.
    PmStaleOwnerNoForward = "pm-stale-owner-no-forward", killed_by: [Model, Proptest];
}
