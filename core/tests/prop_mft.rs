#![cfg(not(ordo_loom))]
//! proptest state machine: `ordo::mft::Mft` against a sequential model (a set of finished
//! timestamps and the contiguous prefix over it), including duplicate finishes and timestamps
//! that run ahead of the window (backpressure errors, never corruption).

use std::collections::BTreeSet;

use ordo::mft::{Mft, MftError};
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

/// The sequential specification of the MFT.
#[derive(Clone, Debug)]
struct Model {
    capacity: u64,
    /// Every `ts < prefix` has finished.
    prefix: u64,
    /// Finished timestamps `≥ prefix` (out of order).
    finished: BTreeSet<u64>,
    /// What the last transition must have returned.
    expected: Option<Result<u64, MftError>>,
}

#[derive(Clone, Debug)]
enum Transition {
    Finish(u64),
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        (1u64..6)
            .prop_map(|capacity| Model {
                capacity,
                prefix: 0,
                finished: BTreeSet::new(),
                expected: None,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        let (p, cap) = (state.prefix, state.capacity);
        prop_oneof![
            // Mostly timestamps inside the window, so the prefix moves.
            4 => (p..p + cap).prop_map(Transition::Finish),
            // Sometimes duplicates (below the prefix) and timestamps ahead of the window.
            1 => (0..p + 2 * cap + 1).prop_map(Transition::Finish),
        ]
        .boxed()
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        let Transition::Finish(ts) = *transition;
        state.expected = Some(if ts < state.prefix || state.finished.contains(&ts) {
            Err(MftError::AlreadyFinished { ts })
        } else if ts >= state.prefix + state.capacity {
            Err(MftError::AheadOfWindow { ts, prefix: state.prefix, capacity: state.capacity })
        } else {
            state.finished.insert(ts);
            while state.finished.remove(&state.prefix) {
                state.prefix += 1;
            }
            Ok(state.prefix)
        });
        state
    }
}

struct MftTest;

impl StateMachineTest for MftTest {
    type SystemUnderTest = Mft;
    type Reference = Model;

    fn init_test(model: &Model) -> Mft {
        Mft::new(model.capacity as usize)
    }

    fn apply(sut: Mft, model: &Model, transition: Transition) -> Mft {
        let Transition::Finish(ts) = transition;
        assert_eq!(Some(sut.finish(ts)), model.expected, "finish({ts})");
        sut
    }

    fn check_invariants(sut: &Mft, model: &Model) {
        assert_eq!(sut.prefix(), model.prefix);
        assert_eq!(sut.mft(), model.prefix.checked_sub(1));
        assert_eq!(sut.capacity(), model.capacity);
        for ts in model.prefix.saturating_sub(1)..model.prefix + model.capacity + 1 {
            assert_eq!(sut.admits(ts), ts < model.prefix + model.capacity, "admits({ts})");
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn mft_matches_the_sequential_model(sequential 1..40 => MftTest);
}
