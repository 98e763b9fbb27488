//! The KGE kernels against the f64 reference (1e-5 relative) and against themselves (bitwise,
//! run to run). Needs a CUDA device; `#[ignore]`d: run with `--ignored` on a GPU machine, where it fails without a device.

#![cfg(not(ordo_loom))]

#[path = "support/require_gpu.rs"]
mod require_gpu;

use ordo_gpu::Gpu;
use ordo_gpu::kge::{
    DeviceKgeBatch, KgeHyper, KgeKernels, KgeLoss, KgeModel, KgeReference, KgeShape, reference_step,
};
use ordo_gpu::workload::{Rng, random_kge_batch};

/// `|got − want| ≤ 1e-5 · max(|want|, scale)` elementwise, where `scale` is the largest
/// magnitude in `want` (so tiny components of a vector are judged on the vector's scale).
fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * w.abs().max(scale);
        assert!((f64::from(g) - w).abs() <= tol, "{what}[{i}]: gpu {g} vs reference {w}");
    }
}

struct Run {
    loss: f64,
    intermediates: [Vec<f32>; 4],
    entities: Vec<f32>,
    relations: Vec<f32>,
}

fn run_gpu(gpu: &Gpu, shape: KgeShape, hyper: KgeHyper, seed: u64) -> (Run, KgeReference) {
    let mut rng = Rng::new(seed);
    let batch = random_kge_batch(&mut rng, 16, 8, 40, shape.relations);
    let ent = rng.params(batch.rows, shape.dim);
    let rel = rng.params(shape.relations, shape.dim);
    let reference = reference_step(&shape, &hyper, &batch, &ent, &rel).unwrap();
    let stream = gpu.new_stream().unwrap();
    let mut k = KgeKernels::new(gpu, stream.clone(), shape, &rel).unwrap();
    let b = DeviceKgeBatch::upload(&stream, &shape, &batch).unwrap();
    let mut rows = stream.clone_htod(&ent).unwrap();
    k.step(&b, &mut rows, &hyper).unwrap();
    let run = Run {
        loss: k.last_loss().unwrap(),
        intermediates: k.last_intermediates().unwrap(),
        entities: stream.clone_dtoh(&rows).unwrap(),
        relations: k.relations().unwrap(),
    };
    (run, reference)
}

#[test]
#[ignore = "needs a CUDA device"]
fn kge_kernels_match_the_f64_reference() {
    let gpu = require_gpu::gpu();
    let cases = [KgeModel::DistMult, KgeModel::ComplEx]
        .into_iter()
        .flat_map(|m| [(m, KgeLoss::Softmax), (m, KgeLoss::Logistic)]);
    for (model, loss) in cases {
        let hyper = KgeHyper { lr: 0.1, eps: 1e-6, reg: 0.01, loss };
        for (dim, seed) in [(6, 1), (64, 2), (200, 3)] {
            let shape = KgeShape { model, dim, relations: 5 };
            let (run, want) = run_gpu(&gpu, shape, hyper, seed);
            let tag = format!("{model:?} {loss:?} dim {dim}");
            let [scores, coef, egrad, rgrad] = &run.intermediates;
            assert_close(&format!("{tag} scores"), scores, &want.scores);
            assert_close(&format!("{tag} coefficients"), coef, &want.coefficients);
            assert_close(&format!("{tag} entity grads"), egrad, &want.entity_grads);
            assert_close(&format!("{tag} relation grads"), rgrad, &want.relation_grads);
            assert_close(&format!("{tag} entities"), &run.entities, &want.entities);
            assert_close(&format!("{tag} relations"), &run.relations, &want.relations);
            assert!((run.loss - want.loss).abs() <= 1e-5 * want.loss.abs().max(1.0), "{tag} loss");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn kge_kernels_are_bitwise_deterministic() {
    let gpu = require_gpu::gpu();
    let hyper = KgeHyper { eps: 1e-8, ..KgeHyper::new(0.05) };
    for model in [KgeModel::DistMult, KgeModel::ComplEx] {
        let shape = KgeShape { model, dim: 128, relations: 7 };
        let (a, _) = run_gpu(&gpu, shape, hyper, 42);
        let (b, _) = run_gpu(&gpu, shape, hyper, 42);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.entities), bits(&b.entities), "{model:?} entities");
        assert_eq!(bits(&a.relations), bits(&b.relations), "{model:?} relations");
        for (x, y) in a.intermediates.iter().zip(&b.intermediates) {
            assert_eq!(bits(x), bits(y), "{model:?} intermediates");
        }
    }
}
