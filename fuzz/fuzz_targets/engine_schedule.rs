//! Feeds `arbitrary` pipelines, batch sets and schedules to the engine's deterministic simulation
//! and compares the result with the sequential replay of the recorded order (the harness is
//! `ordo::engine::simulation::fuzz_check`, so `core/tests/prop_engine.rs` replays saved inputs
//! from `fuzz/regressions/engine_schedule/`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ordo::engine::simulation::fuzz_check(data));
