//! End to end: `ordo-train`'s MLP trained on Fashion-MNIST by the SGD runtime under the
//! Interval-Asynchrony dispatcher passes 80% test accuracy (paper 001's setting, except a larger
//! learning rate so the test stays short). Skipped, with a message, without the dataset.
#![cfg(not(ordo_loom))]

use ordo::sgd::{Every, Stop};
use ordo_train::sgd::dispatchers::{Kind, Spec, build};
use ordo_train::sgd::idx::FashionMnist;
use ordo_train::sgd::train::{TrainOptions, train};
use std::sync::{Mutex, MutexGuard};

/// Serializes the trainings of this file.
static SERIAL: Mutex<()> = Mutex::new(());

/// Fashion-MNIST (`None`, with a message, without the dataset), with this file's training turn:
/// both trainings here use both cores, so they run one at a time, or each one's
/// timing-sensitive asynchronous run is starved by the other (seen in CI: interval stopped at
/// 72 %).
fn fashion_mnist() -> Option<(MutexGuard<'static, ()>, FashionMnist)> {
    let turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = ordo_tests::dataset("fashion_mnist")?;
    Some((turn, FashionMnist::load(&dir).expect("Fashion-MNIST loads")))
}

#[test]
fn interval_sgd_trains_an_mlp_past_80_percent_on_fashion_mnist() {
    let Some((_one_at_a_time, data)) = fashion_mnist() else { return };
    assert_eq!((data.train.n, data.test.n, data.train.dim), (60_000, 10_000, 784));
    let spec = Spec { y: 4, ..Spec::paper(Kind::Interval, 2) };
    let built = build(&spec).unwrap();
    let opts = TrainOptions {
        threads: 2,
        lr: 0.02,
        hidden: 64,
        // Stopped by updates (or the target) only: a wall-clock limit made the accuracy depend on
        // the machine's speed (about 10 s to the target here, idle); CI's timeout guards hangs.
        stop: Stop::updates(20_000),
        eval_every: Every::Updates(500),
        eval_limit: None,
        // Stop early only well past the bar: the evaluation that meets the target and the final
        // model differ by the updates in flight (seen: stopped at 0.81, final model 0.79).
        target_acc: Some(0.85),
        ..TrainOptions::default()
    };
    let outcome = train(&data, &built.algo, &opts, &mut |_| {}, None).unwrap();
    let report = &outcome.report;
    assert!(report.max_tau() < 4, "interval y = 4 but max τ = {}", report.max_tau());
    // The last curve point is the final model on the whole test split.
    let last = outcome.curve.last().expect("the final model is evaluated");
    assert_eq!(last.updates, report.updates);
    eprintln!(
        "{} updates in {:.1} s, accept rate {:.2}, test loss {:.3}, test accuracy {:.3}",
        report.updates,
        report.wall.as_secs_f64(),
        report.accept_rate(),
        last.test_loss,
        last.test_acc
    );
    let curve: Vec<_> = outcome.curve.iter().map(|p| (p.updates, p.test_acc)).collect();
    assert!(last.test_acc > 0.80, "test accuracy {} (curve {curve:?})", last.test_acc);
}

/// Paper 003's PASSM+ (ASSM, then PASSM, then ASSM) with two workers trains the MLP past 80%,
/// and its PASSM steps restrict backpropagation (worker 1 owns the output layer).
#[test]
fn passm_plus_trains_an_mlp_past_80_percent_on_fashion_mnist() {
    let Some((_one_at_a_time, data)) = fashion_mnist() else { return };
    let spec = Spec::paper(Kind::PassmPlus, 2);
    let built = build(&spec).unwrap();
    let opts = TrainOptions {
        threads: 2,
        lr: 0.1,
        momentum: 0.9,
        batch: 32,
        hidden: 64,
        // 1,875 steps per epoch: ASSM in epoch 0, PASSM in epoch 1, ASSM from epoch 2.
        switch_at: vec![1, 2],
        // By updates only, as above.
        stop: Stop::updates(3 * 1875),
        eval_every: Every::Updates(1875),
        ..TrainOptions::default()
    };
    let outcome = train(&data, &built.algo, &opts, &mut |_| {}, None).unwrap();
    let last = outcome.curve.last().expect("the final model is evaluated");
    let w = &outcome.workers;
    eprintln!("test accuracy {:.3}; workers {w:?}", last.test_acc);
    assert!(last.test_acc > 0.80, "test accuracy {}", last.test_acc);
    assert_eq!(w.len(), 2);
    assert!(w[1].passm_steps > 0 && w[1].layers_skipped == w[1].passm_steps);
    assert!(w.iter().all(|t| t.passm_steps < t.steps), "epochs 0 and 2 are ASSM");
}
