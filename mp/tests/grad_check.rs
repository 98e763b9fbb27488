//! Every node type's backward against central finite differences of its forward.
//!
//! For a node with inputs `x_p` and forward outputs `y_k` (each a message with its own state),
//! take `L = Σ_k ⟨c_k, y_k⟩` for fixed random cotangents `c_k`; the backward messages the node
//! sends for the `c_k` must be `∂L/∂x_p`, on input port `p` and with `x_p`'s state.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use ordo_mp::nodes::{
    Bcast, Collect, Concat, Cond, Distribute, Isu, Linear, Phi, Relu, Replicate, SoftmaxLoss,
    Ungroup,
};
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{Emit, IrNode, Out, Payload, State};

type Make = dyn Fn() -> Box<dyn IrNode>;

/// Forward all inputs; the forward outputs.
fn forward(
    node: &mut dyn IrNode,
    inputs: &[(usize, State, Payload)],
    train: bool,
) -> Vec<(usize, State, Payload)> {
    let mut e = Emit::new(train);
    for (p, s, x) in inputs {
        node.forward(*p, s.clone(), x.clone(), &mut e).unwrap();
    }
    e.out
        .into_iter()
        .filter_map(|o| match o {
            Out::Forward { port, state, payload } => Some((port, state, payload)),
            _ => None,
        })
        .collect()
}

fn objective(outs: &[(usize, State, Payload)], cot: &[Payload]) -> f64 {
    outs.iter()
        .zip(cot)
        .map(|((_, _, y), c)| y.iter().zip(c).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>())
        .sum()
}

/// Check `make`'s backward on `inputs`; returns the node after its backward (for parameter
/// checks).
fn check(make: &Make, inputs: &[(usize, State, Payload)]) -> Box<dyn IrNode> {
    let mut node = make();
    let outs = forward(&mut *node, inputs, true);
    assert!(!outs.is_empty(), "{}: no forward output", node.kind());
    let cot: Vec<Payload> = outs
        .iter()
        .enumerate()
        .map(|(k, (_, _, y))| common::matrix(y.nrows(), y.ncols(), 1.0, 100 + k as u64))
        .collect();
    let mut e = Emit::new(true);
    for ((port, state, _), c) in outs.iter().zip(&cot) {
        node.backward(*port, state.clone(), c.clone(), &mut e).unwrap();
    }
    let mut grads: HashMap<(usize, State), Payload> = HashMap::new();
    for o in e.out {
        if let Out::Backward { port, state, payload } = o {
            assert!(grads.insert((port, state), payload).is_none(), "two gradients for one input");
        }
    }
    assert_eq!(node.pending(), 0, "{}: cache entries left after the backward", node.kind());
    assert_eq!(grads.len(), inputs.len(), "{}: one gradient per input", node.kind());
    let eps = 1e-2f32;
    for (i, (p, s, x)) in inputs.iter().enumerate() {
        let g = grads
            .get(&(*p, s.clone()))
            .unwrap_or_else(|| panic!("{}: no gradient on input {p} for {s:?}", node.kind()));
        assert_eq!(g.dim(), x.dim());
        for idx in 0..x.len() {
            let at = |d: f32| {
                let mut ins = inputs.to_vec();
                let v = ins[i].2.as_slice_mut().unwrap();
                v[idx] += d;
                let mut fresh = make();
                objective(&forward(&mut *fresh, &ins, false), &cot)
            };
            let num = (at(eps) - at(-eps)) / (2.0 * eps as f64);
            let ana = g.as_slice().unwrap()[idx] as f64;
            assert!(
                (num - ana).abs() <= 1e-2 * num.abs().max(1.0),
                "{}: input {p} element {idx}: numeric {num}, backward {ana}",
                node.kind()
            );
        }
    }
    node
}

fn st(i: u64) -> State {
    State::new(i)
}

#[test]
fn linear() {
    let w = common::matrix(4, 3, 1.0, 1);
    let x = common::matrix(2, 4, 1.0, 2);
    let make = {
        let w = w.clone();
        move || -> Box<dyn IrNode> {
            Box::new(Linear::new(w.clone(), Optimizer::sgd(0.1), 100).unwrap())
        }
    };
    let node = check(&make, &[(0, st(0), x.clone())]);
    // The accumulated weight gradient is x^T c for the cotangent c of the one output.
    let c = common::matrix(2, 3, 1.0, 100);
    let mut l = Linear::new(w, Optimizer::sgd(0.1), 100).unwrap();
    let mut e = Emit::new(true);
    l.forward(0, st(0), x.clone(), &mut e).unwrap();
    l.backward(0, st(0), c.clone(), &mut e).unwrap();
    let (gw, gb, n) = l.accumulated();
    assert_eq!(n, 1);
    // Finite differences in W: L(W) = <c, xW + b>.
    for (i, j) in [(0, 0), (3, 2), (1, 1)] {
        let num: f32 = (0..2).map(|r| x[[r, i]] * c[[r, j]]).sum();
        assert!((gw[[i, j]] - num).abs() < 1e-5);
    }
    assert!((gb[[0, 1]] - (c[[0, 1]] + c[[1, 1]])).abs() < 1e-6);
    assert_eq!(node.params().len(), 2);
}

/// A first layer (`without_input_gradient`) accumulates the same parameter gradients as the
/// full layer, bit for bit, and sends back an empty input gradient.
#[test]
fn linear_without_input_gradient_keeps_parameter_gradients() {
    let (w, x, c) =
        (common::matrix(4, 3, 1.0, 1), common::matrix(2, 4, 1.0, 2), common::matrix(2, 3, 1.0, 3));
    let run = |l: &mut Linear| {
        let mut e = Emit::new(true);
        l.forward(0, st(0), x.clone(), &mut e).unwrap();
        l.backward(0, st(0), c.clone(), &mut e).unwrap();
        match e.out.pop() {
            Some(Out::Backward { port: 0, payload, .. }) => payload.dim(),
            other => panic!("expected a backward message, got {other:?}"),
        }
    };
    let mut full = Linear::new(w.clone(), Optimizer::sgd(0.1), 100).unwrap();
    let mut first = Linear::new(w, Optimizer::sgd(0.1), 100).unwrap().without_input_gradient();
    assert_eq!(run(&mut full), (2, 4));
    assert_eq!(run(&mut first), (0, 0));
    let (a, b) = (full.accumulated(), first.accumulated());
    assert_eq!((a.0, a.1, a.2), (b.0, b.1, b.2));
}

#[test]
fn relu() {
    // Away from the kink so that finite differences see the derivative.
    let x = common::matrix(3, 4, 1.0, 3).mapv(|v| if v.abs() < 0.1 { 0.5 } else { v });
    check(&|| Box::new(Relu::new()), &[(0, st(1), x)]);
}

#[test]
fn cond_routes_back_to_its_input() {
    check(
        &|| Box::new(Cond::new(3, |s: &State| (s.instance % 3) as usize)),
        &[(0, st(5), common::matrix(2, 2, 1.0, 4))],
    );
}

#[test]
fn phi_sends_back_to_the_recorded_origin() {
    let make = || -> Box<dyn IrNode> { Box::new(Phi::new(3)) };
    check(
        &make,
        &[(2, st(0), common::matrix(2, 2, 1.0, 5)), (0, st(1), common::matrix(2, 2, 1.0, 6))],
    );
}

#[test]
fn isu_inverts_its_state_update() {
    check(&|| Box::new(Isu::increment()), &[(0, st(2).push(3), common::matrix(1, 3, 1.0, 7))]);
}

#[test]
fn concat() {
    check(
        &|| Box::new(Concat::new(2)),
        &[(0, st(0), common::matrix(2, 3, 1.0, 8)), (1, st(0), common::matrix(2, 2, 1.0, 9))],
    );
}

#[test]
fn bcast_sums_its_children() {
    check(&|| Box::new(Bcast::new(3)), &[(0, st(0), common::matrix(2, 2, 1.0, 10))]);
}

#[test]
fn ungroup_regroups() {
    check(&|| Box::new(Ungroup::new()), &[(0, st(0).with_len(3), common::matrix(6, 2, 1.0, 11))]);
}

#[test]
fn replicate_sums() {
    check(&|| Box::new(Replicate::new(3)), &[(0, st(0), common::matrix(2, 2, 1.0, 12))]);
}

fn assign() -> ordo_mp::nodes::Assign {
    Arc::new(|s: &State, r: usize| (r * 7 + s.instance as usize) % 3)
}

#[test]
fn distribute_merges_back() {
    check(&|| Box::new(Distribute::new(3, assign())), &[(0, st(1), common::matrix(7, 2, 1.0, 13))]);
}

#[test]
fn collect_partitions_back() {
    // The parts Distribute would make of a 7-row payload for instance 1.
    let parts: Vec<usize> =
        (0..3).map(|p| (0..7).filter(|r| (r * 7 + 1) % 3 == p).count()).collect();
    let inputs: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(p, &n)| (p, st(1), common::matrix(n, 2, 1.0, 14 + p as u64)))
        .collect();
    check(&|| Box::new(Collect::new(3, assign())), &inputs);
}

#[test]
fn softmax_loss_gradient_is_that_of_the_mean_loss() {
    let logits = common::matrix(4, 5, 2.0, 15);
    let labels = ndarray::arr2(&[[0.0f32], [3.0], [4.0], [1.0]]);
    let loss_of = |z: &Payload| {
        let mut l = SoftmaxLoss::new();
        let mut e = Emit::new(false);
        l.forward(1, st(0), labels.clone(), &mut e).unwrap();
        l.forward(0, st(0), z.clone(), &mut e).unwrap();
        match &e.out[0] {
            Out::Forward { payload, .. } => payload[[0, 0]] as f64 / 4.0,
            o => panic!("{o:?}"),
        }
    };
    let mut l = SoftmaxLoss::new();
    let mut e = Emit::new(true);
    l.forward(0, st(0), logits.clone(), &mut e).unwrap();
    l.forward(1, st(0), labels.clone(), &mut e).unwrap();
    let g = e.out.iter().find_map(|o| match o {
        Out::Backward { port: 0, payload, .. } => Some(payload.clone()),
        _ => None,
    });
    let g = g.expect("a gradient on the logits");
    assert_eq!(l.pending(), 0);
    for idx in 0..logits.len() {
        let mut up = logits.clone();
        let mut down = logits.clone();
        up.as_slice_mut().unwrap()[idx] += 1e-2;
        down.as_slice_mut().unwrap()[idx] -= 1e-2;
        let num = (loss_of(&up) - loss_of(&down)) / 2e-2;
        let ana = g.as_slice().unwrap()[idx] as f64;
        assert!((num - ana).abs() < 1e-3, "element {idx}: numeric {num}, backward {ana}");
    }
}

#[test]
fn lookup_table_gradient_is_the_scattered_output_gradient() {
    use ordo_mp::nodes::Lookup;
    let table = common::matrix(5, 3, 1.0, 20);
    let ids = ndarray::arr2(&[[4.0f32], [1.0], [4.0]]);
    let mut l = Lookup::new(table.clone(), Optimizer::sgd(1.0), 1).unwrap();
    let mut e = Emit::new(true);
    l.forward(0, st(0), ids.clone(), &mut e).unwrap();
    let y = match &e.out[0] {
        Out::Forward { payload, .. } => payload.clone(),
        o => panic!("{o:?}"),
    };
    assert_eq!(y.row(0), table.row(4));
    let c = common::matrix(3, 3, 1.0, 21);
    let mut e = Emit::new(true);
    l.backward(0, st(0), c.clone(), &mut e).unwrap();
    assert!(matches!(&e.out[..], [Out::Update(_), Out::Backward { port: 0, .. }]));
    l.update(st(0), &mut e).unwrap();
    // L = <c, table[ids]>: dL/dtable[4] = c[0] + c[2], dL/dtable[1] = c[1], others 0; SGD lr 1.
    let after = l.params()[0].clone();
    for j in 0..3 {
        assert!((table[[4, j]] - (c[[0, j]] + c[[2, j]]) - after[[4, j]]).abs() < 1e-6);
        assert!((table[[1, j]] - c[[1, j]] - after[[1, j]]).abs() < 1e-6);
        assert_eq!(table[[0, j]], after[[0, j]]);
    }
    assert_eq!(l.pending(), 0);
}
