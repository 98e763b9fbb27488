//! `gpu/run-gpu-checks.sh` cannot pass without running the GPU tests: its test step hands each
//! GPU test binary `--ignored` and `ORDO_REQUIRE_GPU=1` and passes it only when the harness
//! reports exactly the number of tests the pack listed, none failed and it exited 0. Checked
//! here with fake test binaries (shell scripts printing a libtest summary), by sourcing the
//! script and calling its `run_test_binary`; and `run` refuses an incomplete pack before any
//! GPU step. Needs bash (no GPU).
#![cfg(not(ordo_loom))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("run-gpu-checks.sh")
}

/// A fresh directory under the system's temp dir.
fn fresh_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: only uniqueness of the number matters, nothing is published through it.
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir =
        std::env::temp_dir().join(format!("ordo-gpu-checks-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run the script's `run_test_binary` on a fake test binary that prints `summary` and exits with
/// `status` (or 3 when it was not given `--ignored` and `ORDO_REQUIRE_GPU=1`), with `expected`
/// tests listed for it. Returns whether the script counted the binary as passed.
fn counted(summary: &str, status: i32, expected: usize) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("count");
    let (pack, out) = (dir.join("pack"), dir.join("out"));
    std::fs::create_dir_all(pack.join("tests")).unwrap();
    std::fs::create_dir_all(out.join("tests")).unwrap();
    let fake = pack.join("tests/fake");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\n[ \"$ORDO_REQUIRE_GPU\" = 1 ] && [ \"$1\" = --ignored ] || exit 3\n\
             echo 'running {expected} tests'\ncat <<'EOF'\n{summary}\nEOF\nexit {status}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = Command::new("bash")
        .arg("-c")
        .arg(r#"source "$1" && run_test_binary "$2" "$3" fake "$4" && [ ${#FAILED[@]} -eq 0 ]"#)
        .arg("bash")
        .args([script(), pack, out])
        .arg(expected.to_string())
        .output()
        .expect("bash runs");
    std::fs::remove_dir_all(&dir).unwrap();
    run.status.success()
}

fn ok(n: usize) -> String {
    format!("test result: ok. {n} passed; 0 failed; 0 ignored; 0 measured; 2 filtered out")
}

#[test]
fn a_test_binary_passes_only_with_every_listed_gpu_test_run_and_passed() {
    assert!(counted(&ok(3), 0, 3), "all three listed tests passed");
    assert!(!counted(&ok(0), 0, 3), "none ran (e.g. run without --ignored)");
    assert!(!counted(&ok(2), 0, 3), "fewer ran than listed");
    assert!(!counted(&ok(4), 0, 3), "more ran than listed: the pack is stale");
    assert!(!counted(&ok(3), 101, 3), "the binary failed");
    let failed = "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out";
    assert!(!counted(failed, 101, 3), "a test failed");
    assert!(!counted("", 0, 3), "no summary at all");
    assert!(!counted(&ok(0), 0, 0), "a binary with nothing to run on the GPU");
}

fn run_script(args: &[&str]) -> Output {
    Command::new("bash").arg(script()).args(args).output().expect("bash runs")
}

#[test]
fn run_refuses_an_incomplete_pack_before_any_gpu_step() {
    let dir = fresh_dir("pack");
    let (pack, out) = (dir.join("pack"), dir.join("out"));
    let (p, o) = (pack.to_str().unwrap(), out.to_str().unwrap());
    let run = run_script(&["run", p, o]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("expected-tests.txt missing"), "{stderr}");

    std::fs::create_dir_all(&pack).unwrap();
    std::fs::write(pack.join("expected-tests.txt"), "cuda_cache 3\n").unwrap();
    let run = run_script(&["run", p, o]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the pack is incomplete"), "{stderr}");
    assert!(stderr.contains("tests/cuda_cache") && stderr.contains("bin/gpu_bench"), "{stderr}");
    let log = std::fs::read_to_string(out.join("run.log")).unwrap_or_default();
    assert!(!log.contains("GPU prerequisites"), "went past the pack check: {log}");

    let run = run_script(&["run", p, o, "no-such-step"]);
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("unknown step"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run `within` (the window steps' runner) on a stand-in for the script that sleeps `sleep`
/// seconds and exits `status`, with a limit of `limit` seconds; the script's FAILED list.
fn window(sleep: u32, status: i32, limit: u32) -> String {
    let dir = fresh_dir("window");
    let fake = dir.join("fake.sh");
    std::fs::write(&fake, format!("#!/bin/sh\nsleep {sleep}\nexit {status}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = Command::new("bash")
        .arg("-c")
        .arg(
            r#"source "$1" && RUN_SELF=$2 && within pack "$3" correctness "$4" tests sanitize;
               echo "FAILED=${FAILED[*]}""#,
        )
        .arg("bash")
        .args([script(), fake, dir.clone()])
        .arg(limit.to_string())
        .output()
        .expect("bash runs");
    std::fs::remove_dir_all(&dir).unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    stdout.lines().find_map(|l| l.strip_prefix("FAILED=")).unwrap_or("(no list)").to_owned()
}

/// A window step (`correctness` ≤ 2 min, `measures` ≤ 3 min) fails when it runs past its limit
/// or when its steps fail, and passes only when they pass within it.
#[test]
fn a_window_step_fails_past_its_limit_or_on_a_failed_step() {
    assert_eq!(window(0, 0, 5), "", "passed within the limit");
    assert!(window(0, 1, 5).contains("correctness: see"), "a failed step");
    assert!(window(5, 0, 1).contains("correctness: over its limit of 1 s"), "past the limit");
}

#[test]
fn the_window_steps_are_known_and_sized() {
    let src = std::fs::read_to_string(script()).unwrap();
    assert!(src.contains("CORRECTNESS_LIMIT_S:-120") && src.contains("MEASURES_LIMIT_S:-180"));
    let run = run_script(&["run", "/nonexistent-pack", "/nonexistent-out", "correctness"]);
    // A known step: refused for the missing pack, not as an unknown step.
    assert!(!String::from_utf8_lossy(&run.stderr).contains("unknown step"));
}
