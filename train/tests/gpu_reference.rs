//! `--device cuda` and `--device cpu` define the same KGE step: ordo-gpu's f64 reference (the
//! specification its kernels are tested against on a GPU) equals this trainer's f32 step on
//! random batches, within 1e-5 relative on the scale of each vector. Runs without a GPU.
//!
//! The check must be able to fail: the same comparison with one side perturbed (Adagrad eps
//! 1e-10 → 1e-4, the L2 weight not halved for the two groups per positive, the head and tail
//! negatives swapped) must be rejected.
#![cfg(not(ordo_loom))]

use ordo::engine::{BatchRows, Model};
use ordo_gpu::kge::{KgeHyper, reference_step};
use ordo_train::kge::data::batch::{Sampling, SplitMix64, TripleBatch};
use ordo_train::kge::data::dataset::Triple;
use ordo_train::kge::model::gpu::{
    dense_of, device_batch, device_hyper, device_shape, relation_rows,
};
use ordo_train::kge::model::init::Init;
use ordo_train::kge::model::score::{Loss, ScoreFn};
use ordo_train::kge::model::step::{EmbeddingModel, StepConfig, init_entities};

const ENTITIES: u32 = 40;
const RELATIONS: u32 = 5;
const DIM: usize = 8;

/// What to get wrong on the reference's side.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Perturb {
    None,
    Eps,
    FullReg,
    SwapSides,
}

/// `|got − want| ≤ 1e-5 · max(|want|, scale)` elementwise, `scale` the vector's largest magnitude.
fn close(what: &str, got: &[f32], want: &[f64]) -> Result<(), String> {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if (f64::from(g) - w).abs() > 1e-5 * w.abs().max(scale) {
            return Err(format!("{what}[{i}]: cpu {g} vs reference {w}"));
        }
    }
    Ok(())
}

/// Every `2·dim` row's first (`half` 0: embedding) or second (1: Adagrad sums) half.
fn half<T: Copy>(rows: &[T], h: usize) -> Vec<T> {
    rows.chunks(2 * DIM).flat_map(|r| r[h * DIM..(h + 1) * DIM].to_vec()).collect()
}

/// Two consecutive batches (the second starts from nonzero Adagrad sums): the CPU step against
/// the reference on the same inputs, after each.
fn compare(
    score: ScoreFn,
    loss: Loss,
    chunk: usize,
    reg: f32,
    seed: u64,
    perturb: Perturb,
) -> Result<(), String> {
    let cfg = StepConfig { score, loss, dim: DIM, lr: 0.1, reg, ..StepConfig::default() };
    let mut model = EmbeddingModel::new(cfg, RELATIONS as usize, 0.5, seed);
    let mut g = SplitMix64::new(seed, 77);
    let train: Vec<Triple> = (0..30)
        .map(|_| Triple { h: g.below(ENTITIES), r: g.below(RELATIONS), t: g.below(ENTITIES) })
        .collect();
    let s = Sampling {
        seed,
        batch_size: 12,
        negatives: 4,
        chunk,
        entities: ENTITIES,
        neg_sampling: Default::default(),
        batch_negatives: 0,
    };
    let mut table = init_entities(ENTITIES as usize, DIM, 2 * DIM, (Init::Uniform, 0.5), seed);
    let shape = device_shape(&cfg, RELATIONS as usize).expect("supported");
    let mut hyper: KgeHyper = device_hyper(&cfg).expect("supported");
    match perturb {
        Perturb::Eps => hyper.eps = 1e-4,
        Perturb::FullReg => hyper.reg = reg,
        Perturb::None | Perturb::SwapSides => {}
    }
    for b in s.epoch_batches(&train, 0).into_iter().take(2) {
        let w = 2 * DIM;
        let mut values: Vec<f32> = b
            .rows
            .iter()
            .flat_map(|&r| table[r as usize * w..(r as usize + 1) * w].to_vec())
            .collect();
        let mut data: TripleBatch = b.data.clone();
        if perturb == Perturb::SwapSides {
            std::mem::swap(&mut data.neg_tails, &mut data.neg_heads);
        }
        let rel = relation_rows(&model.dense(), DIM);
        let want =
            reference_step(&shape, &hyper, &device_batch(&data, b.rows.len()), &values, &rel)
                .map_err(|e| e.to_string())?;
        model.step(&b.data, &mut BatchRows::new(&b.rows, w, &mut values).unwrap()).unwrap();
        let tag = format!("{score:?} {loss:?} chunk {chunk} reg {reg} batch {}", b.id);
        close(&format!("{tag} entity embeddings"), &half(&values, 0), &half(&want.entities, 0))?;
        close(&format!("{tag} entity Adagrad sums"), &half(&values, 1), &half(&want.entities, 1))?;
        let dense = model.dense();
        let want_dense = dense_of(&want.relations, DIM);
        let (p, a) = want_dense.split_at(want_dense.len() / 2);
        close(&format!("{tag} relations"), &dense[..dense.len() / 2], p)?;
        close(&format!("{tag} relation Adagrad sums"), &dense[dense.len() / 2..], a)?;
        let mean = model.take_loss();
        let want_mean = want.loss / b.data.pos.len() as f64;
        if (mean - want_mean).abs() > 1e-5 * want_mean.abs().max(1.0) {
            return Err(format!("{tag} loss: cpu {mean} vs reference {want_mean}"));
        }
        for (i, &r) in b.rows.iter().enumerate() {
            table[r as usize * w..(r as usize + 1) * w]
                .copy_from_slice(&values[i * w..(i + 1) * w]);
        }
    }
    Ok(())
}

fn cases() -> impl Iterator<Item = (ScoreFn, Loss, usize, f32)> {
    [ScoreFn::DistMult, ScoreFn::ComplEx].into_iter().flat_map(|score| {
        [Loss::Softmax, Loss::Logistic].into_iter().flat_map(move |loss| {
            [(1, 0.0), (4, 0.01)].into_iter().map(move |(chunk, reg)| (score, loss, chunk, reg))
        })
    })
}

#[test]
fn the_gpu_reference_step_equals_the_cpu_step() {
    for (score, loss, chunk, reg) in cases() {
        for seed in [1, 2, 3] {
            compare(score, loss, chunk, reg, seed, Perturb::None).unwrap();
        }
    }
}

#[test]
fn the_comparison_rejects_a_perturbed_side() {
    for (score, loss, chunk, reg) in cases() {
        let mut perturbs = vec![Perturb::Eps, Perturb::SwapSides];
        if reg > 0.0 {
            perturbs.push(Perturb::FullReg);
        }
        for p in perturbs {
            assert!(
                compare(score, loss, chunk, reg, 1, p).is_err(),
                "{score:?} {loss:?} chunk {chunk} reg {reg}: {p:?} not detected"
            );
        }
    }
}

/// The step in the CPU step's shape (ordo-gpu's `chunked_step`, the host port of the GPU step
/// to come: per chunk and side a matrix product against the shared negatives, fixed-order
/// reductions) equals this trainer's CPU step from the same state, batch by batch through a
/// whole epoch whose last batch is short (30 triples in batches of 12: 12, 12, 6), for both
/// models and losses, with and without L2 and chunking.
#[test]
fn the_chunked_step_equals_the_cpu_step_through_an_epoch() {
    use ordo_gpu::kge::chunked_step;
    use ordo_train::kge::model::gpu::chunked_batch;
    for (score, loss, chunk, reg) in cases() {
        let cfg = StepConfig { score, loss, dim: DIM, lr: 0.1, reg, ..StepConfig::default() };
        let mut model = EmbeddingModel::new(cfg, RELATIONS as usize, 0.5, 9);
        let mut g = SplitMix64::new(9, 77);
        let train: Vec<Triple> = (0..30)
            .map(|_| Triple { h: g.below(ENTITIES), r: g.below(RELATIONS), t: g.below(ENTITIES) })
            .collect();
        let s = Sampling {
            seed: 9,
            batch_size: 12,
            negatives: 4,
            chunk,
            entities: ENTITIES,
            neg_sampling: Default::default(),
            batch_negatives: 0,
        };
        let shape = device_shape(&cfg, RELATIONS as usize).expect("supported");
        let hyper = device_hyper(&cfg).expect("supported");
        let w = 2 * DIM;
        let mut table = init_entities(ENTITIES as usize, DIM, w, (Init::Uniform, 0.5), 9);
        let batches = s.epoch_batches(&train, 0);
        let sizes: Vec<usize> = batches.iter().map(|b| b.data.pos.len()).collect();
        assert_eq!(sizes, [12, 12, 6], "the epoch ends with a short batch");
        for b in batches {
            let tag = format!("{score:?} {loss:?} chunk {chunk} reg {reg} batch {}", b.id);
            let mut values: Vec<f32> =
                b.rows.iter().flat_map(|&r| table[r as usize * w..][..w].to_vec()).collect();
            let (mut ported, mut rel) = (values.clone(), relation_rows(&model.dense(), DIM));
            let cb = chunked_batch(&b.data, b.rows.len());
            let port_loss = chunked_step(&shape, &hyper, &cb, &mut ported, &mut rel).unwrap();
            model.step(&b.data, &mut BatchRows::new(&b.rows, w, &mut values).unwrap()).unwrap();
            let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            close(&format!("{tag} entity rows"), &ported, &f64s(&values)).unwrap();
            let dense = relation_rows(&model.dense(), DIM);
            close(&format!("{tag} relation rows"), &rel, &f64s(&dense)).unwrap();
            let mean = model.take_loss();
            let port_mean = port_loss / b.data.pos.len() as f64;
            assert!((mean - port_mean).abs() <= 1e-5 * mean.abs().max(1.0), "{tag}: loss");
            for (i, &r) in b.rows.iter().enumerate() {
                table[r as usize * w..][..w].copy_from_slice(&values[i * w..(i + 1) * w]);
            }
        }
    }
}
