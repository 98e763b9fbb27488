//! A multi-layer perceptron with ReLUs (Appendix B.1) as a chain of IR nodes.

use crate::controller::Controller;
use crate::error::MpError;
use crate::graph::{Graph, GraphBuilder};
use crate::models::Init;
use crate::node_id::NodeId;
use crate::nodes::{Linear, Relu, SoftmaxLoss};
use crate::optimizer::Optimizer;

/// `Linear(dims[0]→dims[1]) → ReLU → … → Linear(→dims[last]) → SoftmaxLoss`. The controller's
/// output 0 carries the inputs (`B × dims[0]`), output 1 the labels (`B × 1`). Returns the graph
/// and its linear layers in order. Placement follows §3.1: the heavy nodes (the linear layers)
/// round-robin over `workers`, the light ones (ReLUs, loss) on the last worker, which holds
/// the last, smallest layer when there are as many workers as layers. A ReLU on the worker of
/// the heavy layer before it waits behind that layer's other work (a 25 ms backward of another
/// instance, emulated) before it can pass its instance on, which bunches instances into
/// convoys and wastes the pipeline (measured: 2.2× instead of ≈ 2.9× at mak 4).
pub fn mlp(
    dims: &[usize],
    init: Init,
    opt: Optimizer,
    min_update_interval: usize,
    workers: usize,
) -> Result<(Graph, Vec<NodeId>), MpError> {
    if dims.len() < 2 || workers == 0 {
        return Err(MpError::Config("an MLP needs two sizes and a worker".into()));
    }
    let mut b = GraphBuilder::new();
    let ctrl = b.controller(Controller::new(vec![true, false]))?;
    b.place(ctrl, 0)?;
    let mut chain = vec![ctrl];
    let mut linears = Vec::new();
    for (i, w) in dims.windows(2).enumerate() {
        let l = Linear::new(init(w[0], w[1]), opt, min_update_interval)?;
        // The first layer's input is the controller's data: nobody reads its gradient.
        let l = b.add(if i == 0 { l.without_input_gradient() } else { l });
        b.place(l, i % workers)?;
        linears.push(l);
        chain.push(l);
        if i + 2 < dims.len() {
            let r = b.add(Relu::new());
            b.place(r, workers - 1)?;
            chain.push(r);
        }
    }
    let loss = b.add(SoftmaxLoss::new());
    b.place(loss, workers - 1)?;
    chain.push(loss);
    b.chain(&chain)?;
    b.connect(ctrl, 1, loss, 1)?;
    b.connect(loss, 0, ctrl, 0)?;
    Ok((b.build(workers)?, linears))
}
