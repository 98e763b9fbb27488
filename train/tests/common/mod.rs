//! What the output and resume tests share: running `ordo-train`, temporary directories.
//!
//! `ORDO_TRAIN_BIN=PATH` runs the tests against another build of the binary (e.g. an older
//! commit's, to see them fail there).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub fn bin() -> PathBuf {
    std::env::var_os("ORDO_TRAIN_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ordo-train")), PathBuf::from)
}

/// A fresh, empty directory for one test.
pub fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ordo-out-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `ordo-train kge ARGS --quiet`, with `env` set.
pub fn kge_env(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(bin());
    c.arg("kge").args(args).arg("--quiet");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

/// `ordo-train kge ARGS --quiet`.
pub fn kge(args: &[&str]) -> Output {
    kge_env(args, &[])
}

/// Its stderr.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Its stdout.
pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A path as a `&str` argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Names in `dir` that contain `part`.
pub fn names_with(dir: &Path, part: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(part))
                .collect()
        })
        .unwrap_or_default()
}

/// The test MRR `kge eval --load DIR` prints, or its stderr.
pub fn eval_mrr(dataset: &str, dir: &Path, extra: &[&str]) -> Result<String, String> {
    let o = kge(&[&["eval", "--dataset", dataset, "--load", s(dir)], extra].concat());
    if o.status.success() { Ok(out(&o).trim().to_string()) } else { Err(err(&o)) }
}

/// A tiny Fashion-MNIST in IDX format: `n` training and `n` test images of 28 × 28.
pub fn tiny_fashion(dir: &Path, n: u32) {
    std::fs::create_dir_all(dir).unwrap();
    for prefix in ["train", "t10k"] {
        let mut img =
            [0x0803u32, n, 28, 28].iter().flat_map(|w| w.to_be_bytes()).collect::<Vec<u8>>();
        img.extend((0..n * 784).map(|i| (i % 251) as u8));
        std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), img).unwrap();
        let mut lab = [0x0801u32, n].iter().flat_map(|w| w.to_be_bytes()).collect::<Vec<u8>>();
        lab.extend((0..n).map(|i| (i % 10) as u8));
        std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), lab).unwrap();
    }
}
