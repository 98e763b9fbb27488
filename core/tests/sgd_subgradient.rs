//! Paper 003's methods on the real runtime: one-worker ASSM is sequential momentum SGD bit for
//! bit; PASSM's restriction shows in the telemetry and still trains; bad arguments are errors.
#![cfg(not(ordo_loom))]

use ordo::dispatcher::Sequential;
use ordo::sgd::{
    BlockSchedule, Control, Every, GradientModel, LayeredModel, Method, SgdConfig, SgdError, Stop,
    run_async_subgradient, run_dispatched,
};

/// f_b(x) = Σ_j ½ w_j (x_j − t_{b,j})² over layers of `sizes` words: batch-dependent targets, so
/// the order of minibatches shows in the result.
struct Layers {
    sizes: Vec<usize>,
}

impl Layers {
    fn target(batch: u64, j: usize) -> f32 {
        ((batch * 7 + j as u64 * 3) % 11) as f32 - 5.0
    }
}

impl GradientModel for Layers {
    type Scratch = ();
    fn num_params(&self) -> usize {
        self.sizes.iter().sum()
    }
    fn scratch(&self) {}
    fn gradient(&self, p: &[f32], batch: u64, s: &mut (), g: &mut [f32]) -> f32 {
        self.restricted_gradient(p, batch, 0, s, g)
    }
}

impl LayeredModel for Layers {
    fn layer_sizes(&self) -> Vec<usize> {
        self.sizes.clone()
    }
    fn restricted_gradient(
        &self,
        p: &[f32],
        b: u64,
        lowest: usize,
        _: &mut (),
        g: &mut [f32],
    ) -> f32 {
        let from: usize = self.sizes[..lowest].iter().sum();
        let mut loss = 0.0;
        for (j, (gj, pj)) in g.iter_mut().zip(p).enumerate() {
            let d = pj - Self::target(b, j);
            loss += 0.5 * d * d;
            *gj = if j >= from { d * (1.0 + j as f32 / 8.0) } else { 0.0 };
        }
        std::hint::black_box((0..500u32).sum::<u32>());
        loss
    }
}

fn sgd(updates: u64) -> SgdConfig {
    SgdConfig { lr: 0.05, momentum: 0.9, stop: Stop::updates(updates), every: Every::Never }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn one_worker_assm_is_sequential_momentum_sgd_bit_for_bit() {
    let model = Layers { sizes: vec![5, 3] };
    let init: Vec<f32> = (0..8).map(|j| j as f32 * 0.25 - 1.0).collect();
    let schedule = BlockSchedule::assm(sgd(300), 40);
    let assm =
        run_async_subgradient(&model, 1, &init, &schedule, &mut |_| Control::Continue).unwrap();
    // Sequential SGD with momentum v ← m·v + g; x ← x − η·v at η = (1 − m)·γ.
    let seq_cfg = SgdConfig { lr: schedule.step(0), ..sgd(300) };
    let seq = run_dispatched(
        &model,
        &Sequential::new(1).unwrap(),
        1,
        &init,
        &seq_cfg,
        &mut |_| Control::Continue,
        None,
    )
    .unwrap();
    assert_eq!(assm.run.updates, 300);
    assert_eq!(seq.updates, 300);
    assert_eq!(bits(&assm.run.params), bits(&seq.params));
    assert_ne!(bits(&assm.run.params), bits(&init), "the run moved the model");
    assert!(assm.run.steps.iter().all(|s| s.tau == Some(0)));
}

#[test]
fn passm_restricts_backprop_and_still_trains() {
    let model = Layers { sizes: vec![4, 4] };
    let init = vec![0.0f32; 8];
    let r =
        run_async_subgradient(&model, 2, &init, &BlockSchedule::passm(sgd(4000), 50), &mut |_| {
            Control::Continue
        })
        .unwrap();
    assert_eq!(r.workers.len(), 2);
    let w = &r.workers;
    assert_eq!(w[0].passm_steps, w[0].steps);
    assert_eq!((w[0].layers_skipped, w[0].params_skipped), (0, 0), "block 0 holds layer 0");
    assert_eq!(w[1].layers_skipped, w[1].steps, "worker 1's backprop stops at layer 1");
    assert_eq!(w[1].params_skipped, 4 * w[1].steps);
    assert_eq!(w[0].lock_wait + w[1].lock_wait, std::time::Duration::ZERO, "PASSM takes no lock");
    // The mean target of word j over batches is ~0; the trained model sits near it.
    let mean: f32 = r.run.params.iter().map(|x| x.abs()).sum::<f32>() / 8.0;
    assert!(mean < 1.5, "{:?}", r.run.params);
}

/// The update budget is exact under PASSM's lock-free writes too: a step that finishes after
/// the last update was taken is dropped, and the telemetry counts only applied steps.
#[test]
fn the_update_budget_is_exact_without_a_lock() {
    let model = Layers { sizes: vec![4, 4] };
    for _ in 0..20 {
        let s = BlockSchedule::passm(sgd(300), 50);
        let r =
            run_async_subgradient(&model, 2, &[0.0; 8], &s, &mut |_| Control::Continue).unwrap();
        assert_eq!(r.run.updates, 300);
        assert_eq!(r.run.steps.len(), 300);
        assert_eq!(r.workers.iter().map(|w| w.steps).sum::<u64>(), 300);
        assert_eq!(r.workers.iter().map(|w| w.passm_steps).sum::<u64>(), 300);
    }
}

#[test]
fn passm_plus_switches_methods_at_the_configured_epochs() {
    let model = Layers { sizes: vec![4, 4] };
    let schedule = BlockSchedule::passm_plus(sgd(600), 100, vec![2, 4], 2);
    assert_eq!(schedule.method(3), Method::Passm);
    let r =
        run_async_subgradient(&model, 2, &[0.0; 8], &schedule, &mut |_| Control::Continue).unwrap();
    let passm: u64 = r.workers.iter().map(|w| w.passm_steps).sum();
    // Epochs 2 and 3 (start indices 200..400) are PASSM: every applied step from them, and no
    // other, ran PASSM. Not simply 200: a worker preempted between taking start index 399 and
    // entering the gate may wake after the other took the 600th update, and its step is then
    // dropped by the exact update budget, while a step from index ≥ 600 took its place.
    let in_passm_epochs = r.run.steps.iter().filter(|s| (200..400).contains(&s.index)).count();
    assert_eq!(passm, in_passm_epochs as u64, "{} steps", r.run.steps.len());
    // At the budget's end each other worker holds at most one start index: at most one dropped.
    assert!(in_passm_epochs >= 199, "{in_passm_epochs} steps from the PASSM epochs");
    assert_eq!(r.run.steps.len(), 600);
}

#[test]
fn bad_arguments_are_errors() {
    let model = Layers { sizes: vec![4, 4] };
    let go = |threads, init: &[f32], s: &BlockSchedule| {
        run_async_subgradient(&model, threads, init, s, &mut |_| Control::Continue).err()
    };
    let s = BlockSchedule::assm(sgd(10), 10);
    assert_eq!(go(3, &[0.0; 8], &s), Some(SgdError::TooManyBlocks { blocks: 3, layers: 2 }));
    assert_eq!(go(2, &[0.0; 7], &s), Some(SgdError::ParamLen { expected: 8, got: 7 }));
    assert_eq!(go(0, &[0.0; 8], &s), Some(SgdError::NoWorkers));
}
