//! The MPI transport (feature `mpi`, rsmpi on the system's OpenMPI): one process per node, one
//! communication thread per process which initializes MPI with `Threading::Funneled` and is the
//! only thread that ever calls MPI; training threads use a [`NodeHandle`] exactly as in-process.
//!
//! Messages are point-to-point sends of the CBOR encoding (ciborium) of a [`Message`] (tag 0);
//! MPI's non-overtaking rule gives the FIFO-per-pair order routing needs. `bytes_sent` counts
//! the binary size [`Message::wire_bytes`], not the CBOR (JSON, used before, spent most of a
//! 4-rank WordNet run formatting and parsing floats). Sends are blocking standard sends: rows are
//! small (below OpenMPI's eager limit), so a send completes without the peer receiving.
//!
//! Quiescence across processes ([`run_node`] after the training closure returns): a
//! non-blocking barrier while still serving requests (so no rank blocks a peer that still
//! pulls from it), then rounds of `all_reduce` over (messages sent − received, nodes not quiet,
//! messages sent) until two rounds in a row show nothing in flight, every node quiet and no new
//! message. Then every rank gathers the final table (owners contribute their main copies) and the
//! number of owners per key, and the summed counters.

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
pub struct MpiTransport {
    world: SimpleCommunicator,
    sent: std::cell::Cell<u64>,
    received: std::cell::Cell<u64>,
}

impl Transport for MpiTransport {
    fn rank(&self) -> NodeId {
        self.world.rank() as NodeId
    }
    fn nodes(&self) -> usize {
        self.world.size() as usize
    }
    fn send(&self, to: NodeId, msg: Message) -> Result<(), PmError> {
        let mut bytes = Vec::new();
        ciborium::into_writer(&msg, &mut bytes).map_err(|e| PmError::Transport(e.to_string()))?;
        self.world.process_at_rank(to as i32).send(&bytes[..]);
        self.sent.set(self.sent.get() + 1);
        Ok(())
    }
    fn recv_timeout(&self, timeout: Duration) -> Result<Option<(NodeId, Message)>, PmError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(probed) = self.world.any_process().immediate_matched_probe() {
                let (bytes, status) = probed.matched_receive_vec::<u8>();
                self.received.set(self.received.get() + 1);
                let msg = ciborium::from_reader(&bytes[..])
                    .map_err(|e| PmError::Transport(e.to_string()))?;
                return Ok(Some((status.source_rank() as NodeId, msg)));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::yield_now();
        }
    }
}

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
        let t = MpiTransport {
            world: universe.world(),
            sent: Default::default(),
            received: Default::default(),
        };
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
                    let mut sum = [0i64; 3];
                    t.world.all_reduce_into(&local[..], &mut sum[..], SystemOperation::sum());
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
