//! `ordo-verify explore` in a real browser: start the Explorer on the OAC model with a mutant,
//! load the page in headless Chromium, and check that the property `safe` lists the
//! counterexample as a link to its steps (the same path that `explore` prints).
//!
//! Needs Chromium (Debian's apt package `chromium`, binary `chromium`; `CHROMIUM=/path` to use
//! another): `.ci/run` installs it when missing and runs this test with `--ignored`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills the Explorer when the test ends, whatever way it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".to_string())
}

/// Run headless Chromium on `url` with `args` (e.g. `--dump-dom`), letting the page's scripts
/// run for a few seconds of virtual time; its stdout.
fn headless(url: &str, args: &[&str]) -> String {
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000"])
        .args(["--window-size=1280,1000"])
        .args(args)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e} (apt install chromium)", chromium()));
    assert!(out.status.success(), "chromium failed: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs chromium (apt chromium); .ci/run installs it and runs this test with --ignored"]
fn explorer_lists_the_mutants_counterexample_in_headless_chromium() {
    let port = TcpListener::bind(("localhost", 0)).unwrap().local_addr().unwrap().port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ordo-verify"))
        .args(["explore", "--model", "oac", "--mutant", "evict-ste-plus-one"])
        .args(["--port", &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _server = Server(child);
    let mut lines = BufReader::new(stdout).lines();
    // First line: the counterexample's steps address; second: the Explorer is up and searching.
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("counterexample (10 steps): "), "{first}");
    let steps = first.rsplit('#').next().unwrap().to_string();
    let second = lines.next().unwrap().unwrap();
    assert!(second.starts_with("Explorer: http://localhost:"), "{second}");

    let url = format!("http://localhost:{port}/");
    // The on-demand search runs in the server; reload until the discovery is listed.
    let mut dom = String::new();
    for _ in 0..10 {
        dom = headless(&url, &["--dump-dom"]);
        if dom.contains(&format!("href=\"#{steps}\"")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        dom.contains(&format!("href=\"#{steps}\"")),
        "the page does not link the counterexample #{steps}:\n{dom}"
    );
    assert!(dom.contains("safe: every step"), "{dom}");

    // The counterexample's own page lists its steps, ending with the device's run of the batch
    // whose eviction removed the entry it needed.
    let dom = headless(&format!("{url}#{steps}"), &["--dump-dom"]);
    assert!(dom.contains("Counterexample found"), "{dom}");
    assert!(dom.contains("DeviceRun"), "{dom}");
    assert!(dom.contains("which this very eviction"), "{dom}");
    if let Ok(dir) = std::env::var("ORDO_EXPLORER_SCREENSHOT") {
        let file = format!("--screenshot={dir}/explorer-evict-ste-plus-one.png");
        headless(&format!("{url}#{steps}"), &[&file]);
    }
}
