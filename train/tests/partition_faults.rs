//! Issue 61, class 2: the partition store of a `--storage disk` run under faults. A run killed
//! at any fsync or rename its store makes (or its save) resumes to the uninterrupted run's
//! result, bit for bit. A folder whose partition files were damaged between runs (a flipped
//! byte, a file cut short, a missing file, a file of another run's folder: the same geometry,
//! other values) is refused when the run resumes from it, as bad input (exit 2) naming the
//! partition file; with the file restored the run resumes.
#![cfg(not(ordo_loom))]

mod common;

use common::{err, kge, kge_env, out, s, temp};
use std::path::{Path, PathBuf};

const RUN: [&str; 6] = ["--dataset", "umls", "--dim", "8", "--storage", "disk"];

fn run(dir: &Path, epochs: &str, seed: &str) -> std::process::Output {
    kge(&[&RUN[..], &["--storage-dir", s(dir), "--epochs", epochs, "--seed", seed]].concat())
}

/// The newest generation of partition 2's file in `dir`.
fn partition_2(dir: &Path) -> PathBuf {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("p2.g"))
        .collect();
    files.sort();
    files.pop().expect("partition 2 has a file")
}

#[test]
fn a_damaged_partition_file_is_refused_naming_it_and_the_restored_folder_resumes() {
    let dir = temp("partition-faults");
    let (folder, other) = (dir.join("run"), dir.join("other"));
    for (d, seed) in [(&folder, "1"), (&other, "2")] {
        let o = run(d, "1", seed);
        assert!(o.status.success(), "{}", err(&o));
    }
    let file = partition_2(&folder);
    let good = std::fs::read(&file).unwrap();
    let foreign = std::fs::read(other.join(file.file_name().unwrap())).unwrap();
    assert_eq!(foreign.len(), good.len());
    assert_ne!(foreign, good);
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    let damages: [(&str, Option<&[u8]>); 4] = [
        ("a flipped byte", Some(&flipped)),
        ("cut short", Some(&good[..good.len() - 3])),
        ("another run's file", Some(&foreign)),
        ("missing", None),
    ];
    for (what, bytes) in damages {
        match bytes {
            Some(b) => std::fs::write(&file, b).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        let o = run(&folder, "2", "1");
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{what}: {e}");
        assert!(e.contains(s(&file)), "{what}: the partition file is not named: {e}");
        assert!(!common::out(&o).contains("test ("), "{what}: trained on it: {e}");
        std::fs::write(&file, &good).unwrap();
    }
    let o = run(&folder, "2", "1");
    assert!(o.status.success(), "the restored folder resumes: {}", err(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A small run (4 partitions, so few durability points) in `--mode sync`, whose result is a
/// pure function of its options.
fn sync_run(folder: &Path, save: &Path) -> Vec<String> {
    let small = ["--partitions", "4", "--buffer", "2", "--mode", "sync", "--epochs", "2"];
    let paths = ["--storage-dir", s(folder), "--save", s(save), "--seed", "1"];
    [&RUN[..], &small, &paths].concat().into_iter().map(String::from).collect()
}

/// What a run leaves to compare: its saved tables and its test metrics.
fn result(save: &Path, o: &std::process::Output) -> (Vec<u8>, Vec<u8>, String) {
    let test = out(o).lines().filter(|l| l.starts_with("test (")).collect::<Vec<_>>().join("\n");
    let read = |f: &str| std::fs::read(save.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    (read("entities.npy"), read("relations.npy"), test)
}

/// `ORDO_CRASH_AT = k` aborts the run at its `k`th fsync or rename: creating the partition
/// files (each synced, then the manifest's sync, rename and folder sync), each epoch's
/// checkpoint (the dense parameters, the partition files written since the last one, the
/// manifest) and the save. After each kill, the same command resumes from the folder and ends
/// with the uninterrupted run's tables and metrics, bit for bit.
#[test]
fn a_disk_run_killed_at_every_fsync_and_rename_resumes_to_the_uninterrupted_result() {
    let dir = temp("partition-kill");
    let (folder, save) = (dir.join("run"), dir.join("emb"));
    let args = sync_run(&folder, &save);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = kge(&args);
    assert!(o.status.success(), "{}", err(&o));
    let whole = result(&save, &o);
    let mut crashes = 0;
    for k in 1..200 {
        for d in [&folder, &save] {
            let _ = std::fs::remove_dir_all(d);
        }
        let o = kge_env(&args, &[("ORDO_CRASH_AT", k.to_string())]);
        if o.status.success() {
            assert!(result(&save, &o) == whole, "a run with no kill left");
            break;
        }
        assert_eq!(o.status.code(), None, "run {k} failed instead of being killed: {}", err(&o));
        crashes += 1;
        let resumed = kge(&args);
        assert!(resumed.status.success(), "resume after kill {k}: {}", err(&resumed));
        assert!(result(&save, &resumed) == whole, "resume after kill {k} differs");
    }
    // Creating 4 files and the manifest: 7; each epoch's checkpoint: the dense file, at least
    // the partitions of its last state, the manifest: at least 6 (and the save's).
    assert!(crashes >= 7 + 2 * 6, "only {crashes} fsyncs and renames");
    eprintln!("killed at {crashes} fsyncs and renames, each resumed to the uninterrupted result");
    std::fs::remove_dir_all(&dir).unwrap();
}
