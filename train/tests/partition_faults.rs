//! Issue 61, class 2 (in part): a `--storage disk` folder whose partition files were damaged
//! between runs. A flipped byte, a file cut short, a missing file and a file of another run's
//! folder (the same geometry, other values) are each found when the run resumes from the
//! folder, refused as bad input (exit 2) naming the partition file; with the file restored the
//! run resumes.
#![cfg(not(ordo_loom))]

mod common;

use common::{err, kge, s, temp};
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
