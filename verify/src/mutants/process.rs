//! Subprocesses of the mutation table: run one with a time limit (killing its process group),
//! read cargo's test executables and libtest's test listing, and say why a run failed.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How one subprocess ended.
pub(crate) enum Exit {
    Passed,
    Failed(String),
    TimedOut,
    CouldNotRun(String),
}

/// Run `cmd` to completion or until `timeout` (a test: its output matters only when it fails).
pub(crate) fn run_command(cmd: Command, timeout: Duration) -> Exit {
    match run_capture(cmd, timeout) {
        Captured::Exited(true, _) => Exit::Passed,
        Captured::Exited(false, text) => Exit::Failed(text),
        Captured::TimedOut => Exit::TimedOut,
        Captured::CouldNotRun(e) => Exit::CouldNotRun(e),
    }
}

/// How one subprocess ended, with its output.
pub(crate) enum Captured {
    Exited(bool, String),
    TimedOut,
    CouldNotRun(String),
}

/// Run `cmd` in its own process group, killing the group at `timeout`.
pub(crate) fn run_capture(mut cmd: Command, timeout: Duration) -> Captured {
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
                kill_group(&mut child);
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

/// Kill `child`'s whole process group (a test binary and anything it started, which may hold
/// the output pipes open), then the child itself in case the group could not be signalled.
///
/// The group is named after `--`: procps-ng's `kill` (4.x) reads `-KILL -<pgid>` as two signal
/// options, exits 0 and signals nothing, which left a hung mutant running forever (a CI run
/// past its time limit, not a kill).
fn kill_group(child: &mut std::process::Child) {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill").args(["-s", "KILL", "--", &group]).status();
    let _ = child.kill();
}

/// The panic line and the one after it, or libFuzzer's error line, or the last lines.
pub(crate) fn why_failed(text: &str) -> String {
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

/// The test executables in cargo's `--message-format=json` output, as (file stem, path).
pub(crate) fn test_executables(json: &str) -> Vec<(String, PathBuf)> {
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
pub(crate) fn list_tests(listing: &str) -> Vec<String> {
    listing.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hung unit is stopped at its limit with its process group, pipes included: the runner
    /// goes on to the next unit instead of waiting for the hang (on the old `kill -KILL -<pgid>`
    /// this took the sleeper's full 60 s).
    #[test]
    fn a_unit_past_its_limit_is_killed_with_its_process_group() {
        // The shell starts a grandchild that holds the pipes open, as a test's threads would.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & sleep 60"]);
        let t = Instant::now();
        let captured = run_capture(cmd, Duration::from_millis(300));
        assert!(matches!(captured, Captured::TimedOut), "not reported as a timeout");
        assert!(t.elapsed() < Duration::from_secs(20), "the hung unit ran {:?}", t.elapsed());
    }

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
}
