//! A downstream crate of `ordo`, written as an outside trainer would write it: only the public
//! API with default features, no `testing` scaffolding. Its tests (`tests/*.rs`) each exercise
//! one thing such a user needs from the engine, with the user's own storage, model and errors.
//!
//! CI runs them alone, `cargo test -p ordo-downstream-user`, so that feature unification with
//! the rest of the workspace cannot lend them anything a user would not have.
