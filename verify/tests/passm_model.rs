//! The PASSM+ block-ownership model: one writer per block holds at the CI bound, the seeded
//! mutant `passm-writes-foreign-block` breaks it, and so does removing the phase gate.

use ordo::mutation::Mutant;
use ordo_verify::passm::{ALL_DONE, ONE_WRITER, Passm};
use stateright::{Checker, HasDiscoveries, Model};

#[test]
fn one_writer_per_block_holds_and_every_worker_finishes() {
    let c = Passm::ci(None).checker().spawn_bfs().join();
    c.assert_properties();
    assert!(c.discovery(ALL_DONE).is_some(), "no run finishes");
    assert!(c.unique_state_count() > 1_000, "explored only {} states", c.unique_state_count());
    eprintln!("passm model: {} states", c.unique_state_count());
}

#[test]
fn writing_foreign_blocks_is_killed() {
    let model = Passm::ci(Some(Mutant::PassmWritesForeignBlock));
    let c = model.clone().checker().finish_when(HasDiscoveries::AnyFailures).spawn_bfs().join();
    let path = c.discovery(ONE_WRITER).expect("passm-writes-foreign-block survives the model");
    let path = ordo_verify::model::shortest(&model, ONE_WRITER, path);
    let last = path.last_state();
    assert!(last.writers.iter().any(|&n| n > 1), "{last:?}");
    // Two workers enter PASSM and both begin writing block 0.
    assert_eq!(path.clone().into_actions().len(), 4, "{:?}", path.into_actions());
}

#[test]
fn without_the_phase_gate_an_assm_writer_meets_the_passm_owner() {
    let c = Passm::ci(None).without_gate().checker().spawn_bfs().join();
    assert!(c.discovery(ONE_WRITER).is_some(), "the gate is not needed?");
}

#[test]
fn the_mutation_table_model_column_kills_it() {
    let why = ordo_verify::suite::check_stateright_mutant(Mutant::PassmWritesForeignBlock.name());
    assert!(matches!(why, Some(Some(ref w)) if w.contains(ONE_WRITER)), "{why:?}");
}
