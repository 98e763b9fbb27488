//! `ordo-train kge --device cuda` on a machine without a usable CUDA: exits non-zero before any
//! training, names the reason, and writes nothing (`--out` and `--save` stay absent). On a
//! machine with CUDA it prints "skipped: CUDA is available".
#![cfg(not(ordo_loom))]

use std::process::Command;

#[test]
fn device_cuda_without_cuda_fails_fast_and_touches_nothing() {
    let Some(reason) = ordo_gpu::cuda_unavailable_reason() else {
        eprintln!("skipped: CUDA is available");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ordo-cli-device-{}", std::process::id()));
    let (out, save) = (dir.join("out"), dir.join("save"));
    for sub in [&[][..], &["compare"][..]] {
        let run = Command::new(env!("CARGO_BIN_EXE_ordo-train"))
            .arg("kge")
            .args(sub)
            .args(["--device", "cuda", "--epochs", "1", "--quiet", "--out"])
            .arg(&out)
            .arg("--save")
            .arg(&save)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&run.stderr);
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(!run.status.success(), "{sub:?}: exit status {:?}", run.status);
        assert!(stderr.contains("--device cuda: no CUDA device"), "{sub:?}: {stderr}");
        assert!(stderr.contains(reason), "{sub:?}: {stderr}");
        // Failed before loading the dataset or training: nothing printed, nothing written.
        assert!(stdout.is_empty(), "{sub:?}: {stdout}");
        assert!(!stderr.contains("entities"), "{sub:?}: dataset loaded: {stderr}");
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
