//! `Distribute`: dynamic partition of a payload's rows over several successors (Figure 3).

use crate::node::prelude::*;

/// Which part row `r` of an instance's payload belongs to, from the message state.
pub type Assign = std::sync::Arc<dyn Fn(&State, usize) -> usize + Send + Sync>;

/// Split `x`'s rows into `n` parts by `assign` (rows keep their order within a part).
pub(crate) fn partition(
    kind: &'static str,
    x: &Payload,
    state: &State,
    assign: &Assign,
    n: usize,
) -> Result<Vec<Payload>, MpError> {
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); n];
    for r in 0..x.nrows() {
        let p = assign(state, r);
        rows.get_mut(p).ok_or_else(|| MpError::BadState { kind, state: state.clone() })?.push(r);
    }
    Ok(rows.into_iter().map(|rs| x.select(ndarray::Axis(0), &rs)).collect())
}

/// The inverse of [`partition`]: put the parts' rows back in their original places.
pub(crate) fn merge(
    kind: &'static str,
    parts: &[Payload],
    state: &State,
    assign: &Assign,
) -> Result<Payload, MpError> {
    let total: usize = parts.iter().map(|p| p.nrows()).sum();
    let cols = parts.iter().map(|p| p.ncols()).max().unwrap_or(0);
    let mut out = Payload::zeros((total, cols));
    let mut next = vec![0usize; parts.len()];
    for r in 0..total {
        let p = assign(state, r);
        let part = parts.get(p).ok_or_else(|| MpError::BadState { kind, state: state.clone() })?;
        if next[p] >= part.nrows() || part.ncols() != cols {
            return Err(MpError::Shape {
                kind,
                detail: format!("part {p} does not fit the assignment"),
            });
        }
        out.row_mut(r).assign(&part.row(next[p]));
        next[p] += 1;
    }
    Ok(out)
}

/// Forward: sends the rows assigned to part `p` to output `p` (every output gets a message,
/// possibly with no rows). Backward: waits for all parts' gradients and merges them back.
pub struct Distribute {
    parts: usize,
    assign: Assign,
    cache: Gather,
}

impl Distribute {
    /// A distribute node over `parts` outputs with row assignment `assign`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let d = ordo_mp::nodes::Distribute::new(2, Arc::new(|_s: &ordo_mp::State, r: usize| r % 2));
    /// assert_eq!(ordo_mp::IrNode::outputs(&d), 2);
    /// ```
    pub fn new(parts: usize, assign: Assign) -> Distribute {
        Distribute { parts, assign, cache: Gather::default() }
    }
}

impl IrNode for Distribute {
    fn signature(&self) -> Signature {
        Signature { kind: "Distribute", inputs: 1, outputs: self.parts }
    }
    fn forward(
        &mut self,
        _port: usize,
        state: State,
        x: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        e.forward_each(&state, partition("Distribute", &x, &state, &self.assign, self.parts)?);
        Ok(())
    }
    fn backward(
        &mut self,
        port: usize,
        state: State,
        g: Payload,
        e: &mut Emit,
    ) -> Result<(), MpError> {
        let arrived = self.cache.add("Distribute", state.clone(), port, self.parts, g)?;
        if let Some(parts) = arrived {
            let merged = merge("Distribute", &parts, &state, &self.assign)?;
            e.backward(0, state, merged);
        }
        Ok(())
    }
    fn pending(&self) -> usize {
        self.cache.len()
    }
}
