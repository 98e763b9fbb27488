//! The multi-core runtime (Appendix A): one thread per worker, one MPSC inbox per worker,
//! a worker-local priority queue, and nothing shared between workers but messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};

use crate::controller::{InstanceResult, Source};
use crate::device_clock::DeviceClock;
use crate::error::MpError;
use crate::graph::{Graph, Topology};
use crate::node::Emit;
use crate::node_id::NodeId;
use crate::queue::{Envelope, LocalQueue};
use crate::slot::Slot;
use crate::trace::{Applied, Trace};

/// How a run goes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// `max_active_keys`: instances in flight at most (1 = synchronous).
    pub max_active_keys: usize,
    /// Train (record, backpropagate, update) or only evaluate.
    pub train: bool,
    /// Record the order each node applied its messages ([`Trace`]).
    pub record: bool,
    /// A worker that waits this long for a message fails the run with [`MpError::Stalled`].
    pub stall: Duration,
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig { max_active_keys: 1, train: true, record: false, stall: Duration::from_secs(60) }
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunReport {
    /// The loss's result for each instance, in completion order.
    pub results: Vec<InstanceResult>,
    /// The most instances in flight at once.
    pub max_active: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Messages applied.
    pub messages: u64,
    /// The recorded order, if asked for.
    pub trace: Option<Trace>,
}

impl RunReport {
    /// The report of a complete run of `graph` started at `start`, once no node (the controller
    /// included) still holds a cache entry ([`leak_check`]).
    pub(crate) fn of_complete(
        graph: &mut Graph,
        start: Instant,
        messages: u64,
        trace: Option<Trace>,
    ) -> Result<RunReport, MpError> {
        leak_check(graph)?;
        let c = graph.controller();
        Ok(RunReport {
            results: c.results().to_vec(),
            max_active: c.max_active(),
            elapsed: start.elapsed(),
            messages,
            trace,
        })
    }

    /// Fraction of correct predictions over all instances.
    pub fn accuracy(&self) -> f64 {
        let (c, n) = self
            .results
            .iter()
            .fold((0.0, 0.0), |(c, n), r| (c + r.correct as f64, n + r.examples as f64));
        if n > 0.0 { c / n } else { 0.0 }
    }

    /// Mean loss per example.
    pub fn mean_loss(&self) -> f64 {
        let (l, n) = self
            .results
            .iter()
            .fold((0.0, 0.0), |(l, n), r| (l + r.loss as f64, n + r.examples as f64));
        if n > 0.0 { l / n } else { 0.0 }
    }
}

/// Fail if any node (the controller included) holds cache entries (run after a complete run).
pub fn leak_check(graph: &Graph) -> Result<(), MpError> {
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.pending() > 0 {
            return Err(MpError::CacheLeak {
                node: NodeId(n),
                kind: node.kind(),
                entries: node.pending(),
            });
        }
    }
    Ok(())
}

/// What a worker hands back: its log and how many messages it applied, or why it failed.
type WorkerOutcome = Result<(Vec<(NodeId, Applied)>, u64), MpError>;

struct Worker<'a> {
    id: usize,
    nodes: HashMap<NodeId, &'a mut Slot>,
    topo: &'a Topology,
    inboxes: &'a [Sender<Envelope>],
    queue: LocalQueue,
    train: bool,
    log: Vec<(NodeId, Applied)>,
    record: bool,
    applied: u64,
    device: DeviceClock,
}

impl Worker<'_> {
    /// Route `e`'s messages, stamped with emulated time `at`.
    fn send(&mut self, from: NodeId, e: Emit, at: Duration) {
        for out in e.out {
            let m = self.topo.address(from, out);
            let w = self.topo.place[m.node.0];
            if w == self.id {
                self.queue.push(Envelope::Msg(m, at));
            } else {
                // A send fails only when the receiver has already stopped, i.e. after an abort.
                let _ = self.inboxes[w].send(Envelope::Msg(m, at));
            }
        }
    }

    fn stop_all(&self) {
        for tx in self.inboxes {
            let _ = tx.send(Envelope::Stop);
        }
    }

    /// After a controller step: stop everyone once every instance completed.
    fn controller_done(&mut self, n: NodeId) -> bool {
        n == self.topo.controller
            && self.nodes.get_mut(&n).and_then(|c| c.controller()).is_some_and(|c| c.finished())
    }

    fn run(
        &mut self,
        inbox: &Receiver<Envelope>,
        stall: Duration,
        abort: &AtomicBool,
    ) -> Result<(), MpError> {
        let c = self.topo.controller;
        if self.nodes.contains_key(&c) {
            let mut e = Emit::new(self.train);
            if let Some(ctrl) = self.nodes.get_mut(&c).and_then(|n| n.controller()) {
                ctrl.start(&mut e)?;
            }
            if self.record {
                self.log.push((c, Applied::Start));
            }
            self.send(c, e, Duration::ZERO);
            if self.controller_done(c) {
                self.stop_all();
            }
        }
        loop {
            // Acquire pairs with the Release store of the worker that failed: nothing after the
            // abort needs its data, it only tells us to stop early.
            if abort.load(Ordering::Acquire) {
                return Ok(());
            }
            while let Ok(env) = inbox.try_recv() {
                self.queue.push(env);
            }
            let env = match self.queue.pop() {
                Some(env) => env,
                None => match inbox.recv_timeout(stall) {
                    Ok(env) => env,
                    Err(RecvTimeoutError::Timeout) => return Err(MpError::Stalled(stall)),
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                },
            };
            let (m, at) = match env {
                Envelope::Stop => return Ok(()),
                Envelope::Msg(m, at) => (m, at),
            };
            let node = self.nodes.get_mut(&m.node).ok_or(MpError::UnknownNode(m.node))?;
            if self.record {
                self.log.push((m.node, Applied::Msg(m.key())));
            }
            let mut e = Emit::new(self.train);
            let began = Instant::now();
            node.apply(m.dir, m.port, m.state, m.payload, &mut e)?;
            let done = self.device.run(at, began.elapsed(), e.device);
            self.applied += 1;
            self.send(m.node, e, done);
            if self.controller_done(m.node) {
                self.stop_all();
            }
        }
    }
}

/// Run `order` (indices into `source`) through `graph` on its workers.
///
/// Ends when the controller has every instance's result (and, training, every backward it
/// expects); then no message is in flight, because each node sends its update message to
/// itself before the backward that leads to completion. A complete run leaves every cache
/// empty, which is checked ([`MpError::CacheLeak`]).
pub fn run(
    graph: &mut Graph,
    source: Arc<dyn Source>,
    order: Vec<usize>,
    cfg: &RunConfig,
) -> Result<RunReport, MpError> {
    graph.controller().prepare(source, order, cfg.max_active_keys)?;
    let start = Instant::now();
    let workers = graph.topo.workers;
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..workers).map(|_| unbounded::<Envelope>()).unzip();
    let abort = AtomicBool::new(false);
    let topo = graph.topo.clone();
    let mut per_worker: Vec<HashMap<NodeId, &mut Slot>> =
        (0..workers).map(|_| HashMap::new()).collect();
    for (n, node) in graph.nodes.iter_mut().enumerate() {
        per_worker[topo.place[n]].insert(NodeId(n), node);
    }
    let outcomes: Vec<WorkerOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = per_worker
            .into_iter()
            .zip(rxs)
            .enumerate()
            .map(|(id, (nodes, rx))| {
                let (topo, txs, abort) = (&topo, &txs, &abort);
                s.spawn(move || {
                    let mut w = Worker {
                        id,
                        nodes,
                        topo,
                        inboxes: txs,
                        queue: LocalQueue::default(),
                        train: cfg.train,
                        log: Vec::new(),
                        record: cfg.record,
                        applied: 0,
                        device: DeviceClock::new(start),
                    };
                    let r = w.run(&rx, cfg.stall, abort);
                    if r.is_err() {
                        // Release: see the Acquire load in the worker loop.
                        abort.store(true, Ordering::Release);
                        w.stop_all();
                    }
                    r.map(|()| (w.log, w.applied))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Err(MpError::WorkerPanicked))).collect()
    });
    let mut trace = Trace { per_node: vec![Vec::new(); graph.nodes.len()] };
    let mut messages = 0;
    let mut first_err = None;
    for o in outcomes {
        match o {
            Ok((log, applied)) => {
                messages += applied;
                for (n, a) in log {
                    trace.per_node[n.0].push(a);
                }
            }
            Err(e) => {
                // A stall elsewhere is the consequence, not the cause.
                if first_err.is_none() || matches!(first_err, Some(MpError::Stalled(_))) {
                    first_err = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    if !graph.controller().finished() {
        return Err(MpError::Stalled(cfg.stall));
    }
    RunReport::of_complete(graph, start, messages, cfg.record.then_some(trace))
}
