//! `Lookup`: the lookup-table PPT (embeddings), the paper's other parameterized transform.

use crate::node::prelude::*;

use crate::optimizer::{OptState, Optimizer};
use crate::ppt::PptLearner;
use crate::staleness::StalenessHistogram;

/// Forward: the payload is a column of row ids (`k × 1`, as `f32`); emits the `k` table rows
/// (`k × d`) and records the ids keyed by state. Backward: adds each gradient row to its table
/// row's accumulated gradient (no gradient flows to the ids: the backward message to the input
/// carries zeros of the ids' shape, so the sender still gets its one backward). Updates like
/// [`Linear`](crate::nodes::Linear): after `min_update_interval` gradients, the mean.
#[derive(Debug)]
pub struct Lookup {
    table: Payload,
    learner: PptLearner,
    /// Forward ids and the parameter version they read, by state.
    ids: Recorded<(Vec<usize>, u64)>,
}

impl Lookup {
    /// A lookup table with rows `table` (`n × d`).
    ///
    /// ```
    /// let t = ordo_mp::nodes::Lookup::new(ndarray::Array2::zeros((5, 2)), ordo_mp::optimizer::Optimizer::sgd(0.1), 1).unwrap();
    /// assert_eq!(ordo_mp::IrNode::params(&t)[0].dim(), (5, 2));
    /// ```
    pub fn new(
        table: Payload,
        opt: Optimizer,
        min_update_interval: usize,
    ) -> Result<Lookup, MpError> {
        let learner = PptLearner::new(&[&table], opt, min_update_interval)?;
        Ok(Lookup { table, learner, ids: Recorded::new("Lookup") })
    }
}

impl IrNode for Lookup {
    fn signature(&self) -> Signature {
        Signature { kind: "Lookup", inputs: 1, outputs: 1 }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let n = self.table.nrows();
        let ids: Vec<usize> = x.iter().map(|&v| v as usize).collect();
        if x.ncols() != 1 || ids.iter().any(|&i| i >= n) {
            return Err(MpError::Shape {
                kind: "Lookup",
                detail: format!("ids {:?} into {n} rows", x.dim()),
            });
        }
        let y = self.table.select(ndarray::Axis(0), &ids);
        e.forward_keeping(&mut self.ids, state, (ids, self.learner.version()), y);
        Ok(())
    }
    fn backward(
        &mut self,
        _port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let (ids, read) =
            self.ids.take_for(&state, &g, |(ids, _)| (ids.len(), self.table.ncols()))?;
        let sum = &mut self.learner.sums_mut()[0];
        for (r, &i) in ids.iter().enumerate() {
            let mut row = sum.row_mut(i);
            row += &g.row(r);
        }
        self.learner.added(read, e);
        e.backward(0, state, Payload::zeros((ids.len(), 1)));
        Ok(())
    }
    fn update(&mut self, state: State, _e: &mut Emit) -> Result<(), MpError> {
        self.learner.update("Lookup", state, &mut [&mut self.table], true)
    }
    fn pending(&self) -> usize {
        self.ids.len()
    }
    fn staleness(&self) -> Option<&StalenessHistogram> {
        Some(self.learner.staleness())
    }
    fn params(&self) -> Vec<&Payload> {
        vec![&self.table]
    }
    fn params_mut(&mut self) -> Vec<&mut Payload> {
        vec![&mut self.table]
    }
    fn opt_state_mut(&mut self) -> Option<&mut OptState> {
        Some(self.learner.opt_state_mut())
    }
}
