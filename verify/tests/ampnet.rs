//! The AMPNet protocol model: holds at the CI bound and kills each seeded AMPNet mutant on the
//! property that mutant breaks.

use ordo_mp::mutation::Mutant;
use ordo_verify::ampnet::{AMPNET_MUTANTS, Ampnet, MAK_BOUND, MIN_UPDATE_INTERVAL, ONE_BACKWARD};
use stateright::{Checker, Model};

#[test]
fn correct_protocol_holds() {
    let c = Ampnet::ci(None).checker().spawn_bfs().join();
    c.assert_properties();
    assert!(c.unique_state_count() > 100, "explored only {} states", c.unique_state_count());
    eprintln!("ampnet model: {} states", c.unique_state_count());
}

#[test]
fn mak_one_and_update_every_gradient_hold_too() {
    let m = Ampnet { instances: 3, max_active_keys: 1, min_update_interval: 1, mutant: None };
    m.checker().spawn_bfs().join().assert_properties();
}

#[test]
fn each_mutant_is_killed_on_its_property() {
    let want = [
        (Mutant::AmpMakOffByOne, MAK_BOUND),
        (Mutant::AmpPhiForgetsOrigin, ONE_BACKWARD),
        (Mutant::AmpUpdateBeforeInterval, MIN_UPDATE_INTERVAL),
    ];
    assert_eq!(want.len(), AMPNET_MUTANTS.len());
    for (m, property) in want {
        assert!(AMPNET_MUTANTS.contains(&m));
        let model = Ampnet::ci(Some(m));
        assert!(
            model.violated(property),
            "{} survives: no counterexample to {property:?}",
            m.name()
        );
        assert!(model.fails());
    }
    assert!(!Ampnet::ci(None).fails());
}
