//! A worker's local priority queue (Appendix A): updates, then backward, then forward; FIFO
//! among equals; the stop signal last of all.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::message::Message;

/// What travels between workers.
#[derive(Debug)]
pub enum Envelope {
    /// A message for a node on the receiving worker, and the emulated time it was sent at
    /// ([`DeviceClock`](crate::device_clock::DeviceClock)).
    Msg(Message, std::time::Duration),
    /// The run is over: stop once nothing else is queued.
    Stop,
}

struct Entry {
    key: Reverse<(u8, u64)>,
    env: Envelope,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Entry) -> bool {
        self.key == o.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Entry) -> std::cmp::Ordering {
        self.key.cmp(&o.key)
    }
}

/// The worker-local priority queue.
///
/// ```
/// use ordo_mp::queue::{Envelope, LocalQueue};
/// let mut q = LocalQueue::default();
/// q.push(Envelope::Stop);
/// assert!(matches!(q.pop(), Some(Envelope::Stop)));
/// ```
#[derive(Default)]
pub struct LocalQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl LocalQueue {
    /// Queue an envelope.
    pub fn push(&mut self, env: Envelope) {
        let prio = match &env {
            Envelope::Msg(m, _) => m.dir.priority(),
            Envelope::Stop => u8::MAX,
        };
        self.seq += 1;
        self.heap.push(Entry { key: Reverse((prio, self.seq)), env });
    }

    /// The most urgent envelope.
    pub fn pop(&mut self) -> Option<Envelope> {
        self.heap.pop().map(|e| e.env)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
