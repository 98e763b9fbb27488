//! The filled mutation table: one verdict per (mutant, checker), the exit criterion, and its
//! rendering.

use std::fmt::Write as _;
use std::time::Duration;

use ordo::mutation::Checker;

use super::Row;

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
    /// The text of the cell.
    pub fn cell(&self) -> &'static str {
        match self {
            Verdict::Killed(d) if d.starts_with("timeout") => "killed(t/o)",
            Verdict::Killed(_) => "killed",
            Verdict::Survived => "survived",
            Verdict::NotApplicable(_) => "n.a.",
            Verdict::Error(_) => "error",
        }
    }
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
    pub rows: Vec<(Row, Vec<Verdict>)>,
    /// Per checker: units (test functions, fuzz targets, models) it ran on the baseline.
    pub units: Vec<usize>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
}

impl Table {
    /// Non-equivalent mutants killed by at least one checker, and the number of non-equivalent
    /// mutants.
    pub fn kill_rate(&self) -> (usize, usize) {
        let live: Vec<_> = self.rows.iter().filter(|(r, _)| r.entry.equivalent.is_none()).collect();
        let killed =
            live.iter().filter(|(_, v)| v.iter().any(|v| matches!(v, Verdict::Killed(_)))).count();
        (killed, live.len())
    }

    /// The cells a catalog demands and did not get: `(mutant, checker)` where the checker ran,
    /// is listed in the mutant's `killed_by`, and did not kill it.
    pub fn missed_demands(&self) -> Vec<(&'static str, Checker)> {
        let mut out = Vec::new();
        for (r, vs) in &self.rows {
            for (&c, v) in self.checkers.iter().zip(vs) {
                if r.entry.killed_by.contains(&c) && !matches!(v, Verdict::Killed(_)) {
                    out.push((r.entry.name, c));
                }
            }
        }
        out
    }

    /// The exit criterion. Always: every baseline passes (or is n.a.), no cell is an error, and
    /// every checker a catalog names in a mutant's `killed_by` kills it (when it runs).
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
                .filter(|(r, _)| r.entry.equivalent.is_none())
                .all(|(_, v)| model.is_none_or(|i| !matches!(v[i], Verdict::Survived)))
        } else {
            let (k, n) = self.kill_rate();
            k == n
        };
        baselines_ok && no_errors && killed && self.missed_demands().is_empty()
    }

    /// Render the table, the details of each kill, and the kill rate.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = write!(s, "| {:<31} |", "mutant");
        for c in &self.checkers {
            let _ = write!(s, " {:<11} |", c.name());
        }
        s.push('\n');
        let _ = write!(s, "|{}|", "-".repeat(33));
        for _ in &self.checkers {
            let _ = write!(s, "{}|", "-".repeat(13));
        }
        s.push('\n');
        let _ = write!(s, "| {:<31} |", "(none: baseline must pass)");
        for v in &self.baseline {
            let cell = match v {
                Verdict::Survived => "passes",
                Verdict::Killed(_) => "FAILS",
                other => other.cell(),
            };
            let _ = write!(s, " {cell:<11} |");
        }
        s.push('\n');
        for (r, vs) in &self.rows {
            let name = if r.entry.equivalent.is_some() {
                format!("{} (equiv.)", r.entry.name)
            } else {
                r.entry.name.to_string()
            };
            let _ = write!(s, "| {name:<31} |");
            for v in vs {
                // An equivalent mutant that passes is expected, not a survivor.
                let cell = match v {
                    Verdict::Survived if r.entry.equivalent.is_some() => "no diff",
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
        for (r, vs) in &self.rows {
            for (c, v) in self.checkers.iter().zip(vs) {
                match v {
                    Verdict::Killed(d) | Verdict::Error(d) => {
                        let _ = writeln!(s, "  {} / {}: {}", r.entry.name, c.name(), d);
                    }
                    _ => {}
                }
            }
            if let Some(why) = r.entry.equivalent {
                let _ = writeln!(s, "  {} is equivalent: {why}", r.entry.name);
            }
        }
        let (k, n) = self.kill_rate();
        let survivors: Vec<&str> = self
            .rows
            .iter()
            .filter(|(r, v)| {
                r.entry.equivalent.is_none() && !v.iter().any(|v| matches!(v, Verdict::Killed(_)))
            })
            .map(|(r, _)| r.entry.name)
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
        for (m, c) in self.missed_demands() {
            let _ = writeln!(s, "Not killed by {}, which its catalog demands: {m}", c.name());
        }
        let _ = writeln!(s, "Elapsed: {:.1?}", self.elapsed);
        s
    }
}
