//! The mutation table: every checker against every mutant of [`ordo::mutation::Mutant`].
//!
//! Checkers:
//! - `model`: the explicit-state model of the protocol the mutant changes (in process);
//! - `proptest`: `core/tests/prop_*.rs` on the real code, `cargo test --release -p ordo
//!   --features mutants` with `ORDO_MUTANT=<name>`;
//! - `loom`: `core/tests/loom_*.rs` the same way under `RUSTFLAGS="--cfg ordo_loom -C debug-assertions"`
//!   in their own target dir;
//! - `fuzz`: every `fuzz/fuzz_targets/*.rs` for a short time, `cargo fuzz run --sanitizer none
//!   --features mutants`.
//!
//! A mutant is *killed* by a checker when the checker fails with it on (a counterexample, a
//! failing test, a crash, or a hang past the time limit). Each subprocess checker is first run
//! with no mutant: if that baseline fails, its column says so and counts for nothing. Test files
//! are found by glob, so a missing one makes the checker "n.a."; a mutant with no hook in
//! `core/src` or `core/tests` is "n.a." for the real-code checkers.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ordo::mutation::Mutant;

use crate::checker::{Limits, Outcome};
use crate::suite::{Bound, check_mutant};

/// A checker of the mutation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checker {
    /// The explicit-state protocol models.
    Model,
    /// proptest files on the real code.
    Proptest,
    /// loom files on the real code.
    Loom,
    /// cargo-fuzz targets on the real code.
    Fuzz,
}

impl Checker {
    /// Every checker, in table order.
    pub const ALL: [Checker; 4] = [Checker::Model, Checker::Proptest, Checker::Loom, Checker::Fuzz];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Model => "model",
            Checker::Proptest => "proptest",
            Checker::Loom => "loom",
            Checker::Fuzz => "fuzz",
        }
    }

    /// Parse [`Checker::name`].
    pub fn from_name(s: &str) -> Option<Checker> {
        Checker::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One cell of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The checker failed with the mutant on; the detail says how.
    Killed(String),
    /// The checker passed with the mutant on.
    Survived,
    /// The checker does not apply (no test files, no hook, or no model of that protocol).
    NotApplicable(String),
    /// The checker could not run (build failure, or its baseline fails).
    Error(String),
}

impl Verdict {
    fn cell(&self) -> &'static str {
        match self {
            Verdict::Killed(d) if d.starts_with("timeout") => "killed(t/o)",
            Verdict::Killed(_) => "killed",
            Verdict::Survived => "survived",
            Verdict::NotApplicable(_) => "n.a.",
            Verdict::Error(_) => "error",
        }
    }
}

/// What the runner runs and how long it may take.
#[derive(Debug, Clone)]
pub struct Options {
    /// The workspace root (holds `core/`, `fuzz/`).
    pub root: PathBuf,
    /// The checkers to run.
    pub checkers: Vec<Checker>,
    /// The model checker's bound.
    pub bound: Bound,
    /// Seconds per fuzz target per mutant.
    pub fuzz_seconds: u64,
    /// Wall-clock limit of one test subprocess (a hang past it counts as a kill).
    pub timeout: Duration,
    /// Target dir for the `--cfg ordo_loom` builds.
    pub loom_target_dir: PathBuf,
    /// The mutants to run (default: all).
    pub mutants: Vec<Mutant>,
}

/// The filled table.
#[derive(Debug, Clone)]
pub struct Table {
    /// The checkers, in column order.
    pub checkers: Vec<Checker>,
    /// Per checker: the baseline (no mutant) verdict: `Survived` means the checker passes on the
    /// correct code, as it must.
    pub baseline: Vec<Verdict>,
    /// One row per mutant.
    pub rows: Vec<(Mutant, Vec<Verdict>)>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

impl Table {
    /// Non-equivalent mutants killed by at least one checker, and the number of non-equivalent
    /// mutants.
    pub fn kill_rate(&self) -> (usize, usize) {
        let live: Vec<_> =
            self.rows.iter().filter(|(m, _)| m.equivalent_because().is_none()).collect();
        let killed =
            live.iter().filter(|(_, v)| v.iter().any(|v| matches!(v, Verdict::Killed(_)))).count();
        (killed, live.len())
    }

    /// The exit criterion. Always: every baseline passes (or is n.a.) and no cell is an error.
    /// Full run (`quick = false`): every non-equivalent mutant is killed by some checker.
    /// Quick run: every non-equivalent mutant the model applies to is killed by the model (the
    /// memory-ordering mutants need loom, which quick mode does not run).
    pub fn passes(&self, quick: bool) -> bool {
        let baselines_ok = self
            .baseline
            .iter()
            .all(|b| matches!(b, Verdict::Survived | Verdict::NotApplicable(_)));
        let no_errors =
            self.rows.iter().all(|(_, v)| !v.iter().any(|v| matches!(v, Verdict::Error(_))));
        let killed = if quick {
            let model = self.checkers.iter().position(|&c| c == Checker::Model);
            self.rows
                .iter()
                .filter(|(m, _)| m.equivalent_because().is_none())
                .all(|(_, v)| model.is_none_or(|i| !matches!(v[i], Verdict::Survived)))
        } else {
            let (k, n) = self.kill_rate();
            k == n
        };
        baselines_ok && no_errors && killed
    }

    /// Render the table, the details of each kill, and the kill rate.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = write!(s, "| {:<26} |", "mutant");
        for c in &self.checkers {
            let _ = write!(s, " {:<11} |", c.name());
        }
        s.push('\n');
        let _ = write!(s, "|{}|", "-".repeat(28));
        for _ in &self.checkers {
            let _ = write!(s, "{}|", "-".repeat(13));
        }
        s.push('\n');
        let _ = write!(s, "| {:<26} |", "(none: baseline must pass)");
        for v in &self.baseline {
            let cell = match v {
                Verdict::Survived => "passes",
                Verdict::Killed(_) => "FAILS",
                other => other.cell(),
            };
            let _ = write!(s, " {cell:<11} |");
        }
        s.push('\n');
        for (m, vs) in &self.rows {
            let name = if m.equivalent_because().is_some() {
                format!("{} (equiv.)", m.name())
            } else {
                m.name().to_string()
            };
            let _ = write!(s, "| {name:<26} |");
            for v in vs {
                // An equivalent mutant that passes is expected, not a survivor.
                let cell = match v {
                    Verdict::Survived if m.equivalent_because().is_some() => "no diff",
                    v => v.cell(),
                };
                let _ = write!(s, " {cell:<11} |");
            }
            s.push('\n');
        }
        s.push_str("\nDetails:\n");
        for (c, v) in self.checkers.iter().zip(&self.baseline) {
            if let Verdict::Killed(d) | Verdict::Error(d) | Verdict::NotApplicable(d) = v {
                let _ = writeln!(s, "  baseline / {}: {d}", c.name());
            }
        }
        for (m, vs) in &self.rows {
            for (c, v) in self.checkers.iter().zip(vs) {
                match v {
                    Verdict::Killed(d) | Verdict::Error(d) => {
                        let _ = writeln!(s, "  {} / {}: {}", m.name(), c.name(), d);
                    }
                    _ => {}
                }
            }
            if let Some(why) = m.equivalent_because() {
                let _ = writeln!(s, "  {} is equivalent: {why}", m.name());
            }
        }
        let (k, n) = self.kill_rate();
        let survivors: Vec<&str> = self
            .rows
            .iter()
            .filter(|(m, v)| {
                m.equivalent_because().is_none()
                    && !v.iter().any(|v| matches!(v, Verdict::Killed(_)))
            })
            .map(|(m, _)| m.name())
            .collect();
        let _ = writeln!(
            s,
            "\nKill rate over non-equivalent mutants: {k}/{n}{}",
            if survivors.is_empty() {
                String::new()
            } else {
                format!(" — survivors: {}", survivors.join(", "))
            }
        );
        let _ = writeln!(s, "Elapsed: {:.1?}", self.elapsed);
        s
    }
}

/// Run every chosen checker against the baseline and every mutant.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Table {
    let start = Instant::now();
    let mut baseline = Vec::new();
    let mut columns: Vec<Vec<Verdict>> = Vec::new();
    for &c in &opts.checkers {
        progress(&format!("checker {}: preparing", c.name()));
        let (base, col) = match c {
            Checker::Model => model_column(opts),
            _ => SubprocessChecker::new(c, opts).column(opts, &mut progress),
        };
        baseline.push(base);
        columns.push(col);
    }
    let rows = opts
        .mutants
        .iter()
        .enumerate()
        .map(|(i, &m)| (m, columns.iter().map(|col| col[i].clone()).collect()))
        .collect();
    Table { checkers: opts.checkers.clone(), baseline, rows, elapsed: start.elapsed() }
}

fn model_column(opts: &Options) -> (Verdict, Vec<Verdict>) {
    let limits = Limits::default();
    let base = match crate::suite::check_correct(&opts.bound, limits) {
        Ok(runs) => match runs.iter().find(|r| r.report.outcome != Outcome::Proved) {
            None => Verdict::Survived,
            Some(r) => Verdict::Killed(format!("{} fails", r.name)),
        },
        Err(e) => Verdict::Error(e.to_string()),
    };
    let col = opts
        .mutants
        .iter()
        .map(|&m| match check_mutant(&opts.bound, m, limits) {
            None => Verdict::NotApplicable(
                "not a protocol step (memory ordering or code detail)".into(),
            ),
            Some(Err(e)) => Verdict::Error(e.to_string()),
            Some(Ok(r)) => match r.outcome {
                Outcome::Proved => Verdict::Survived,
                Outcome::Violated(cex) => Verdict::Killed(format!(
                    "{}-step counterexample ({} states): {}",
                    cex.steps.len(),
                    r.stats.states,
                    cex.violation
                )),
            },
        })
        .collect();
    (base, col)
}

/// A real-code checker run as `cargo` subprocesses.
struct SubprocessChecker {
    checker: Checker,
    /// Test files (proptest/loom) or fuzz targets found by glob.
    targets: Vec<String>,
}

/// The file stems in `dir` that start with `prefix` and end in `.rs`, sorted.
fn glob(dir: &Path, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".rs"))
        .map(|n| n.trim_end_matches(".rs").to_string())
        .collect();
    out.sort();
    out
}

/// Whether the real code has a hook for `m`: `Mutant::<Variant>` appears in `core/src`
/// (outside the catalog itself) or in a test file of `core/tests` (a fixture switched by it).
fn has_hook(root: &Path, m: Mutant) -> bool {
    let needle = format!("Mutant::{m:?}");
    let mut stack = vec![root.join("core/src"), root.join("core/tests")];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p.ends_with("mutation.rs")
                && fs::read_to_string(&p).is_ok_and(|t| t.contains(&needle))
            {
                return true;
            }
        }
    }
    false
}

/// How one subprocess ended.
enum Exit {
    Passed,
    Failed(String),
    TimedOut,
    CouldNotRun(String),
}

fn run_command(mut cmd: Command, timeout: Duration) -> Exit {
    use std::os::unix::process::CommandExt;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Exit::CouldNotRun(format!("cannot start {cmd:?}: {e}")),
    };
    // Drain the pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|x| Box::new(x) as Box<dyn std::io::Read + Send>));
    let err = drain(child.stderr.take().map(|x| Box::new(x) as Box<dyn std::io::Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => {
                // Kill the whole process group (cargo and the test binary it started).
                let _ = Command::new("kill").args(["-KILL", &format!("-{}", child.id())]).status();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Exit::CouldNotRun(e.to_string()),
        }
    };
    let text = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    match status {
        None => Exit::TimedOut,
        Some(st) if st.success() => Exit::Passed,
        Some(_) => Exit::Failed(text),
    }
}

impl SubprocessChecker {
    fn new(checker: Checker, opts: &Options) -> SubprocessChecker {
        let targets = match checker {
            Checker::Proptest => glob(&opts.root.join("core/tests"), "prop_"),
            Checker::Loom => glob(&opts.root.join("core/tests"), "loom_"),
            Checker::Fuzz => glob(&opts.root.join("fuzz/fuzz_targets"), ""),
            Checker::Model => Vec::new(),
        };
        SubprocessChecker { checker, targets }
    }

    /// `cargo test` over the test files, with or without a mutant (`build_only`: `--no-run`).
    fn test_command(&self, opts: &Options, mutant: Option<Mutant>, build_only: bool) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&opts.root).args([
            "test",
            "--release",
            "-p",
            "ordo",
            "--features",
            "mutants",
            "--no-fail-fast",
        ]);
        if build_only {
            cmd.arg("--no-run");
        }
        for t in &self.targets {
            cmd.args(["--test", t]);
        }
        cmd.env_remove("ORDO_MUTANT");
        if let Some(m) = mutant {
            cmd.env("ORDO_MUTANT", m.name());
        }
        // A mutant's failing cases are expected: do not save them as regression seeds in the tree.
        cmd.env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1");
        if self.checker == Checker::Loom {
            cmd.env("RUSTFLAGS", "--cfg ordo_loom -C debug-assertions")
                .env("CARGO_TARGET_DIR", &opts.loom_target_dir)
                .env(
                    "LOOM_MAX_PREEMPTIONS",
                    std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or("2".into()),
                )
                .env("LOOM_MAX_BRANCHES", "20000");
        }
        cmd
    }

    fn fuzz_command(
        &self,
        opts: &Options,
        target: &str,
        mutant: Option<Mutant>,
        build_only: bool,
    ) -> Command {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(opts.root.join("fuzz")).env_remove("ORDO_MUTANT");
        if build_only {
            cmd.args(["fuzz", "build", "--sanitizer", "none", "--features", "mutants"]);
            return cmd;
        }
        let tag = mutant.map_or("none", |m| m.name());
        let scratch = std::env::temp_dir()
            .join(format!("ordo-mutants-{}/{tag}/{target}", std::process::id()));
        let corpus = scratch.join("corpus");
        let _ = fs::create_dir_all(&corpus);
        cmd.args(["fuzz", "run", "--sanitizer", "none", "--features", "mutants", target])
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={}", opts.fuzz_seconds))
            .arg(format!("-artifact_prefix={}/", scratch.display()));
        if let Some(m) = mutant {
            cmd.env("ORDO_MUTANT", m.name());
        }
        cmd
    }

    /// Which test files failed, from cargo's `--no-fail-fast` summary (lines like
    /// ``error: test failed, to rerun pass `-p ordo --test prop_mft` `` and `` `--test x` ``).
    pub(crate) fn failing_tests(text: &str) -> Vec<String> {
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| l.contains("to rerun pass") || l.trim_start().starts_with('`'))
            .filter_map(|l| l.rsplit("--test ").next().filter(|_| l.contains("--test ")))
            .filter_map(|rest| rest.split(['`', ' ']).next())
            .map(str::to_string)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Run the checker once (no mutant = baseline) and turn the exit into a verdict.
    fn verdict(&self, opts: &Options, mutant: Option<Mutant>) -> Verdict {
        match self.checker {
            Checker::Fuzz => {
                for t in &self.targets {
                    let limit = Duration::from_secs(opts.fuzz_seconds) + opts.timeout;
                    match run_command(self.fuzz_command(opts, t, mutant, false), limit) {
                        Exit::Passed => {}
                        Exit::Failed(text) => {
                            // The panic line and the message after it, or libFuzzer's error line.
                            let lines: Vec<&str> = text.lines().collect();
                            let why = lines
                                .iter()
                                .position(|l| {
                                    l.contains("panicked") || l.contains("ERROR: libFuzzer")
                                })
                                .map_or("fuzz target failed".to_string(), |i| {
                                    lines[i..(i + 2).min(lines.len())].join(" ").trim().to_string()
                                });
                            return Verdict::Killed(format!("{t}: {why}"));
                        }
                        Exit::TimedOut => {
                            return Verdict::Killed(format!("timeout: {t} ran past its limit"));
                        }
                        Exit::CouldNotRun(e) => return Verdict::Error(e),
                    }
                }
                Verdict::Survived
            }
            _ => match run_command(self.test_command(opts, mutant, false), opts.timeout) {
                Exit::Passed => Verdict::Survived,
                Exit::Failed(text) => {
                    let failed = Self::failing_tests(&text);
                    if failed.is_empty() {
                        let tail: Vec<&str> = text.lines().rev().take(3).collect();
                        Verdict::Error(format!(
                            "cargo failed without a failing test: {}",
                            tail.join(" / ")
                        ))
                    } else {
                        Verdict::Killed(format!("failing: {}", failed.join(", ")))
                    }
                }
                Exit::TimedOut => {
                    Verdict::Killed(format!("timeout: tests ran past {:?}", opts.timeout))
                }
                Exit::CouldNotRun(e) => Verdict::Error(e),
            },
        }
    }

    fn column(&self, opts: &Options, progress: &mut impl FnMut(&str)) -> (Verdict, Vec<Verdict>) {
        let na = |why: String| {
            (
                Verdict::NotApplicable(why.clone()),
                vec![Verdict::NotApplicable(why); opts.mutants.len()],
            )
        };
        if self.targets.is_empty() {
            return na(format!("no {} files found", self.checker.name()));
        }
        if self.checker == Checker::Fuzz
            && !Command::new("cargo")
                .args(["fuzz", "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
        {
            return na("cargo-fuzz is not installed".into());
        }
        progress(&format!(
            "checker {}: building ({})",
            self.checker.name(),
            self.targets.join(", ")
        ));
        let build = match self.checker {
            Checker::Fuzz => self.fuzz_command(opts, "", None, true),
            _ => self.test_command(opts, None, true),
        };
        let build_limit = Duration::from_secs(1800);
        match run_command(build, build_limit) {
            Exit::Passed => {}
            Exit::Failed(t) => {
                let tail: Vec<&str> =
                    t.lines().filter(|l| l.starts_with("error")).take(3).collect();
                let e = Verdict::Error(format!("build failed: {}", tail.join(" / ")));
                return (e.clone(), vec![e; opts.mutants.len()]);
            }
            Exit::TimedOut => {
                let e = Verdict::Error("build timed out".into());
                return (e.clone(), vec![e; opts.mutants.len()]);
            }
            Exit::CouldNotRun(why) => {
                let e = Verdict::Error(why);
                return (e.clone(), vec![e; opts.mutants.len()]);
            }
        }
        progress(&format!("checker {}: baseline (no mutant)", self.checker.name()));
        let base = self.verdict(opts, None);
        if base != Verdict::Survived {
            let e = Verdict::Error(format!("baseline does not pass: {base:?}"));
            return (base, vec![e; opts.mutants.len()]);
        }
        let col = opts
            .mutants
            .iter()
            .map(|&m| {
                if !has_hook(&opts.root, m) {
                    return Verdict::NotApplicable("no hook in core/src or core/tests".into());
                }
                progress(&format!("checker {}: mutant {}", self.checker.name(), m.name()));
                self.verdict(opts, Some(m))
            })
            .collect();
        (base, col)
    }
}

#[cfg(test)]
mod tests {
    use super::SubprocessChecker;

    #[test]
    fn failing_tests_are_read_from_cargo_summaries() {
        let text = "error: test failed, to rerun pass `-p ordo --test prop_engine`\n\
                    error: 2 targets failed:\n    `-p ordo --test prop_engine`\n    `--test loom_mft`\n\
                    running 3 tests\n";
        assert_eq!(SubprocessChecker::failing_tests(text), vec!["loom_mft", "prop_engine"]);
        assert!(SubprocessChecker::failing_tests("error: could not compile `ordo`").is_empty());
    }
}
