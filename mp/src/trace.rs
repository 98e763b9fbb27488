//! The recorded order: which messages each node applied, in order, and its sequential replay.

use std::collections::HashMap;
use std::sync::Arc;

use crate::controller::Source;
use crate::error::MpError;
use crate::graph::{Graph, NodeId};
use crate::message::{MessageKey, Payload};
use crate::node::Emit;
use crate::runtime::{RunConfig, RunReport, apply, leak_check};

/// One step of a node: the controller's start, or the message (by key) it applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The controller pumped its first instances.
    Start,
    /// The node applied this message.
    Msg(MessageKey),
}

/// Per node, the messages it applied in the order it applied them. Each node lives on one
/// worker, which applies its messages one at a time, so this order is total per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// `per_node[n]`: node `n`'s steps.
    pub per_node: Vec<Vec<Applied>>,
}

impl Trace {
    /// Steps in total.
    pub fn len(&self) -> usize {
        self.per_node.iter().map(Vec::len).sum()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Replay `trace` on `graph` (freshly built like the recorded run's) on this thread: repeatedly
/// let any node whose next recorded message has been produced apply it. Nodes are deterministic
/// functions of the messages they apply in order, so the replay reproduces the recorded run's
/// parameters exactly — if the runtime added nothing of its own.
pub fn replay(
    graph: &mut Graph,
    source: Arc<dyn Source>,
    order: Vec<usize>,
    cfg: &RunConfig,
    trace: &Trace,
) -> Result<RunReport, MpError> {
    let start = std::time::Instant::now();
    graph.controller().prepare(source, order, cfg.max_active_keys)?;
    let topo = graph.topo.clone();
    let mut produced: HashMap<MessageKey, Payload> = HashMap::new();
    let mut cursor = vec![0usize; graph.nodes.len()];
    let mut applied = 0usize;
    loop {
        let mut progress = false;
        #[allow(clippy::needless_range_loop)] // `n` indexes nodes, cursors and the trace alike
        for n in 0..graph.nodes.len() {
            let steps = trace.per_node.get(n).map(Vec::as_slice).unwrap_or(&[]);
            while let Some(step) = steps.get(cursor[n]) {
                let mut e = Emit::new(cfg.train);
                match step {
                    Applied::Start => {
                        graph.nodes[n]
                            .as_controller()
                            .ok_or(MpError::ReplayStuck { applied })?
                            .start(&mut e)?;
                    }
                    Applied::Msg(k) => {
                        let Some(p) = produced.remove(k) else { break };
                        apply(&mut *graph.nodes[n], k.dir, k.port, k.state.clone(), p, &mut e)?;
                    }
                }
                for out in e.out {
                    let m = topo.address(NodeId(n), out);
                    produced.insert(m.key(), m.payload);
                }
                cursor[n] += 1;
                applied += 1;
                progress = true;
            }
        }
        if cursor.iter().enumerate().all(|(n, &c)| c == trace.per_node.get(n).map_or(0, Vec::len)) {
            break;
        }
        if !progress {
            return Err(MpError::ReplayStuck { applied });
        }
    }
    if !produced.is_empty() {
        return Err(MpError::ReplayStuck { applied });
    }
    leak_check(graph)?;
    let c = graph.controller();
    Ok(RunReport {
        results: c.results().to_vec(),
        max_active: c.max_active(),
        elapsed: start.elapsed(),
        messages: applied as u64,
        trace: None,
    })
}
