//! The `kge_hogs` benchmark: bad arguments and a missing dataset stop it before any busy loop
//! starts, and a run prints one row per pair and the medians, then leaves no busy loop behind.
#![cfg(all(target_os = "linux", not(ordo_loom)))]

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kge_hogs");

/// Processes now running this test's `kge_hogs` as a busy loop (`--hog`), from `/proc`.
fn hogs_running() -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    procs
        .filter_map(|p| std::fs::read(p.ok()?.path().join("cmdline")).ok())
        .filter(|cmd| {
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            args.first().is_some_and(|a| *a == BIN.as_bytes()) && args.contains(&&b"--hog"[..])
        })
        .count()
}

#[test]
fn refuses_bad_input_before_any_busy_loop_then_runs_and_stops_its_busy_loops() {
    bad_arguments_and_a_missing_dataset_stop_it_before_any_busy_loop();
    two_pairs_beside_one_busy_loop_print_both_modes_and_leave_no_busy_loop();
}

fn bad_arguments_and_a_missing_dataset_stop_it_before_any_busy_loop() {
    for (args, names) in [
        (&["--pairs", "0"][..], "--pairs"),
        (&["--epochs", "0"][..], "--epochs"),
        (&["--dim", "0"][..], "--dim"),
        (
            &["--dataset", "/nonexistent/ordo-kge-hogs", "--hogs", "1"][..],
            "/nonexistent/ordo-kge-hogs",
        ),
    ] {
        let run = Command::new(BIN).args(args).output().expect("the binary runs");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
        assert!(
            run.stdout.is_empty(),
            "{args:?}: printed {:?}",
            String::from_utf8_lossy(&run.stdout)
        );
    }
    assert_eq!(hogs_running(), 0, "a refused run started a busy loop");
}

/// Two pairs beside one busy loop print both modes' figures; after the run no busy loop is
/// left. (One test: a second one running beside it could count this one's busy loop.)
fn two_pairs_beside_one_busy_loop_print_both_modes_and_leave_no_busy_loop() {
    let run = Command::new(BIN)
        .args(["--dataset", "umls", "--pairs", "2", "--epochs", "1", "--hogs", "1"])
        .args(["--dim", "8", "--batch-size", "256", "--negatives", "8", "--chunk", "8"])
        .output()
        .expect("the binary runs");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stderr}");
    assert!(stdout.contains("2 pairs beside 1 busy loops"), "{stdout}");
    for row in ["| 1 |", "| 2 |", "| median |"] {
        let line =
            stdout.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("{stdout}"));
        // pair, sync and oac triples/s, oac/sync, two CPU times, two core counts.
        let cells: Vec<&str> = line.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 8, "{line}");
        for cell in &cells[1..] {
            let x: f64 = cell.trim_matches('*').parse().unwrap_or_else(|_| panic!("{line}"));
            assert!(x > 0.0 && x.is_finite(), "{line}");
        }
    }
    assert_eq!(hogs_running(), 0, "a busy loop outlived the run");
}
