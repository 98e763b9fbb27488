//! Bad graphs and bad runs are typed errors, never panics; a complete run leaves no cache
//! entry; the mak bound holds at every bound tried.

mod common;

use std::sync::Arc;

use ordo_mp::models::mlp::mlp;
use ordo_mp::models::rnn::{RnnSpec, rnn};
use ordo_mp::nodes::{Concat, Linear, Relu, SoftmaxLoss};
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{Controller, GraphBuilder, MpError, RunConfig, run};

#[test]
fn unconnected_port_is_an_error() {
    let mut b = GraphBuilder::new();
    let c = b.controller(Controller::new(vec![true, false])).unwrap();
    let r = b.add(Relu::new());
    b.connect(c, 0, r, 0).unwrap();
    assert!(matches!(b.build(1), Err(MpError::Unconnected { .. })));
}

#[test]
fn port_errors() {
    let mut b = GraphBuilder::new();
    let c = b.controller(Controller::new(vec![true])).unwrap();
    let r = b.add(Relu::new());
    assert!(matches!(b.connect(c, 5, r, 0), Err(MpError::NoSuchPort { .. })));
    b.connect(c, 0, r, 0).unwrap();
    assert!(matches!(b.connect(c, 0, r, 0), Err(MpError::PortTaken { .. })));
    assert!(matches!(b.connect(c, 0, ordo_mp::NodeId(9), 0), Err(MpError::UnknownNode(_))));
}

#[test]
fn controller_count_and_placement_are_checked() {
    let mut b = GraphBuilder::new();
    b.add(Relu::new());
    assert!(matches!(b.build(1), Err(MpError::Controllers(0))));
    let mut b = GraphBuilder::new();
    b.controller(Controller::new(vec![])).unwrap();
    assert!(matches!(b.controller(Controller::new(vec![])), Err(MpError::Controllers(2))));
    let (_, _) = mlp(&[3, 2], &mut common::init(0), Optimizer::sgd(0.1), 1, 1).unwrap();
    let mut b = GraphBuilder::new();
    let c = b.controller(Controller::new(vec![])).unwrap();
    b.place(c, 3).unwrap();
    // The controller's result input is unconnected: either error is a typed one.
    assert!(b.build(2).is_err());
    assert!(matches!(
        Linear::new(ndarray::Array2::zeros((2, 2)), Optimizer::sgd(0.1), 0),
        Err(MpError::Config(_))
    ));
}

#[test]
fn shape_mismatch_fails_the_run() {
    let (mut g, _) = mlp(&[3, 2], &mut common::init(0), Optimizer::sgd(0.1), 1, 2).unwrap();
    let data = common::dense_instances(2, 2, 5, 2, 0);
    let r = run(&mut g, Arc::new(data), vec![0, 1], &RunConfig::default());
    assert!(matches!(r, Err(MpError::Shape { .. })), "{r:?}");
}

#[test]
fn a_graph_that_cannot_complete_stalls_with_an_error() {
    // A Concat whose second parent never sends: the instance never completes.
    let mut b = GraphBuilder::new();
    let c = b.controller(Controller::new(vec![true, false, true])).unwrap();
    let cat = b.add(Concat::new(2));
    let l = b.add(Linear::new(common::matrix(4, 2, 1.0, 0), Optimizer::sgd(0.1), 1).unwrap());
    let loss = b.add(SoftmaxLoss::new());
    let r = b.add(Relu::new());
    b.connect(c, 0, cat, 0).unwrap();
    b.connect(c, 2, r, 0).unwrap();
    b.connect(r, 0, cat, 1).unwrap();
    b.chain(&[cat, l, loss]).unwrap();
    b.connect(c, 1, loss, 1).unwrap();
    b.connect(loss, 0, c, 0).unwrap();
    let mut g = b.build(2).unwrap();
    let x = common::matrix(1, 2, 1.0, 1);
    let data = vec![
        (ordo_mp::State::new(0), vec![x.clone(), ndarray::arr2(&[[1.0f32]]), x.clone()]),
        (ordo_mp::State::new(1), vec![x.clone(), ndarray::arr2(&[[0.0f32]])]),
    ];
    let cfg = RunConfig { stall: std::time::Duration::from_millis(300), ..RunConfig::default() };
    let r = run(&mut g, Arc::new(data), vec![0, 1], &cfg);
    assert!(matches!(r, Err(MpError::Shape { .. } | MpError::Stalled(_))), "{r:?}");
}

#[test]
fn mak_bound_holds_and_caches_end_empty() {
    let spec = RnnSpec {
        vocab: 5,
        hidden: 8,
        classes: 3,
        replicas: 3,
        opt: Optimizer::sgd(0.05),
        min_update_interval: 1,
    };
    let data = Arc::new(common::sequence_instances(40, 2, 5, 8, 3, 1));
    for mak in [1, 2, 5, 16] {
        let (mut g, _) = rnn(spec, &mut common::init(3), 3).unwrap();
        let rep = run(
            &mut g,
            data.clone(),
            (0..40).collect(),
            &RunConfig { max_active_keys: mak, ..RunConfig::default() },
        )
        .unwrap();
        assert!(rep.max_active <= mak, "mak {mak}: {} in flight", rep.max_active);
        assert_eq!(rep.results.len(), 40);
        for n in 0..g.len() {
            assert_eq!(g.pending(ordo_mp::NodeId(n)).unwrap(), 0);
        }
    }
}
