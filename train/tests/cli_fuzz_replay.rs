//! Replays the fuzz target `cli_validate`'s seed corpus and every input kept in
//! `fuzz/regressions/cli_validate/` (a crash the fuzzer found, saved there once fixed) through
//! its harness, `ordo_train::cli::fuzz_check`: none may panic.
#![cfg(not(ordo_loom))]

use std::path::Path;

#[test]
fn the_saved_cli_fuzz_inputs_neither_panic_nor_stall() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for dir in ["corpus/cli_validate", "regressions/cli_validate"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            let start = std::time::Instant::now();
            ordo_train::cli::fuzz_check(&std::fs::read(&path).unwrap());
            // The fuzzer's limit is 1 s on a release build; a debug build gets 10.
            assert!(
                start.elapsed().as_secs() < 10,
                "{} took {:?}",
                path.display(),
                start.elapsed()
            );
            replayed += 1;
        }
    }
    assert!(replayed >= 8, "the seed corpus is missing: {replayed} inputs");
}
