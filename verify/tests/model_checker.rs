//! The models on stateright prove the correct protocols at the CI bound, finds a shortest,
//! printable counterexample for every non-equivalent protocol mutant, and none for the
//! equivalent one.

use std::collections::HashMap;

use ordo::mutation::Mutant;
use ordo_verify::interval::{Interval, IntervalConfigError, Variant};
use ordo_verify::model::{CheckError, Counterexample, Outcome, Search, TransitionSystem, check};
use ordo_verify::mutants::{self, Checker, Options, Verdict};
use ordo_verify::oac::{OAC_MUTANTS, Oac, OacConfigError, Properties, SteAt};
use ordo_verify::suite::{Bound, check_correct, check_mutant, protocol_mutants};

fn violated(outcome: Outcome) -> Counterexample {
    match outcome {
        Outcome::Violated(c) => c,
        Outcome::Proved => panic!("expected a counterexample"),
    }
}

#[test]
fn correct_protocols_are_proved_at_the_ci_bound() {
    let runs = check_correct(&Bound::CI, Search::default()).unwrap();
    assert_eq!(runs.len(), 5);
    // The partition buffer's swap model is small (a sequential trainer): see swap_model.rs.
    assert_eq!(runs[4].report.outcome, Outcome::Proved, "{}", runs[4].name);
    for run in &runs[..4] {
        assert_eq!(run.report.outcome, Outcome::Proved, "{}", run.name);
        // The search really explored interleavings, merging those that meet again.
        assert!(run.report.stats.states > 50_000, "{}: {}", run.name, run.report.stats);
        assert!(run.report.stats.generated > run.report.stats.states, "{}", run.name);
    }
    // The reachable spaces at the CI bound. The hand-written breadth-first search that this
    // port replaced (commit a436daa, `ordo-verify check`) visited the same 354,201 dispatcher
    // states, and the same OAC spaces (501,569 and 538,081) while the model's device took
    // batches in arrival order; in submission order, as the engine's device since dbd0ca5,
    // the readers can no longer reorder the device's batches, and far fewer states remain.
    let states: Vec<usize> = runs.iter().map(|r| r.report.stats.states).collect();
    assert_eq!(states[..3], [72_757, 83_199, 354_201]);
    // Symmetry reduction (the dispatcher's workers) visits fewer states than the plain search.
    assert!(runs[3].report.stats.states < runs[2].report.stats.states);
}

/// Multi-threaded checking explores the same reachable spaces as the single-threaded search
/// (above).
#[test]
fn two_checker_threads_explore_the_same_states() {
    let search = Search { threads: 2, ..Search::default() };
    let oac = Bound::CI.oac(None).unwrap();
    let device = check(&oac.clone().with_ste_at(SteAt::Device), search).unwrap();
    let announce = check(&oac.with_ste_at(SteAt::Announce), search).unwrap();
    let interval = check(&Bound::CI.interval(Variant::SingleWord, None).unwrap(), search).unwrap();
    assert_eq!(device.stats.states, 72_757);
    assert_eq!(announce.stats.states, 83_199);
    assert_eq!(interval.stats.states, 354_201);
    assert_eq!(device.outcome, Outcome::Proved);
}

#[test]
fn every_non_equivalent_mutant_has_a_counterexample_at_the_ci_bound() {
    let protocol = protocol_mutants();
    // 14 protocol mutants plus partition-evict-unfinished (the swap model's pipelined rule).
    assert_eq!(protocol.len(), 15);
    for m in protocol {
        assert!(Mutant::ALL.contains(&m), "{} is not in the catalog", m.name());
        let report = check_mutant(&Bound::CI, m, Search::default()).unwrap().unwrap();
        match (m.equivalent_because(), report.outcome) {
            (None, Outcome::Violated(cex)) => assert!(!cex.steps.is_empty(), "{}", m.name()),
            (None, Outcome::Proved) => panic!("mutant {} survived the model checker", m.name()),
            (Some(_), Outcome::Proved) => {}
            (Some(_), Outcome::Violated(cex)) => {
                panic!("equivalent mutant {} has a counterexample:\n{cex}", m.name())
            }
        }
    }
}

#[test]
fn the_published_dispatcher_is_broken_and_the_single_word_one_is_not() {
    let published = Interval::new(2, 4, 1, true, Variant::Published, None).unwrap();
    let cex = violated(check(&published, Search::default()).unwrap().outcome);
    assert!(cex.violation.contains("crosses an interval boundary"), "{cex}");
    let fixed = Interval::new(2, 4, 1, true, Variant::SingleWord, None).unwrap();
    assert_eq!(check(&fixed, Search::default()).unwrap().outcome, Outcome::Proved);
}

/// The end-to-end property alone (the final store equals the sequential run in device order and
/// in submission order) kills every non-equivalent OAC mutant but the MFT's own: the per-step
/// properties only shorten those traces. Since the device takes batches in submission order, an
/// MFT that passes an unfinished batch (`mft-counts-finishes`; `mft-before-writes-visible` with
/// the paper's STE) leaves no wrong final store at this bound: only the MFT invariant sees it.
#[test]
fn the_final_state_property_alone_kills_every_oac_mutant_but_the_mft_ones() {
    let only_final = Properties { validation: false, mft: false };
    let final_and_mft = Properties { validation: false, mft: true };
    for m in OAC_MUTANTS.into_iter().filter(|m| m.equivalent_because().is_none()) {
        for at in [SteAt::Device, SteAt::Announce] {
            let model = |props| {
                Oac::standard(4, 3, Some(m)).unwrap().with_properties(props).with_ste_at(at)
            };
            let outcome = check(&model(only_final), Search::default()).unwrap().outcome;
            let mft_only = m == Mutant::MftCountsFinishes
                || (m == Mutant::MftBeforeWritesVisible && at == SteAt::Announce);
            let cex = if mft_only {
                assert_eq!(outcome, Outcome::Proved, "{} {at:?}", m.name());
                violated(check(&model(final_and_mft), Search::default()).unwrap().outcome)
            } else {
                violated(outcome)
            };
            let expected = if mft_only { "MFT = " } else { "final store row" };
            assert!(cex.violation.starts_with(expected), "{} {at:?}: {}", m.name(), cex.violation);
        }
    }
    let correct = Oac::standard(4, 3, None).unwrap().with_properties(only_final);
    assert_eq!(check(&correct, Search::default()).unwrap().outcome, Outcome::Proved);
}

/// Independent depth-bounded search: is any property violated within `depth` steps?
/// (Memoises the smallest depth at which each state was reached, so it is exhaustive.)
fn violation_within<T: TransitionSystem>(sys: &T, depth: usize) -> bool {
    fn go<T: TransitionSystem>(
        sys: &T,
        s: &T::State,
        d: usize,
        left: usize,
        best: &mut HashMap<T::State, usize>,
    ) -> bool {
        if sys.invariant(s).is_err() {
            return true;
        }
        let mut acts = Vec::new();
        sys.actions(s, &mut acts);
        if acts.is_empty() {
            return sys.final_check(s).is_err();
        }
        if left == 0 {
            return false;
        }
        for a in &acts {
            match sys.apply(s, a) {
                Err(_) => return true,
                Ok(n) => {
                    if best.get(&n).is_some_and(|&b| b <= d + 1) {
                        continue;
                    }
                    best.insert(n.clone(), d + 1);
                    if go(sys, &n, d + 1, left - 1, best) {
                        return true;
                    }
                }
            }
        }
        false
    }
    let init = sys.initial();
    go(sys, &init, 0, depth, &mut HashMap::new())
}

/// Trace length `L` counts the failing step itself when the violation fires during a step, so
/// the violation is reachable within `L` steps (of which the last may be the failing one) and
/// not within `L − 1`.
fn assert_shortest<T: TransitionSystem>(sys: &T, name: &str) {
    let cex = violated(check(sys, Search::default()).unwrap().outcome);
    let len = cex.steps.len();
    assert!(violation_within(sys, len), "{name}: no violation within {len} steps?");
    assert!(
        !violation_within(sys, len - 1),
        "{name}: a violation within {} steps exists: BFS trace not minimal",
        len - 1
    );
}

#[test]
fn counterexamples_are_shortest() {
    for m in OAC_MUTANTS.into_iter().filter(|m| m.equivalent_because().is_none()) {
        assert_shortest(&Oac::standard(3, 2, Some(m)).unwrap(), m.name());
    }
    assert_shortest(&Interval::new(2, 4, 1, true, Variant::Published, None).unwrap(), "published");
    assert_shortest(
        &Interval::new(2, 4, 2, true, Variant::SingleWord, Some(Mutant::AcceptEarlierInterval))
            .unwrap(),
        "accept-earlier-interval",
    );
}

#[test]
fn counterexamples_print_one_numbered_line_per_actor_step() {
    let cex = violated(
        check_mutant(&Bound::CI, Mutant::ReadBeforeAnnounce, Search::default())
            .unwrap()
            .unwrap()
            .outcome,
    );
    let text = cex.to_string();
    assert!(text.starts_with(&format!("counterexample ({} steps):", cex.steps.len())), "{text}");
    assert!(text.contains("    1. reader: batch 0 reads row"), "{text}");
    assert!(text.contains("device: batch"), "{text}");
    assert!(text.contains("writer: batch"), "{text}");
    assert!(text.contains("  violation: batch"), "{text}");
    assert_eq!(text.lines().count(), cex.steps.len() + 2);

    let cex = violated(
        check_mutant(&Bound::CI, Mutant::PublishedAbaDispatcher, Search::default())
            .unwrap()
            .unwrap()
            .outcome,
    );
    let text = cex.to_string();
    assert!(text.contains("line 26 CAS(I_done"), "{text}");
    assert!(text.contains("→ ACCEPTED"), "{text}");
}

#[test]
fn bad_configurations_are_typed_errors() {
    assert_eq!(
        Oac::new(vec![vec![0, 3]], 3, 2, 2, None).unwrap_err(),
        OacConfigError::BadRowSet { batch: 0, rows: 3 }
    );
    assert_eq!(
        Oac::new(vec![vec![1, 1]], 3, 2, 2, None).unwrap_err(),
        OacConfigError::BadRowSet { batch: 0, rows: 3 }
    );
    assert_eq!(Oac::new(vec![], 3, 2, 2, None).unwrap_err(), OacConfigError::Batches(0));
    assert_eq!(Oac::new(vec![vec![0]], 1, 0, 2, None).unwrap_err(), OacConfigError::NoThreads);
    assert_eq!(
        Oac::new(vec![vec![0]], 1, 1, 1, Some(Mutant::AcceptEarlierInterval)).unwrap_err(),
        OacConfigError::NotOacMutant("accept-earlier-interval")
    );
    assert_eq!(
        Interval::new(2, 4, 0, true, Variant::SingleWord, None).unwrap_err(),
        IntervalConfigError::Interval(0)
    );
    assert_eq!(
        Interval::new(2, 4, 1, true, Variant::SingleWord, Some(Mutant::WriteIgnoresTs))
            .unwrap_err(),
        IntervalConfigError::NotIntervalMutant("write-ignores-ts")
    );
    let big = Oac::standard(4, 3, None).unwrap();
    assert_eq!(
        check(&big, Search { max_states: 100, ..Search::default() }).unwrap_err(),
        CheckError::StateLimit(100)
    );
}

/// The mutation runner with the model checker and a checker whose test files are missing:
/// the model kills every non-equivalent mutant, the missing checker is "n.a.", not a pass.
#[test]
fn mutation_table_marks_missing_checkers_not_applicable() {
    let root = std::env::temp_dir().join(format!("ordo-verify-empty-root-{}", std::process::id()));
    std::fs::create_dir_all(root.join("core/tests")).unwrap();
    let opts = Options {
        root: root.clone(),
        checkers: vec![Checker::Model, Checker::Proptest],
        bound: Bound {
            batches: 4,
            rows: 3,
            readers: 2,
            writers: 2,
            workers: 2,
            steps: 5,
            y0: 2,
            sets: None,
        },
        fuzz_seconds: 1,
        timeout: std::time::Duration::from_secs(60),
        target_dir: root.join("target"),
        jobs: 2,
        // The mutants no catalog demands a proptest kill of (the partition mutants' is: with
        // the proptest files missing, their table fails, as it should).
        mutants: protocol_mutants()
            .iter()
            .filter_map(|m| mutants::row(m.name()))
            .filter(|r| !r.entry.killed_by.contains(&Checker::Proptest))
            .collect(),
    };
    let live = opts.mutants.iter().filter(|r| r.entry.equivalent.is_none()).count();
    assert!(live >= 9, "{live} rows");
    let table = mutants::run(&opts, &mutants::Quiet);
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(table.kill_rate(), (live, live));
    assert_eq!(table.baseline[0], Verdict::Survived);
    assert!(matches!(table.baseline[1], Verdict::NotApplicable(_)));
    for (m, row) in &table.rows {
        assert!(matches!(row[1], Verdict::NotApplicable(_)), "{}", m.entry.name);
        assert_eq!(
            matches!(row[0], Verdict::Killed(_)),
            m.entry.equivalent.is_none(),
            "{}",
            m.entry.name
        );
    }
    assert!(table.passes(true) && table.passes(false));
    // A survivor fails both criteria; a failing baseline fails them too.
    let mut bad = table.clone();
    bad.rows[0].1[0] = Verdict::Survived;
    assert!(!bad.passes(true) && !bad.passes(false));
    let mut bad = table.clone();
    bad.baseline[0] = Verdict::Killed("baseline fails".into());
    assert!(!bad.passes(true) && !bad.passes(false));
    // A catalog's `killed_by` is a demand: ordo-pm's mutants must fall to its proptest too.
    let pm = mutants::row("pm-stale-owner-no-forward").unwrap();
    assert_eq!(pm.entry.killed_by, &[Checker::Model, Checker::Proptest]);
    let mut bad = table.clone();
    bad.rows.push((pm, vec![Verdict::Killed("model".into()), Verdict::Survived]));
    assert!(!bad.passes(true) && !bad.passes(false));
    assert_eq!(bad.missed_demands(), vec![("pm-stale-owner-no-forward", Checker::Proptest)]);
    bad.rows.last_mut().unwrap().1[1] = Verdict::Killed("proptest".into());
    assert!(bad.passes(true) && bad.passes(false));
    let text = table.render();
    assert!(
        text.contains(&format!("Kill rate over non-equivalent mutants: {live}/{live}")),
        "{text}"
    );
}
