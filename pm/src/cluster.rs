//! Threads as nodes: each node's state behind a mutex, one communication thread per node that
//! alone talks to the [`Transport`] (so an MPI transport can run `MPI_THREAD_FUNNELED`), and
//! [`NodeHandle`]s through which training threads call the API. Training threads never touch the
//! transport: their messages go through a channel to the communication thread.
//!
//! The communication thread receives and handles messages and runs a sync round every
//! `round_interval`. A remote pull or write blocks its caller until the answer arrives.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use ordo::row_store::{StoreError, Version};
use ordo::storage::RowStorage;

use crate::error::PmError;
use crate::message::{Key, Message, NodeId};
use crate::mode::PmMode;
use crate::node::{Node, Outbox, PullOutcome};
use crate::stats::PmStats;
use crate::transport::{InProcessTransport, Transport};

/// Most messages the communication thread handles under one lock before it sends and syncs.
const MAX_DRAIN: i64 = 4096;

/// How long a remote pull or write waits for its answer before it fails.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) struct Shared {
    pub(crate) node: Mutex<Node>,
    pub(crate) answered: Condvar,
    pub(crate) outgoing: Sender<(NodeId, Message)>,
    /// Messages created and not yet handled, over the whole cluster (in-process only).
    pub(crate) in_flight: Arc<AtomicI64>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Node> {
        // A poisoned lock means a node panicked mid-step; its state is not trustworthy.
        self.node.lock().expect("a node thread panicked")
    }

    pub(crate) fn post(&self, out: Outbox) {
        // SeqCst: the counter, and the quiet checks of `Cluster::quiesce`, need one total order so
        // a message counted here is never missed by a check that sees the node quiet.
        self.in_flight.fetch_add(out.len() as i64, Ordering::SeqCst);
        for m in out {
            // The receiver lives as long as the communication thread; after shutdown, messages
            // have nowhere to go and dropping them is the shutdown.
            let _ = self.outgoing.send(m);
        }
    }
}

/// A node's API for training threads (cheap to clone; `Send + Sync`).
#[derive(Clone)]
pub struct NodeHandle {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle").field("node", &self.shared.lock().id()).finish()
    }
}

impl NodeHandle {
    /// Run `f` on the node and send what it produced.
    fn step<T>(&self, f: impl FnOnce(&mut Node, &mut Outbox) -> T) -> T {
        let mut out = Vec::new();
        let r = f(&mut self.shared.lock(), &mut out);
        self.shared.post(out);
        r
    }

    /// See [`Node::intent`].
    pub fn intent(&self, keys: &[Key], start: u64, end: u64) -> Result<(), PmError> {
        self.shared.lock().intent(keys, start, end)
    }

    /// See [`Node::advance_clock`]; then a sync round ([`Node::sync_round`]) on the caller's
    /// thread, so replica deltas and refreshes leave at least once per clock however rarely the
    /// communication thread gets a core (with more threads than cores, it got too few rounds and
    /// replicas drifted apart for whole epochs). Its messages go out through the communication
    /// thread like every other; the caller never touches the transport.
    pub fn advance_clock(&self) {
        self.step(|n, out| {
            n.advance_clock();
            n.sync_round(out);
        });
    }

    /// Local sampling with intent: under one lock, draw `n` keys that `accept` admits among those
    /// this node holds ([`crate::sampling::sample_local`]) and signal intent to access them until
    /// the clock reaches `end` ([`Node::intent_now`]), so they stay local until then. Empty if
    /// the node holds no admitted key.
    pub fn sample_local<R: rand::Rng + ?Sized>(
        &self,
        n: usize,
        rng: &mut R,
        accept: impl Fn(Key) -> bool,
        end: u64,
    ) -> Result<Vec<Key>, PmError> {
        self.step(|node, out| {
            let drawn = crate::sampling::sample_local(node, n, rng, accept);
            node.intent_now(&drawn, end, out)?;
            Ok(drawn)
        })
    }

    /// Block until this node holds every one of `keys` (owned or replicated) or `timeout` has
    /// passed; whether it holds them. For the start of training: the intents for the first
    /// batches are signaled when they are already due, so without this wait their keys would
    /// be pulled remotely while their relocations are still on the way.
    pub fn wait_local(&self, keys: &[Key], timeout: Duration) -> bool {
        let held = |n: &Node| keys.iter().all(|&k| n.owns(k) || n.replica(k).is_some());
        let deadline = Instant::now() + timeout;
        let mut node = self.shared.lock();
        loop {
            if held(&node) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = left.min(Duration::from_millis(1));
            node = self.shared.answered.wait_timeout(node, wait).expect("a node thread panicked").0;
        }
    }

    /// This node's clock.
    pub fn clock(&self) -> u64 {
        self.shared.lock().clock()
    }

    /// Additive update of `keys` (`updates` is `keys.len() × width`, row-major).
    pub fn push(&self, keys: &[Key], updates: &[f32]) -> Result<(), PmError> {
        let width = self.shared.lock().width();
        if updates.len() != keys.len() * width {
            return Err(PmError::UpdateLength { keys: keys.len(), updates: updates.len(), width });
        }
        self.step(|n, out| {
            keys.iter().zip(updates.chunks(width.max(1))).try_for_each(|(&k, u)| n.push(k, u, out))
        })
    }

    /// Read `keys` into `out` (`keys.len() × width`); returns their versions. Every remote
    /// request is sent before the first is waited for, so a pull of many remote keys costs about
    /// one round trip, not one per key; blocks until the owners answer.
    pub fn pull(&self, keys: &[Key], out: &mut [f32]) -> Result<Vec<u64>, PmError> {
        let width = self.shared.lock().width();
        if out.len() != keys.len() * width {
            return Err(PmError::UpdateLength { keys: keys.len(), updates: out.len(), width });
        }
        // All keys checked before any request leaves, so no answer arrives that nobody takes.
        let n_keys = self.shared.lock().keys();
        if let Some(&key) = keys.iter().find(|&&k| k >= n_keys) {
            return Err(PmError::KeyOutOfRange { key, keys: n_keys });
        }
        let outcomes = self.step(|n, o| keys.iter().map(|&k| n.pull(k, o)).collect::<Vec<_>>());
        let mut versions = Vec::with_capacity(keys.len());
        for (outcome, dst) in outcomes.into_iter().zip(out.chunks_mut(width.max(1))) {
            let (v, ver) = match outcome? {
                PullOutcome::Local(v, ver) => (v, ver),
                PullOutcome::Remote(req) => self.wait(|n| n.take_reply(req))?,
            };
            dst.copy_from_slice(&v);
            versions.push(ver);
        }
        Ok(versions)
    }

    /// Block until `take` yields the answer; an error after [`ANSWER_TIMEOUT`] (a lost request:
    /// the protocol forwards every request, so only a bug or a dead peer gets here).
    fn wait<T>(&self, mut take: impl FnMut(&mut Node) -> Option<T>) -> Result<T, PmError> {
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let mut node = self.shared.lock();
        loop {
            if let Some(t) = take(&mut node) {
                return Ok(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(PmError::NoAnswer(ANSWER_TIMEOUT));
            }
            node = self.shared.answered.wait_timeout(node, left).expect("a node thread panicked").0;
        }
    }

    /// Counters of this node.
    pub fn stats(&self) -> PmStats {
        self.shared.lock().stats()
    }

    /// Run `f` with the node (e.g. [`crate::sampling::sample_local`]).
    pub fn with_node<T>(&self, f: impl FnOnce(&Node) -> T) -> T {
        f(&self.shared.lock())
    }
}

fn version_of(v: u64) -> Version {
    if v == 0 { Version::Initial } else { Version::Written(v - 1) }
}

/// Validate a `RowStorage` call as `RowStore` does, so the node never sees bad input.
fn check(h: &NodeHandle, row: u64, len: usize, ts: u64) -> Result<(), StoreError> {
    let (rows, width) = (h.rows(), RowStorage::width(h));
    if row >= rows as u64 {
        return Err(StoreError::RowOutOfRange { row, rows });
    }
    if len != width {
        return Err(StoreError::DimMismatch { expected: width, got: len });
    }
    if ts >= (1 << 63) - 1 {
        return Err(StoreError::TimestampTooLarge { ts });
    }
    Ok(())
}

/// After [`check`], the node accepts the call; a residual error is the parameter manager's
/// own (e.g. the owner did not answer), handed on whole.
fn residual(e: PmError) -> StoreError {
    match e {
        PmError::KeyOutOfRange { key, keys } => {
            StoreError::RowOutOfRange { row: key, rows: keys as usize }
        }
        e => StoreError::other(e),
    }
}

/// The engine's storage trait over the parameter manager: version `Written(ts)` means the main
/// copy's version is `ts + 1` (pushes count one version each, [`Node::write_if_newer`] sets it to
/// `ts + 1`). *No torn read* holds because a node copies a row under its lock; *newer is never
/// overwritten* because the owner alone decides a write, against its own version.
impl RowStorage for NodeHandle {
    fn rows(&self) -> usize {
        self.shared.lock().keys() as usize
    }
    fn width(&self) -> usize {
        self.shared.lock().width()
    }
    fn read(&self, row: u64, out: &mut [f32]) -> Result<Version, StoreError> {
        check(self, row, out.len(), 0)?;
        let v = self.pull(&[row], out).map_err(residual)?;
        Ok(version_of(v[0]))
    }
    fn version(&self, row: u64) -> Result<Version, StoreError> {
        let mut buf = vec![0.0; RowStorage::width(self)];
        self.read(row, &mut buf)
    }
    fn write_if_newer(&self, row: u64, ts: u64, values: &[f32]) -> Result<bool, StoreError> {
        check(self, row, values.len(), ts)?;
        let req = self.step(|n, o| n.write_if_newer(row, ts, values, o)).map_err(residual)?;
        self.wait(|n| n.take_write_reply(req)).map_err(residual)
    }
    /// The parameter manager keeps no table-wide newest version: every key's is asked.
    fn next_version(&self) -> Result<u64, StoreError> {
        ordo::storage::scan_next_version(self)
    }
    /// One pull per key.
    fn snapshot(&self) -> Result<Vec<f32>, StoreError> {
        ordo::storage::read_all(self)
    }
}

/// `n` nodes as threads of this process, over [`InProcessTransport`].
///
/// ```
/// use ordo_pm::{PmMode, cluster::Cluster};
/// let c = Cluster::in_process(3, 6, 2, PmMode::AdaPm, |k| vec![k as f32; 2]).unwrap();
/// let h = c.handle(1).unwrap();
/// h.intent(&[0], 0, 10).unwrap();
/// h.push(&[0], &[1.0, 1.0]).unwrap();
/// let mut row = [0.0; 2];
/// h.pull(&[0], &mut row).unwrap();
/// assert_eq!(row, [1.0, 1.0]);
/// c.quiesce(std::time::Duration::from_secs(10)).unwrap();
/// ```
pub struct Cluster {
    shared: Vec<Arc<Shared>>,
    threads: Vec<JoinHandle<Result<(), PmError>>>,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicI64>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("nodes", &self.shared.len()).finish()
    }
}

impl Cluster {
    /// Start `nodes` nodes (sync round every 200 µs).
    pub fn in_process(
        nodes: usize,
        keys: u64,
        width: usize,
        mode: PmMode,
        init: impl Fn(Key) -> Vec<f32>,
    ) -> Result<Self, PmError> {
        let all = Node::all(nodes, keys, width, mode, init)?;
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicI64::new(0));
        let mut shared = Vec::new();
        let mut threads = Vec::new();
        for (node, transport) in all.into_iter().zip(InProcessTransport::mesh(nodes)) {
            let (tx, rx) = unbounded();
            let s = Arc::new(Shared {
                node: Mutex::new(node),
                answered: Condvar::new(),
                outgoing: tx,
                in_flight: in_flight.clone(),
            });
            shared.push(s.clone());
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                // Relaxed: see `Cluster::drop`.
                communicate(&s, &transport, &rx, Duration::from_micros(200), |_, _, _| {
                    Ok(stop.load(Ordering::Relaxed))
                })
            }));
        }
        Ok(Cluster { shared, threads, stop, in_flight })
    }

    /// The API of node `n`.
    pub fn handle(&self, n: NodeId) -> Result<NodeHandle, PmError> {
        let s = self
            .shared
            .get(n)
            .ok_or(PmError::NodeOutOfRange { node: n, nodes: self.shared.len() })?;
        Ok(NodeHandle { shared: s.clone() })
    }

    /// Counters summed over nodes.
    pub fn stats(&self) -> PmStats {
        let mut t = PmStats::default();
        for s in &self.shared {
            t += s.lock().stats();
        }
        t
    }

    /// Advance every node's clock past its intents and wait until no message is in flight and
    /// every node is quiet ([`Node::is_quiet`]); `Err` after `timeout`.
    pub fn quiesce(&self, timeout: Duration) -> Result<(), PmError> {
        let deadline = Instant::now() + timeout;
        loop {
            for s in &self.shared {
                let mut n = s.lock();
                if let Some(end) = n.last_intent_end() {
                    while n.clock() < end {
                        n.advance_clock();
                    }
                }
            }
            // SeqCst: see `Shared::post`; zero before and after all-quiet means nothing moved.
            let before = self.in_flight.load(Ordering::SeqCst);
            let quiet = self.shared.iter().all(|s| s.lock().is_quiet());
            let after = self.in_flight.load(Ordering::SeqCst);
            if before == 0 && quiet && after == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PmError::Transport(format!(
                    "not quiescent ({after} messages in flight)"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Relaxed: the flag carries no data; the threads are joined right after.
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The communication thread of one node: the only caller of `transport`. Runs until `done`
/// (called once per iteration, on this thread, so it may make MPI calls) says so.
pub(crate) fn communicate<T: Transport + ?Sized>(
    s: &Shared,
    transport: &T,
    outgoing: &Receiver<(NodeId, Message)>,
    round_interval: Duration,
    mut done: impl FnMut(&T, &Shared, bool) -> Result<bool, PmError>,
) -> Result<(), PmError> {
    let mut next_round = Instant::now();
    loop {
        while let Ok((to, m)) = outgoing.try_recv() {
            transport.send(to, m)?;
        }
        transport.flush()?;
        if let Some(first) = transport.recv_timeout(Duration::from_micros(100))? {
            // Handle what has already arrived under one lock (up to `MAX_DRAIN`): taking the
            // lock once per message let a busy training thread starve the node's inbox.
            let mut out = Vec::new();
            let mut handled = 0;
            {
                let mut node = s.lock();
                let mut next = Some(first);
                while let Some((from, m)) = next {
                    node.handle(from, m, &mut out);
                    handled += 1;
                    next = if handled < MAX_DRAIN {
                        transport.recv_timeout(Duration::ZERO)?
                    } else {
                        None
                    };
                }
            }
            s.post(out);
            // SeqCst: after the messages they produced are counted (see `Shared::post`).
            s.in_flight.fetch_sub(handled, Ordering::SeqCst);
            s.answered.notify_all();
        }
        if Instant::now() >= next_round {
            let mut out = Vec::new();
            s.lock().sync_round(&mut out);
            s.post(out);
            next_round = Instant::now() + round_interval;
        }
        if done(transport, s, outgoing.is_empty())? {
            return Ok(());
        }
    }
}
