//! The mutation table: every checker against every mutant of [`ordo::mutation::Mutant`].
//!
//! Checkers:
//! - `model`: the explicit-state model of the protocol the mutant changes (in process);
//! - `proptest`: the tests of `core/tests/prop_*.rs` on the real code;
//! - `loom`: the tests of `core/tests/loom_*.rs` under `--cfg ordo_loom -C debug-assertions`;
//! - `shuttle`: the tests of `core/tests/shuttle_*.rs` under `--cfg ordo_shuttle`;
//! - `fuzz`: every `fuzz/fuzz_targets/*.rs` for `fuzz_seconds`, `cargo fuzz run --sanitizer none`.
//!
//! # How it runs (fast enough for every submission)
//! Mutants are switched at run time (`ORDO_MUTANT=<name>`), so each *configuration* (plain, loom
//! cfg, shuttle cfg, fuzz) is built **once** with `--features mutants`, each in one target dir
//! (`<target>/release`, `<target>/loom`, `<target>/shuttle`). The test binaries are then run
//! directly, one test function (a *unit*) per process:
//! 1. **Baseline.** Every unit runs once with no mutant; it must pass (else its column is an
//!    error and counts for nothing). Its duration orders the work and sets the unit's time limit
//!    for the mutants (`10 ×` baseline `+ 30 s`, at least `--timeout`).
//! 2. **Cells.** One job per (mutant, checker), over the units that can reach the mutant's hook
//!    only (below): a checker that no unit makes reachable is "n.a.", not run. A job stops at its
//!    first failing unit (the kill), trying first the units of the hooked module's own test file
//!    and then the quick ones. Jobs run on `jobs` threads (default: the available cores), the
//!    costliest first. An equivalent mutant runs on the model and proptest only (it cannot be
//!    killed; the slow checkers would spend their whole suite to say "no diff").
//!
//! **Reachability.** A mutant's hooks are the files under `core/src` that name it
//! (`Mutant::<Variant>`, outside the catalog); their top-level modules (`core/src/<m>.rs` or
//! `core/src/<m>/`) are the hooked modules. A test file reaches module `m` when it names
//! `ordo::m` or `m::` for a module it names, closed over the `crate::<m>` references between the
//! modules of `core/src`. This over-approximates (a unit that cannot reach the hook only costs
//! time); a hook in a test file itself makes that file reachable.
//!
//! A mutant is *killed* by a checker when a unit fails with it on (a counterexample, a failing
//! assertion, a crash, or a hang past the unit's limit).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ordo::mutation::Mutant;

use crate::model::{Outcome, Search};
use crate::suite::{Bound, check_mutant};

/// A checker of the mutation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Checker {
    /// The explicit-state protocol models.
    Model,
    /// proptest files on the real code.
    Proptest,
    /// loom files on the real code.
    Loom,
    /// shuttle files on the real code.
    Shuttle,
    /// cargo-fuzz targets on the real code.
    Fuzz,
}

impl Checker {
    /// Every checker, in table order.
    pub const ALL: [Checker; 5] =
        [Checker::Model, Checker::Proptest, Checker::Loom, Checker::Shuttle, Checker::Fuzz];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Model => "model",
            Checker::Proptest => "proptest",
            Checker::Loom => "loom",
            Checker::Shuttle => "shuttle",
            Checker::Fuzz => "fuzz",
        }
    }

    /// Parse [`Checker::name`].
    pub fn from_name(s: &str) -> Option<Checker> {
        Checker::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Test-file prefix in `core/tests` (the cargo-test checkers).
    fn test_prefix(self) -> Option<&'static str> {
        match self {
            Checker::Proptest => Some("prop_"),
            Checker::Loom => Some("loom_"),
            Checker::Shuttle => Some("shuttle_"),
            Checker::Model | Checker::Fuzz => None,
        }
    }

    /// `RUSTFLAGS` of the configuration and its target subdirectory (`None`: the plain release
    /// build, in the target dir itself).
    fn cfg(self) -> Option<(&'static str, &'static str)> {
        match self {
            Checker::Loom => Some(("--cfg ordo_loom -C debug-assertions", "loom")),
            Checker::Shuttle => Some(("--cfg ordo_shuttle", "shuttle")),
            _ => None,
        }
    }
}

/// One cell of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The checker failed with the mutant on; the detail says how.
    Killed(String),
    /// The checker passed with the mutant on.
    Survived,
    /// The checker does not apply (no test files, no hook it reaches, or no model of that
    /// protocol).
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
    /// Upper limit of one unit's run (a hang past its limit counts as a kill).
    pub timeout: Duration,
    /// Target dir: the plain build goes to `<target_dir>/release`, the loom and shuttle builds to
    /// `<target_dir>/loom` and `<target_dir>/shuttle`.
    pub target_dir: PathBuf,
    /// Jobs run at once.
    pub jobs: usize,
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
    /// Per checker: units (test functions, fuzz targets, models) it ran on the baseline.
    pub units: Vec<usize>,
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
        for ((c, v), n) in self.checkers.iter().zip(&self.baseline).zip(&self.units) {
            match v {
                Verdict::Killed(d) | Verdict::Error(d) | Verdict::NotApplicable(d) => {
                    let _ = writeln!(s, "  baseline / {}: {d}", c.name());
                }
                Verdict::Survived => {
                    let _ = writeln!(s, "  baseline / {}: {n} units pass", c.name());
                }
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
    let graph = ModuleGraph::read(&opts.root);
    let n = opts.mutants.len();
    let mut baseline = Vec::new();
    let mut cols: Vec<Vec<Verdict>> = Vec::new();
    let mut unit_counts = Vec::new();
    // Build every configuration (sequentially: cargo uses every core itself) and list its units.
    let mut ready: Vec<(Checker, Vec<Unit>)> = Vec::new();
    for &c in &opts.checkers {
        match prepare(c, opts, progress) {
            Ok(units) => {
                ready.push((c, units));
                baseline.push(Verdict::Survived);
                cols.push(vec![Verdict::Survived; n]);
                unit_counts.push(0);
            }
            Err(v) => {
                baseline.push(v.clone());
                let v = match v {
                    Verdict::NotApplicable(_) => v,
                    other => Verdict::Error(format!("checker could not run: {other:?}")),
                };
                cols.push(vec![v; n]);
                unit_counts.push(0);
                ready.push((c, Vec::new()));
            }
        }
    }
    let col_of = |c: Checker| opts.checkers.iter().position(|&x| x == c).unwrap_or(0);

    // Phase 1: baseline of every unit (the model column's baseline is the correct protocols).
    enum BaseJob {
        Model,
        Unit(Unit),
    }
    let mut base_jobs: Vec<BaseJob> = Vec::new();
    for (c, units) in &ready {
        if *c == Checker::Model {
            base_jobs.push(BaseJob::Model);
        }
        base_jobs.extend(units.iter().cloned().map(BaseJob::Unit));
    }
    progress.phase("baseline (no mutant)", base_jobs.len());
    let base_results = pool(opts.jobs, base_jobs, |job| match job {
        BaseJob::Model => {
            let v = model_baseline(opts);
            progress.done(&format!("model baseline: {}", v.cell()));
            (Checker::Model, None, v)
        }
        BaseJob::Unit(mut u) => {
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
            progress.done(&format!(
                "{} baseline {}: {:.1?}",
                u.checker.name(),
                u.label(),
                u.baseline
            ));
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
        mutant: Mutant,
        checker: Checker,
        units: Vec<Unit>,
        cost: Duration,
    }
    let mut cells = Vec::new();
    for (row, &m) in opts.mutants.iter().enumerate() {
        let hooks = graph.hooks(m);
        for (col, &c) in opts.checkers.iter().enumerate() {
            if baseline[col] != Verdict::Survived {
                continue;
            }
            if c == Checker::Model {
                cells.push(Cell {
                    row,
                    col,
                    mutant: m,
                    checker: c,
                    units: Vec::new(),
                    cost: Duration::from_secs(3),
                });
                continue;
            }
            if hooks.is_empty() {
                cols[col][row] = Verdict::NotApplicable("no hook in core/src or core/tests".into());
                continue;
            }
            // An equivalent mutant cannot be killed; the model and proptest show "no diff"
            // cheaply, the slow checkers would only spend their whole suite on it.
            if m.equivalent_because().is_some() && c != Checker::Proptest {
                cols[col][row] = Verdict::NotApplicable("equivalent mutant: not run".into());
                continue;
            }
            let mut units: Vec<Unit> = passed
                .get(&c)
                .into_iter()
                .flatten()
                .filter(|u| graph.reaches(c, &u.file, &hooks))
                .cloned()
                .collect();
            if units.is_empty() {
                cols[col][row] = Verdict::NotApplicable(format!(
                    "no {} unit reaches the hook in {}",
                    c.name(),
                    hooks.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
                continue;
            }
            // The hooked module's own tests first, then the quick ones.
            units.sort_by_key(|u| (!hooks.iter().any(|h| u.file.contains(h.as_str())), u.baseline));
            let cost = units.iter().map(|u| u.baseline).sum();
            cells.push(Cell { row, col, mutant: m, checker: c, units, cost });
        }
    }
    cells.sort_by_key(|c| std::cmp::Reverse(c.cost));
    progress.phase("mutants", cells.len());
    let results = pool(opts.jobs, cells, |cell| {
        let t = Instant::now();
        let v = if cell.checker == Checker::Model {
            model_cell(opts, cell.mutant)
        } else {
            mutant_cell(opts, cell.mutant, &cell.units)
        };
        progress.done(&format!(
            "{} / {}: {} ({:.1?})",
            cell.mutant.name(),
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
        .map(|(i, &m)| (m, cols.iter().map(|col| col[i].clone()).collect()))
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

fn model_cell(opts: &Options, m: Mutant) -> Verdict {
    if let Some(found) = crate::suite::check_stateright_mutant(m) {
        return match found {
            Some(why) => Verdict::Killed(why),
            None => Verdict::Survived,
        };
    }
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

/// Run the units with `m` on until the first one fails (the kill).
fn mutant_cell(opts: &Options, m: Mutant, units: &[Unit]) -> Verdict {
    for u in units {
        // Never below `--timeout`: on a loaded machine a unit can run 10× its baseline without
        // hanging, and a false timeout would count as a kill.
        let limit = (u.baseline * 10 + Duration::from_secs(30)).max(opts.timeout);
        match run_unit(opts, u, Some(m), limit) {
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

/// Build a checker's configuration and list its units; `Err` is the whole column's verdict.
fn prepare(c: Checker, opts: &Options, progress: &dyn Progress) -> Result<Vec<Unit>, Verdict> {
    match c {
        Checker::Model => Ok(Vec::new()),
        Checker::Fuzz => {
            let targets = glob(&opts.root.join("fuzz/fuzz_targets"), "");
            if targets.is_empty() {
                return Err(Verdict::NotApplicable("no fuzz targets found".into()));
            }
            if !Command::new("cargo")
                .args(["fuzz", "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
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
                    checker: c,
                    file,
                    test: String::new(),
                    exe: PathBuf::new(),
                    baseline: Duration::ZERO,
                })
                .collect())
        }
        _ => {
            let prefix = c.test_prefix().unwrap_or_default();
            let files = glob(&opts.root.join("core/tests"), prefix);
            if files.is_empty() {
                return Err(Verdict::NotApplicable(format!("no core/tests/{prefix}*.rs files")));
            }
            progress.phase(&format!("build {} ({})", c.name(), files.join(", ")), 0);
            let mut cmd = cargo_test(c, opts);
            cmd.args(["--no-run", "--message-format=json-render-diagnostics"]);
            for f in &files {
                cmd.args(["--test", f]);
            }
            let json = expect_built(run_capture(cmd, Duration::from_secs(1800)))?;
            let mut units = Vec::new();
            for (file, exe) in test_executables(&json) {
                let out = Command::new(&exe)
                    .args(["--list", "--format", "terse"])
                    .output()
                    .map_err(|e| Verdict::Error(format!("cannot list {}: {e}", exe.display())))?;
                for test in list_tests(&String::from_utf8_lossy(&out.stdout)) {
                    units.push(Unit {
                        checker: c,
                        file: file.clone(),
                        test,
                        exe: exe.clone(),
                        baseline: Duration::ZERO,
                    });
                }
            }
            Ok(units)
        }
    }
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

/// `cargo test --release -p ordo --features mutants` in the checker's configuration.
fn cargo_test(c: Checker, opts: &Options) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&opts.root)
        .args(["test", "--release", "-p", "ordo", "--features", "mutants"])
        .env_remove("ORDO_MUTANT");
    match c.cfg() {
        Some((flags, sub)) => {
            cmd.env("RUSTFLAGS", flags).env("CARGO_TARGET_DIR", opts.target_dir.join(sub));
        }
        None => {
            cmd.env_remove("RUSTFLAGS").env("CARGO_TARGET_DIR", &opts.target_dir);
        }
    }
    cmd
}

/// The test executables in cargo's `--message-format=json` output, as (file stem, path).
fn test_executables(json: &str) -> Vec<(String, PathBuf)> {
    json.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["profile"]["test"] == true)
        .filter_map(|v| {
            let exe = v["executable"].as_str()?;
            Some((v["target"]["name"].as_str()?.to_string(), PathBuf::from(exe)))
        })
        .collect()
}

/// The test names of a libtest `--list --format terse` listing (`name: test` lines).
fn list_tests(listing: &str) -> Vec<String> {
    listing.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect()
}

/// Run one unit with or without a mutant.
fn run_unit(opts: &Options, u: &Unit, m: Option<Mutant>, limit: Duration) -> Exit {
    let mut cmd = if u.checker == Checker::Fuzz {
        fuzz_command(opts, &u.file, m)
    } else {
        let mut cmd = Command::new(&u.exe);
        cmd.current_dir(opts.root.join("core")).args([
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
    if let Some(m) = m {
        cmd.env("ORDO_MUTANT", m.name());
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

/// `cargo fuzz run` of one target for `fuzz_seconds`, on a scratch corpus seeded from the
/// committed one (`fuzz/corpus/<target>`, when present).
fn fuzz_command(opts: &Options, target: &str, m: Option<Mutant>) -> Command {
    let tag = m.map_or("none", |m| m.name());
    let scratch =
        std::env::temp_dir().join(format!("ordo-mutants-{}/{tag}/{target}", std::process::id()));
    let corpus = scratch.join("corpus");
    let _ = fs::create_dir_all(&corpus);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(opts.root.join("fuzz"))
        .args(["fuzz", "run", "--sanitizer", "none", "--features", "mutants", target])
        .arg(&corpus);
    let committed = opts.root.join("fuzz/corpus").join(target);
    if committed.is_dir() {
        cmd.arg(committed);
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={}", opts.fuzz_seconds))
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
    let targets = glob(&root.join("fuzz/fuzz_targets"), "");
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

/// The panic line and the one after it, or libFuzzer's error line, or the last lines.
fn why_failed(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    // `panicked at` first: shuttle prints "test panicked in task" (no message) before it.
    let at = lines.iter().position(|l| l.contains("panicked at"));
    match at.or_else(|| {
        lines.iter().position(|l| l.contains("panicked") || l.contains("ERROR: libFuzzer"))
    }) {
        Some(i) => lines[i..(i + 2).min(lines.len())].join(" ").trim().to_string(),
        None => lines.iter().rev().take(2).rev().copied().collect::<Vec<_>>().join(" / "),
    }
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

/// Which test files can reach which module of `core/src` (module docs, "Reachability").
#[derive(Debug, Default)]
struct ModuleGraph {
    root: PathBuf,
    /// Top-level modules of `core/src` and the text of their files.
    modules: HashMap<String, String>,
    /// `crate::<m>` references between them.
    deps: HashMap<String, BTreeSet<String>>,
}

impl ModuleGraph {
    fn read(root: &Path) -> ModuleGraph {
        let src = root.join("core/src");
        let mut modules = HashMap::new();
        for e in fs::read_dir(&src).into_iter().flatten().flatten() {
            let p = e.path();
            let Some(stem) = p.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
                continue;
            };
            if stem == "lib" || stem == "main" {
                continue;
            }
            let text =
                if p.is_dir() { read_tree(&p) } else { fs::read_to_string(&p).unwrap_or_default() };
            modules.entry(stem).or_insert_with(String::new).push_str(&text);
        }
        let deps = modules
            .iter()
            .map(|(m, text)| {
                let d = modules
                    .keys()
                    .filter(|o| *o != m && text.contains(&format!("crate::{o}")))
                    .cloned()
                    .collect();
                (m.clone(), d)
            })
            .collect();
        ModuleGraph { root: root.to_path_buf(), modules, deps }
    }

    /// The modules (or, for a hook in a test file, `test:<stem>`) where `m` has a hook.
    fn hooks(&self, m: Mutant) -> BTreeSet<String> {
        let needle = format!("Mutant::{m:?}");
        let mut out: BTreeSet<String> = self
            .modules
            .iter()
            .filter(|(name, text)| *name != "mutation" && text.contains(&needle))
            .map(|(name, _)| name.clone())
            .collect();
        for dir in ["core/tests", "fuzz/fuzz_targets"] {
            for stem in glob(&self.root.join(dir), "") {
                let text = fs::read_to_string(self.root.join(dir).join(format!("{stem}.rs")));
                if text.is_ok_and(|t| t.contains(&needle)) {
                    out.insert(format!("test:{stem}"));
                }
            }
        }
        out
    }

    /// Whether the test file (or fuzz target) `stem` of checker `c` can reach one of `hooks`.
    fn reaches(&self, c: Checker, stem: &str, hooks: &BTreeSet<String>) -> bool {
        if hooks.contains(&format!("test:{stem}")) {
            return true;
        }
        let dir = if c == Checker::Fuzz { "fuzz/fuzz_targets" } else { "core/tests" };
        let Ok(text) = fs::read_to_string(self.root.join(dir).join(format!("{stem}.rs"))) else {
            return true; // cannot tell: run it
        };
        let mut stack: Vec<String> =
            self.modules.keys().filter(|m| names_module(&text, m)).cloned().collect();
        let mut seen: BTreeSet<String> = stack.iter().cloned().collect();
        while let Some(m) = stack.pop() {
            if hooks.contains(&m) {
                return true;
            }
            for d in self.deps.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        false
    }
}

/// Whether `text` names module `m` as a path: `ordo::m` or `m::` after a non-identifier char.
fn names_module(text: &str, m: &str) -> bool {
    let pat = format!("{m}::");
    text.match_indices(&pat).any(|(i, _)| {
        text[..i].chars().next_back().is_none_or(|ch| !(ch.is_alphanumeric() || ch == '_'))
    })
}

/// The concatenated text of every `.rs` file under `dir`.
fn read_tree(dir: &Path) -> String {
    let mut s = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                s.push_str(&fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    s
}

/// How one subprocess ended.
enum Exit {
    Passed,
    Failed(String),
    TimedOut,
    CouldNotRun(String),
}

/// Run `cmd` to completion or until `timeout` (a test: its output matters only when it fails).
fn run_command(cmd: Command, timeout: Duration) -> Exit {
    match run_capture(cmd, timeout) {
        Captured::Exited(true, _) => Exit::Passed,
        Captured::Exited(false, text) => Exit::Failed(text),
        Captured::TimedOut => Exit::TimedOut,
        Captured::CouldNotRun(e) => Exit::CouldNotRun(e),
    }
}

/// How one subprocess ended, with its output.
enum Captured {
    Exited(bool, String),
    TimedOut,
    CouldNotRun(String),
}

/// Run `cmd` in its own process group, killing the group at `timeout`.
fn run_capture(mut cmd: Command, timeout: Duration) -> Captured {
    use std::os::unix::process::CommandExt;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Captured::CouldNotRun(format!("cannot start {cmd:?}: {e}")),
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
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Captured::CouldNotRun(e.to_string()),
        }
    };
    let text = format!("{}{}", out.join().unwrap_or_default(), err.join().unwrap_or_default());
    match status {
        None => Captured::TimedOut,
        Some(st) => Captured::Exited(st.success(), text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_names_are_read_from_terse_listings() {
        let listing = "a::b: test\nplain: test\nbench_x: benchmark\n\n3 tests, 0 benchmarks\n";
        assert_eq!(list_tests(listing), vec!["a::b", "plain"]);
    }

    #[test]
    fn executables_are_read_from_cargo_json() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","target":{"name":"loom_mft"},"profile":{"test":true},"executable":"/t/loom_mft-1"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"name":"ordo"},"profile":{"test":false},"executable":null}"#,
            "\nnot json\n"
        );
        assert_eq!(
            test_executables(json),
            vec![("loom_mft".into(), PathBuf::from("/t/loom_mft-1"))]
        );
    }

    #[test]
    fn module_paths_are_told_from_longer_names() {
        assert!(names_module("use ordo::mft::Mft;", "mft"));
        assert!(names_module("use ordo::{engine::Batch, store::RowStore};", "store"));
        assert!(!names_module("use ordo::rowstore::X;", "store"));
        assert!(!names_module("mft is a word", "mft"));
    }

    /// On this repository: the MFT's hooks reach its own tests and the engine's, never the
    /// dispatcher's; the dispatcher's hook reaches the dispatcher's tests only.
    #[test]
    fn reachability_follows_the_module_graph() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let g = ModuleGraph::read(&root);
        let mft = g.hooks(Mutant::MftNoFence);
        assert!(mft.contains("mft"), "{mft:?}");
        assert!(g.reaches(Checker::Loom, "loom_mft", &mft));
        assert!(g.reaches(Checker::Loom, "loom_engine", &mft));
        assert!(!g.reaches(Checker::Loom, "loom_dispatcher", &mft));
        let interval = g.hooks(Mutant::AcceptEarlierInterval);
        assert!(g.reaches(Checker::Proptest, "prop_dispatcher", &interval));
        assert!(!g.reaches(Checker::Proptest, "prop_engine", &interval));
        assert!(!g.reaches(Checker::Fuzz, "engine_schedule", &interval));
    }
}
