//! Issue 37, class 1: multi-file outputs are all-or-nothing and locked. A save or a checkpoint
//! killed at any of its fsyncs and renames leaves the previous complete directory or the new
//! one, never a mix, and the next run removes the dead run's temporaries; two runs into one
//! `--save` or `--checkpoint` directory: the second is refused, naming the first's pid; an
//! unwritable output is found before training; `--out` says whether it is complete.
#![cfg(not(ordo_loom))]

mod common;

use common::{eval_mrr, kge, kge_env, names_with, out, s, temp};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const QUICK: [&str; 8] = ["--dataset", "nations", "--dim", "8", "--mode", "sync", "--epochs", "1"];

/// Run `args` with `ORDO_CRASH_AT = 1, 2, …` until a run survives; after each crash call
/// `check(k)`. Returns how many runs crashed.
fn crash_at_every_point(args: &[&str], mut check: impl FnMut(u32)) -> u32 {
    for k in 1..200 {
        let o = kge_env(args, &[("ORDO_CRASH_AT", k.to_string())]);
        if o.status.success() {
            return k - 1;
        }
        // Killed by the abort, not an error exit.
        assert_eq!(o.status.code(), None, "run {k} failed instead: {}", common::err(&o));
        check(k);
    }
    panic!("never completed");
}

#[test]
fn a_save_killed_at_every_fsync_and_rename_leaves_the_old_or_the_new_save() {
    let dir = temp("save-crash");
    let (save, reference) = (dir.join("emb"), dir.join("reference"));
    let seeded = |seed: &'static str, to: &Path| {
        let o = kge(&[&QUICK[..], &["--seed", seed, "--save", s(to)]].concat());
        assert!(o.status.success(), "{}", common::err(&o));
    };
    seeded("1", &save);
    seeded("2", &reference);
    let old = std::fs::read(save.join("entities.npy")).unwrap();
    let new = std::fs::read(reference.join("entities.npy")).unwrap();
    let (old_mrr, new_mrr) =
        (eval_mrr("nations", &save, &[]).unwrap(), eval_mrr("nations", &reference, &[]).unwrap());
    assert_ne!(old, new);
    let args = [&QUICK[..], &["--seed", "2", "--save", s(&save)]].concat();
    let crashes = crash_at_every_point(&args, |k| {
        // Whatever the instant, the directory is one complete save: it loads (its manifest
        // matches its files) and is wholly the old one or wholly the new one.
        let mrr = eval_mrr("nations", &save, &[]).unwrap_or_else(|e| panic!("crash {k}: {e}"));
        let now = std::fs::read(save.join("entities.npy")).unwrap();
        assert!(
            (now == old && mrr == old_mrr) || (now == new && mrr == new_mrr),
            "crash {k}: a mixed directory"
        );
    });
    assert!(crashes >= 6, "only {crashes} durability points in a save");
    assert_eq!(std::fs::read(save.join("entities.npy")).unwrap(), new);
    // The surviving run removed every temporary the crashed ones left.
    assert_eq!(names_with(&dir, ".tmp-"), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_killed_at_every_fsync_and_rename_resumes_from_a_complete_one() {
    let dir = temp("ck-crash");
    let ck = dir.join("ck");
    let run = ["--dataset", "nations", "--dim", "8", "--mode", "sync"];
    let args = [&run[..], &["--epochs", "2", "--checkpoint", s(&ck)]].concat();
    assert!(kge(&args).status.success());
    let crashes = crash_at_every_point(&args, |k| {
        let resumed = kge(&[&run[..], &["--epochs", "3", "--resume", s(&ck)]].concat());
        assert!(resumed.status.success(), "crash {k}: {}", common::err(&resumed));
        assert!(out(&resumed).contains("    3 "), "crash {k}: epoch 3 was not trained");
    });
    assert!(crashes >= 10, "only {crashes} durability points in a checkpoint");
    assert_eq!(names_with(&ck, ".tmp-"), Vec::<String>::new());
    assert_eq!(names_with(&ck, "epoch-"), ["epoch-000002"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A long run writing `flag DIR` in the background, once it holds `DIR`'s lock (its pid in the
/// lock file beside `DIR`); `None` if it never takes it.
fn holder(flag: &str, dir: &Path) -> (Child, Option<String>) {
    let child = Command::new(common::bin())
        .args(["kge", "--dataset", "umls", "--dim", "32", "--mode", "sync", "--epochs", "500"])
        .args(["--quiet", flag, s(dir)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = dir.with_file_name(format!(".{}.lock", dir.file_name().unwrap().to_str().unwrap()));
    let pid = child.id().to_string();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if std::fs::read_to_string(&lock).is_ok_and(|p| p.trim() == pid) {
            return (child, Some(pid));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, None)
}

fn second_run_is_refused(flag: &str, tag: &str) {
    let dir = temp(tag);
    let target = dir.join("shared");
    let (mut first, pid) = holder(flag, &target);
    let second = kge(&[&QUICK[..], &[flag, s(&target)]].concat());
    // The first is killed mid-run: a crash, as far as the directory is concerned.
    first.kill().unwrap();
    first.wait().unwrap();
    let pid = pid.expect("the first run never locked its output directory");
    let e = common::err(&second);
    assert_eq!(second.status.code(), Some(2), "{e}");
    assert!(e.contains("in use by another run") && e.contains(&pid), "{e}");
    assert!(e.contains(s(&target)), "{e}");
    assert!(!out(&second).contains("test ("), "the second run trained: {e}");
    // The lock dies with its holder: a third run writes the directory.
    let third = kge(&[&QUICK[..], &[flag, s(&target)]].concat());
    assert!(third.status.success(), "{}", common::err(&third));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_save_into_a_directory_in_use_is_refused_naming_the_holder() {
    second_run_is_refused("--save", "save-lock");
}

#[test]
fn a_second_checkpointing_run_into_a_directory_in_use_is_refused_naming_the_holder() {
    second_run_is_refused("--checkpoint", "ck-lock");
}

#[test]
fn unwritable_outputs_are_refused_before_training_naming_the_path() {
    let dir = temp("unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let bad = file.join("sub");
    for flag in ["--save", "--out", "--checkpoint"] {
        let o = kge(&[&QUICK[..], &[flag, s(&bad)]].concat());
        let e = common::err(&o);
        assert_eq!(o.status.code(), Some(2), "{flag}: {e}");
        assert!(e.contains(s(&bad)) && e.contains("cannot write"), "{flag}: {e}");
        assert!(!out(&o).contains("test ("), "{flag}: trained before refusing: {e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stale_temporaries_are_removed_and_out_is_marked_complete_last() {
    let dir = temp("stale");
    let (save, ck, o) = (dir.join("emb"), dir.join("ck"), dir.join("out"));
    // What dead runs left: a staged save beside its target, a staged checkpoint inside.
    let staged_save = dir.join(".emb.tmp-4242-00000000deadbeef");
    let staged_ck = ck.join(".epoch-000001.tmp-4242-00000000deadbeef");
    for d in [&staged_save, &staged_ck] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("entities.npy"), "half").unwrap();
    }
    // A COMPLETE of an earlier run goes before anything of this run is written: a run killed
    // at its first durability point leaves --out unmarked.
    std::fs::create_dir_all(&o).unwrap();
    std::fs::write(o.join("COMPLETE"), "earlier\n").unwrap();
    let crashed =
        kge_env(&[&QUICK[..], &["--out", s(&o)]].concat(), &[("ORDO_CRASH_AT", "1".into())]);
    assert_eq!(crashed.status.code(), None, "{}", common::err(&crashed));
    assert!(!o.join("COMPLETE").exists(), "an incomplete --out is marked complete");
    let args = [&QUICK[..], &["--save", s(&save), "--checkpoint", s(&ck), "--out", s(&o)]].concat();
    let run = kge(&args);
    assert!(run.status.success(), "{}", common::err(&run));
    assert!(!staged_save.exists() && !staged_ck.exists(), "stale temporaries left");
    let marker = std::fs::read_to_string(o.join("COMPLETE")).unwrap();
    let manifest = std::fs::read_to_string(save.join("manifest.json")).unwrap();
    assert!(manifest.contains(&format!("\"run\": \"{}\"", marker.trim())), "{marker} {manifest}");
    // metrics.csv is a CSV of one header and 2 rows (an epoch and the test row).
    let csv = std::fs::read_to_string(o.join("metrics.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows.iter().all(|r| r.len() == 10), "{csv}");
    assert_eq!((rows[1][9], rows[2][9]), ("valid", "test"), "{csv}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 61: a run that ends cleanly leaves no `.NAME.lock` beside its outputs (a killed one
/// does, and the next run takes it: `a_second_save_into_a_directory_in_use_…`).
#[test]
fn a_clean_run_leaves_no_lock_file_behind() {
    let dir = temp("no-lock");
    let (save, ck, o) = (dir.join("emb"), dir.join("ck"), dir.join("out"));
    let args = [&QUICK[..], &["--save", s(&save), "--checkpoint", s(&ck), "--out", s(&o)]].concat();
    let run = kge(&args);
    assert!(run.status.success(), "{}", common::err(&run));
    assert_eq!(names_with(&dir, ".lock"), Vec::<String>::new());
    // Resuming from the checkpoint holds it too, and gives it back as cleanly.
    let resumed = kge(&[&QUICK[..6], &["--epochs", "2", "--resume", s(&ck)]].concat());
    assert!(resumed.status.success(), "{}", common::err(&resumed));
    assert_eq!(names_with(&dir, ".lock"), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 61: `--out` files are replaced whole, not rewritten in place: a reader that has the
/// last run's chart or CSV open (here: a second link to it) keeps it whole, and no temporary
/// is left.
#[test]
fn out_files_are_replaced_not_rewritten_in_place() {
    let dir = temp("out-replace");
    let o = dir.join("out");
    let first = kge(&[&QUICK[..], &["--seed", "1", "--out", s(&o)]].concat());
    assert!(first.status.success(), "{}", common::err(&first));
    let files = ["metrics.csv", "mrr_vs_time.png", "mrr_vs_epoch.png"];
    let mut held = Vec::new();
    for f in files {
        let link = dir.join(format!("held-{f}"));
        std::fs::hard_link(o.join(f), &link).unwrap();
        held.push((f, link.clone(), std::fs::read(&link).unwrap()));
    }
    let second = kge(&[&QUICK[..], &["--seed", "2", "--out", s(&o)]].concat());
    assert!(second.status.success(), "{}", common::err(&second));
    for (f, link, old) in held {
        assert_ne!(std::fs::read(o.join(f)).unwrap(), old, "{f} was not rewritten");
        assert_eq!(std::fs::read(&link).unwrap(), old, "{f} was written in place");
    }
    assert_eq!(names_with(&o, ".tmp-"), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 61: `kge_bench --out DIR` is locked like every other output: refused before any work
/// while another process holds `DIR`, naming it.
#[test]
fn kge_bench_out_is_locked() {
    let dir = temp("bench-lock");
    let o = dir.join("out");
    let held = ordo_train::outdir::OutputLock::take(&o).unwrap();
    let bench = Command::new(env!("CARGO_BIN_EXE_kge_bench"))
        .args(["--only", "umls", "--epochs", "1", "--out", s(&o)])
        .output()
        .unwrap();
    let e = common::err(&bench);
    assert!(!bench.status.success(), "ran into a held directory: {e}");
    assert!(
        e.contains("in use by another run") && e.contains(&std::process::id().to_string()),
        "{e}"
    );
    assert!(!common::out(&bench).contains("###"), "benchmarked before refusing: {e}");
    drop(held);
    std::fs::remove_dir_all(&dir).unwrap();
}
