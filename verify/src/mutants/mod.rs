//! The mutation table: every checker against every mutant of every crate's catalog.
//!
//! The table is data: each crate declares its catalog beside its code with
//! [`ordo::mutation_catalog!`] (`core/src/mutation.rs`, `pm/src/mutation.rs`,
//! `mp/src/mutation.rs`, `train/src/mutation.rs`), and [`CATALOGS`] lists them. A catalog says which package and feature
//! compile its hooks, which test files each checker runs against its mutants ([`Suite`]s), and
//! per mutant whether it is equivalent and which checkers must kill it (`killed_by`).
//!
//! Checkers ([`Checker`]): `model` (ordo-verify's own models in process, and the catalogs'
//! model test files, e.g. `pm/tests/model_node.rs` over the shipped AdaPM node), `proptest`,
//! `loom` (built with `--cfg ordo_loom -C debug-assertions`), `shuttle` (`--cfg ordo_shuttle`),
//! `fuzz` (`cargo fuzz run --sanitizer none` of each target for `fuzz_seconds`).
//!
//! # How it runs (fast enough for every submission)
//! Mutants are switched at run time (`ORDO_MUTANT=<name>`), so each *configuration* (plain,
//! loom cfg, shuttle cfg, fuzz) is built **once** per package with its `mutants` feature, each
//! in one target dir (`<target>/release`, `<target>/loom`, `<target>/shuttle`). The test
//! binaries are then run directly, one test function (a *unit*) per process, in the package's
//! directory:
//! 1. **Baseline.** Every unit runs once with no mutant; it must pass (else its column is an
//!    error and counts for nothing). Its duration orders the work and sets the unit's time limit
//!    for the mutants (`10 ×` baseline `+ 30 s`, at least `--timeout`).
//! 2. **Cells.** One job per (mutant, checker), over the units that can reach the mutant's hook
//!    only (`reach.rs`; a crate's model suite only for that crate's own mutants): a checker that
//!    no unit makes reachable is "n.a.", not run. A job stops at
//!    its first failing unit (the kill), trying first the units of the hooked module's own test
//!    file and then the quick ones. Jobs run on `jobs` threads (default: the available cores),
//!    the costliest first. An equivalent mutant runs on the model and proptest only (it cannot
//!    be killed; the slow checkers would spend their whole suite to say "no diff").
//!
//! A mutant is *killed* by a checker when a unit fails with it on (a counterexample, a failing
//! assertion, a crash, or a hang past the unit's limit).

mod fuzz;
mod process;
pub(crate) mod reach;
mod table;

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use fuzz::{LongFuzz, long_fuzz};
pub use ordo::mutation::{Catalog, Checker, Entry, Suite};
pub use table::{Table, Verdict};

use crate::model::{Outcome, Search};
use crate::suite::{Bound, check_mutant};
use process::{Captured, Exit, list_tests, run_capture, run_command, test_executables, why_failed};
use reach::Sources;

/// Every crate's mutation catalog, in table order.
pub const CATALOGS: [&Catalog; 4] = [
    &ordo::mutation::CATALOG,
    &ordo_pm::mutation::CATALOG,
    &ordo_mp::mutation::CATALOG,
    &ordo_train::mutation::CATALOG,
];

/// One row of the table: a mutant and the catalog that declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The crate's catalog.
    pub catalog: &'static Catalog,
    /// The mutant.
    pub entry: &'static Entry,
}

/// Every mutant of every catalog, in catalog order.
pub fn all_rows() -> Vec<Row> {
    CATALOGS
        .iter()
        .flat_map(|&catalog| catalog.mutants.iter().map(move |entry| Row { catalog, entry }))
        .collect()
}

/// The row of the mutant called `name`.
pub fn row(name: &str) -> Option<Row> {
    all_rows().into_iter().find(|r| r.entry.name == name)
}

/// The build configuration of a cargo-test checker: `RUSTFLAGS` and target subdirectory
/// (`None`: the plain release build, in the target dir itself).
fn cfg(c: Checker) -> Option<(&'static str, &'static str)> {
    match c {
        Checker::Loom => Some(("--cfg ordo_loom -C debug-assertions", "loom")),
        Checker::Shuttle => Some(("--cfg ordo_shuttle", "shuttle")),
        _ => None,
    }
}

/// What the runner runs and how long it may take.
#[derive(Debug, Clone)]
pub struct Options {
    /// The workspace root (holds `core/`, `pm/`, `mp/`, `fuzz/`).
    pub root: PathBuf,
    /// The checkers to run.
    pub checkers: Vec<Checker>,
    /// The model checker's bound.
    pub bound: Bound,
    /// Seconds per fuzz target per mutant.
    pub fuzz_seconds: u64,
    /// Upper limit of one unit's run (a hang past its limit counts as a kill).
    pub timeout: Duration,
    /// Target dir: the plain build goes to `<target_dir>/release`, the loom and shuttle builds to
    /// `<target_dir>/loom` and `<target_dir>/shuttle`.
    pub target_dir: PathBuf,
    /// Jobs run at once.
    pub jobs: usize,
    /// The mutants to run (default: [`all_rows`]).
    pub mutants: Vec<Row>,
}

/// Where the runner reports what it is doing.
pub trait Progress: Sync {
    /// A phase begins with `total` jobs.
    fn phase(&self, name: &str, total: usize);
    /// One job of the phase is done; `line` says which and how it ended.
    fn done(&self, line: &str);
}

/// A [`Progress`] that reports nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn phase(&self, _: &str, _: usize) {}
    fn done(&self, _: &str) {}
}

/// One test function of one test binary (or one fuzz target).
#[derive(Debug, Clone)]
struct Unit {
    checker: Checker,
    /// The package directory it runs in, relative to the root.
    dir: String,
    /// The file, relative to the root (reachability reads it).
    path: PathBuf,
    /// Test file stem (`loom_mft`) or fuzz target name.
    file: String,
    /// Test function (empty for a fuzz target).
    test: String,
    /// The test binary (empty for a fuzz target).
    exe: PathBuf,
    /// Its baseline wall time.
    baseline: Duration,
}

impl Unit {
    fn label(&self) -> String {
        if self.test.is_empty() {
            self.file.clone()
        } else {
            format!("{}::{}", self.file, self.test)
        }
    }
}

/// Run every chosen checker against the baseline and every mutant (module docs: how).
pub fn run(opts: &Options, progress: &dyn Progress) -> Table {
    let start = Instant::now();
    let sources = Sources::read(&opts.root);
    let n = opts.mutants.len();
    let ncols = opts.checkers.len();
    let mut baseline = vec![Verdict::Survived; ncols];
    let mut cols: Vec<Vec<Verdict>> = vec![vec![Verdict::Survived; n]; ncols];
    let mut unit_counts = vec![0; ncols];
    let col_of = |c: Checker| opts.checkers.iter().position(|&x| x == c).unwrap_or(0);
    // Build every configuration (sequentially: cargo uses every core itself) and list its units.
    let mut units: Vec<Unit> = Vec::new();
    for (i, &c) in opts.checkers.iter().enumerate() {
        match prepare(c, opts, progress) {
            Ok(u) if u.is_empty() && c != Checker::Model => {
                baseline[i] = Verdict::NotApplicable(format!("no {} suite files", c.name()));
                cols[i] = vec![baseline[i].clone(); n];
            }
            Ok(u) => units.extend(u),
            Err(v) => {
                baseline[i] = v.clone();
                cols[i] = vec![
                    match v {
                        Verdict::NotApplicable(_) => v,
                        other => Verdict::Error(format!("checker could not run: {other:?}")),
                    };
                    n
                ];
            }
        }
    }

    // Phase 1: baseline of every unit (the model column's baseline includes the correct
    // protocols of ordo-verify's own models).
    let mut base_jobs: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    if opts.checkers.contains(&Checker::Model) {
        base_jobs.insert(0, None);
    }
    progress.phase("baseline (no mutant)", base_jobs.len());
    let base_results = pool(opts.jobs, base_jobs, |job| match job {
        None => {
            let v = model_baseline(opts);
            progress.done(&format!("model baseline: {}", v.cell()));
            (Checker::Model, None, v)
        }
        Some(mut u) => {
            let t = Instant::now();
            let exit = run_unit(opts, &u, None, opts.timeout);
            u.baseline = t.elapsed();
            let v = match exit {
                Exit::Passed => Verdict::Survived,
                Exit::Failed(why) => {
                    Verdict::Killed(format!("{} fails on the correct code: {why}", u.label()))
                }
                Exit::TimedOut => {
                    Verdict::Killed(format!("{} ran past {:?}", u.label(), opts.timeout))
                }
                Exit::CouldNotRun(e) => Verdict::Error(e),
            };
            let line = format!("{} baseline {}: {:.1?}", u.checker.name(), u.label(), u.baseline);
            progress.done(&line);
            (u.checker, Some(u), v)
        }
    });
    let mut passed: HashMap<Checker, Vec<Unit>> = HashMap::new();
    for (c, unit, v) in base_results {
        let i = col_of(c);
        match (unit, v) {
            (Some(u), Verdict::Survived) => {
                unit_counts[i] += 1;
                passed.entry(c).or_default().push(u);
            }
            (None, Verdict::Survived) => unit_counts[i] += 1,
            (_, bad) => {
                if !matches!(baseline[i], Verdict::Killed(_) | Verdict::Error(_)) {
                    baseline[i] = bad.clone();
                }
            }
        }
    }
    for (i, b) in baseline.iter().enumerate() {
        if !matches!(b, Verdict::Survived | Verdict::NotApplicable(_)) {
            cols[i] = vec![Verdict::Error(format!("baseline does not pass: {b:?}")); n];
        }
    }

    // Phase 2: one job per (mutant, checker) cell, costliest first.
    struct Cell {
        row: usize,
        col: usize,
        name: &'static str,
        checker: Checker,
        /// ordo-verify's own model of the mutant's protocol is run (in process).
        in_process: bool,
        units: Vec<Unit>,
        cost: Duration,
    }
    let texts: HashMap<PathBuf, String> = passed
        .values()
        .flatten()
        .map(|u| (u.path.clone(), fs::read_to_string(opts.root.join(&u.path)).unwrap_or_default()))
        .collect();
    let mut cells = Vec::new();
    for (row, r) in opts.mutants.iter().enumerate() {
        let (name, needle) = (r.entry.name, r.entry.hook);
        let hooks = sources.hooks(needle);
        for (col, &c) in opts.checkers.iter().enumerate() {
            if baseline[col] != Verdict::Survived {
                continue;
            }
            let in_process = c == Checker::Model && crate::suite::has_model(name);
            // An equivalent mutant cannot be killed; the model and proptest show "no diff"
            // cheaply, the slow checkers would only spend their whole suite on it.
            if r.entry.equivalent.is_some() && !matches!(c, Checker::Proptest | Checker::Model) {
                cols[col][row] = Verdict::NotApplicable("equivalent mutant: not run".into());
                continue;
            }
            let mut units: Vec<Unit> = passed
                .get(&c)
                .into_iter()
                .flatten()
                // A model suite checks its own crate's protocol: it runs for that crate's mutants.
                .filter(|u| c != Checker::Model || u.dir == r.catalog.dir)
                .filter(|u| !hooks.is_empty() && sources.reaches(&texts[&u.path], needle, &hooks))
                .cloned()
                .collect();
            if units.is_empty() && !in_process {
                cols[col][row] = Verdict::NotApplicable(if hooks.is_empty() {
                    format!("no hook ({needle}) in any crate's sources")
                } else if c == Checker::Model {
                    "not a modelled protocol step (memory ordering or code detail)".into()
                } else {
                    let at: Vec<String> = hooks.iter().map(|(d, m)| format!("{d}/{m}")).collect();
                    format!("no {} unit reaches the hook in {}", c.name(), at.join(", "))
                });
                continue;
            }
            // The hooked module's own tests first, then the quick ones.
            units.sort_by_key(|u| {
                (!hooks.iter().any(|(_, h)| u.file.contains(h.as_str())), u.baseline)
            });
            let cost = units.iter().map(|u| u.baseline).sum::<Duration>()
                + if in_process { Duration::from_secs(3) } else { Duration::ZERO };
            cells.push(Cell { row, col, name, checker: c, in_process, units, cost });
        }
    }
    cells.sort_by_key(|c| std::cmp::Reverse(c.cost));
    progress.phase("mutants", cells.len());
    let results = pool(opts.jobs, cells, |cell| {
        let t = Instant::now();
        let v = match cell.in_process.then(|| model_cell(opts, cell.name)) {
            Some(Verdict::Survived) | None => mutant_cell(opts, cell.name, &cell.units),
            Some(v) => v,
        };
        progress.done(&format!(
            "{} / {}: {} ({:.1?})",
            cell.name,
            cell.checker.name(),
            v.cell(),
            t.elapsed()
        ));
        (cell.row, cell.col, v)
    });
    for (row, col, v) in results {
        cols[col][row] = v;
    }
    let rows = opts
        .mutants
        .iter()
        .enumerate()
        .map(|(i, &r)| (r, cols.iter().map(|col| col[i].clone()).collect()))
        .collect();
    Table {
        checkers: opts.checkers.clone(),
        baseline,
        rows,
        units: unit_counts,
        elapsed: start.elapsed(),
    }
}

/// Run `f` over `jobs` on `threads` threads, taking them in order; results in completion order.
fn pool<J: Send, R: Send>(threads: usize, jobs: Vec<J>, f: impl Fn(J) -> R + Sync) -> Vec<R> {
    let queue = Mutex::new(VecDeque::from(jobs));
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let Some(job) = queue.lock().map(|mut q| q.pop_front()).ok().flatten() else {
                        break;
                    };
                    let r = f(job);
                    if let Ok(mut o) = out.lock() {
                        o.push(r);
                    }
                }
            });
        }
    });
    out.into_inner().unwrap_or_default()
}

fn model_baseline(opts: &Options) -> Verdict {
    match crate::suite::check_correct(&opts.bound, Search::default()) {
        Ok(runs) => match runs.iter().find(|r| r.report.outcome != Outcome::Proved) {
            None => Verdict::Survived,
            Some(r) => Verdict::Killed(format!("{} fails", r.name)),
        },
        Err(e) => Verdict::Error(e.to_string()),
    }
}

/// ordo-verify's own model of the protocol mutant `name` changes, with it on.
fn model_cell(opts: &Options, name: &str) -> Verdict {
    if let Some(found) = crate::suite::check_stateright_mutant(name) {
        return match found {
            Some(why) => Verdict::Killed(why),
            None => Verdict::Survived,
        };
    }
    let Some(m) = ordo::mutation::Mutant::from_name(name) else {
        return Verdict::NotApplicable("no model of its protocol".into());
    };
    match check_mutant(&opts.bound, m, Search::default()) {
        None => {
            Verdict::NotApplicable("not a protocol step (memory ordering or code detail)".into())
        }
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
    }
}

/// Run the units with mutant `name` on until the first one fails (the kill).
fn mutant_cell(opts: &Options, name: &str, units: &[Unit]) -> Verdict {
    for u in units {
        // Never below `--timeout`: on a loaded machine a unit can run 10× its baseline without
        // hanging, and a false timeout would count as a kill.
        let limit = (u.baseline * 10 + Duration::from_secs(30)).max(opts.timeout);
        match run_unit(opts, u, Some(name), limit) {
            Exit::Passed => {}
            Exit::Failed(why) => return Verdict::Killed(format!("{}: {why}", u.label())),
            Exit::TimedOut => {
                return Verdict::Killed(format!("timeout: {} ran past {limit:?}", u.label()));
            }
            Exit::CouldNotRun(e) => return Verdict::Error(e),
        }
    }
    Verdict::Survived
}

/// The stems of the files a suite names (`dir/prefix*suffix.rs`), with their directory.
fn suite_files(root: &Path, files: &str) -> (PathBuf, Vec<String>) {
    let (dir, name) = files.rsplit_once('/').unwrap_or((".", files));
    let name = name.strip_suffix(".rs").unwrap_or(name);
    let (prefix, suffix) = name.split_once('*').unwrap_or((name, ""));
    let stems = glob(&root.join(dir), prefix, suffix);
    let stems =
        if name.contains('*') { stems } else { stems.into_iter().filter(|s| s == name).collect() };
    (PathBuf::from(dir), stems)
}

/// Build a checker's configuration for every catalog that has a suite for it and list its
/// units; `Err` is the whole column's verdict.
fn prepare(c: Checker, opts: &Options, progress: &dyn Progress) -> Result<Vec<Unit>, Verdict> {
    let mut units = Vec::new();
    for catalog in CATALOGS {
        for suite in catalog.suites.iter().filter(|s| s.checker == c) {
            let (dir, stems) = suite_files(&opts.root, suite.files);
            if stems.is_empty() {
                continue;
            }
            if c == Checker::Fuzz {
                units.extend(prepare_fuzz(opts, progress, &dir, stems)?);
                continue;
            }
            progress.phase(
                &format!("build {} of {} ({})", c.name(), catalog.package, stems.join(", ")),
                0,
            );
            let mut cmd = cargo_test(c, catalog, opts);
            cmd.args(["--no-run", "--message-format=json-render-diagnostics"]);
            for f in &stems {
                cmd.args(["--test", f]);
            }
            let json = expect_built(run_capture(cmd, Duration::from_secs(1800)))?;
            for (file, exe) in test_executables(&json) {
                let out = Command::new(&exe)
                    .args(["--list", "--format", "terse"])
                    .output()
                    .map_err(|e| Verdict::Error(format!("cannot list {}: {e}", exe.display())))?;
                for test in list_tests(&String::from_utf8_lossy(&out.stdout)) {
                    units.push(Unit {
                        checker: c,
                        dir: catalog.dir.to_string(),
                        path: dir.join(format!("{file}.rs")),
                        file: file.clone(),
                        test,
                        exe: exe.clone(),
                        baseline: Duration::ZERO,
                    });
                }
            }
        }
    }
    Ok(units)
}

/// Build the fuzz targets (cargo-fuzz, feature `mutants`) and list them as units.
fn prepare_fuzz(
    opts: &Options,
    progress: &dyn Progress,
    dir: &Path,
    targets: Vec<String>,
) -> Result<Vec<Unit>, Verdict> {
    if !Command::new("cargo").args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success())
    {
        return Err(Verdict::NotApplicable("cargo-fuzz is not installed".into()));
    }
    progress.phase(&format!("build fuzz ({})", targets.join(", ")), 0);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(opts.root.join("fuzz")).env_remove("ORDO_MUTANT").args([
        "fuzz",
        "build",
        "--sanitizer",
        "none",
        "--features",
        "mutants",
    ]);
    expect_built(run_capture(cmd, Duration::from_secs(1800)))?;
    Ok(targets
        .into_iter()
        .map(|file| Unit {
            checker: Checker::Fuzz,
            dir: "fuzz".into(),
            path: dir.join(format!("{file}.rs")),
            file,
            test: String::new(),
            exe: PathBuf::new(),
            baseline: Duration::ZERO,
        })
        .collect())
}

/// A build's output, or the column's error verdict.
fn expect_built(c: Captured) -> Result<String, Verdict> {
    match c {
        Captured::Exited(true, text) => Ok(text),
        Captured::Exited(false, t) => {
            let tail: Vec<&str> = t.lines().filter(|l| l.starts_with("error")).take(3).collect();
            Err(Verdict::Error(format!("build failed: {}", tail.join(" / "))))
        }
        Captured::TimedOut => Err(Verdict::Error("build timed out".into())),
        Captured::CouldNotRun(why) => Err(Verdict::Error(why)),
    }
}

/// `cargo test --release -p <package> --features <feature>` in the checker's configuration.
fn cargo_test(c: Checker, catalog: &Catalog, opts: &Options) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&opts.root)
        .args(["test", "--release", "-p", catalog.package, "--features", catalog.feature])
        .env_remove("ORDO_MUTANT");
    match cfg(c) {
        Some((flags, sub)) => {
            cmd.env("RUSTFLAGS", flags).env("CARGO_TARGET_DIR", opts.target_dir.join(sub));
        }
        None => {
            cmd.env_remove("RUSTFLAGS").env("CARGO_TARGET_DIR", &opts.target_dir);
        }
    }
    cmd
}

/// Run one unit with mutant `mutant` on, or none.
fn run_unit(opts: &Options, u: &Unit, mutant: Option<&str>, limit: Duration) -> Exit {
    let mut cmd = if u.checker == Checker::Fuzz {
        fuzz::fuzz_command(&opts.root, &u.file, mutant, opts.fuzz_seconds)
    } else {
        let mut cmd = Command::new(&u.exe);
        cmd.current_dir(opts.root.join(&u.dir)).args([
            "--exact",
            &u.test,
            "--test-threads",
            "1",
            "-q",
        ]);
        cmd
    };
    cmd.env_remove("ORDO_MUTANT")
        // A mutant's failing cases are expected: do not save them as regression seeds in the tree.
        .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
        .env("LOOM_MAX_PREEMPTIONS", std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or("2".into()))
        .env("LOOM_MAX_BRANCHES", "20000");
    if let Some(m) = mutant {
        cmd.env("ORDO_MUTANT", m);
    }
    let limit = if u.checker == Checker::Fuzz {
        Duration::from_secs(opts.fuzz_seconds) + limit.max(Duration::from_secs(60))
    } else {
        limit
    };
    match run_command(cmd, limit) {
        Exit::Failed(text) => Exit::Failed(why_failed(&text)),
        other => other,
    }
}

/// The file stems in `dir` named `<prefix>*<suffix>.rs`, sorted.
fn glob(dir: &Path, prefix: &str, suffix: &str) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".rs").map(str::to_string))
        .filter(|n| {
            n.starts_with(prefix) && n.ends_with(suffix) && n.len() >= prefix.len() + suffix.len()
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_name_files_by_pattern() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (dir, stems) = suite_files(&root, "core/tests/loom_*.rs");
        assert_eq!(dir, PathBuf::from("core/tests"));
        assert!(
            stems.contains(&"loom_mft".to_string()) && stems.iter().all(|s| s.starts_with("loom_"))
        );
        let (_, one) = suite_files(&root, "pm/tests/prop_conservation.rs");
        assert_eq!(one, vec!["prop_conservation".to_string()]);
    }

    #[test]
    fn every_mutant_name_and_hook_is_unique_and_every_suite_names_files() {
        let rows = all_rows();
        let mut names: Vec<_> = rows.iter().map(|r| r.entry.name).collect();
        let mut hooks: Vec<_> = rows.iter().map(|r| r.entry.hook).collect();
        names.sort_unstable();
        names.dedup();
        hooks.sort_unstable();
        hooks.dedup();
        assert_eq!((names.len(), hooks.len()), (rows.len(), rows.len()));
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for c in CATALOGS {
            for s in c.suites {
                assert!(!suite_files(&root, s.files).1.is_empty(), "{}: {}", c.package, s.files);
            }
        }
        assert_eq!(row("pm-stale-owner-no-forward").map(|r| r.catalog.package), Some("ordo-pm"));
    }
}
