//! Issue 37, class 2: resume and load verify what they trust. A one-bit edit of a checkpoint's
//! `meta.json` or of a `manifest.json`, a dataset whose lines were reordered (at resume and at
//! `kge eval`), embeddings of another model, `--load` on a training run and `--epochs` below the
//! checkpoint's are each refused with exit status 2, naming the file (and line).
#![cfg(not(ordo_loom))]

mod common;

use common::{err, eval_mrr, kge, out, s, temp};
use std::path::{Path, PathBuf};

/// The options of every run here; `TWO` the epochs of the runs that write.
const RUN: [&str; 4] = ["--dim", "8", "--mode", "sync"];
const TWO: [&str; 2] = ["--epochs", "2"];

/// Flip bit `bit` of byte `at` of `path`; return the old contents.
fn flip(path: &Path, at: usize, bit: u8) -> Vec<u8> {
    let old = std::fs::read(path).unwrap();
    let mut new = old.clone();
    new[at] ^= 1 << bit;
    std::fs::write(path, new).unwrap();
    old
}

/// The checkpoint directory `latest` names.
fn latest(ck: &Path) -> PathBuf {
    ck.join(std::fs::read_to_string(ck.join("latest")).unwrap().trim())
}

/// `kge --dataset nations RUN --epochs EPOCHS --resume CK`.
fn resume(ck: &Path, epochs: &str) -> std::process::Output {
    kge(&[&["--dataset", "nations"], &RUN[..], &["--epochs", epochs, "--resume", s(ck)]].concat())
}

#[test]
fn a_one_bit_edit_of_meta_json_or_a_manifest_is_refused() {
    let dir = temp("bits");
    let (ck, save) = (dir.join("ck"), dir.join("emb"));
    let args = [&["--dataset", "nations"], &RUN[..], &TWO, &["--checkpoint", s(&ck)]].concat();
    assert!(kge(&[&args[..], &["--save", s(&save)]].concat()).status.success());
    let meta = latest(&ck).join("meta.json");
    // `"epoch":2` → `"epoch":3`: one bit, and a checkpoint that would train one epoch fewer.
    let text = std::fs::read_to_string(&meta).unwrap();
    let at = text.find("\"epoch\":2").unwrap() + "\"epoch\":".len();
    let old = flip(&meta, at, 0);
    let o = resume(&ck, "4");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("meta.json") && err(&o).contains("CRC-32"), "{}", err(&o));
    std::fs::write(&meta, old).unwrap();
    assert!(resume(&ck, "4").status.success());
    // One bit of a checksum in the checkpoint's manifest: the file it lists no longer matches.
    let manifest = latest(&ck).join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let at = text.find("\"entities.npy\": ").unwrap() + "\"entities.npy\": ".len();
    flip(&manifest, at, 0);
    let o = resume(&ck, "4");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("entities.npy") && err(&o).contains("manifest.json"), "{}", err(&o));
    // One bit of the save's manifest (its model's name): refused by `kge eval`.
    let manifest = save.join("manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let at = text.find("\"model\": \"complex\"").unwrap() + "\"model\": \"".len();
    flip(&manifest, at, 1);
    let e = eval_mrr("nations", &save, &[]).unwrap_err();
    assert!(e.contains("manifest.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A copy of the embedded `nations` dataset in `dir`, its train.txt lines in reverse order when
/// `reversed` (the same triples; other entity and relation ids).
fn nations(dir: &Path, reversed: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/nations");
    let to = dir.join(if reversed { "nations-reversed" } else { "nations" });
    std::fs::create_dir_all(&to).unwrap();
    for f in ["train.txt", "valid.txt", "test.txt"] {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        if reversed && f == "train.txt" {
            lines.reverse();
        }
        std::fs::write(to.join(f), lines.join("\n") + "\n").unwrap();
    }
    to
}

#[test]
fn a_reordered_dataset_is_refused_at_resume_and_at_eval_naming_the_line() {
    let dir = temp("reordered");
    let (data, reversed) = (nations(&dir, false), nations(&dir, true));
    let (ck, save) = (dir.join("ck"), dir.join("emb"));
    let train = [&["--dataset", s(&data)], &RUN[..], &TWO].concat();
    let o = kge(&[&train[..], &["--checkpoint", s(&ck), "--save", s(&save)]].concat());
    assert!(o.status.success(), "{}", err(&o));
    assert!(eval_mrr(s(&data), &save, &[]).is_ok());
    let o = kge(&[&["--dataset", s(&reversed)], &RUN[..], &["--epochs", "3"]].concat());
    assert!(o.status.success(), "the reversed dataset trains on its own: {}", err(&o));
    let o =
        kge(&[&["--dataset", s(&reversed)], &RUN[..], &["--epochs", "3", "--resume", s(&ck)]]
            .concat());
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("entities.tsv:") && err(&o).contains("saved name"), "{}", err(&o));
    let e = eval_mrr(s(&reversed), &save, &[]).unwrap_err();
    assert!(e.contains("entities.txt:") && e.contains("saved name"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn eval_scores_with_the_saved_model_and_refuses_another() {
    let dir = temp("model");
    let save = dir.join("emb");
    let distmult = ["--dataset", "nations", "--model", "distmult"];
    let o = kge(&[&distmult[..], &RUN[..], &TWO, &["--save", s(&save)]].concat());
    assert!(o.status.success(), "{}", err(&o));
    // The training run's test MRR, as eval prints it.
    let line = out(&o).lines().find(|l| l.starts_with("test (")).unwrap().to_string();
    let mrr = line.split("MRR ").nth(1).unwrap().split(' ').next().unwrap().to_string();
    let got = eval_mrr("nations", &save, &[]).unwrap();
    assert!(got.starts_with(&format!("test  MRR {mrr} ")), "{got} vs {line}");
    let e = eval_mrr("nations", &save, &["--model", "complex"]).unwrap_err();
    assert!(e.contains("embeddings of model distmult, but --model complex"), "{e}");
    // A save from before manifests still loads (names checked), scored with --model.
    std::fs::remove_file(save.join("manifest.json")).unwrap();
    let o = kge(&["eval", "--dataset", "nations", "--load", s(&save), "--model", "distmult"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("format 0"), "{}", err(&o));
    assert!(out(&o).starts_with(&format!("test  MRR {mrr} ")), "{}", out(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn load_on_a_training_run_and_epochs_below_the_checkpoints_are_errors() {
    let dir = temp("flags");
    let ck = dir.join("ck");
    let o = kge(&[&["--dataset", "nations"], &RUN[..], &TWO, &["--load", s(&dir)]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--load is read by `kge eval` only"), "{}", err(&o));
    assert!(!out(&o).contains("test ("), "it trained");
    let args = [&["--dataset", "nations"], &RUN[..], &TWO, &["--checkpoint", s(&ck)]].concat();
    assert!(kge(&args).status.success());
    let o = resume(&ck, "1");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("has done 2 epochs, more than --epochs 1"), "{}", err(&o));
    assert!(!out(&o).contains("test ("), "it returned the later model");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Even with the manifest rewritten to match, a `meta.json` whose epoch disagrees with its
/// directory's name and its recorded orders is refused.
#[test]
fn an_epoch_that_disagrees_with_its_directory_and_orders_is_refused() {
    let dir = temp("epoch");
    let ck = dir.join("ck");
    let args = [&["--dataset", "nations"], &RUN[..], &TWO, &["--checkpoint", s(&ck)]].concat();
    assert!(kge(&args).status.success());
    let sub = latest(&ck);
    let meta = sub.join("meta.json");
    let text = std::fs::read_to_string(&meta).unwrap().replacen("\"epoch\":2,", "\"epoch\":1,", 1);
    std::fs::write(&meta, text).unwrap();
    let manifest = sub.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let crc = ordo_train::kge::io::manifest::crc32_of(&meta).unwrap();
    m["files"]["meta.json"] = crc.into();
    std::fs::write(&manifest, m.to_string()).unwrap();
    let o = resume(&ck, "4");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("epoch 1 in directory epoch-000002"), "{}", err(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 61: `kge eval` checks the save's training triples against the dataset's `train.txt`
/// (as a resume does), not only its names: two lines swapped (the same names, the same ids)
/// are another training set, refused with exit status 2 naming the manifest.
#[test]
fn eval_refuses_a_save_trained_on_another_train_txt() {
    let dir = temp("eval-train");
    let data = nations(&dir, false);
    let save = dir.join("emb");
    let o = kge(&[&["--dataset", s(&data)], &RUN[..], &TWO, &["--save", s(&save)]].concat());
    assert!(o.status.success(), "{}", err(&o));
    assert!(eval_mrr(s(&data), &save, &[]).is_ok());
    let train = std::fs::read_to_string(data.join("train.txt")).unwrap();
    let mut lines: Vec<&str> = train.lines().collect();
    let n = lines.len();
    lines.swap(n - 1, n - 2);
    std::fs::write(data.join("train.txt"), lines.join("\n") + "\n").unwrap();
    let e = eval_mrr(s(&data), &save, &[]).unwrap_err();
    assert!(e.contains("manifest.json") && e.contains("train.txt differs"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 61: every model's save loads in `kge eval --load` and scores to the training run's own
/// test metrics (RotatE's relations are `dim / 2` phases, its entities `dim` floats).
#[test]
fn every_models_save_is_scored_by_eval_to_the_training_runs_test_metrics() {
    let dir = temp("round-trip");
    for model in ["distmult", "complex", "transe-l1", "transe-l2", "rotate"] {
        let save = dir.join(model);
        let o = kge(&[
            &["--dataset", "nations", "--model", model, "--epochs", "1"],
            &RUN[..],
            &["--save", s(&save)],
        ]
        .concat());
        assert!(o.status.success(), "{model}: {}", err(&o));
        let line = out(&o).lines().find(|l| l.starts_with("test (")).unwrap().to_string();
        // `test (sync): MRR …  Hits@10 …  (N triples/s)`: the metrics between.
        let metrics = line.split_once("): ").unwrap().1.split("  (").next().unwrap().to_string();
        let got = eval_mrr("nations", &save, &[]).unwrap_or_else(|e| panic!("{model}: {e}"));
        assert_eq!(got.trim_start_matches("test").trim(), metrics, "{model}: {got} vs {line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
