//! `--device cuda` (of `ordo-train kge` and of the `kge_roofline` benchmark) on a machine
//! without a usable CUDA: exits with status 1 before any training or measurement, names the
//! reason, and writes nothing (`--out` and `--save` stay absent). On a machine with CUDA the same
//! commands get past the device check: pointed at a missing dataset, they fail on the dataset.
//! With `ORDO_REQUIRE_GPU=1` (a GPU machine's run) a machine without CUDA fails these tests
//! instead of checking the refusal.
#![cfg(not(ordo_loom))]

use std::process::{Command, Output};

/// A dataset path that does not exist: where the device check passes, loading it fails.
const MISSING: &str = "/nonexistent/ordo-cli-device-dataset";

/// Run `bin` with `args` and the missing dataset; check it failed with the status of its cause
/// and printed nothing on stdout, and that its error is the device's (without CUDA) or the
/// dataset's (with it). Returns its stderr.
fn refused(bin: &str, args: &[&str]) -> String {
    let run: Output = Command::new(bin)
        .args(args)
        .args(["--dataset", MISSING])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&run.stdout);
    // Failed before loading the dataset, training or measuring: nothing printed.
    assert!(stdout.is_empty(), "{args:?}: {stdout}");
    match ordo_gpu::cuda_unavailable_reason() {
        Some(reason) => {
            assert!(
                std::env::var_os("ORDO_REQUIRE_GPU").is_none_or(|v| v != "1"),
                "ORDO_REQUIRE_GPU=1 but CUDA is not usable: {reason}"
            );
            // A missing device is not bad input (status 2): the trainer's status 1.
            assert_eq!(run.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(stderr.contains("no CUDA device"), "{args:?}: {stderr}");
            assert!(stderr.contains(reason), "{args:?}: {stderr}");
            assert!(!stderr.contains(MISSING), "{args:?}: dataset looked at first: {stderr}");
        }
        None => {
            // A missing dataset is bad input.
            assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(!stderr.contains("no CUDA device"), "{args:?}: {stderr}");
            assert!(stderr.contains(MISSING), "{args:?}: {stderr}");
        }
    }
    stderr
}

#[test]
fn roofline_device_cuda_is_checked_before_measuring() {
    refused(env!("CARGO_BIN_EXE_kge_roofline"), &["--device", "cuda", "--modes", "oac"]);
}

#[test]
fn device_cuda_without_cuda_fails_fast_and_touches_nothing() {
    let dir = std::env::temp_dir().join(format!("ordo-cli-device-{}", std::process::id()));
    let (out, save) = (dir.join("out"), dir.join("save"));
    for sub in [&[][..], &["compare"][..]] {
        let (out, save) = (out.to_str().expect("utf-8 temp dir"), save.to_str().expect("utf-8"));
        let args = [&["kge"][..], sub, &["--device", "cuda", "--epochs", "1", "--quiet"]].concat();
        let args = [&args[..], &["--out", out, "--save", save]].concat();
        let stderr = refused(env!("CARGO_BIN_EXE_ordo-train"), &args);
        if ordo_gpu::cuda_unavailable_reason().is_some() {
            assert!(stderr.contains("--device cuda: no CUDA device"), "{sub:?}: {stderr}");
        }
        assert!(!dir.exists(), "{sub:?}: {} was created", dir.display());
    }
    // The same command on the CPU does train (so the refusal above is the device check).
    let run = Command::new(env!("CARGO_BIN_EXE_ordo-train"))
        .args(["kge", "--device", "cpu", "--dataset", "nations", "--dim", "8", "--epochs", "1"])
        .args(["--quiet", "--out"])
        .arg(&out)
        .output()
        .expect("the binary runs");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(out.join("metrics.csv").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}
