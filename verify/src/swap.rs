//! The partition buffer's protocol at a swap (`core/src/partition/`; the protocol is stated in
//! the docs of `ordo::partition` and `PartitionedStorage`) as a transition system.
//!
//! Actors and their atomic steps:
//! - **the trainer** (one thread) walks the buffer states of ordo's own BETA plan
//!   (`ordo::partition::ordering::beta(P, c)`) under one of two rules.
//!
//!   *Pipelined* (ordo's trainer, `ordo::partition::Walk`; [`Swap::ci`]): entering a state
//!   *admits* its partitions (queue the load unless resident or on its way, within `c + 1`
//!   partitions resident or loading, then *take* it once it arrived) while earlier states'
//!   batches may still be in flight; it *submits* the state's batches and moves on once they
//!   are all submitted. At any point it may *retire* a resident partition that neither the
//!   current state nor an earlier state with an unwritten batch holds (evict it, queueing its
//!   write-back if changed), and *prefetch* a partition of the next state within `c + 1`. The
//!   last state drains, then the checkpoint.
//!
//!   *Draining* ([`Swap::draining`]: `PartitionedStorage::enter` after the session's `finish`,
//!   the replays' rule). Entering a state: *evict* each outgoing
//!   partition (queueing its write-back if a write landed since its load), *admit* each of the
//!   state's partitions (queue its load unless it is resident or on its way, then *take* it once
//!   the load arrived), *prefetch* the next state's incoming partition. Then it *submits* the
//!   state's batches (one per bucket, at most `depth` unwritten at a time) and *drains*: the
//!   next state starts only when every batch is written. After the last state it
//!   *checkpoints* (queues the write-back of every changed resident partition) and waits for the
//!   I/O thread.
//! - **batches** (any number at once, up to `depth`): *read* both partitions of their bucket in
//!   one step, then *write* both (each landed write adds one to the partition's count).
//! - **the I/O thread** (one): serves its queue first in, first out — a *load* replies with the
//!   partition's file, a *write-back* replaces the file with the copy it was given.
//!
//! A partition's content is abstracted as the number of writes that landed in it (`Writes(n)`),
//! or `Zeros`, the rows of a slot before its bytes arrive. Ghost state: `landed[p]`, the writes
//! that landed in `p` in any copy.
//!
//! Properties:
//! - [`READ_LOADED`]: a batch reads (and writes) a partition only while it is in the buffer,
//!   after its load completed, and its copy holds every write that landed in it;
//! - [`EVICT_DRAINED`]: a partition leaves the buffer only when no unwritten batch touches it
//!   (so no batch still in flight can read, validate against or write its rows);
//! - [`BUFFER_BOUND`] (every state): at most `c + 1` partitions are resident or loading;
//! - [`FILES_CURRENT`] (every state): a partition outside the buffer whose write-back is not
//!   still queued has every landed write in its file — write-back never writes a stale copy;
//! - final: the trainer finished, the queue is empty and every file holds every landed write.
//!
//! The four partition mutants of [`ordo::mutation::Mutant`] each change one step
//! (`partition-evict-unfinished`: retire counts a state finished once its batches are
//! submitted). [`Swap::without_drain`] lets the draining rule's trainer move on without
//! draining, to show that the drain is needed there.
//!
//! What it cannot see: row values (a partition is a count of landed writes), the engine within
//! a state (OAC's model checks that a state's batches equal their sequential run), memory
//! orderings (the Relaxed dirty flag is ordered by the slot's lock: eviction takes its write
//! guard after every writer released its read guard; loom does not run on the storage), the
//! engine's completion messages (the model reads the batches' states directly; the trainer
//! learns them from the session's completions, sent after each batch's last write), the bytes and checksums of the files, crashes,
//! generations and manifests (`prop_partition` and the trainer's resume tests), I/O errors, and
//! plans larger than its bound (two epochs of `beta(4, 3)` in CI).

use ordo::mutation::Mutant;
use ordo::partition::ordering::{Plan, beta};

use crate::model::TransitionSystem;

/// Property: reads see a loaded, current copy.
pub const READ_LOADED: &str =
    "a batch reads a partition only after its load, with every landed write";
/// Property: eviction only after every batch that touched the partition is written.
pub const EVICT_DRAINED: &str =
    "a partition leaves the buffer only when no unwritten batch touches it";
/// Property: the buffer's memory bound.
pub const BUFFER_BOUND: &str = "at most c + 1 partitions are resident or loading";
/// Property: files outside the buffer are current.
pub const FILES_CURRENT: &str = "a partition outside the buffer has every landed write in its file";

/// The CI bound's geometry: `P = 4` partitions, a buffer of `c = 3`.
pub const CI_GEOMETRY: (usize, usize) = (4, 3);
/// The CI bound's epochs: the second reloads partitions the first wrote.
pub const CI_EPOCHS: u8 = 2;
/// The CI bound's pipeline depth (batches unwritten at once).
pub const CI_DEPTH: u8 = 3;

/// The mutants this model is a checker of.
pub const SWAP_MUTANTS: [Mutant; 4] = [
    Mutant::PartitionEvictWithoutWriteBack,
    Mutant::PartitionReadBeforeLoad,
    Mutant::PartitionWriteBackStale,
    Mutant::PartitionEvictUnfinished,
];

/// A copy of a partition: rows before their bytes arrived, or after `n` landed writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Content {
    /// A slot taken before its load finished.
    Zeros,
    /// The rows after this many landed writes.
    Writes(u8),
}

/// A request to the I/O thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// Read the partition's file.
    Load(u8),
    /// Replace the partition's file with this copy.
    WriteBack(u8, Content),
}

/// Where a partition's load stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Load {
    /// No load asked for.
    Idle,
    /// Queued or being read.
    Sent,
    /// Read: this is the file's content.
    Arrived(Content),
}

/// A batch of the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Batch {
    /// Not submitted yet.
    Waiting,
    /// Submitted, not read.
    Submitted,
    /// Read, not written.
    Read,
    /// Written.
    Written,
}

/// The trainer's program counter within buffer state `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Entering: the index of the next step of entering the state (evictions, admissions, the
    /// prefetch).
    Enter(u8),
    /// Submitting and draining the state's batches.
    Train,
    /// After the last state: the checkpoint's write-backs are queued; waiting for the I/O.
    Checkpoint,
    /// Finished.
    Done,
}

/// A global state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SwapState {
    /// The buffer state being entered or trained.
    pub state: u8,
    /// The trainer's program counter.
    pub pc: Pc,
    /// Per partition, its copy in the buffer.
    pub slot: Vec<Option<Content>>,
    /// Per partition, a write landed since its load.
    pub dirty: Vec<bool>,
    /// Per partition, its load.
    pub load: Vec<Load>,
    /// Per partition, its file's content.
    pub file: Vec<Content>,
    /// The I/O thread's queue, oldest first.
    pub queue: Vec<Request>,
    /// The epoch's batches, state by state (bucket by bucket within a state).
    pub batches: Vec<Batch>,
    /// Ghost: writes landed per partition.
    pub landed: Vec<u8>,
}

/// One atomic step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The trainer takes the next step of entering its state.
    Enter,
    /// The trainer submits batch `.0` (of its state).
    Submit(u8),
    /// The trainer, its state's batches written (submitted, without the drain), moves to the
    /// next state (or checkpoints after the last).
    Drained,
    /// Batch `.0` reads its bucket's partitions.
    Read(u8),
    /// Batch `.0` writes them.
    Write(u8),
    /// The I/O thread serves its oldest request.
    Serve,
    /// Pipelined: the trainer evicts partition `.0`, which no unfinished state needs.
    Retire(u8),
    /// Pipelined: the trainer prefetches partition `.0` of the next state.
    Prefetch(u8),
}

/// One step of entering a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnterStep {
    Evict(u8),
    AdmitSend(u8),
    AdmitTake(u8),
    Prefetch(u8),
}

/// The swap protocol over one epoch of a plan.
#[derive(Debug, Clone)]
pub struct Swap {
    /// The plan of one epoch: ordo's BETA order.
    pub plan: Plan,
    /// Epochs, each walking the whole plan.
    pub epochs: u8,
    /// Batches unwritten at most (the pipeline's depth).
    pub depth: u8,
    /// Whether the trainer drains before each swap (the draining rule: `PartitionedStorage::enter`).
    pub drain: bool,
    /// The rule of ordo's trainer (`ordo::partition::Walk`): no drain at a swap; the trainer
    /// admits the next state's partitions (at most `c + 1` partitions resident or loading) while
    /// earlier states' batches are in flight, and a partition leaves once no unwritten batch of
    /// an earlier state and not the current state holds it (*retire*). The epoch's end drains.
    pub pipelined: bool,
    /// The mutant on, if any.
    pub mutant: Option<Mutant>,
}

impl Swap {
    /// `epochs` epochs of `beta(partitions, buffer)` with `depth` batches in flight.
    pub fn new(
        (partitions, buffer): (usize, usize),
        epochs: u8,
        depth: u8,
        mutant: Option<Mutant>,
    ) -> Swap {
        let plan = beta(partitions, buffer).expect("a valid geometry");
        Swap { plan, epochs, depth, drain: true, pipelined: true, mutant }
    }

    /// The CI bound: two epochs of `beta(4, 3)`, 3 batches in flight (about 6 000 states, well
    /// under a second).
    ///
    /// # Example
    /// ```
    /// use ordo_verify::model::{Outcome, Search, check};
    /// use ordo_verify::swap::Swap;
    /// let report = check(&Swap::ci(None), Search::default()).unwrap();
    /// assert_eq!(report.outcome, Outcome::Proved);
    /// ```
    pub fn ci(mutant: Option<Mutant>) -> Swap {
        Swap::new(CI_GEOMETRY, CI_EPOCHS, CI_DEPTH, mutant)
    }

    /// Buffer states over all epochs.
    fn states(&self) -> usize {
        self.plan.states.len() * self.epochs as usize
    }

    /// Global state `g`'s buffer state in the plan.
    fn st(&self, g: usize) -> &ordo::partition::ordering::BufferState {
        &self.plan.states[g % self.plan.states.len()]
    }

    /// The draining rule (`PartitionedStorage::enter` after the session's `finish`): entering a
    /// state evicts the outgoing partitions, and the trainer leaves a state only once its
    /// batches are written.
    pub fn draining(mut self) -> Swap {
        self.pipelined = false;
        self
    }

    /// The draining rule without its drain: the trainer enters the next state (evicting the
    /// outgoing partitions) while batches of the last one are still in flight.
    pub fn without_drain(mut self) -> Swap {
        self.pipelined = false;
        self.drain = false;
        self
    }

    fn on(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The steps of entering state `k`, in order: the plan's outgoing partitions, then the
    /// state's own, then the next state's incoming one.
    fn entering(&self, k: usize) -> Vec<EnterStep> {
        let st = self.st(k);
        let mut steps = Vec::new();
        if self.pipelined {
            // Evictions and prefetches are the trainer's `Retire` and `Prefetch` actions.
            for &p in &st.resident {
                steps.push(EnterStep::AdmitSend(p as u8));
                steps.push(EnterStep::AdmitTake(p as u8));
            }
            return steps;
        }
        if let Some(prev) = k.checked_sub(1).map(|j| self.st(j)) {
            for &p in prev.resident.iter().filter(|p| !st.resident.contains(p)) {
                steps.push(EnterStep::Evict(p as u8));
            }
        }
        for &p in &st.resident {
            steps.push(EnterStep::AdmitSend(p as u8));
            steps.push(EnterStep::AdmitTake(p as u8));
        }
        if let Some(swap) = (k + 1 < self.states()).then(|| self.st(k + 1).swap).flatten() {
            steps.push(EnterStep::Prefetch(swap.load as u8));
        }
        steps
    }

    /// The state of batch `b` and its bucket's index in that state.
    fn batch(&self, b: usize) -> (usize, usize) {
        let mut b = b;
        for k in 0..self.states() {
            let n = self.st(k).buckets.len();
            if b < n {
                return (k, b);
            }
            b -= n;
        }
        unreachable!("batch out of the plan")
    }

    /// The batches of state `k`.
    fn batches_of(&self, k: usize) -> std::ops::Range<usize> {
        let first: usize = (0..k).map(|j| self.st(j).buckets.len()).sum();
        first..first + self.st(k).buckets.len()
    }

    /// The partitions batch `b` touches (one if its bucket is diagonal).
    fn touches(&self, b: usize) -> Vec<usize> {
        let (k, i) = self.batch(b);
        let bucket = self.st(k).buckets[i];
        if bucket.src == bucket.dst { vec![bucket.src] } else { vec![bucket.src, bucket.dst] }
    }

    /// Queue a load of `p` unless it is resident or on its way.
    fn send_load(s: &mut SwapState, p: usize) {
        if s.slot[p].is_none() && s.load[p] == Load::Idle {
            s.load[p] = Load::Sent;
            s.queue.push(Request::Load(p as u8));
        }
    }

    /// Partitions in memory: resident, or with a load sent or arrived; `but` not counted.
    fn in_memory(s: &SwapState, but: Option<usize>) -> usize {
        (0..s.slot.len())
            .filter(|&p| Some(p) != but && (s.slot[p].is_some() || s.load[p] != Load::Idle))
            .count()
    }

    /// Under the pipelined rule, the partitions the trainer must keep: the current state's and
    /// those of every earlier state with a batch not yet written (with the mutant, the current
    /// state's only).
    fn needed(&self, s: &SwapState) -> Vec<usize> {
        let k = s.state as usize;
        let mut needed: Vec<usize> = self.st(k).resident.clone();
        if !self.on(Mutant::PartitionEvictUnfinished) {
            for j in 0..k {
                if self.batches_of(j).any(|b| s.batches[b] != Batch::Written) {
                    needed.extend(self.st(j).resident.iter().copied());
                }
            }
        }
        needed
    }

    /// A partition leaves the buffer, its write-back queued if a write landed since its load;
    /// an error if an unwritten batch touches it.
    fn evict(&self, s: &mut SwapState, p: usize) -> Result<(), String> {
        let in_flight = (0..s.batches.len()).find(|&b| {
            matches!(s.batches[b], Batch::Submitted | Batch::Read) && self.touches(b).contains(&p)
        });
        if let Some(b) = in_flight {
            return Err(format!(
                "{EVICT_DRAINED}: partition {p} leaves while batch {b} is {:?}",
                s.batches[b]
            ));
        }
        let copy = s.slot[p].take().ok_or(format!("partition {p} not resident"))?;
        if s.dirty[p] && !self.on(Mutant::PartitionEvictWithoutWriteBack) {
            s.queue.push(Request::WriteBack(p as u8, copy));
        }
        s.dirty[p] = false;
        Ok(())
    }

    fn current(s: &SwapState, p: usize) -> Content {
        Content::Writes(s.landed[p])
    }
}

impl TransitionSystem for Swap {
    type State = SwapState;
    type Action = Action;

    fn initial(&self) -> SwapState {
        let n = self.plan.partitions;
        SwapState {
            state: 0,
            pc: Pc::Enter(0),
            slot: vec![None; n],
            dirty: vec![false; n],
            load: vec![Load::Idle; n],
            file: vec![Content::Writes(0); n],
            queue: Vec::new(),
            batches: vec![
                Batch::Waiting;
                (0..self.states()).map(|k| self.st(k).buckets.len()).sum()
            ],
            landed: vec![0; n],
        }
    }

    fn actions(&self, s: &SwapState, out: &mut Vec<Action>) {
        let k = s.state as usize;
        match s.pc {
            Pc::Enter(i) => {
                let ready = match self.entering(k)[i as usize] {
                    // Pipelined: a load only within c + 1 partitions in memory.
                    EnterStep::AdmitSend(p) if self.pipelined => {
                        let p = p as usize;
                        s.slot[p].is_some()
                            || s.load[p] != Load::Idle
                            || Self::in_memory(s, Some(p)) < self.plan.buffer + 1
                    }
                    EnterStep::AdmitTake(p) => {
                        let p = p as usize;
                        s.slot[p].is_some()
                            || matches!(s.load[p], Load::Arrived(_))
                            || self.on(Mutant::PartitionReadBeforeLoad)
                    }
                    _ => true,
                };
                if ready {
                    out.push(Action::Enter);
                }
            }
            Pc::Train => {
                let unwritten = s
                    .batches
                    .iter()
                    .filter(|b| matches!(b, Batch::Submitted | Batch::Read))
                    .count();
                let mine = self.batches_of(k);
                match mine.clone().find(|&b| s.batches[b] == Batch::Waiting) {
                    Some(b) if unwritten < self.depth as usize => out.push(Action::Submit(b as u8)),
                    Some(_) => {}
                    None if !self.pipelined
                        && (!self.drain
                            || mine.clone().all(|b| s.batches[b] == Batch::Written)) =>
                    {
                        out.push(Action::Drained)
                    }
                    // Pipelined: the trainer moves on once the state's batches are submitted;
                    // only the last state drains.
                    None if self.pipelined
                        && (k + 1 < self.states()
                            || s.batches.iter().all(|b| *b == Batch::Written)) =>
                    {
                        out.push(Action::Drained)
                    }
                    None => {}
                }
            }
            Pc::Checkpoint | Pc::Done => {}
        }
        if self.pipelined && matches!(s.pc, Pc::Enter(_) | Pc::Train) {
            let needed = self.needed(s);
            for p in 0..self.plan.partitions {
                if s.slot[p].is_some() && !needed.contains(&p) {
                    out.push(Action::Retire(p as u8));
                }
            }
            if s.pc == Pc::Train && k + 1 < self.states() {
                for &p in &self.st(k + 1).resident {
                    if s.slot[p].is_none()
                        && s.load[p] == Load::Idle
                        && Self::in_memory(s, None) < self.plan.buffer + 1
                    {
                        out.push(Action::Prefetch(p as u8));
                    }
                }
            }
        }
        for (b, batch) in s.batches.iter().enumerate() {
            match batch {
                Batch::Submitted => out.push(Action::Read(b as u8)),
                Batch::Read => out.push(Action::Write(b as u8)),
                _ => {}
            }
        }
        if !s.queue.is_empty() {
            out.push(Action::Serve);
        }
    }

    fn apply(&self, s: &SwapState, a: &Action) -> Result<SwapState, String> {
        let mut s = s.clone();
        let k = s.state as usize;
        match *a {
            Action::Enter => {
                let Pc::Enter(i) = s.pc else { return Err("not entering".into()) };
                let steps = self.entering(k);
                match steps[i as usize] {
                    EnterStep::Evict(p) => self.evict(&mut s, p as usize)?,
                    EnterStep::AdmitSend(p) => Self::send_load(&mut s, p as usize),
                    EnterStep::AdmitTake(p) => {
                        let p = p as usize;
                        if s.slot[p].is_none() {
                            s.slot[p] = Some(match s.load[p] {
                                Load::Arrived(c) => c,
                                // Only with the mutant: the slot before its bytes arrive (the
                                // reply, when it comes, is dropped).
                                _ => Content::Zeros,
                            });
                            s.load[p] = Load::Idle;
                        }
                    }
                    EnterStep::Prefetch(p) => Self::send_load(&mut s, p as usize),
                }
                s.pc = if i as usize + 1 < steps.len() { Pc::Enter(i + 1) } else { Pc::Train };
            }
            Action::Submit(b) => s.batches[b as usize] = Batch::Submitted,
            Action::Retire(p) => self.evict(&mut s, p as usize)?,
            Action::Prefetch(p) => Self::send_load(&mut s, p as usize),
            Action::Read(b) => {
                for p in self.touches(b as usize) {
                    match s.slot[p] {
                        Some(c) if c == Self::current(&s, p) => {}
                        got => {
                            return Err(format!(
                                "{READ_LOADED}: batch {b} reads partition {p} as {got:?}, but {} writes of it landed",
                                s.landed[p]
                            ));
                        }
                    }
                }
                s.batches[b as usize] = Batch::Read;
            }
            Action::Write(b) => {
                for p in self.touches(b as usize) {
                    let Some(Content::Writes(n)) = s.slot[p] else {
                        return Err(format!(
                            "{READ_LOADED}: batch {b} writes partition {p}, which is {:?}",
                            s.slot[p]
                        ));
                    };
                    s.slot[p] = Some(Content::Writes(n + 1));
                    s.landed[p] += 1;
                    s.dirty[p] = true;
                }
                s.batches[b as usize] = Batch::Written;
            }
            Action::Drained => {
                if k + 1 < self.states() {
                    s.state += 1;
                    s.pc = Pc::Enter(0);
                } else {
                    for p in 0..self.plan.partitions {
                        if let Some(c) = s.slot[p]
                            && s.dirty[p]
                        {
                            s.queue.push(Request::WriteBack(p as u8, c));
                            s.dirty[p] = false;
                        }
                    }
                    s.pc = Pc::Checkpoint;
                }
            }
            Action::Serve => match s.queue.remove(0) {
                Request::Load(p) => {
                    let p = p as usize;
                    if s.load[p] == Load::Sent {
                        s.load[p] = Load::Arrived(s.file[p]);
                    }
                }
                Request::WriteBack(p, copy) => {
                    if !self.on(Mutant::PartitionWriteBackStale) {
                        s.file[p as usize] = copy;
                    }
                }
            },
        }
        let unwritten = s.batches.iter().any(|b| matches!(b, Batch::Submitted | Batch::Read));
        if s.pc == Pc::Checkpoint && s.queue.is_empty() && !unwritten {
            s.pc = Pc::Done;
        }
        Ok(s)
    }

    fn invariant(&self, s: &SwapState) -> Result<(), String> {
        let held = Self::in_memory(s, None);
        if held > self.plan.buffer + 1 {
            return Err(format!("{BUFFER_BOUND}: {held} with c = {}", self.plan.buffer));
        }
        for p in 0..self.plan.partitions {
            let queued =
                s.queue.iter().any(|r| matches!(r, Request::WriteBack(q, _) if *q as usize == p));
            if s.slot[p].is_none() && !queued && s.file[p] != Self::current(s, p) {
                return Err(format!(
                    "{FILES_CURRENT}: partition {p} is out of the buffer with no write-back queued, its file holds {:?}, but {} writes of it landed",
                    s.file[p], s.landed[p]
                ));
            }
        }
        Ok(())
    }

    fn final_check(&self, s: &SwapState) -> Result<(), String> {
        if s.pc != Pc::Done {
            return Err(format!(
                "stuck at state {} ({:?}) with queue {:?}",
                s.state, s.pc, s.queue
            ));
        }
        for p in 0..self.plan.partitions {
            if s.file[p] != Self::current(s, p) {
                return Err(format!(
                    "after the checkpoint partition {p}'s file holds {:?}, but {} writes of it landed",
                    s.file[p], s.landed[p]
                ));
            }
        }
        Ok(())
    }

    fn describe(&self, s: &SwapState, a: &Action) -> String {
        let k = s.state as usize;
        match *a {
            Action::Enter => match s.pc {
                Pc::Enter(i) => format!("trainer, state {k}: {:?}", self.entering(k)[i as usize]),
                _ => "trainer: enter".into(),
            },
            Action::Submit(b) => {
                format!("trainer submits batch {b}, touching {:?}", self.touches(b as usize))
            }
            Action::Drained => format!("trainer leaves state {k}"),
            Action::Read(b) => format!("batch {b} reads partitions {:?}", self.touches(b as usize)),
            Action::Write(b) => {
                format!("batch {b} writes partitions {:?}", self.touches(b as usize))
            }
            Action::Serve => format!("I/O thread serves {:?}", s.queue.first()),
            Action::Retire(p) => format!("trainer, state {k}: evict partition {p} (retired)"),
            Action::Prefetch(p) => format!("trainer, state {k}: prefetch partition {p}"),
        }
    }
}
