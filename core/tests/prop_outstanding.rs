#![cfg(not(ordo_loom))]
//! proptest state machine: `ordo::outstanding::Outstanding` (with its `Mft`) against a sequential
//! model. Sequentially every registration acquires the current finished prefix, a full set is an
//! error, and the STE is the minimum of the finished prefix and every live registration's prefix.

use std::collections::BTreeSet;

use ordo::mft::Mft;
use ordo::outstanding::{Outstanding, OutstandingError, Registration};
use proptest::prelude::*;
use proptest::sample::select;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const MFT_CAPACITY: u64 = 4;

#[derive(Clone, Debug)]
struct Model {
    slots: usize,
    prefix: u64,
    finished: BTreeSet<u64>,
    /// Prefixes of the live registrations, in registration order.
    live: Vec<u64>,
    expected: Expected,
}

#[derive(Clone, Debug, PartialEq)]
enum Expected {
    Nothing,
    Register(Result<u64, OutstandingError>),
    Ste(u64),
}

#[derive(Clone, Debug)]
enum Transition {
    /// Finish an unfinished timestamp inside the MFT's window.
    Finish(u64),
    Register,
    /// Deregister the live registration at this index (modulo the number live).
    Deregister(usize),
    Ste,
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        (1usize..4)
            .prop_map(|slots| Model {
                slots,
                prefix: 0,
                finished: BTreeSet::new(),
                live: Vec::new(),
                expected: Expected::Nothing,
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        let open: Vec<u64> = (state.prefix..state.prefix + MFT_CAPACITY)
            .filter(|ts| !state.finished.contains(ts))
            .collect();
        prop_oneof![
            2 => select(open).prop_map(Transition::Finish),
            2 => Just(Transition::Register),
            2 => any::<usize>().prop_map(Transition::Deregister),
            2 => Just(Transition::Ste),
        ]
        .boxed()
    }

    fn preconditions(state: &Model, transition: &Transition) -> bool {
        match transition {
            Transition::Finish(ts) => {
                *ts >= state.prefix
                    && *ts < state.prefix + MFT_CAPACITY
                    && !state.finished.contains(ts)
            }
            Transition::Deregister(_) => !state.live.is_empty(),
            _ => true,
        }
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.expected = match *transition {
            Transition::Finish(ts) => {
                state.finished.insert(ts);
                while state.finished.remove(&state.prefix) {
                    state.prefix += 1;
                }
                Expected::Nothing
            }
            Transition::Register => {
                if state.live.len() == state.slots {
                    Expected::Register(Err(OutstandingError::Full { capacity: state.slots }))
                } else {
                    state.live.push(state.prefix);
                    Expected::Register(Ok(state.prefix))
                }
            }
            Transition::Deregister(i) => {
                let len = state.live.len();
                state.live.remove(i % len);
                Expected::Nothing
            }
            Transition::Ste => {
                Expected::Ste(state.live.iter().copied().fold(state.prefix, u64::min))
            }
        };
        state
    }
}

struct System {
    mft: Mft,
    out: Outstanding,
    live: Vec<Registration>,
}

struct OutstandingTest;

impl StateMachineTest for OutstandingTest {
    type SystemUnderTest = System;
    type Reference = Model;

    fn init_test(model: &Model) -> System {
        System {
            mft: Mft::new(MFT_CAPACITY as usize),
            out: Outstanding::new(model.slots),
            live: Vec::new(),
        }
    }

    fn apply(mut sut: System, model: &Model, transition: Transition) -> System {
        match transition {
            Transition::Finish(ts) => {
                sut.mft.finish(ts).expect("the model only finishes open timestamps");
            }
            Transition::Register => {
                let got = sut.out.register(&sut.mft);
                assert_eq!(
                    Expected::Register(got.as_ref().map(|r| r.prefix()).map_err(|e| *e)),
                    model.expected
                );
                if let Ok(reg) = got {
                    sut.live.push(reg);
                }
            }
            Transition::Deregister(i) => {
                let len = sut.live.len();
                let reg = sut.live.remove(i % len);
                sut.out.deregister(reg);
            }
            Transition::Ste => {
                assert_eq!(Expected::Ste(sut.out.ste(&sut.mft)), model.expected);
            }
        }
        sut
    }

    fn check_invariants(sut: &System, model: &Model) {
        assert_eq!(sut.mft.prefix(), model.prefix);
        assert_eq!(sut.out.in_flight(), model.live.len());
        assert_eq!(sut.out.capacity(), model.slots);
        let live: Vec<u64> = sut.live.iter().map(Registration::prefix).collect();
        assert_eq!(live, model.live);
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn outstanding_matches_the_sequential_model(sequential 1..40 => OutstandingTest);
}
