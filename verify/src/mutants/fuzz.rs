//! The fuzz column's runs (`cargo fuzz run` of a target with or without a mutant) and the
//! `--long` mode that grows the committed corpus on the correct code.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::{Captured, run_capture, why_failed};
use super::{Progress, glob};

/// `cargo fuzz run` of one target for `seconds`, on a scratch corpus seeded from the committed
/// one (`fuzz/corpus/<target>`, when present), with mutant `mutant` (or none) on.
pub(crate) fn fuzz_command(
    root: &Path,
    target: &str,
    mutant: Option<&str>,
    seconds: u64,
) -> Command {
    let tag = mutant.unwrap_or("none");
    let scratch =
        std::env::temp_dir().join(format!("ordo-mutants-{}/{tag}/{target}", std::process::id()));
    let corpus = scratch.join("corpus");
    let _ = fs::create_dir_all(&corpus);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root.join("fuzz"))
        .args(["fuzz", "run", "--sanitizer", "none", "--features", "mutants", target])
        .arg(&corpus);
    let committed = root.join("fuzz/corpus").join(target);
    if committed.is_dir() {
        cmd.arg(committed);
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", scratch.display()));
    cmd
}

/// What one long fuzzing run of a target on the correct code found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongFuzz {
    /// The fuzz target.
    pub target: String,
    /// Inputs executed (libFuzzer's `stat::number_of_executed_units`).
    pub runs: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Files in the committed corpus after minimization.
    pub corpus: usize,
    /// `None` when no input failed; else the failure.
    pub failure: Option<String>,
}

/// The `--long` mode: fuzz every target on the correct code for `seconds`, growing the
/// committed corpus `fuzz/corpus/<target>` (libFuzzer writes new inputs into its first corpus
/// folder), then minimize that folder in place with `cargo fuzz cmin`. A crash input is left in
/// `fuzz/artifacts/<target>/` to be added to `fuzz/regressions/<target>/` once the bug is fixed.
pub fn long_fuzz(root: &Path, seconds: u64, progress: &dyn Progress) -> Vec<LongFuzz> {
    let targets = glob(&root.join("fuzz/fuzz_targets"), "", "");
    progress.phase(&format!("long fuzz, {seconds} s per target"), targets.len());
    targets
        .into_iter()
        .map(|target| {
            let corpus = root.join("fuzz/corpus").join(&target);
            let _ = fs::create_dir_all(&corpus);
            let mut cmd = Command::new("cargo");
            cmd.current_dir(root.join("fuzz"))
                .env_remove("ORDO_MUTANT")
                .args(["fuzz", "run", "--sanitizer", "none", &target])
                .arg(&corpus)
                .arg("--")
                .arg(format!("-max_total_time={seconds}"))
                .arg("-print_final_stats=1");
            let t = Instant::now();
            let (ok, text) = match run_capture(cmd, Duration::from_secs(seconds + 1800)) {
                Captured::Exited(ok, text) => (ok, text),
                Captured::TimedOut => (false, "ran past its limit".into()),
                Captured::CouldNotRun(e) => (false, e),
            };
            let elapsed = t.elapsed();
            let runs = text
                .lines()
                .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            let mut cmin = Command::new("cargo");
            cmin.current_dir(root.join("fuzz")).args([
                "fuzz",
                "cmin",
                "--sanitizer",
                "none",
                &target,
            ]);
            let _ = run_capture(cmin, Duration::from_secs(1800));
            let files = fs::read_dir(&corpus).map_or(0, |d| d.count());
            let r = LongFuzz {
                target,
                runs,
                elapsed,
                corpus: files,
                failure: (!ok).then(|| why_failed(&text)),
            };
            progress.done(&format!("{r:?}"));
            r
        })
        .collect()
}
