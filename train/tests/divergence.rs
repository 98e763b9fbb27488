//! Issue 61, class 3: a run whose loss or parameters become NaN or infinite stops, in every
//! trainer, with an error naming the step, the epoch and the option to lower; and a run whose
//! `--lr` is paper 003's γ rather than η says so before it trains, naming the η it makes.
#![cfg(not(ordo_loom))]

mod common;

use common::{err, s, temp, tiny_fashion};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sgd(args: &[&str]) -> Output {
    Command::new(common::bin()).arg("sgd").args(args).output().expect("the binary runs")
}

/// The error line names the step (or update), the epoch and `--lr` with its value.
fn names_where_and_what_to_lower(e: &str, lr: &str) {
    let line = e.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{e}"));
    assert!(line.contains("diverged"), "{e}");
    assert!(line.contains(" step ") || line.contains(" update "), "{e}");
    assert!(line.contains("(epoch "), "{e}");
    assert!(line.contains(&format!("lower --lr (it was {lr}")), "{e}");
}

#[test]
fn an_sgd_run_that_diverges_stops_naming_the_step_the_epoch_and_lr() {
    let dir = temp("sgd-diverge");
    let data = dir.join("fashion");
    tiny_fashion(&data, 20);
    for dispatcher in ["sync", "async", "elasync", "interval", "assm", "passm", "passm-plus"] {
        let started = Instant::now();
        // 10^30: the first update overflows the logits.
        let o = sgd(&[
            "--data",
            s(&data),
            "--dispatcher",
            dispatcher,
            "--lr",
            "1e30",
            "--batch",
            "4",
            "--seconds",
            "20",
            "--eval-every",
            "0.05",
            "--eval-limit",
            "8",
        ]);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(1), "{dispatcher}: {e}");
        names_where_and_what_to_lower(&e, "1000000000000000000000000000000");
        // Stopped at the first look at it, not after its 20 s.
        assert!(started.elapsed() < Duration::from_secs(10), "{dispatcher} ground on: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_assm_run_says_up_front_that_its_lr_is_gamma_and_names_the_eta_it_makes() {
    let dir = temp("sgd-scale");
    let data = dir.join("fashion");
    tiny_fashion(&data, 20);
    let args = ["--data", s(&data), "--lr", "0.05", "--momentum", "0.9", "--batch", "4"];
    let run = |dispatcher: &str| {
        let o = sgd(&[&args[..], &["--dispatcher", dispatcher, "--steps", "10"]].concat());
        assert!(o.status.success(), "{dispatcher}: {}", err(&o));
        err(&o)
    };
    for dispatcher in ["assm", "passm", "passm-plus"] {
        let e = run(dispatcher);
        let header = e.lines().next().unwrap_or_default();
        assert!(header.contains("γ = 0.05"), "{dispatcher}: {header}");
        assert!(header.contains("η = (1 − μ)·γ = 0.005"), "{dispatcher}: {header}");
        assert!(header.contains("--lr 0.005 is this step"), "{dispatcher}: {header}");
    }
    let header = run("async");
    assert!(header.lines().next().unwrap_or_default().contains("η = 0.05,"), "{header}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kge_run_that_diverges_stops_naming_the_batch_the_epoch_and_lr() {
    let base = ["--dataset", "nations", "--dim", "8", "--epochs", "3"];
    let blow_up = ["--lr", "1e30", "--init-scale", "1e18"];
    for mode in ["sync", "async", "bounded", "oac"] {
        let o = common::kge(&[&base[..], &blow_up, &["--mode", mode]].concat());
        let e = err(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {e}");
        let line = e.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
        assert!(line.contains("epoch 1: loss is "), "{mode}: {e}");
        assert!(line.contains(" in batch ") && line.contains("smaller --lr"), "{mode}: {e}");
    }
    // Partitioned on disk (its own trainer), and on AdaPM's nodes (whose batches carry no
    // epoch: the error names the batch).
    let dir = temp("kge-diverge");
    let disk = ["--dataset", "umls", "--storage", "disk", "--storage-dir", s(&dir)];
    let pm = ["--dataset", "nations", "--pm", "adapm"];
    for (what, run) in [("disk", &disk[..]), ("adapm", &pm[..])] {
        let o = common::kge(&[run, &["--dim", "8", "--epochs", "3"], &blow_up].concat());
        let e = err(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {e}");
        let line = e.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
        assert!(line.contains("loss is ") && line.contains(" in batch "), "{what}: {e}");
        assert!(line.contains("smaller --lr"), "{what}: {e}");
        assert!(what == "adapm" || line.contains("epoch 1: "), "{what}: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
