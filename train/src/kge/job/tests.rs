//! The run layer's planning against the command line: every flag and config key plans the run
//! it planned before the layer moved out of the CLI.

use super::error::{BoxError, ConfigError};
use super::one_run::OneRun;
use super::options::{INTENT_OFFSET, Options, read_config};
use super::plan::{Command, Job};
use crate::kge::backends::partitioned::StorageKind;
use crate::kge::backends::pm::PmConfig;
use crate::kge::cli::KgeArgs;
use crate::kge::data::batch::NegSampling;
use crate::kge::data::dataset::Dataset;
use crate::kge::run::mode::TrainMode;
use clap::Parser;
use std::path::PathBuf;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    kge: KgeArgs,
}

fn plan(args: &[&str]) -> Result<Job, BoxError> {
    let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied())).unwrap();
    let (opts, request) = cli.kge.request();
    Job::resolve(opts, request, read_config, None)
}

/// `flags` parsed as the Python package parses them, then [`OneRun::new`].
fn plan_run<'a>(flags: impl IntoIterator<Item = &'a str>) -> Result<OneRun, BoxError> {
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        opts: Options,
    }
    let argv = std::iter::once("kge").chain(flags);
    OneRun::new(Flags::try_parse_from(argv)?.opts)
}

/// `kge compare` alone runs the embedded WordNet profile; any flag overrides its line, and
/// --dataset or --config replaces the profile (UMLS's defaults then, as for `kge`).
#[test]
fn compare_without_a_dataset_runs_the_embedded_wordnet_profile() {
    let p = plan(&["compare"]).unwrap();
    assert_eq!((p.opts.dataset(), p.cfg.dim, p.cfg.epochs), ("wordnet30", 96, 10));
    assert_eq!((p.cfg.batch_size, p.cfg.negatives, p.cfg.chunk), (256, 64, 16));
    let p = plan(&["compare", "--dim", "8"]).unwrap();
    assert_eq!((p.opts.dataset(), p.cfg.dim, p.cfg.epochs), ("wordnet30", 8, 10));
    let p = plan(&["--epochs", "3", "compare"]).unwrap();
    assert_eq!((p.opts.dataset(), p.cfg.epochs), ("wordnet30", 3), "a flag before it too");
    let p = plan(&["compare", "--dataset", "umls"]).unwrap();
    let single = plan(&[]).unwrap();
    assert_eq!((p.opts.dataset(), p.cfg.dim), ("umls", single.cfg.dim));
    assert_eq!(single.opts.dataset(), "umls", "`kge` alone keeps UMLS");
}

#[test]
fn bad_storage_flags_are_refused_before_anything_is_read_or_written() {
    let dir = std::env::temp_dir().join(format!("ordo-kge-cli-storage-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    let err =
        plan(&["--storage", "disk", "--storage-dir", d, "--partitions", "4", "--buffer", "5"]);
    let err = err.expect_err("a buffer larger than the partitions");
    assert!(err.to_string().contains("--buffer"), "{err}");
    assert!(!dir.exists(), "nothing written");
    let err = plan(&["--storage", "disk"]).expect_err("no folder");
    assert!(err.to_string().contains("--storage-dir"), "{err}");
    let err = plan(&["--buffer", "2"]).expect_err("no storage");
    assert!(err.to_string().contains("need --storage"), "{err}");
    let err = plan(&["--storage", "memory", "--pm", "adapm"]).expect_err("with --pm");
    assert!(err.to_string().contains("--pm"), "{err}");
    let err = plan(&["--storage", "memory", "--load", d]).expect_err("with --load");
    assert!(err.to_string().contains("--load"), "{err}");
    // --save streams the embeddings from the storage: accepted.
    let saving = plan(&["--storage", "memory", "--save", d]).unwrap();
    assert!(saving.opts.partition_opts(false).unwrap().is_some());
    let ok = plan(&["--storage", "disk", "--storage-dir", d, "--partitions", "8", "--buffer", "2"])
        .unwrap();
    let p = ok.opts.partition_opts(false).unwrap().unwrap();
    assert_eq!((p.partitions, p.buffer, p.storage), (8, 2, StorageKind::Disk));
    assert!(!dir.exists(), "planning writes nothing");
}

/// A negative sampling a run would not do is refused before the dataset is read: the runs
/// that draw their own negatives (the partition buffer; the PM's local negatives, its
/// default) take only uniform ones, and distinct negatives lay a batch's rows out
/// unsorted, which the PM and the GPU's cache do not take.
#[test]
fn negative_samplings_are_refused_where_they_cannot_run() {
    for with in [&["--storage", "memory"][..], &["--pm", "adapm"]] {
        let args = [&["--neg-sampling", "batch"][..], with].concat();
        let err = plan(&args).expect_err("refused");
        assert!(err.to_string().starts_with("--neg-sampling batch: does not go with"), "{err}");
    }
    let global = ["--neg-sampling", "batch", "--pm", "adapm", "--pm-negatives", "global"];
    assert_eq!(plan(&global).unwrap().cfg.neg_sampling, NegSampling::Batch);
    for (with, named) in [
        (&["--pm", "adapm"][..], "--pm"),
        (&["--storage", "memory"], "--storage"),
        (&["--device", "cuda"], "--device cuda"),
    ] {
        let args = [&["--neg-sampling", "distinct"][..], with].concat();
        let err = plan(&args).expect_err("refused");
        assert!(err.to_string().contains(&format!("does not go with {named}")), "{err}");
    }
    let p = plan(&["--neg-sampling", "distinct"]).unwrap();
    assert_eq!(p.cfg.neg_sampling, NegSampling::Distinct);
}

/// `--precision bf16` is refused before anything is read where the rows are not the CPU
/// step's in the engine's in-memory store (`--device cuda`, `--pm`, `--storage`), with a typed
/// error naming the option; `f32` (the default) goes with all of them.
#[test]
fn bf16_is_refused_up_front_where_rows_are_f32_only() {
    let dir = std::env::temp_dir().join(format!("ordo-kge-cli-bf16-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    for (with, named) in [
        (&["--device", "cuda"][..], "--device cuda"),
        (&["--pm", "adapm"], "--pm"),
        (&["--storage", "memory"], "--storage"),
        (&["--storage", "disk", "--storage-dir", d], "--storage"),
    ] {
        let args = [&["--precision", "bf16"][..], with].concat();
        let err = plan(&args).expect_err("refused");
        let typed = err.downcast_ref::<ConfigError>();
        assert!(matches!(typed, Some(ConfigError::PrecisionIncompatible(_))), "{err}");
        let want = format!("--precision bf16 does not go with {named}");
        assert!(err.to_string().starts_with(&want), "{err}");
        let f32 = [&["--precision", "f32"][..], with].concat();
        assert!(plan(&f32).is_ok(), "{with:?} with f32");
        assert!(plan_run(args.iter().copied()).is_err(), "the Python path refuses it too");
    }
    let p = plan(&["--precision", "bf16", "--mode", "async"]).unwrap();
    assert_eq!(p.cfg.precision, crate::kge::model::precision::Precision::Bf16);
    assert_eq!(plan(&[]).unwrap().cfg.precision, Default::default(), "f32 by default");
    assert!(!dir.exists(), "planning writes nothing");
}

/// In-batch negatives beside the others are refused up front where a run draws its own
/// negatives (the partition buffer, the PM's local negatives), and taken everywhere else:
/// with the GPU step and the PM's global negatives, which step the batches as built.
#[test]
fn in_batch_negatives_are_refused_where_a_run_draws_its_own() {
    let dir = std::env::temp_dir().join(format!("ordo-kge-cli-in-batch-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    for (with, named) in [
        (&["--storage", "disk", "--storage-dir", d][..], "--storage"),
        (&["--storage", "memory"], "--storage"),
        (&["--pm", "adapm"], "--pm's local negatives"),
    ] {
        let args = [&["--batch-negatives", "50"][..], with].concat();
        let err = plan(&args).expect_err("refused");
        let want = format!("--batch-negatives 50: does not go with {named}");
        assert!(err.to_string().starts_with(&want), "{err}");
    }
    for with in [&["--device", "cuda"][..], &["--pm", "adapm", "--pm-negatives", "global"], &[]] {
        let args = [&["--negatives", "100", "--batch-negatives", "50"][..], with].concat();
        let p = plan(&args).unwrap();
        assert_eq!((p.cfg.negatives, p.cfg.batch_negatives), (100, 50));
    }
    assert!(plan(&["--batch-negatives", "0", "--storage", "memory"]).is_ok());
    assert!(!dir.exists(), "planning writes nothing");
}

fn pm(args: &[&str], launch: Option<(usize, usize)>) -> Result<Option<PmConfig>, ConfigError> {
    let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied())).unwrap();
    cli.kge.request().0.resolve(read_config)?.pm_config(false, launch)
}

#[test]
fn one_run_takes_the_cli_flags_and_refuses_what_one_run_cannot_do() {
    let plan = plan_run(["--dim", "20", "--mode", "sync", "--save", "x"]).unwrap();
    assert_eq!((plan.config.dim, plan.mode, plan.dataset.as_str()), (20, TrainMode::Sync, "umls"));
    assert_eq!(plan.save, Some(PathBuf::from("x")));
    let clap = |r: Result<OneRun, BoxError>| r.unwrap_err().downcast::<clap::Error>().is_ok();
    assert!(clap(plan_run(["--dimm", "20"])), "a misspelt flag is clap's error");
    assert!(plan_run(["--dim", "0"]).is_err(), "checked as the CLI checks it");
    let kept = plan_run(["--checkpoint", "c", "--resume", "r", "--out", "o"]).unwrap();
    let o = &kept.opts;
    assert_eq!(
        (o.checkpoint.as_deref(), o.resume.as_deref()),
        (Some("c".as_ref()), Some("r".as_ref()))
    );
    assert_eq!(o.out.as_deref(), Some("o".as_ref()), "--out is the plan's, written by finish");
    assert!(clap(plan_run(["compare"])), "no subcommand: not a flag");
    for refused in [&["--load", "x"][..], &["--pm", "adapm"]] {
        let e = plan_run(refused.iter().copied()).unwrap_err();
        assert!(matches!(e.downcast_ref(), Some(ConfigError::Unsupported(_))), "{refused:?}: {e}");
    }
    // A --storage run is taken, its options checked as the command line checks them.
    let disk = plan_run(["--storage", "disk", "--storage-dir", "x", "--partitions", "4"]).unwrap();
    let p = disk.partitions.as_ref().expect("a partitioned run");
    assert_eq!((p.partitions, p.buffer, p.dir.as_deref()), (4, 4, Some("x".as_ref())));
    assert!(disk.prepare(&Dataset::load("umls").unwrap()).is_err(), "its table is not in memory");
    for refused in [
        &["--storage", "disk"][..],
        &["--storage", "disk", "--storage-dir", "x", "--checkpoint", "c"],
        &["--storage", "memory", "--out", "o"],
        &["--storage", "memory", "--partitions", "4", "--buffer", "5"],
    ] {
        assert!(plan_run(refused.iter().copied()).is_err(), "{refused:?}");
    }
}

/// A `--storage` run of [`OneRun`] (the Python package's) is the command line's: the same
/// checks before work starts (a `--memory-limit` the buffer does not fit is refused, naming
/// `--buffer`; without `--buffer` the largest that fits is picked) and the same table.
#[test]
fn a_partitioned_one_run_is_checked_and_trained_as_the_command_line_s() {
    let d = Dataset::load("umls").unwrap();
    let flags = [
        "--storage",
        "memory",
        "--partitions",
        "4",
        "--dim",
        "8",
        "--epochs",
        "1",
        "--mode",
        "sync",
    ];
    let tight = plan_run(flags.into_iter().chain(["--buffer", "4", "--memory-limit", "1K"]));
    let e = tight.unwrap().prepare_parts(&d).unwrap_err();
    assert!(e.to_string().contains("--memory-limit"), "{e}");
    assert_eq!(super::error::exit_code(&*e), 2, "bad input: {e}");
    let run = plan_run(flags.into_iter().chain(["--memory-limit", "1G"])).unwrap();
    let prepared = run.prepare_parts(&d).unwrap();
    assert_eq!(prepared.opts.buffer, 4, "the largest buffer that fits");
    let trained = prepared.train(&d, &run.config, run.mode, &mut |_| {}).unwrap();
    let cli = crate::kge::backends::partitioned::train(
        &d,
        &run.config,
        &prepared.opts,
        run.mode.engine_mode(run.config.staleness),
        &mut |_| {},
    )
    .unwrap();
    let table = |r: &crate::kge::backends::partitioned::PartitionedRun| {
        (0..4)
            .flat_map(|p| r.storage.columns(p, 0..8).unwrap())
            .map(f32::to_bits)
            .collect::<Vec<_>>()
    };
    assert_eq!(table(&trained), table(&cli));
    assert_eq!(trained.test.mrr.to_bits(), cli.test.mrr.to_bits());
}

#[test]
fn the_intent_offset_defaults_to_2_and_a_given_one_is_kept() {
    let one = pm(&["--pm", "adapm", "--pm-nodes", "4"], None).unwrap().unwrap();
    assert_eq!(one.intent_offset, INTENT_OFFSET);
    let given = pm(&["--pm", "adapm", "--intent-offset", "5"], None).unwrap().unwrap();
    assert_eq!(given.intent_offset, 5);
    let ranks = pm(&["--pm", "adapm"], Some((0, 4)));
    if cfg!(feature = "mpi") {
        let ranks = ranks.unwrap().unwrap();
        assert_eq!((ranks.nodes, ranks.intent_offset), (4, INTENT_OFFSET));
    } else {
        assert!(matches!(ranks, Err(ConfigError::Unsupported(_))), "mpirun needs the feature");
    }
}

/// What a plan runs, as `name=value` entries: the command, the dataset, every field of
/// the training configuration, the modes, the PM and storage runs, the outputs and the
/// remaining options. Two plans with the same entries run the same.
fn run_of(p: &Job) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    let command = match &p.command {
        None => "train".to_string(),
        Some(Command::Compare) => "compare".to_string(),
        Some(Command::Eval) => "eval".to_string(),
        Some(Command::Synth { entities, triples, relations, communities, out, seed }) => {
            let out = out.display();
            format!("synth {entities} {triples} {relations} {communities} {out} {seed}")
        }
    };
    m.insert("command".to_string(), command);
    let cfg = format!("{:?}", p.cfg);
    let fields = cfg.strip_prefix("TrainConfig { ").and_then(|c| c.strip_suffix(" }"));
    for field in fields.expect("TrainConfig's Debug").split(", ") {
        let (k, v) = field.split_once(": ").expect("name: value");
        m.insert(format!("cfg.{k}"), v.to_string());
    }
    let o = &p.opts;
    let partition = o.partition_opts(p.command.is_some()).map_err(|e| e.to_string());
    for (k, v) in [
        ("dataset", o.dataset().to_string()),
        ("modes", format!("{:?}", p.modes())),
        ("pm", format!("{:?}", p.pm)),
        ("storage", format!("{partition:?}")),
        ("out", format!("{:?}", o.out)),
        ("save", format!("{:?}", o.save)),
        ("load", format!("{:?}", o.load)),
        ("checkpoint", format!("{:?}", o.checkpoint)),
        ("checkpoint_every", format!("{:?}", o.checkpoint_every.unwrap_or(0))),
        ("resume", format!("{:?}", o.resume)),
        ("memory_limit", format!("{:?}", o.memory_limit)),
        ("repeats", o.repeats().to_string()),
        ("quiet", o.quiet.to_string()),
    ] {
        m.insert(k.to_string(), v);
    }
    m
}

/// Argument vectors of `kge` (each with the same options as a `--config` file where they
/// have one), whose runs `train/tests/fixtures/kge_runs.txt` records: written from the CLI before the run
/// layer moved into the library, so a flag or key whose meaning changes fails here.
const RUNS: &[(&[&str], Option<&str>)] = &[
    (&["--dataset", "nations"], Some("dataset = \"nations\"")),
    (&["--model", "distmult"], Some("model = \"distmult\"")),
    (&["--loss", "margin"], Some("loss = \"margin\"")),
    (&["--margin", "2.5"], Some("margin = 2.5")),
    (&["--dim", "8"], Some("dim = 8")),
    (&["--epochs", "3"], Some("epochs = 3")),
    (&["--batch-size", "64"], Some("batch-size = 64")),
    (&["--negatives", "7"], Some("negatives = 7")),
    (&["--chunk", "4"], Some("chunk = 4")),
    (&["--batch-negatives", "5"], Some("batch-negatives = 5")),
    (&["--batch-negatives", "5", "--storage", "memory"], None),
    (&["--neg-sampling", "batch"], Some("neg-sampling = \"batch\"")),
    (&["--neg-sampling", "distinct"], Some("neg-sampling = \"distinct\"")),
    (&["--reciprocal"], Some("reciprocal = true")),
    (&["--reciprocal", "false"], Some("reciprocal = false")),
    (&["--lr", "0.05"], Some("lr = 0.05")),
    (&["--optimizer", "adam"], Some("optimizer = \"adam\"")),
    (&["--optimizer", "pbg-adagrad"], Some("optimizer = \"pbg-adagrad\"")),
    (&["--regularizer", "n3"], Some("regularizer = \"n3\"")),
    (&["--reg-weight", "0.01"], Some("reg-weight = 0.01")),
    (&["--reg", "0.01"], None),
    (&["--init", "xavier"], Some("init = \"xavier\"")),
    (&["--init-scale", "0.3"], Some("init-scale = 0.3")),
    (&["--seed", "9"], Some("seed = 9")),
    (&["--mode", "bounded"], Some("mode = \"bounded\"")),
    (&["--threads", "2"], Some("threads = 2")),
    (&["--staleness", "6"], Some("staleness = 6")),
    (&["--eval-limit", "50"], Some("eval-limit = 50")),
    (&["--eval-sample", "20"], Some("eval-sample = 20")),
    (&["--out", "o"], Some("out = \"o\"")),
    (&["--save", "s"], Some("save = \"s\"")),
    (&["--device", "cuda"], Some("device = \"cuda\"")),
    (&["--precision", "bf16"], Some("precision = \"bf16\"")),
    (&["--precision", "bf16", "--device", "cuda"], None),
    (&["--precision", "bf16", "--pm", "adapm"], None),
    (&["--precision", "bf16", "--storage", "memory"], None),
    (&["compare", "--precision", "bf16"], None),
    (&["--checkpoint", "c"], Some("checkpoint = \"c\"")),
    (&["--checkpoint-every", "2"], Some("checkpoint-every = 2")),
    (&["--resume", "r"], Some("resume = \"r\"")),
    (
        &["--pm", "adapm", "--pm-nodes", "3", "--intent-offset", "5", "--pm-negatives", "global"],
        Some("pm = \"adapm\"\npm-nodes = 3\nintent-offset = 5\npm-negatives = \"global\""),
    ),
    (&["--pm", "static"], Some("pm = \"static\"")),
    (&["--memory-limit", "1G"], Some("memory-limit = 1073741824")),
    (
        &["--storage", "disk", "--storage-dir", "d", "--partitions", "8", "--buffer", "2"],
        Some("storage = \"disk\"\nstorage-dir = \"d\"\npartitions = 8\nbuffer = 2"),
    ),
    (&["--storage", "memory"], Some("storage = \"memory\"")),
    (&["--quiet"], None),
    (&["--dim", "8", "--config", "@"], Some("dim = 16\nepochs = 2")),
    (&["compare"], None),
    (&["compare", "--dim", "8"], None),
    (&["--epochs", "3", "compare"], None),
    (&["compare", "--dataset", "umls", "--repeat", "3"], Some("dataset = \"umls\"\nrepeat = 3")),
    (&["compare", "--save", "s"], Some("save = \"s\"")),
    (&["eval", "--load", "l"], Some("load = \"l\"")),
    (&["eval", "--load", "l", "--model", "transe-l1"], Some("load = \"l\"\nmodel = \"transe-l1\"")),
    (&["synth", "--out", "g", "--entities", "5", "--triples", "7", "--relations", "3"], None),
    (&["--seed", "4", "--out", "g", "synth"], None),
    (&["synth", "--out", "g", "--entities", "5", "--triples", "7", "--communities", "5"], None),
    (&["--synth-missing"], None),
    // Refused.
    (&["--dim", "0"], Some("dim = 0")),
    (&["--dim", "7"], Some("dim = 7")),
    (&["--lr", "-1"], Some("lr = -1")),
    (&["--margin", "0"], Some("margin = 0")),
    (&["--threads", "100000"], Some("threads = 100000")),
    (&["--pm-nodes", "3"], Some("pm-nodes = 3")),
    (&["--pm", "adapm", "--mode", "sync"], Some("pm = \"adapm\"\nmode = \"sync\"")),
    (&["--pm", "adapm", "--save", "s"], Some("pm = \"adapm\"\nsave = \"s\"")),
    (&["--pm", "adapm", "--pm-nodes", "0"], Some("pm = \"adapm\"\npm-nodes = 0")),
    (&["--pm", "adapm", "--neg-sampling", "batch"], None),
    (&["--pm", "adapm", "--neg-sampling", "distinct", "--pm-negatives", "global"], None),
    (&["--storage", "memory", "--neg-sampling", "batch"], None),
    (&["--device", "cuda", "--neg-sampling", "distinct"], None),
    (&["--storage", "disk"], Some("storage = \"disk\"")),
    (&["--storage", "memory", "--storage-dir", "d"], None),
    (&["--storage", "memory", "--pm", "adapm"], None),
    (&["--storage", "memory", "--resume", "r"], None),
    (&["--buffer", "2"], Some("buffer = 2")),
    (&["--storage", "disk", "--storage-dir", "d", "--partitions", "4", "--buffer", "5"], None),
    (&["--repeat", "2"], Some("repeat = 2")),
    (&["compare", "--repeat", "0"], None),
    (&["compare", "--repeat", "2", "--out", "o"], None),
    (&["compare", "--repeat", "1001"], None),
    (&["eval"], None),
    (&["--load", "l"], Some("load = \"l\"")),
    (&["--intent-offset", "2000000", "--pm", "adapm"], None),
    (&["--memory-limit", "0"], None),
    (&["--epochs", "3", "synth", "--out", "g"], None),
    (&["synth"], None),
    (&["synth", "--out", "g", "--triples", "0"], None),
    (&["synth", "--out", "g", "--entities", "5", "--triples", "7", "--communities", "6"], None),
    (&["compare", "--pm", "adapm"], None),
    (&[], Some("dimm = 8")),
    (&[], Some("dim = \"eight\"")),
];

/// Every row of [`RUNS`] as the CLI plans it (or refuses it), flags and then the same
/// options from a config file, as `train/tests/fixtures/kge_runs.txt` records them: each row's entries that
/// differ from `kge` alone's, which come first in full.
#[test]
fn every_flag_and_config_key_parses_to_the_same_run() {
    use std::fmt::Write;
    let dir = std::env::temp_dir().join(format!("ordo-kge-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = run_of(&plan(&[]).unwrap());
    let mut text = String::from("# kge\n");
    for (k, v) in &base {
        writeln!(text, "{k} = {v}").unwrap();
    }
    let file = dir.join("run.toml");
    let path = file.to_str().unwrap();
    let mut describe = |label: String, args: &[&str]| {
        writeln!(text, "\n# {label}").unwrap();
        let cli = Cli::try_parse_from(std::iter::once("kge").chain(args.iter().copied()));
        let planned = cli.map_err(|e| e.kind().to_string().into()).and_then(|cli| {
            let (opts, request) = cli.kge.request();
            Job::resolve(opts, request, read_config, None)
        });
        match planned {
            Err(e) => writeln!(text, "refused: {}", e.to_string().replace(path, "FILE")).unwrap(),
            Ok(p) => {
                for (k, v) in run_of(&p) {
                    if base.get(&k) != Some(&v) {
                        writeln!(text, "{k} = {v}").unwrap();
                    }
                }
            }
        }
    };
    for (flags, key) in RUNS {
        let flags: Vec<&str> = flags.iter().map(|f| if *f == "@" { path } else { f }).collect();
        if let Some(key) = key {
            std::fs::write(&file, key).unwrap();
        }
        describe(format!("kge {}", flags.join(" ").replace(path, "FILE")), &flags);
        let Some(key) = key else { continue };
        // The same options from a config file: only the subcommand stays on the command line.
        let sub: Vec<&str> = flags.iter().take_while(|f| !f.starts_with("--")).copied().collect();
        let args = [&sub[..], &["--config", path]].concat();
        let label = [&sub[..], &["--config FILE:"]].concat().join(" ");
        describe(format!("kge {label} {}", key.replace('\n', "; ")), &args);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let want = include_str!("../../../tests/fixtures/kge_runs.txt");
    if text != want {
        let at = std::env::temp_dir().join("kge_runs.txt");
        std::fs::write(&at, &text).unwrap();
        panic!("the runs differ from kge_runs.txt: see {} (diff the two)", at.display());
    }
    // Every flag clap knows, on `kge` and on each subcommand, has a row.
    let covered: std::collections::BTreeSet<&str> =
        RUNS.iter().flat_map(|(flags, _)| flags.iter().copied()).collect();
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut missing = Vec::new();
    for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
        for a in c.get_arguments() {
            let names = a.get_long().into_iter().chain(a.get_all_aliases().unwrap_or_default());
            for long in names.map(|l| format!("--{l}")) {
                if long != "--help" && !covered.contains(long.as_str()) {
                    missing.push(long);
                }
            }
        }
    }
    missing.extend(cmd.get_subcommands().map(|c| c.get_name().to_string()));
    missing.retain(|f| !covered.contains(f.as_str()));
    assert!(missing.is_empty(), "flags without a row in RUNS: {missing:?}");
}

/// A `--storage` run checks its memory and disk before it allocates or writes anything, and
/// refuses with the figures; without `--buffer`, `--memory-limit` picks `c`. (On the code
/// before this check, the memory refusal trained instead: a partitioned run skipped the
/// estimate.)
#[test]
fn a_storage_run_that_does_not_fit_its_memory_or_disk_is_refused_with_the_figures() {
    let dir = std::env::temp_dir().join(format!("ordo-kge-fit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.join("store");
    let d = d.to_str().unwrap();
    let err = super::run(plan(&["--storage", "memory", "--memory-limit", "64K"]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("can be had (--memory-limit)"), "{err}");

    // 10^8-float rows: about 200 GB of partition files for UMLS, refused before any is written.
    let huge = ["--storage", "disk", "--storage-dir", d, "--dim", "100000000"];
    let err = super::run(plan(&huge).unwrap()).unwrap_err().to_string();
    assert!(err.contains("needs") && err.contains("free"), "{err}");
    assert!(!dir.exists(), "nothing written");

    // Without --buffer, the largest c whose buffer fits the limit.
    let d = crate::kge::data::dataset::Dataset::load("umls").unwrap();
    let job = plan(&["--storage", "memory", "--partitions", "8", "--memory-limit", "1G"]).unwrap();
    let o = &job.opts;
    let opts = o.partition_opts(false).unwrap().unwrap();
    let budget = crate::memory::Budget { bytes: 1 << 30, source: "--memory-limit" };
    let fit = o.fit_partitions(&job.cfg, &d, opts.clone(), budget).unwrap();
    assert_eq!(fit.buffer, 8, "UMLS fits whole");
    let one = o.check_memory(&job.cfg, &d, None, &[o.mode()], budget, Some(&fit)).unwrap();
    let small = crate::memory::Budget { bytes: one - 1, source: "--memory-limit" };
    let fit = o.fit_partitions(&job.cfg, &d, opts, small).unwrap();
    assert!(fit.buffer < 8 && fit.buffer >= 2, "{}", fit.buffer);
}

/// `kge synth` refuses a graph too small to use every entity and fill valid and test (the old
/// split wrote one with empty valid and test, or entities no triple uses).
#[test]
fn synth_refuses_fewer_triples_than_entities_plus_two() {
    let err = plan(&["synth", "--out", "g", "--entities", "10", "--triples", "11"]).err().unwrap();
    assert!(err.to_string().contains("--triples"), "{err}");
    assert!(plan(&["synth", "--out", "g", "--entities", "10", "--triples", "12"]).is_ok());
}
