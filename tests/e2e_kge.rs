//! End to end on real knowledge graphs: the OAC run of the KGE trainer equals, bit for bit, the
//! synchronous replay of its recorded computation order (embeddings, Adagrad state, relation
//! parameters and the whole valid-MRR curve), while an async run does not; and training beats a
//! random model by a wide margin.
#![cfg(not(ordo_loom))]

use ordo::engine::EngineConfig;
use ordo_tests::{overlapping_writes, slow_writes};
use ordo_train::kge::data::batch::NegSampling;
use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::io::checkpoint::{Checkpoint, CheckpointError};
use ordo_train::kge::io::manifest::ManifestError;
use ordo_train::kge::model::init::Init;
use ordo_train::kge::model::optim::Optimizer;
use ordo_train::kge::model::score::{Loss, Regularizer, ScoreFn};
use ordo_train::kge::model::softmax_exp::{self, ExpPath};
use ordo_train::kge::training::train::{
    Resumable, RunResult, TrainConfig, TrainMode, replay, train, train_resumable,
};

fn config() -> TrainConfig {
    TrainConfig {
        score: ScoreFn::ComplEx,
        dim: 32,
        epochs: 3,
        batch_size: 128,
        negatives: 32,
        chunk: 16,
        seed: 11,
        threads: 2,
        ..TrainConfig::default()
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn curve(r: &RunResult) -> Vec<(u64, u64)> {
    r.epochs.iter().map(|e| (e.loss.to_bits(), e.valid.mrr.to_bits())).collect()
}

/// A run of `mode`; an asynchronous one with [`overlapping_writes`], whose hold it checks
/// happened in every epoch (a sync run writes each batch before the next is read).
fn run(d: &Dataset, cfg: &TrainConfig, mode: TrainMode) -> RunResult {
    if mode == TrainMode::Sync {
        return train(d, cfg, mode, &mut |_| {}, None).expect("training runs");
    }
    let (gate, hook) = overlapping_writes(d, cfg);
    let r = train(d, cfg, mode, &mut |_| {}, Some(&|c: EngineConfig| c.hook(hook.clone())))
        .expect("training runs");
    assert_eq!(gate.held(), cfg.epochs, "{mode:?}: an epoch's first write was not held");
    r
}

/// An OAC run of `cfg` (two epochs or more) equals the replay of its order, rows, relations
/// and curve, repaired at least one stale read and learned (valid MRR rose after epoch 1).
fn oac_learns_and_equals_its_replay(d: &Dataset, cfg: &TrainConfig) {
    let oac = run(d, cfg, TrainMode::Oac);
    let sync = replay(d, cfg, &oac.order).unwrap();
    assert_eq!(bits(&oac.entity_rows()), bits(&sync.entity_rows()), "rows differ");
    assert_eq!(bits(&oac.dense), bits(&sync.dense), "relations differ");
    assert_eq!(curve(&oac), curve(&sync));
    assert!(oac.rows_replaced > 0, "no stale read was repaired");
    let (first, last) = (oac.epochs[0].valid.mrr, oac.epochs[1].valid.mrr);
    assert!(last > first, "it learns: valid MRR {first} then {last}");
}

#[test]
fn oac_on_umls_equals_the_synchronous_replay_of_its_order() {
    let d = Dataset::load("umls").unwrap();
    let cfg = config();
    let oac = run(&d, &cfg, TrainMode::Oac);
    let sync = replay(&d, &cfg, &oac.order).unwrap();
    assert_eq!(bits(&oac.entity_rows()), bits(&sync.entity_rows()), "entity rows differ");
    assert_eq!(bits(&oac.dense), bits(&sync.dense), "relations or their Adagrad sums differ");
    assert_eq!(curve(&oac), curve(&sync), "loss / valid-MRR curves differ");
    assert_eq!(oac.test, sync.test);
    // OAC really ran asynchronously: batches read stale rows, and validation repaired them.
    assert!(oac.rows_replaced > 0, "no stale read was repaired: the check would be vacuous");
    // Every batch of every epoch was stepped exactly once.
    for (e, order) in oac.order.iter().enumerate() {
        let mut ids = order.clone();
        ids.sort_unstable();
        let n = ids.len() as u64;
        assert_eq!(ids, (e as u64 * n..(e as u64 + 1) * n).collect::<Vec<_>>());
    }
}

/// The peers' settings (issue 13) keep the equivalence: Adam's moments and step count travel
/// with each row, inverse relations and the mean-reduced softplus loss live in the step, and
/// OAC still equals the replay of its order for each scoring function.
#[test]
fn oac_equals_its_replay_with_adam_reciprocal_relations_and_every_new_score() {
    let d = Dataset::load("umls").unwrap();
    for (score, loss) in [
        (ScoreFn::RotatE, Loss::Softplus),
        (ScoreFn::TransEL1, Loss::Margin),
        (ScoreFn::TransEL2, Loss::Softplus),
    ] {
        let cfg = TrainConfig {
            score,
            loss,
            optimizer: Optimizer::Adam,
            lr: 0.01,
            reciprocal: true,
            regularizer: Regularizer::N3,
            reg: 1e-4,
            init: Init::Normal,
            neg_sampling: NegSampling::Batch,
            epochs: 2,
            ..config()
        };
        let oac = run(&d, &cfg, TrainMode::Oac);
        let sync = replay(&d, &cfg, &oac.order).unwrap();
        assert_eq!(bits(&oac.entity_rows()), bits(&sync.entity_rows()), "{score:?}: rows differ");
        assert_eq!(bits(&oac.dense), bits(&sync.dense), "{score:?}: relations differ");
        assert_eq!(curve(&oac), curve(&sync), "{score:?}");
        assert!(oac.rows_replaced > 0, "{score:?}: no stale read was repaired");
    }
}

/// Row-wise Adagrad (PyTorch-BigGraph's; one sum per row, so a row is `dim + 1` floats) keeps
/// the equivalence: OAC equals the replay of its order, rows, relations and curve.
#[test]
fn oac_equals_its_replay_with_row_adagrad() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { optimizer: Optimizer::RowAdagrad, epochs: 2, ..config() };
    assert_eq!(cfg.row_width(), cfg.dim + 1);
    oac_learns_and_equals_its_replay(&d, &cfg);
}

/// PyTorch-BigGraph's pair (`pbg-adagrad`: row-wise Adagrad for the entity rows, element-wise
/// for the relations): an entity row is `dim + 1` floats, the relations keep one sum per
/// parameter, OAC equals the replay of its order, and a checkpoint resumes it bit for bit.
#[test]
fn oac_equals_its_replay_and_resumes_with_pbg_adagrad() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { optimizer: Optimizer::PbgAdagrad, epochs: 2, ..config() };
    assert_eq!(cfg.row_width(), cfg.dim + 1);
    oac_learns_and_equals_its_replay(&d, &cfg);
    let sc = cfg.step_config();
    let relation_params = sc.relation_rows(d.relations.len()) * sc.relation_dim();
    let whole = run(&d, &cfg, TrainMode::Sync);
    assert_eq!(whole.dense.len(), 2 * relation_params, "relations, then a sum per parameter");
    let half = TrainConfig { epochs: 1, ..cfg };
    let dir = temp_dir("pbg-adagrad");
    train_resumable(&d, &half, TrainMode::Sync, checkpointed(&dir), &mut |_| {}, None).unwrap();
    let ck = Checkpoint::read(&dir, &d, &cfg).unwrap();
    let resumed = Resumable { resume: Some(ck), ..Resumable::default() };
    let rest = train_resumable(&d, &cfg, TrainMode::Sync, resumed, &mut |_| {}, None).unwrap();
    assert_eq!(bits(&rest.entity_rows()), bits(&whole.entity_rows()));
    assert_eq!(bits(&rest.dense), bits(&whole.dense));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Negatives laid out where the step multiplies them (`NegSampling::Distinct`: the engine
/// reads each batch's rows in the model's order, not sorted; on UMLS's 135 entities many
/// negatives are positives' entities, gathered as before) keep the equivalence: OAC equals
/// the replay of its order, rows, relations and curve. A batch with more negatives than the
/// graph has entities is refused before anything runs.
#[test]
fn oac_equals_its_replay_with_negatives_laid_out() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig {
        neg_sampling: NegSampling::Distinct,
        batch_size: 16,
        negatives: 8,
        chunk: 8,
        epochs: 2,
        ..config()
    };
    oac_learns_and_equals_its_replay(&d, &cfg);
    // UMLS has 135 entities; a batch of 128 positives with 32 negatives per chunk of 16 and
    // side has 2 × 8 × 32 = 512 negatives.
    let wide = TrainConfig { neg_sampling: NegSampling::Distinct, ..config() };
    let err = train(&d, &wide, TrainMode::Oac, &mut |_| panic!("nothing runs"), None).unwrap_err();
    assert!(err.to_string().contains("has 512"), "{err}");
}

/// PyTorch-BigGraph's negatives, uniform and in-batch ones in one batch (here with sorted rows
/// and with laid-out ones), keep the equivalence: OAC equals the replay of its order, rows,
/// relations and curve.
#[test]
fn oac_equals_its_replay_with_uniform_and_in_batch_negatives() {
    let d = Dataset::load("umls").unwrap();
    for neg_sampling in [NegSampling::Uniform, NegSampling::Distinct] {
        let cfg = TrainConfig {
            neg_sampling,
            batch_negatives: 6,
            batch_size: 16,
            negatives: 4,
            chunk: 8,
            epochs: 2,
            ..config()
        };
        oac_learns_and_equals_its_replay(&d, &cfg);
    }
}

/// The softmax's exps run on the widest instruction set the CPU has, and every path gives the
/// same bits: a run with each path this CPU has forced (the baseline, SSE2 on x86-64, first)
/// trains the same rows, relations and curve as the baseline's, bit for bit. 33 scores per
/// query take the 16- and 8-lane loops and the scalar tail.
#[test]
fn every_exp_path_trains_the_same_bits() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { epochs: 2, ..config() };
    let runs: Vec<(ExpPath, RunResult)> = ExpPath::available()
        .into_iter()
        .map(|p| {
            assert!(softmax_exp::force(Some(p)), "{p:?} is available");
            (p, train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).expect("training runs"))
        })
        .collect();
    softmax_exp::force(None);
    let (base, want) = &runs[0];
    assert_eq!(*base, ExpPath::Baseline);
    for (p, got) in &runs[1..] {
        assert_eq!(bits(&got.entity_rows()), bits(&want.entity_rows()), "{p:?}: rows differ");
        assert_eq!(bits(&got.dense), bits(&want.dense), "{p:?}: relations differ");
        assert_eq!(curve(got), curve(want), "{p:?}: curves differ");
    }
    eprintln!("paths compared: {:?}", runs.iter().map(|r| r.0).collect::<Vec<_>>());
}

/// The check has teeth: async (Hogwild with additive deltas) on the same data, with the same
/// delays, is not equal to any replay of its order, because it steps on stale rows.
#[test]
fn async_on_umls_differs_from_the_replay_of_its_order() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { epochs: 1, ..config() };
    let hog = run(&d, &cfg, TrainMode::Async);
    let sync = replay(&d, &cfg, &hog.order).unwrap();
    assert_ne!(bits(&hog.entity_rows()), bits(&sync.entity_rows()));
}

#[test]
fn trained_models_beat_a_random_model_by_a_wide_margin() {
    let d = Dataset::load("umls").unwrap();
    for score in [ScoreFn::DistMult, ScoreFn::ComplEx] {
        let cfg = TrainConfig { score, epochs: 0, ..config() };
        let random = train(&d, &cfg, TrainMode::Sync, &mut |_| {}, None).unwrap();
        let trained =
            train(&d, &TrainConfig { epochs: 5, ..cfg }, TrainMode::Oac, &mut |_| {}, None)
                .unwrap();
        let (r, t) = (random.test.mrr, trained.test.mrr);
        assert!(r < 0.15, "{score:?}: a random model should rank near the middle, MRR {r}");
        assert!(t > 0.55 && t > 5.0 * r, "{score:?}: trained MRR {t} vs random {r}");
        assert!(trained.test.hits10 > 0.8, "{score:?}: Hits@10 {}", trained.test.hits10);
    }
}

/// WordNet 3.0 (112k entities, from ../shared/datasets): loads, and one OAC epoch equals its
/// replay there too (sparse, few conflicts).
#[test]
fn wordnet_oac_epoch_equals_its_replay() {
    let Some(dir) = ordo_tests::dataset("wordnet30") else { return };
    let d = Dataset::load(dir.to_str().unwrap()).unwrap();
    assert_eq!((d.entities.len(), d.relations.len()), (112_199, 11), "{}", d.summary());
    let cfg = TrainConfig {
        dim: 16,
        epochs: 1,
        batch_size: 1000,
        negatives: 16,
        chunk: 50,
        eval_limit: 200,
        ..config()
    };
    let oac = run(&d, &cfg, TrainMode::Oac);
    let sync = replay(&d, &cfg, &oac.order).unwrap();
    assert_eq!(bits(&oac.entity_rows()), bits(&sync.entity_rows()));
    assert_eq!(curve(&oac), curve(&sync));
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ordo-e2e-kge-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn checkpointed(dir: &std::path::Path) -> Resumable {
    Resumable { checkpoint: Some(dir.to_path_buf()), every: 1, ..Resumable::default() }
}

/// Checkpoints (issue 13): 4 epochs equal 2 epochs, checkpointed, then resumed for 2 more — bit
/// for bit in sync; in oac the resumed run equals the replay of its whole recorded order.
#[test]
fn four_epochs_equal_two_epochs_resumed_for_two_more() {
    let d = Dataset::load("umls").unwrap();
    let cfg = TrainConfig { epochs: 4, dim: 16, optimizer: Optimizer::Adam, lr: 0.01, ..config() };
    let half = TrainConfig { epochs: 2, ..cfg };
    for mode in [TrainMode::Sync, TrainMode::Oac] {
        let dir = temp_dir(mode.name());
        let first = train_resumable(
            &d,
            &half,
            mode,
            checkpointed(&dir),
            &mut |_| {},
            Some(&|c: EngineConfig| c.hook(slow_writes())),
        )
        .unwrap();
        let ck = Checkpoint::read(&dir, &d, &cfg).unwrap();
        assert_eq!((ck.epoch, ck.orders.len()), (2, 2));
        assert_eq!(bits(&ck.entities.snapshot()), bits(&first.entity_rows()));
        let resumed = Resumable { resume: Some(ck), ..Resumable::default() };
        let rest = train_resumable(
            &d,
            &cfg,
            mode,
            resumed,
            &mut |_| {},
            Some(&|c: EngineConfig| c.hook(slow_writes())),
        )
        .unwrap();
        assert_eq!(rest.order.len(), 4);
        assert_eq!(rest.order[..2], first.order[..]);
        let reference = match mode {
            TrainMode::Sync => run(&d, &cfg, TrainMode::Sync),
            _ => replay(&d, &cfg, &rest.order).unwrap(),
        };
        assert_eq!(bits(&rest.entity_rows()), bits(&reference.entity_rows()), "{mode:?}");
        assert_eq!(bits(&rest.dense), bits(&reference.dense), "{mode:?}");
        assert_eq!(curve(&rest), curve(&reference), "{mode:?}");
        assert_eq!(rest.test, reference.test);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A corrupt checkpoint, or one of another model, is refused with an error naming the file, and
/// reading it changes nothing on disk. The `.npy` files load without ordo's types: plain numpy
/// headers, `entities.tsv` in row order.
#[test]
fn a_corrupt_or_foreign_checkpoint_is_refused() {
    let d = Dataset::load("nations").unwrap();
    let cfg = TrainConfig { epochs: 1, dim: 8, ..config() };
    let dir = temp_dir("corrupt");
    train_resumable(&d, &cfg, TrainMode::Sync, checkpointed(&dir), &mut |_| {}, None).unwrap();
    let sub = dir.join(std::fs::read_to_string(dir.join("latest")).unwrap().trim());
    let npy = std::fs::read(sub.join("entities.npy")).unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    let header = String::from_utf8_lossy(&npy[..128]);
    for field in ["'descr': '<f4'", "'fortran_order': False", "'shape': (14, 8"] {
        assert!(header.contains(field), "{header}");
    }
    let tsv = std::fs::read_to_string(sub.join("entities.tsv")).unwrap();
    assert_eq!(tsv.lines().next().unwrap(), format!("0\t{}", d.entities.name(0)));
    // Another model: refused, naming meta.json and both settings.
    let other = TrainConfig { score: ScoreFn::DistMult, ..cfg };
    let e = Checkpoint::read(&dir, &d, &other).unwrap_err();
    assert!(matches!(e, CheckpointError::Mismatch { .. }), "{e}");
    assert!(e.to_string().contains("meta.json") && e.to_string().contains("DistMult"), "{e}");
    // One flipped byte: refused by its checksum, naming the file; nothing changes on disk.
    let mut bad = npy.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(sub.join("entities.npy"), &bad).unwrap();
    let listing = |p: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v.iter().map(|p| (p.clone(), std::fs::read(p).ok())).collect::<Vec<_>>()
    };
    let before = (listing(&dir), listing(&sub));
    let e = Checkpoint::read(&dir, &d, &cfg).unwrap_err();
    assert!(matches!(e, CheckpointError::Manifest(ManifestError::Corrupt { .. })), "{e}");
    assert!(e.to_string().contains("entities.npy") && e.to_string().contains("CRC-32"), "{e}");
    assert_eq!(before, (listing(&dir), listing(&sub)));
    std::fs::remove_dir_all(&dir).unwrap();
}
