//! The IR graph as data, and its builder: nodes, edges, placement on workers, replica groups.

use crate::controller::Controller;
use crate::error::MpError;
use crate::message::{Direction, Message, Payload};
use crate::node::{IrNode, Out};
use crate::node_id::NodeId;
use crate::optimizer::OptState;
use crate::slot::Slot;

/// Where messages go: the edges in both directions, each node's worker, the controller.
#[derive(Debug, Clone)]
pub struct Topology {
    /// `fwd[n][o]`: the node and input port that output `o` of node `n` feeds.
    pub fwd: Vec<Vec<(NodeId, usize)>>,
    /// `bwd[n][i]`: the node and output port that feeds input `i` of node `n`.
    pub bwd: Vec<Vec<(NodeId, usize)>>,
    /// Each node's worker.
    pub place: Vec<usize>,
    /// Number of workers.
    pub workers: usize,
    /// The controller.
    pub controller: NodeId,
}

impl Topology {
    /// The message that `out`, emitted by node `from`, becomes.
    pub fn address(&self, from: NodeId, out: Out) -> Message {
        match out {
            Out::Forward { port, state, payload } => {
                let (node, port) = self.fwd[from.0][port];
                Message { node, port, dir: Direction::Forward, state, payload }
            }
            Out::Backward { port, state, payload } => {
                let (node, port) = self.bwd[from.0][port];
                Message { node, port, dir: Direction::Backward, state, payload }
            }
            Out::Update(state) => Message {
                node: from,
                port: 0,
                dir: Direction::Update,
                state,
                payload: Payload::zeros((0, 0)),
            },
        }
    }
}

/// A validated graph: every port connected exactly once, exactly one controller, every node on
/// an existing worker.
pub struct Graph {
    pub(crate) nodes: Vec<Slot>,
    pub(crate) topo: Topology,
    replicas: Vec<Vec<NodeId>>,
    /// Per replica group: its parameters at the last synchronization (at build: the start).
    synced: Vec<Vec<Payload>>,
}

/// Builds a [`Graph`].
///
/// ```
/// use ordo_mp::{Controller, GraphBuilder, nodes::{Linear, SoftmaxLoss}, optimizer::Optimizer};
/// let mut b = GraphBuilder::new();
/// let c = b.controller(Controller::new(vec![true, false])).unwrap();
/// let l = b.add(Linear::new(ndarray::Array2::zeros((4, 3)), Optimizer::sgd(0.1), 1).unwrap());
/// let loss = b.add(SoftmaxLoss::new());
/// b.connect(c, 0, l, 0).unwrap();
/// b.connect(l, 0, loss, 0).unwrap();
/// b.connect(c, 1, loss, 1).unwrap();
/// b.connect(loss, 0, c, 0).unwrap();
/// let g = b.build(2).unwrap();
/// assert_eq!(g.len(), 3);
/// ```
#[derive(Default)]
pub struct GraphBuilder {
    nodes: Vec<Slot>,
    /// The controller, once [`GraphBuilder::controller`] has given it.
    controller: Option<NodeId>,
    fwd: Vec<Vec<Option<(NodeId, usize)>>>,
    bwd: Vec<Vec<Option<(NodeId, usize)>>>,
    place: Vec<Option<usize>>,
    replicas: Vec<Vec<NodeId>>,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// Add a node.
    pub fn add(&mut self, node: impl IrNode + 'static) -> NodeId {
        let (inputs, outputs) = (node.inputs(), node.outputs());
        self.push(Slot::IrNode(Box::new(node)), inputs, outputs)
    }

    /// Add the graph's controller and get its id: a graph has exactly one, so a second is
    /// [`MpError::Controllers`].
    pub fn controller(&mut self, controller: Controller) -> Result<NodeId, MpError> {
        if self.controller.is_some() {
            return Err(MpError::Controllers(2));
        }
        let (inputs, outputs) = (controller.inputs(), controller.outputs());
        let id = self.push(Slot::Controller(controller), inputs, outputs);
        self.controller = Some(id);
        Ok(id)
    }

    fn push(&mut self, slot: Slot, inputs: usize, outputs: usize) -> NodeId {
        self.fwd.push(vec![None; outputs]);
        self.bwd.push(vec![None; inputs]);
        self.place.push(None);
        self.nodes.push(slot);
        NodeId(self.nodes.len() - 1)
    }

    fn check(&self, n: NodeId) -> Result<(), MpError> {
        if n.0 < self.nodes.len() { Ok(()) } else { Err(MpError::UnknownNode(n)) }
    }

    /// Connect output `out` of `from` to input `inp` of `to`.
    pub fn connect(
        &mut self,
        from: NodeId,
        out: usize,
        to: NodeId,
        inp: usize,
    ) -> Result<(), MpError> {
        self.check(from)?;
        self.check(to)?;
        let no_port =
            |node: NodeId, kind, side, port| MpError::NoSuchPort { node, kind, side, port };
        let slot = self.fwd[from.0].get(out).ok_or(no_port(
            from,
            self.nodes[from.0].kind(),
            "output",
            out,
        ))?;
        if slot.is_some() {
            return Err(MpError::PortTaken { node: from, side: "output", port: out });
        }
        let slot =
            self.bwd[to.0].get(inp).ok_or(no_port(to, self.nodes[to.0].kind(), "input", inp))?;
        if slot.is_some() {
            return Err(MpError::PortTaken { node: to, side: "input", port: inp });
        }
        self.fwd[from.0][out] = Some((to, inp));
        self.bwd[to.0][inp] = Some((from, out));
        Ok(())
    }

    /// Connect output 0 of each node to input 0 of the next.
    pub fn chain(&mut self, nodes: &[NodeId]) -> Result<(), MpError> {
        for w in nodes.windows(2) {
            self.connect(w[0], 0, w[1], 0)?;
        }
        Ok(())
    }

    /// Place `node` on `worker` (checked against the worker count at [`GraphBuilder::build`]).
    pub fn place(&mut self, node: NodeId, worker: usize) -> Result<(), MpError> {
        self.check(node)?;
        self.place[node.0] = Some(worker);
        Ok(())
    }

    /// Declare nodes with equally shaped parameters as replicas of one another (averaged by
    /// [`Graph::average_replicas`]).
    ///
    /// Invariant: replicas are one layer held several times (§5), so [`GraphBuilder::build`]
    /// starts every replica as a copy of the group's first node, whatever it was built with.
    /// Replicas initialized apart would hold hidden units in no common order, and the average
    /// of such cells is no trained cell at all.
    pub fn replicas(&mut self, group: Vec<NodeId>) -> Result<(), MpError> {
        for &n in &group {
            self.check(n)?;
        }
        self.replicas.push(group);
        Ok(())
    }

    /// Validate and place the rest: nodes not placed explicitly go round-robin, parameterized
    /// (heavy) nodes first so that the `h`-th heavy node lands on worker `h mod W` (§3.1), then
    /// the light ones continuing the rotation.
    pub fn build(mut self, workers: usize) -> Result<Graph, MpError> {
        let Some(controller) = self.controller else {
            return Err(MpError::Controllers(0));
        };
        if workers == 0 {
            return Err(MpError::Placement { node: controller, worker: 0, workers });
        }
        let unconnected = |edges: &Vec<Vec<Option<(NodeId, usize)>>>, side| {
            for (n, ports) in edges.iter().enumerate() {
                if let Some(port) = ports.iter().position(Option::is_none) {
                    return Err(MpError::Unconnected {
                        node: NodeId(n),
                        kind: self.nodes[n].kind(),
                        side,
                        port,
                    });
                }
            }
            Ok(edges.iter().map(|ps| ps.iter().flatten().copied().collect()).collect())
        };
        let fwd = unconnected(&self.fwd, "output")?;
        let bwd = unconnected(&self.bwd, "input")?;
        let mut place = vec![0; self.nodes.len()];
        let mut next = 0;
        let heavy = |n: &Slot| n.node().is_some_and(|n| !n.params().is_empty());
        let order = (0..self.nodes.len())
            .filter(|&n| heavy(&self.nodes[n]))
            .chain((0..self.nodes.len()).filter(|&n| !heavy(&self.nodes[n])));
        for n in order {
            place[n] = match self.place[n] {
                Some(w) if w < workers => w,
                Some(w) => return Err(MpError::Placement { node: NodeId(n), worker: w, workers }),
                None => {
                    next += 1;
                    (next - 1) % workers
                }
            };
        }
        for g in &self.replicas {
            let shapes: Vec<Vec<_>> = g
                .iter()
                .map(|n| params(&self.nodes[n.0]).iter().map(|p| p.dim()).collect())
                .collect();
            if shapes.windows(2).any(|w| w[0] != w[1]) {
                return Err(MpError::Config("replicas with different parameter shapes".into()));
            }
        }
        // Every replica starts as its group's first (see `replicas`).
        for g in &self.replicas {
            let Some((first, rest)) = g.split_first() else { continue };
            let start: Vec<Payload> = params(&self.nodes[first.0]).into_iter().cloned().collect();
            for n in rest {
                let Some(node) = self.nodes[n.0].node_mut() else { continue };
                for (p, s) in node.params_mut().into_iter().zip(&start) {
                    p.assign(s);
                }
            }
        }
        let synced = self
            .replicas
            .iter()
            .map(|g| match g.first() {
                Some(n) => params(&self.nodes[n.0]).into_iter().cloned().collect(),
                None => Vec::new(),
            })
            .collect();
        let replicas = self.replicas.iter().map(Vec::len).max().unwrap_or(1);
        if let Some(c) = self.nodes[controller.0].controller() {
            c.set_replicas(replicas);
        }
        Ok(Graph {
            nodes: self.nodes,
            topo: Topology { fwd, bwd, place, workers, controller },
            replicas: self.replicas,
            synced,
        })
    }
}

impl Graph {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes (never, once built).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node `n`; `None` for the controller (see [`Graph::controller`]).
    pub fn node(&self, n: NodeId) -> Result<Option<&dyn IrNode>, MpError> {
        self.nodes.get(n.0).map(Slot::node).ok_or(MpError::UnknownNode(n))
    }

    /// Cache entries node `n` holds now (the controller: its active instances); zero for every
    /// node after a complete run.
    pub fn pending(&self, n: NodeId) -> Result<usize, MpError> {
        self.nodes.get(n.0).map(Slot::pending).ok_or(MpError::UnknownNode(n))
    }

    /// The topology (edges, placement).
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The controller.
    pub fn controller(&mut self) -> &mut Controller {
        let c = self.topo.controller.0;
        self.nodes[c].controller().expect("the builder put the controller at its id")
    }

    /// A copy of every node's parameters, by node.
    pub fn params(&self) -> Vec<Vec<Payload>> {
        self.nodes.iter().map(|n| params(n).into_iter().cloned().collect()).collect()
    }

    /// Per parameterized (PPT) node: its id, kind and the staleness of the gradients it has
    /// applied since the graph was built.
    pub fn staleness(&self) -> Vec<(NodeId, &'static str, crate::staleness::StalenessHistogram)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let n = n.node()?;
                n.staleness().map(|h| (NodeId(i), n.kind(), *h))
            })
            .collect()
    }

    /// Emulate a device of `flops` flop/s in every compute node (`None`: compute).
    pub fn emulate(&mut self, flops: Option<f64>) {
        for n in self.nodes.iter_mut().filter_map(Slot::node_mut) {
            n.emulate(flops);
        }
    }

    /// Set the learning rate of every parameterized node's optimizer (a schedule's step
    /// between runs; the optimizers' memory is kept).
    pub fn set_learning_rate(&mut self, lr: f32) {
        self.optimizers().for_each(|o| o.set_lr(lr));
    }

    /// Clip every parameterized node's update to gradient norm `max_norm` ([`crate::clip`];
    /// `None`: no clipping, the default).
    pub fn set_clip_norm(&mut self, max_norm: Option<f32>) {
        self.optimizers().for_each(|o| o.set_clip_norm(max_norm));
    }

    /// The optimizer of every parameterized node.
    fn optimizers(&mut self) -> impl Iterator<Item = &mut OptState> {
        self.nodes.iter_mut().filter_map(Slot::node_mut).filter_map(|n| n.opt_state_mut())
    }

    /// Replace each replica group's parameters by their mean (the end-of-epoch
    /// synchronization of §5): [`Graph::sync_replicas`] with step 1.
    pub fn average_replicas(&mut self) {
        self.sync_replicas(1.0);
    }

    /// Synchronize each replica group: every replica becomes `w₀ + step · mean(wᵢ − w₀)`,
    /// where `w₀` is the group's parameters at the previous synchronization (or the start).
    ///
    /// Step 1 is the plain average of §5 (computed as `mean(wᵢ)`). Step `r` (the group's
    /// size) applies the *sum* of the replicas' moves since the last synchronization: to first
    /// order in the learning rate, where one layer applying all the replicas' updates would
    /// have gone; the average goes only as far as one replica's share of the data took it
    /// (`r` times fewer updates per epoch: the effective-minibatch slow-down B.2 reports).
    pub fn sync_replicas(&mut self, step: f32) {
        for (g, synced) in self.replicas.iter().zip(&mut self.synced) {
            let Some(mut mean) = group_mean(&mut self.nodes, g, params_of) else { continue };
            if step != 1.0 {
                for (m, w0) in mean.iter_mut().zip(synced.iter()) {
                    m.zip_mut_with(w0, |m, &w0| *m = w0 + step * (*m - w0));
                }
            }
            for (s, m) in synced.iter_mut().zip(&mean) {
                s.assign(m);
            }
            assign_all(&mut self.nodes, g, params_of, &mean);
        }
    }

    /// Replace each replica group's optimizer memory (momentum, Adam moments) by its mean, so
    /// that after a synchronization the replicas are one layer again, optimizer included: a
    /// replica otherwise goes on along its own momentum, away from the other's.
    pub fn average_replica_moments(&mut self) {
        for g in &self.replicas {
            if let Some(mean) = group_mean(&mut self.nodes, g, moments_of) {
                assign_all(&mut self.nodes, g, moments_of, &mean);
            }
        }
    }
}

/// Which arrays of a node a replica synchronization averages: [`params_of`] or [`moments_of`].
type Arrays = for<'a> fn(&'a mut dyn IrNode) -> Option<Vec<&'a mut Payload>>;

/// A node's parameters.
fn params_of(n: &mut dyn IrNode) -> Option<Vec<&mut Payload>> {
    Some(n.params_mut())
}

/// A node's optimizer memory (momentum, Adam moments), if it has an optimizer.
fn moments_of(n: &mut dyn IrNode) -> Option<Vec<&mut Payload>> {
    n.opt_state_mut().map(|o| o.moments_mut())
}

/// The arrays `get` gives of a node (its parameters, or its optimizer's moments), averaged
/// element-wise over the replica group `group`: the sum from +0.0 in the group's order, divided
/// by the group's size, so every replica gets the same bits. `None` if no node of the group
/// has such arrays.
fn group_mean(nodes: &mut [Slot], group: &[NodeId], get: Arrays) -> Option<Vec<Payload>> {
    let mut sum: Option<Vec<Payload>> = None;
    for n in group {
        let Some(arrays) = nodes[n.0].node_mut().and_then(get) else { continue };
        let sum =
            sum.get_or_insert_with(|| arrays.iter().map(|a| Payload::zeros(a.raw_dim())).collect());
        for (s, a) in sum.iter_mut().zip(arrays) {
            *s += &*a;
        }
    }
    let k = group.len() as f32;
    sum.map(|mut s| {
        s.iter_mut().for_each(|m| m.mapv_inplace(|v| v / k));
        s
    })
}

/// Give every node of `group` the arrays `values` in place of those `get` gives.
fn assign_all(nodes: &mut [Slot], group: &[NodeId], get: Arrays, values: &[Payload]) {
    for n in group {
        for (a, v) in nodes[n.0].node_mut().and_then(get).into_iter().flatten().zip(values) {
            a.assign(v);
        }
    }
}

/// A node's parameters (none for the controller).
fn params(n: &Slot) -> Vec<&Payload> {
    n.node().map(IrNode::params).unwrap_or_default()
}
