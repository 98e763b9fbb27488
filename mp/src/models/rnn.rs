//! A vanilla RNN with ReLU (Figure 2), its cell replicated `r` times (Figure 4b).

use crate::controller::Controller;
use crate::error::MpError;
use crate::graph::{Graph, GraphBuilder};
use crate::models::Init;
use crate::node_id::NodeId;
use crate::nodes::{Concat, Cond, Isu, Linear, Phi, Relu, SoftmaxLoss, Ungroup};
use crate::optimizer::Optimizer;
use crate::state::State;

/// The RNN's sizes and training knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RnnSpec {
    /// One-hot vocabulary size.
    pub vocab: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Output classes.
    pub classes: usize,
    /// Cell replicas (1: no replication).
    pub replicas: usize,
    /// Optimizer of every layer.
    pub opt: Optimizer,
    /// `min_update_interval` of every layer.
    pub min_update_interval: usize,
}

/// Leave a loop: pop the counter (backward: push it back as `len`, where the loop ended).
pub(crate) fn exit_loop() -> Isu {
    Isu::new(
        |s| (s.counter() == Some(s.len)).then(|| s.clone().pop()),
        |s| Some(s.clone().push(s.len)),
    )
}

/// Enter a loop: push counter 0 (backward: pop it).
pub(crate) fn enter_loop() -> Isu {
    Isu::new(|s| Some(s.clone().push(0)), |s| (s.counter() == Some(0)).then(|| s.clone().pop()))
}

/// The replicas' router (§5, Figure 4b): output `replica mod r`, the replica the controller
/// stamped on the instance (balanced over the active instances, see [`Controller`]).
pub(crate) fn by_replica(r: usize) -> Cond {
    Cond::new(r, move |s: &State| s.replica as usize % r)
}

/// The loop's test: output 1 (leave) once the counter reaches the sequence length, else 0.
pub(crate) fn loop_end() -> Cond {
    Cond::new(2, |s: &State| usize::from(s.counter() == Some(s.len)))
}

/// The graph of Figure 2: the controller pumps one-hot tokens (`L·B × vocab`, time major; state
/// `len = L`) into an `Ungroup`, a zero initial state (`B × hidden`) into the loop's `Phi`
/// (through an `Isu` entering the loop) and labels (`B × 1`) into the loss. Each step
/// concatenates `[h | x_t]`, applies the cell `Linear` (the replica the controller stamped, joined by a
/// `Phi`), ReLU, increments the counter, and a `Cond` either loops back or leaves to the output
/// layer. Returns the graph and the replica cells; with several workers the cells go
/// round-robin over workers `1..`, and the output layer and the light nodes stay on worker 0
/// (so the control flow never waits behind a cell).
pub fn rnn(spec: RnnSpec, init: Init, workers: usize) -> Result<(Graph, Vec<NodeId>), MpError> {
    let r = spec.replicas;
    if r == 0 || workers == 0 {
        return Err(MpError::Config("an RNN needs a replica and a worker".into()));
    }
    let mut b = GraphBuilder::new();
    let ctrl = b.controller(Controller::new(vec![true, true, false]))?;
    let ungroup = b.add(Ungroup::new());
    let enter = b.add(enter_loop());
    let phi = b.add(Phi::new(2));
    let concat = b.add(Concat::new(2));
    let split = b.add(by_replica(r));
    let join = b.add(Phi::new(r));
    let relu = b.add(Relu::new());
    let inc = b.add(Isu::increment());
    let cond = b.add(loop_end());
    let exit = b.add(exit_loop());
    let out =
        b.add(Linear::new(init(spec.hidden, spec.classes), spec.opt, spec.min_update_interval)?);
    let loss = b.add(SoftmaxLoss::new());
    let mut cells = Vec::new();
    // One initial cell for every replica (the builder makes replicas start equal in any case,
    // see `GraphBuilder::replicas`): one draw, not r.
    let w0 = init(spec.hidden + spec.vocab, spec.hidden);
    for i in 0..r {
        let cell = b.add(Linear::new(w0.clone(), spec.opt, spec.min_update_interval)?);
        b.place(cell, if workers > 1 { 1 + i % (workers - 1) } else { 0 })?;
        b.connect(split, i, cell, 0)?;
        b.connect(cell, 0, join, i)?;
        cells.push(cell);
    }
    b.place(out, 0)?;
    for n in [ctrl, ungroup, enter, phi, concat, split, join, relu, inc, cond, exit, loss] {
        b.place(n, 0)?;
    }
    b.connect(ctrl, 0, ungroup, 0)?;
    b.connect(ctrl, 1, enter, 0)?;
    b.connect(ctrl, 2, loss, 1)?;
    b.connect(enter, 0, phi, 0)?;
    b.connect(phi, 0, concat, 0)?;
    b.connect(ungroup, 0, concat, 1)?;
    b.connect(concat, 0, split, 0)?;
    b.chain(&[join, relu, inc, cond])?;
    b.connect(cond, 0, phi, 1)?;
    b.connect(cond, 1, exit, 0)?;
    b.chain(&[exit, out, loss])?;
    b.connect(loss, 0, ctrl, 0)?;
    if r > 1 {
        b.replicas(cells.clone())?;
    }
    Ok((b.build(workers)?, cells))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Payload;

    /// A tiny RNN: vocabulary 3, hidden 4, 2 classes, `r` replicas, mui 1.
    fn small(r: usize, opt: Optimizer) -> RnnSpec {
        RnnSpec { vocab: 3, hidden: 4, classes: 2, replicas: r, opt, min_update_interval: 1 }
    }

    /// Every replica starts as the same cell, so the end-of-epoch average of replicas that have
    /// not trained yet is that cell again.
    #[test]
    fn replicas_start_as_one_cell() {
        let spec = small(3, Optimizer::sgd(0.1));
        let mut seed = 0.0;
        let mut init = |din, dout| {
            seed += 1.0;
            Payload::from_shape_fn((din, dout), |(i, j)| seed + (i * dout + j) as f32)
        };
        let (mut g, cells) = rnn(spec, &mut init, 4).unwrap();
        let before = g.params();
        assert!(cells.iter().all(|c| before[c.0] == before[cells[0].0]));
        g.average_replicas();
        assert_eq!(g.params(), before);
    }

    /// A synchronization with step `s` moves every replica to `w₀ + s · mean(wᵢ − w₀)` from
    /// the previous synchronization's `w₀`: replicas moved by 1 and 3 average to `w₀ + 2`
    /// (step 1) or sum to `w₀ + 4` (step 2), and the next synchronization starts from there.
    #[test]
    fn sync_moves_replicas_by_step_times_their_mean_move() {
        let spec = small(2, Optimizer::sgd(0.1));
        let mut init = |din, dout| Payload::from_elem((din, dout), 0.5);
        let (mut g, cells) = rnn(spec, &mut init, 3).unwrap();
        let shift = |g: &mut Graph, by: [f32; 2]| {
            for (c, d) in cells.iter().zip(by) {
                g.nodes[c.0]
                    .node_mut()
                    .unwrap()
                    .params_mut()
                    .into_iter()
                    .for_each(|p| p.mapv_inplace(|v| v + d));
            }
        };
        let w = |g: &Graph| g.params()[cells[1].0][0][[0, 0]];
        shift(&mut g, [1.0, 3.0]);
        g.sync_replicas(2.0);
        assert_eq!(w(&g), 4.5);
        assert_eq!(g.params()[cells[0].0], g.params()[cells[1].0]);
        shift(&mut g, [1.0, 3.0]);
        g.sync_replicas(1.0);
        assert_eq!(w(&g), 6.5);
        g.sync_replicas(2.0);
        assert_eq!(w(&g), 6.5);
    }

    /// Averaging the replicas' optimizer memory leaves every replica with the mean moments.
    #[test]
    fn replica_moments_average_to_their_mean() {
        let spec = small(2, Optimizer::adam(0.1));
        let mut init = |din, dout| Payload::from_elem((din, dout), 0.5);
        let (mut g, cells) = rnn(spec, &mut init, 3).unwrap();
        for (c, v) in cells.iter().zip([1.0, 4.0]) {
            let o = g.nodes[c.0].node_mut().unwrap().opt_state_mut().unwrap();
            o.moments_mut().into_iter().for_each(|m| m.fill(v));
        }
        g.average_replica_moments();
        for c in &cells {
            let o = g.nodes[c.0].node_mut().unwrap().opt_state_mut().unwrap();
            assert!(o.moments_mut().iter().all(|m| m.iter().all(|&x| x == 2.5)));
        }
    }
}
