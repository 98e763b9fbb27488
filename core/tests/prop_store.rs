#![cfg(not(ordo_loom))]
//! proptest checks of `ordo::row_store::RowStore`:
//! * a state machine against a sequential model (per row: version and values), with bad rows,
//!   bad widths and oversized timestamps, which must be errors that change nothing, and the
//!   Hogwild view, which shares the values and ignores versions;
//! * random concurrent writers (plus a reader checking for torn rows): the final state of each row
//!   is the write with the largest ts.

use ordo::row_store::{RowStore, StoreError, Version};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

#[derive(Clone, Debug)]
struct Row {
    version: Version,
    values: Vec<f32>,
}

#[derive(Clone, Debug)]
struct Model {
    width: usize,
    rows: Vec<Row>,
    expected: Expected,
}

#[derive(Clone, Debug, PartialEq)]
enum Expected {
    Nothing,
    Write(Result<bool, StoreError>),
    Read(Result<(Version, Vec<f32>), StoreError>),
    Hogwild(Result<(), StoreError>),
}

#[derive(Clone, Debug)]
enum Transition {
    Write { row: u64, ts: u64, values: Vec<f32> },
    Read { row: u64, len: usize },
    HogwildWrite { row: u64, values: Vec<f32> },
}

/// Small integers as floats: exact, never NaN, so equality is meaningful.
fn floats(len: usize) -> impl Strategy<Value = Vec<f32>> {
    vec((-50i32..50).prop_map(|x| x as f32), len)
}

impl Model {
    fn check(&self, row: u64, len: usize) -> Result<usize, StoreError> {
        if row >= self.rows.len() as u64 {
            Err(StoreError::RowOutOfRange { row, rows: self.rows.len() })
        } else if len != self.width {
            Err(StoreError::DimMismatch { expected: self.width, got: len })
        } else {
            Ok(row as usize)
        }
    }
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        (1usize..4, 1usize..4)
            .prop_flat_map(|(rows, width)| {
                vec(floats(width), rows).prop_map(move |init| Model {
                    width,
                    rows: init
                        .into_iter()
                        .map(|values| Row { version: Version::Initial, values })
                        .collect(),
                    expected: Expected::Nothing,
                })
            })
            .boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        let (rows, width) = (state.rows.len() as u64, state.width);
        // Mostly valid rows and widths; sometimes one past the end or one float off.
        let row = prop_oneof![6 => 0..rows, 1 => rows..rows + 2];
        let len = prop_oneof![6 => Just(width), 1 => Just(width + 1), 1 => Just(width - 1)];
        let ts = prop_oneof![8 => 0u64..12, 1 => Just(u64::MAX), 1 => Just((1 << 63) - 2)];
        prop_oneof![
            4 => (row.clone(), ts, len.clone())
                .prop_flat_map(|(row, ts, len)| floats(len)
                    .prop_map(move |values| Transition::Write { row, ts, values })),
            3 => (row.clone(), len.clone()).prop_map(|(row, len)| Transition::Read { row, len }),
            1 => (row, len).prop_flat_map(|(row, len)| floats(len)
                    .prop_map(move |values| Transition::HogwildWrite { row, values })),
        ]
        .boxed()
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.expected = match transition {
            Transition::Write { row, ts, values } => {
                Expected::Write(state.check(*row, values.len()).and_then(|r| {
                    if *ts >= (1 << 63) - 1 {
                        return Err(StoreError::TimestampTooLarge { ts: *ts });
                    }
                    let newer = match state.rows[r].version {
                        Version::Initial => true,
                        Version::Written(old) => *ts > old,
                    };
                    if newer {
                        state.rows[r] =
                            Row { version: Version::Written(*ts), values: values.clone() };
                    }
                    Ok(newer)
                }))
            }
            Transition::Read { row, len } => Expected::Read(
                state
                    .check(*row, *len)
                    .map(|r| (state.rows[r].version, state.rows[r].values.clone())),
            ),
            Transition::HogwildWrite { row, values } => {
                Expected::Hogwild(state.check(*row, values.len()).map(|r| {
                    state.rows[r].values = values.clone();
                }))
            }
        };
        state
    }
}

struct StoreTest;

impl StateMachineTest for StoreTest {
    type SystemUnderTest = RowStore;
    type Reference = Model;

    fn init_test(model: &Model) -> RowStore {
        let flat: Vec<f32> = model.rows.iter().flat_map(|r| r.values.iter().copied()).collect();
        RowStore::from_values(model.rows.len(), model.width, &flat).unwrap()
    }

    fn apply(sut: RowStore, model: &Model, transition: Transition) -> RowStore {
        let got = match transition {
            Transition::Write { row, ts, values } => {
                Expected::Write(sut.write_if_newer(row, ts, &values))
            }
            Transition::Read { row, len } => {
                let mut out = vec![f32::NAN; len];
                Expected::Read(sut.read(row, &mut out).map(|v| (v, out)))
            }
            Transition::HogwildWrite { row, values } => {
                Expected::Hogwild(sut.hogwild().write(row, &values))
            }
        };
        assert_eq!(got, model.expected);
        sut
    }

    fn check_invariants(sut: &RowStore, model: &Model) {
        let flat: Vec<f32> = model.rows.iter().flat_map(|r| r.values.iter().copied()).collect();
        assert_eq!(sut.snapshot(), flat);
        let versions: Vec<Version> = model.rows.iter().map(|r| r.version).collect();
        assert_eq!(sut.versions(), versions);
        let mut out = vec![0.0; model.width];
        for (r, row) in model.rows.iter().enumerate() {
            assert_eq!(sut.version(r as u64), Ok(row.version));
            sut.hogwild().read(r as u64, &mut out).unwrap();
            assert_eq!(out, row.values);
        }
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn store_matches_the_sequential_model(sequential 1..40 => StoreTest);
}

const ROWS: u64 = 3;
const WIDTH: usize = 8;

/// The values batch `ts` writes to `row`: one function of (row, ts), so every float of a read row
/// tells which write it came from, and two writes of the same ts are the same write.
fn values_of(row: u64, ts: u64) -> [f32; WIDTH] {
    std::array::from_fn(|c| (row * 1000 + ts * 10 + c as u64) as f32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random concurrent writers (each a random sequence of (row, ts) writes) and one reader
    /// racing them: the reader never sees a torn row, and at rest every row holds the write with
    /// the largest ts sent to it (or its initial zeros).
    #[test]
    fn concurrent_writers_leave_the_newest_write_per_row(
        writers in vec(vec((0..ROWS, 0u64..40), 1..30), 2..4)
    ) {
        let store = RowStore::zeros(ROWS as usize, WIDTH);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut out = [0.0; WIDTH];
                // Relaxed: only a stop signal; the reads check themselves.
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for row in 0..ROWS {
                        let expected = match store.read(row, &mut out).unwrap() {
                            Version::Initial => [0.0; WIDTH],
                            Version::Written(ts) => values_of(row, ts),
                        };
                        assert_eq!(out, expected, "torn read of row {}", row);
                    }
                }
            });
            let handles: Vec<_> = writers
                .iter()
                .map(|writes| {
                    let store = &store;
                    s.spawn(move || {
                        for &(row, ts) in writes {
                            store.write_if_newer(row, ts, &values_of(row, ts)).unwrap();
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            reader.join().unwrap();
        });
        for row in 0..ROWS {
            let newest = writers.iter().flatten().filter(|(r, _)| *r == row).map(|(_, ts)| *ts).max();
            let mut out = [0.0; WIDTH];
            let version = store.read(row, &mut out).unwrap();
            prop_assert_eq!(version.ts(), newest, "row {}", row);
            let expected = newest.map_or([0.0; WIDTH], |ts| values_of(row, ts));
            prop_assert_eq!(out, expected, "row {}", row);
        }
    }
}
