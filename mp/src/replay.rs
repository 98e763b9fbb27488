//! The sequential replay of a recorded run ([`Trace`]): the check that the runtime adds nothing
//! of its own to the nodes' deterministic handlers.

use std::collections::HashMap;
use std::sync::Arc;

use crate::controller::Source;
use crate::error::MpError;
use crate::graph::Graph;
use crate::message::{MessageKey, Payload};
use crate::node::Emit;
use crate::node_id::NodeId;
use crate::runtime::{RunConfig, RunReport};
use crate::trace::{Applied, Trace};

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
                            .controller()
                            .ok_or(MpError::ReplayStuck { applied })?
                            .start(&mut e)?;
                    }
                    Applied::Msg(k) => {
                        let Some(p) = produced.remove(k) else { break };
                        graph.nodes[n].apply(k.dir, k.port, k.state.clone(), p, &mut e)?;
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
    RunReport::of_complete(graph, start, applied as u64, None)
}
