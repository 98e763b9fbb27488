//! Feeds arbitrary command lines, config files, datasets and amp graph files to `ordo-train`'s
//! parsing and validation (`ordo_train::cli::fuzz_check`), which must accept or refuse each
//! without a panic, an abort or a stall, and never start training. `train/tests/cli_fuzz_replay.rs`
//! replays the inputs saved in `fuzz/regressions/cli_validate/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ordo_train::cli::fuzz_check(data));
