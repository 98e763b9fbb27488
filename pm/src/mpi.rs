//! The MPI transport (feature `mpi`, rsmpi on the system's OpenMPI): one process per node, one
//! communication thread per process which initializes MPI with `Threading::Funneled` and is the
//! only thread that ever calls MPI; training threads use a [`NodeHandle`] exactly as in-process.
//!
//! Messages travel as point-to-point MPI messages (tag 0), **one per destination and flush**:
//! the CBOR encoding (ciborium) of every [`Message`] the node queued for that rank since the
//! last flush, rows as byte strings ([`MpiTransport`], `message::row_bytes`). MPI's
//! non-overtaking rule gives the FIFO-per-pair order routing needs. `bytes_sent` counts the
//! binary size [`Message::wire_bytes`] of each message. With one blocking `MPI_Send` per message
//! (before), 4 ranks on 2 cores spent ~80% of each communication thread inside `MPI_Send` and
//! most messages were 0.1 s to over 1 s in flight, longer than the intent offset: that, not the
//! protocol, was what kept adapm's remote share above 0.001 on MPI (BENCHMARKS.md, "AdaPM on 4
//! MPI ranks: where the remote accesses went").
//!
//! Quiescence across processes ([`run_node`] after the training closure returns): a
//! non-blocking barrier while still serving requests (so no rank blocks a peer that still
//! pulls from it), then rounds of `all_reduce` over (messages sent − received, nodes not quiet,
//! messages sent) until two rounds in a row show nothing in flight, every node quiet and no new
//! message. Then every rank gathers the final table (owners contribute their main copies) and the
//! number of owners per key, and the summed counters.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::unbounded;
use mpi::Threading;
use mpi::collective::SystemOperation;
use mpi::request::Request;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::cluster::{NodeHandle, Shared, communicate};
use crate::error::PmError;
use crate::message::{Key, Message, NodeId};
use crate::mode::PmMode;
use crate::node::Node;
use crate::stats::PmStats;
use crate::transport::Transport;

/// This process's endpoint: the world communicator, on the communication thread only.
///
/// [`Transport::send`] only queues a message for its destination; [`Transport::flush`] sends
/// each destination's queue as **one** MPI message (the CBOR of the `Vec<Message>`) with a
/// non-blocking send, and until every such send has completed it keeps receiving what arrives
/// (so two ranks flushing large batches to each other cannot deadlock on rendezvous sends).
/// Received batches are queued whole and handed out one message at a time, in order, by
/// [`Transport::recv_timeout`]. MPI's non-overtaking rule keeps a pair's batches in order, so
/// the FIFO-per-pair contract holds message by message.
pub struct MpiTransport {
    world: SimpleCommunicator,
    /// Per destination rank, the messages queued since the last flush.
    outbox: RefCell<Vec<Vec<Message>>>,
    /// Batches received and not yet decoded, with their source, in arrival order.
    arrived: RefCell<VecDeque<(NodeId, Vec<u8>)>>,
    /// Messages of decoded batches not yet handed out.
    inbox: RefCell<VecDeque<(NodeId, Message)>>,
    /// Messages flushed (counted one by one, not per MPI message).
    sent: Cell<u64>,
    /// Messages handed out by `recv_timeout`.
    received: Cell<u64>,
}

impl MpiTransport {
    fn new(world: SimpleCommunicator) -> Self {
        let size = world.size() as usize;
        MpiTransport {
            world,
            outbox: RefCell::new(vec![Vec::new(); size]),
            arrived: Default::default(),
            inbox: Default::default(),
            sent: Default::default(),
            received: Default::default(),
        }
    }

    /// Receive every batch MPI has already delivered to this rank; whether there was one.
    fn receive_arrived(&self) -> bool {
        let mut any = false;
        while let Some(probed) = self.world.any_process().immediate_matched_probe() {
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            self.arrived.borrow_mut().push_back((status.source_rank() as NodeId, bytes));
            any = true;
        }
        any
    }

    /// The element-wise sum of `local` over all ranks (`MPI_Iallreduce`), receiving what arrives
    /// while it completes: a rank still in [`Transport::flush`] waits for this rank to take
    /// its batch, so a blocking collective here could deadlock with it.
    fn sum_over_ranks(&self, local: &[i64]) -> Vec<i64> {
        let mut sum = vec![0i64; local.len()];
        mpi::request::scope(|scope| {
            let op = SystemOperation::sum();
            let mut req = self.world.immediate_all_reduce_into(scope, local, &mut sum[..], op);
            loop {
                match req.test() {
                    Ok(_) => break,
                    Err(r) => req = r,
                }
                if !self.receive_arrived() {
                    std::thread::yield_now();
                }
            }
        });
        sum
    }

    /// The next message of the received batches, decoding the next batch when needed.
    fn next_received(&self) -> Result<Option<(NodeId, Message)>, PmError> {
        loop {
            if let Some(m) = self.inbox.borrow_mut().pop_front() {
                self.received.set(self.received.get() + 1);
                return Ok(Some(m));
            }
            let Some((from, bytes)) = self.arrived.borrow_mut().pop_front() else {
                return Ok(None);
            };
            let batch: Vec<Message> =
                ciborium::from_reader(&bytes[..]).map_err(|e| PmError::Transport(e.to_string()))?;
            self.inbox.borrow_mut().extend(batch.into_iter().map(|m| (from, m)));
        }
    }
}

impl Transport for MpiTransport {
    fn rank(&self) -> NodeId {
        self.world.rank() as NodeId
    }
    fn nodes(&self) -> usize {
        self.world.size() as usize
    }
    fn send(&self, to: NodeId, msg: Message) -> Result<(), PmError> {
        let mut outbox = self.outbox.borrow_mut();
        let nodes = outbox.len();
        outbox.get_mut(to).ok_or(PmError::NodeOutOfRange { node: to, nodes })?.push(msg);
        Ok(())
    }
    fn flush(&self) -> Result<(), PmError> {
        let mut batches = Vec::new();
        for (to, queued) in self.outbox.borrow_mut().iter_mut().enumerate() {
            if queued.is_empty() {
                continue;
            }
            let mut bytes = Vec::new();
            ciborium::into_writer(&*queued, &mut bytes)
                .map_err(|e| PmError::Transport(e.to_string()))?;
            self.sent.set(self.sent.get() + queued.len() as u64);
            queued.clear();
            batches.push((to as i32, bytes));
        }
        mpi::request::scope(|scope| {
            let mut sending: Vec<_> = batches
                .iter()
                .map(|(to, b)| self.world.process_at_rank(*to).immediate_send(scope, &b[..]))
                .collect();
            while !sending.is_empty() {
                sending = sending.into_iter().filter_map(|r| r.test().err()).collect();
                if !sending.is_empty() && !self.receive_arrived() {
                    std::thread::yield_now();
                }
            }
        });
        Ok(())
    }
    fn recv_timeout(&self, timeout: Duration) -> Result<Option<(NodeId, Message)>, PmError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(m) = self.next_received()? {
                return Ok(Some(m));
            }
            if self.receive_arrived() {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // Sleep, not spin: with more ranks than cores a spinning communication thread takes
            // the core its own training thread (and the peers) need.
            std::thread::sleep(left.min(POLL));
        }
    }
}

/// How long `recv_timeout` sleeps between two looks for arrived batches.
const POLL: Duration = Duration::from_micros(50);

/// What every rank knows after [`run_node`].
#[derive(Debug, Clone)]
pub struct MpiOutcome<T> {
    /// What the training closure returned on this rank.
    pub result: T,
    /// This rank.
    pub rank: NodeId,
    /// Number of ranks.
    pub nodes: usize,
    /// The final table, row-major, gathered from the owners.
    pub table: Vec<f32>,
    /// Owners per key at quiescence (1 when the protocol is correct).
    pub owners: Vec<i64>,
    /// Counters summed over ranks.
    pub stats: PmStats,
}

enum Phase {
    Running,
    Barrier(Request<'static, ()>),
    Counting { quiet_rounds: u32, last_sent: i64 },
}

/// Run this process as one node of an MPI job: start the communication thread (which initializes
/// MPI, Funneled), call `train` with this node's handle, its rank and the number of ranks, then
/// quiesce the whole job and gather the final table.
pub fn run_node<T>(
    keys: u64,
    width: usize,
    mode: PmMode,
    init: impl Fn(Key) -> Vec<f32> + Send + 'static,
    train: impl FnOnce(&NodeHandle, NodeId, usize) -> T,
) -> Result<MpiOutcome<T>, PmError> {
    let (tx_shared, rx_shared) = unbounded::<Result<(Arc<Shared>, NodeId, usize), PmError>>();
    let (tx_done, rx_done) = unbounded::<()>();
    let comm = std::thread::spawn(move || -> Result<(Vec<f32>, Vec<i64>, PmStats), PmError> {
        let Some((universe, level)) = mpi::initialize_with_threading(Threading::Funneled) else {
            let e = PmError::Transport("MPI already initialized".into());
            let _ = tx_shared.send(Err(e.clone()));
            return Err(e);
        };
        if level < Threading::Funneled {
            let e = PmError::Transport(format!("MPI provides only {level:?}"));
            let _ = tx_shared.send(Err(e.clone()));
            return Err(e);
        }
        let t = MpiTransport::new(universe.world());
        let (rank, size) = (t.rank(), t.nodes());
        let node = Node::new(rank, size, keys, width, mode, init)?;
        let (out_tx, out_rx) = unbounded();
        let shared = Arc::new(Shared {
            node: Mutex::new(node),
            answered: Condvar::new(),
            outgoing: out_tx,
            in_flight: Arc::new(AtomicI64::new(0)),
        });
        let _ = tx_shared.send(Ok((shared.clone(), rank, size)));
        let mut phase = Phase::Running;
        communicate(&shared, &t, &out_rx, Duration::from_micros(200), |t, s, drained| {
            phase = match std::mem::replace(&mut phase, Phase::Running) {
                Phase::Running if rx_done.try_recv().is_ok() => {
                    Phase::Barrier(t.world.immediate_barrier())
                }
                Phase::Running => Phase::Running,
                Phase::Barrier(req) => match req.test() {
                    Ok(_) => Phase::Counting { quiet_rounds: 0, last_sent: -1 },
                    Err(req) => Phase::Barrier(req),
                },
                Phase::Counting { quiet_rounds, last_sent } => {
                    let quiet = drained && s.lock().is_quiet();
                    let local = [
                        t.sent.get() as i64 - t.received.get() as i64,
                        i64::from(!quiet),
                        t.sent.get() as i64,
                    ];
                    let sum = t.sum_over_ranks(&local);
                    let settled = sum[0] == 0 && sum[1] == 0 && sum[2] == last_sent;
                    let quiet_rounds = if settled { quiet_rounds + 1 } else { 0 };
                    if quiet_rounds >= 2 {
                        return Ok(true);
                    }
                    Phase::Counting { quiet_rounds, last_sent: sum[2] }
                }
            };
            Ok(false)
        })?;
        // Gather the final table and counters.
        let node = shared.lock();
        let mut local = vec![0.0f32; keys as usize * width];
        let mut own = vec![0i64; keys as usize];
        for k in 0..keys {
            if let Some(r) = node.owned_record(k) {
                local[k as usize * width..(k as usize + 1) * width].copy_from_slice(&r.value);
                own[k as usize] = 1;
            }
        }
        let mut table = vec![0.0f32; local.len()];
        let mut owners = vec![0i64; own.len()];
        t.world.all_reduce_into(&local[..], &mut table[..], SystemOperation::sum());
        t.world.all_reduce_into(&own[..], &mut owners[..], SystemOperation::sum());
        let st = node.stats();
        let fields = [
            st.local_pulls,
            st.remote_pulls,
            st.local_pushes,
            st.remote_pushes,
            st.messages,
            st.bytes_sent,
            st.relocations,
            st.replications,
            st.forwards,
        ];
        let mut sum = [0u64; 9];
        t.world.all_reduce_into(&fields[..], &mut sum[..], SystemOperation::sum());
        let stats = PmStats {
            local_pulls: sum[0],
            remote_pulls: sum[1],
            local_pushes: sum[2],
            remote_pushes: sum[3],
            messages: sum[4],
            bytes_sent: sum[5],
            relocations: sum[6],
            replications: sum[7],
            forwards: sum[8],
        };
        Ok((table, owners, stats))
    });
    let (shared, rank, nodes) = rx_shared
        .recv()
        .map_err(|_| PmError::Transport("communication thread died before MPI was up".into()))??;
    let handle = NodeHandle { shared: shared.clone() };
    let result = train(&handle, rank, nodes);
    {
        let mut n = shared.lock();
        if let Some(end) = n.last_intent_end() {
            while n.clock() < end {
                n.advance_clock();
            }
        }
    }
    let _ = tx_done.send(());
    let (table, owners, stats) =
        comm.join().map_err(|_| PmError::Transport("communication thread panicked".into()))??;
    Ok(MpiOutcome { result, rank, nodes, table, owners, stats })
}
