//! With `max_active_keys = 1` on one worker, AMPNet training is sequential SGD on the same
//! instance order, bit for bit: the runtime adds nothing of its own (issue 16).

mod common;

use std::sync::Arc;

use ndarray::Axis;
use ordo_mp::models::mlp::mlp;
use ordo_mp::nodes::loss::softmax_xent;
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{Payload, RunConfig, State, run};

/// Sequential minibatch SGD on the same MLP, written out layer by layer: gradients of
/// `min_update_interval` instances are summed, divided by their count, and applied.
fn sequential(
    dims: &[usize],
    data: &[(State, Vec<Payload>)],
    lr: f32,
    mui: usize,
    seed: u64,
) -> Vec<(Payload, Payload)> {
    let mut init = common::init(seed);
    let mut layers: Vec<(Payload, Payload)> =
        dims.windows(2).map(|w| (init(w[0], w[1]), Payload::zeros((1, w[1])))).collect();
    let mut acc: Vec<(Payload, Payload)> = layers
        .iter()
        .map(|(w, b)| (Payload::zeros(w.raw_dim()), Payload::zeros(b.raw_dim())))
        .collect();
    let mut n = 0;
    for (_, p) in data {
        let mut acts = vec![p[0].clone()];
        for (i, (w, b)) in layers.iter().enumerate() {
            let z = acts[i].dot(w) + b;
            acts.push(if i + 1 < layers.len() { z.mapv(|v| v.max(0.0)) } else { z });
        }
        let (_, _, mut g) = softmax_xent(&acts[layers.len()], &p[1]).unwrap();
        for i in (0..layers.len()).rev() {
            let x = &acts[i];
            acc[i].0 += &x.t().dot(&g);
            acc[i].1 += &g.sum_axis(Axis(0)).insert_axis(Axis(0));
            let mut dx = g.dot(&layers[i].0.t());
            if i > 0 {
                // ReLU's adjoint: the layer input `acts[i]` is the ReLU output, positive where
                // the ReLU input was.
                dx.zip_mut_with(&acts[i], |d, &a| {
                    if a <= 0.0 {
                        *d = 0.0;
                    }
                });
            }
            g = dx;
        }
        n += 1;
        if n == mui {
            for ((w, b), (gw, gb)) in layers.iter_mut().zip(&mut acc) {
                let gw = std::mem::replace(gw, Payload::zeros(w.raw_dim())) / n as f32;
                let gb = std::mem::replace(gb, Payload::zeros(b.raw_dim())) / n as f32;
                w.scaled_add(-lr, &gw);
                b.scaled_add(-lr, &gb);
            }
            n = 0;
        }
    }
    layers
}

fn check(mui: usize) {
    let dims = [12, 16, 16, 4];
    let data = common::dense_instances(24, 5, 12, 4, 3);
    let lr = 0.1;
    let (mut g, linears) = mlp(&dims, &mut common::init(9), Optimizer::sgd(lr), mui, 1).unwrap();
    let order: Vec<usize> = (0..data.len()).rev().collect();
    let report = run(&mut g, Arc::new(data.clone()), order.clone(), &RunConfig::default()).unwrap();
    assert_eq!(report.max_active, 1);
    let in_order: Vec<_> = order.iter().map(|&i| data[i].clone()).collect();
    let want = sequential(&dims, &in_order, lr, mui, 9);
    let got: Vec<Vec<Payload>> = linears
        .iter()
        .map(|&l| {
            g.node(l)
                .unwrap()
                .expect("a layer, not the controller")
                .params()
                .into_iter()
                .cloned()
                .collect()
        })
        .collect();
    let want: Vec<Vec<Payload>> = want.into_iter().map(|(w, b)| vec![w, b]).collect();
    assert!(
        common::bits(&got) == common::bits(&want),
        "AMPNet with mak 1 differs from sequential SGD (mui {mui})"
    );
}

#[test]
fn mak1_one_worker_is_sequential_sgd() {
    check(1);
}

#[test]
fn mak1_one_worker_is_sequential_sgd_with_update_interval() {
    check(2);
}

/// Several workers do not change the result at `mak = 1` either: updates run before the next
/// instance can reach the node (they are sent to itself before the backward that completes
/// the instance).
#[test]
fn mak1_many_workers_is_sequential_sgd() {
    let dims = [12, 16, 16, 4];
    let data = common::dense_instances(16, 5, 12, 4, 5);
    let (mut g1, _) = mlp(&dims, &mut common::init(2), Optimizer::sgd(0.1), 1, 1).unwrap();
    let (mut g3, _) = mlp(&dims, &mut common::init(2), Optimizer::sgd(0.1), 1, 3).unwrap();
    let order: Vec<usize> = (0..data.len()).collect();
    run(&mut g1, Arc::new(data.clone()), order.clone(), &RunConfig::default()).unwrap();
    run(&mut g3, Arc::new(data), order, &RunConfig::default()).unwrap();
    assert!(
        common::bits(&g1.params()) == common::bits(&g3.params()),
        "3 workers differ from 1 at mak 1"
    );
}
