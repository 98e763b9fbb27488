//! `ordo-train kge` on bad input: a malformed line, an id of valid/test unknown to train, an odd dimension for ComplEx/RotatE, a bad
//! `--config` file, a checkpoint of another model. Each exits with status 2, names the file (and
//! line, where there is one), and writes nothing (`--out` stays absent).
#![cfg(not(ordo_loom))]

use std::path::{Path, PathBuf};
use std::process::Command;

fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ordo-cli-bad-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run `ordo-train kge ARGS --quiet --epochs 1 --out OUT`; return (status code, stderr).
fn kge(args: &[&str], out: &Path) -> (Option<i32>, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_ordo-train"))
        .arg("kge")
        .args(args)
        .args(["--quiet", "--epochs", "1", "--out"])
        .arg(out)
        .output()
        .expect("the binary runs");
    (run.status.code(), String::from_utf8_lossy(&run.stderr).into_owned())
}

#[test]
fn bad_input_exits_2_names_the_file_and_writes_nothing() {
    let dir = temp("input");
    let out = dir.join("out");
    let data = dir.join("kg");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("train.txt"), "a\tr\tb\nb\tr\tc\n").unwrap();
    std::fs::write(data.join("valid.txt"), "a\tr\tc\n").unwrap();
    std::fs::write(data.join("test.txt"), "a\tr\tb\nc r a\n").unwrap();
    let (code, err) = kge(&["--dataset", data.to_str().unwrap()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("test.txt:2:"), "{err}");
    // An entity of valid.txt that train.txt does not have.
    std::fs::write(data.join("test.txt"), "a\tr\tb\n").unwrap();
    std::fs::write(data.join("valid.txt"), "a\tr\tc\n\nc\tr\tzz\n").unwrap();
    let (code, err) = kge(&["--dataset", data.to_str().unwrap()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("valid.txt:3: entity \"zz\" does not occur in train.txt"), "{err}");
    // An odd dimension for a complex model.
    let (code, err) = kge(&["--dataset", "nations", "--model", "rotate", "--dim", "7"], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RotatE needs a positive even embedding dimension, got 7"), "{err}");
    // A config file with an unknown key, and one with a bad value.
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "dim = 8\nbatch_sise = 3\n").unwrap();
    let (code, err) = kge(&["--dataset", "nations", "--config", cfg.to_str().unwrap()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("bad.toml") && err.contains("batch_sise"), "{err}");
    let cfg = dir.join("bad.json");
    std::fs::write(&cfg, "{\"model\": \"transx\"}").unwrap();
    let (code, err) = kge(&["--dataset", "nations", "--config", cfg.to_str().unwrap()], &out);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("bad.json") && err.contains("transx"), "{err}");
    assert!(!out.exists(), "--out was written on bad input");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_model_exits_2_and_a_config_file_is_overridden_by_flags() {
    let dir = temp("ckpt");
    let (ck, out) = (dir.join("ck"), dir.join("out"));
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, "dataset = \"nations\"\nmodel = \"distmult\"\nmode = \"sync\"\n").unwrap();
    let c = cfg.to_str().unwrap();
    let (code, err) = kge(&["--config", c, "--checkpoint", ck.to_str().unwrap()], &out);
    assert_eq!(code, Some(0), "{err}");
    assert!(ck.join("latest").is_file());
    let out2 = dir.join("out2");
    let resume = ["--config", c, "--model", "complex", "--resume", ck.to_str().unwrap()];
    let (code, err) = kge(&resume, &out2);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("meta.json") && err.contains("checkpoint of another run"), "{err}");
    assert!(!out2.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--pm` with flags that belong to the engine's runs, PM flags without `--pm`, and zero nodes:
/// each exits with status 2 and says which flag, before reading the dataset.
#[test]
fn bad_pm_flag_combinations_exit_2() {
    let cases: [(&[&str], &str); 6] = [
        (&["--pm", "adapm", "--pm-nodes", "0"], "--pm-nodes 0: must be at least 1"),
        (&["--pm-nodes", "2"], "--pm-nodes, --intent-offset and --pm-negatives need --pm"),
        (&["--intent-offset", "3"], "--pm-nodes, --intent-offset and --pm-negatives need --pm"),
        (&["--pm-negatives", "global"], "--pm-nodes, --intent-offset and --pm-negatives need --pm"),
        (&["--pm", "static", "--mode", "sync"], "--pm does not go with --mode"),
        (&["--pm", "adapm", "--save", "emb"], "--pm does not go with --save"),
    ];
    for (args, message) in cases {
        let run = Command::new(env!("CARGO_BIN_EXE_ordo-train"))
            .args(["kge", "--dataset", "no-such-dataset", "--quiet"])
            .args(args)
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
