//! The AdaPM protocol model (verify/src/adapm.rs), exhausted with stateright: every `always`
//! property holds and every `sometimes` one is reached; each `pm-*` mutant breaks its property.

use ordo_verify::adapm::{AdaPmModel, MUTANTS};
use stateright::{Checker, Model};

#[test]
fn adapm_model_exhausts_with_all_properties() {
    let checker = AdaPmModel::new(3, 1, None).checker().spawn_bfs().join();
    assert!(checker.is_done());
    checker.assert_properties();
    println!("adapm model: {} unique states", checker.unique_state_count());
    assert!(checker.unique_state_count() > 10_000);
}

#[test]
fn adapm_model_kills_every_pm_mutant() {
    for (mutant, property) in MUTANTS {
        let checker = AdaPmModel::new(3, 1, Some(mutant)).checker().spawn_bfs().join();
        assert!(
            checker.discovery(property).is_some(),
            "{} survived: no counterexample to {property}",
            mutant.name()
        );
    }
}
