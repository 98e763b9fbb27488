//! The partition buffer's swap model: its properties hold at the CI bound, each seeded
//! partition mutant breaks the property it names (among them a premature eviction under the
//! pipelined rule), and so does a trainer that swaps without draining under the draining rule.

use ordo::mutation::Mutant;
use ordo_verify::model::{Outcome, Search, check};
use ordo_verify::swap::{EVICT_DRAINED, FILES_CURRENT, READ_LOADED, SWAP_MUTANTS, Swap};

fn violation(model: &Swap) -> String {
    match check(model, Search::default()).unwrap().outcome {
        Outcome::Violated(cex) => format!("{}\n{}", cex.violation, cex.steps.join("\n")),
        Outcome::Proved => panic!("{:?} survives the model", model.mutant),
    }
}

#[test]
fn the_swap_protocol_holds_at_the_ci_bound() {
    let report = check(&Swap::ci(None), Search::default()).unwrap();
    assert_eq!(report.outcome, Outcome::Proved);
    assert!(report.stats.states > 1_000, "explored only {} states", report.stats.states);
    eprintln!("swap model (pipelined): {}", report.stats);
    let report = check(&Swap::ci(None).draining(), Search::default()).unwrap();
    assert_eq!(report.outcome, Outcome::Proved);
    eprintln!("swap model (draining): {}", report.stats);
}

#[test]
fn each_partition_mutant_breaks_the_property_it_names() {
    let want = [
        (Mutant::PartitionEvictWithoutWriteBack, FILES_CURRENT),
        (Mutant::PartitionReadBeforeLoad, READ_LOADED),
        (Mutant::PartitionWriteBackStale, FILES_CURRENT),
        (Mutant::PartitionEvictUnfinished, EVICT_DRAINED),
    ];
    assert_eq!(want.len(), SWAP_MUTANTS.len());
    for (m, property) in want {
        assert!(SWAP_MUTANTS.contains(&m));
        let why = violation(&Swap::ci(Some(m)));
        assert!(why.starts_with(property), "{}: {why}", m.name());
        let cell =
            ordo_verify::suite::check_mutant(&ordo_verify::suite::Bound::CI, m, Search::default());
        assert!(
            matches!(cell, Some(Ok(ref r)) if matches!(r.outcome, Outcome::Violated(_))),
            "the mutation table's model column misses {}",
            m.name()
        );
    }
}

#[test]
fn without_the_drain_a_partition_leaves_under_a_batch_in_flight() {
    let why = violation(&Swap::ci(None).without_drain());
    assert!(why.starts_with(EVICT_DRAINED), "{why}");
}
