//! The OAC protocol (paper 000, §3; ARCHITECTURE.md "The engine") as a transition system.
//!
//! Actors and their atomic steps:
//! - **readers** (a pool of `readers` threads, taking batches in id order): *announce* (read the
//!   MFT and register it in the outstanding set, one atomic step), then *read* each row's
//!   `(ts, value)`, one row per step, so reads of different batches interleave row by row; the
//!   last read enqueues the batch for the device. The queue order is the arrival order.
//! - **device** (one thread, in submission order, as ordo's engine: `core/src/engine/arrivals.rs`):
//!   *take* the batch whose turn it is (batch `b` once batches `0..b` were taken; it waits while
//!   that batch is still being read, however many later ones are queued) and compute its STE (the
//!   least of the MFT and the MFTs announced by outstanding batches, as ordo's engine does;
//!   [`SteAt::Announce`] computes it at the announcement instead, as the paper does); then, in
//!   one step, evict cache entries with `ts ≤ STE`, validate (a row whose cache ts is `>` the ts read is replaced by the cached
//!   value), step (`v' = 2v + batch + 1`, in integers, so the result depends on the order),
//!   stamp the next ts, insert the rows into the cache.
//! - **writers** (a pool of `writers` threads, taking batches in device order): write each row
//!   if the batch's ts is newer than the row's, one row per step; then `finish(ts)` in the MFT;
//!   then leave the outstanding set.
//!
//! Ghost state: `seq`, the store as the sequential run of the batches in the order the device
//! took them would leave it; and, fixed, the store the sequential run in submission order
//! leaves.
//!
//! Properties:
//! - at every device validation, each row the batch computes on equals the sequential value
//!   (ts and value) — in particular no batch needed an entry that was evicted or never inserted;
//! - in every state, every ts ≤ MFT belongs to a batch whose writes are all done (MFT never
//!   exceeds an unfinished ts);
//! - in every final state, every batch is done and the store equals `seq`, and the sequential run
//!   in submission order (the device took the batches in that order).
//!
//! **What it cannot see.** The readers here have no outstanding-slot limit and no read-ahead,
//! so the liveness argument for the device's wait (a reader of the awaited batch always gets a
//! slot) is not modelled: the engine's simulation (`ordo::engine::simulation`, whose schedules
//! fail on any deadlock with the real slots and read-ahead) and the shuttle and loom tests
//! check it.
//!
//! The protocol mutants of [`ordo::mutation::Mutant`] change exactly one of these steps.

use ordo::mutation::Mutant;
use thiserror::Error;

use crate::model::TransitionSystem;

/// A row's timestamp. The initial store has ts `-1` on every row (the paper's convention).
pub type Ts = i16;

/// A row version: its timestamp and (integer) value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Row {
    /// The ts of the batch that wrote it, `-1` for the initial value.
    pub ts: Ts,
    /// The value.
    pub val: u32,
}

/// A bad OAC model configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OacConfigError {
    /// At least one batch, at most 16.
    #[error("the number of batches must be in 1..=16, got {0}")]
    Batches(usize),
    /// At least one row, at most 16.
    #[error("the number of rows must be in 1..=16, got {0}")]
    Rows(usize),
    /// A batch touches a row outside `0..rows`, touches none, or lists one twice.
    #[error("batch {batch}: row set must be non-empty, distinct and within 0..{rows}")]
    BadRowSet {
        /// The batch.
        batch: usize,
        /// The number of rows.
        rows: usize,
    },
    /// Both pools need at least one thread.
    #[error("readers and writers must be at least 1")]
    NoThreads,
    /// The mutant does not belong to the OAC protocol.
    #[error("mutant {0} is not an OAC protocol mutant")]
    NotOacMutant(&'static str),
}

/// The OAC mutants: those that change a step of this model.
pub const OAC_MUTANTS: [Mutant; 9] = [
    Mutant::WriteIgnoresTs,
    Mutant::EvictStePlusOne,
    Mutant::ValidationSkipped,
    Mutant::ReadBeforeAnnounce,
    Mutant::MftBeforeWritesVisible,
    Mutant::CacheInsertSkipped,
    Mutant::ValidateGe,
    Mutant::MftCountsFinishes,
    Mutant::DeviceTakesArrivalOrder,
];

/// The OAC transition system: `k` batches over `p` rows, each batch reading and writing the
/// same row set.
#[derive(Debug, Clone)]
pub struct Oac {
    sets: Vec<Vec<usize>>,
    rows: usize,
    readers: usize,
    writers: usize,
    mutant: Option<Mutant>,
    props: Properties,
    ste_at: SteAt,
    /// The store after the sequential run of the batches in submission order.
    submitted: Vec<Row>,
}

/// Which of the model's properties are checked (all by default). Switching some off shows what
/// the others catch alone: for instance the final-state property (the store equals the
/// sequential result) kills most OAC mutants by itself too, only with longer traces, but not
/// `mft-counts-finishes`, which only the MFT invariant sees (`tests/model_checker.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Properties {
    /// At each device validation: every row a batch computes on is the sequential value.
    pub validation: bool,
    /// In every state: MFT never exceeds the ts of a batch whose writes are not all done.
    pub mft: bool,
}

impl Default for Properties {
    fn default() -> Self {
        Properties { validation: true, mft: true }
    }
}

/// Who computes the STE a batch's eviction uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SteAt {
    /// The paper (000, §3.3): the reader, atomically with the announcement, as the least MFT
    /// announced by the batches outstanding then.
    Announce,
    /// ordo's engine (`core/src/engine/sequencer.rs`): the device, when it takes the batch, as the
    /// least of the current MFT and the MFTs announced by the batches outstanding now.
    Device,
}

/// Where a batch is in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    /// Not yet taken by a reader.
    Waiting,
    /// Taken by a reader, not yet enqueued for the device.
    Reading,
    /// In the device's input queue.
    Queued,
    /// Taken by the device (its STE known), not yet computed.
    AtDevice,
    /// Computed by the device, in the writers' queue.
    Computed,
    /// Taken by a writer.
    Writing,
    /// Written, finished and deregistered.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Batch {
    phase: Phase,
    /// The announced MFT, if announced (and not yet deregistered, see `registered`).
    announced: Option<Ts>,
    registered: bool,
    ste: Ts,
    /// The versions read, in row-set order (cleared once computed).
    read: Vec<Row>,
    /// Its ts and computed values, in row-set order (once computed).
    ts: Ts,
    out: Vec<u32>,
    /// Rows written so far (writers), and whether `finish(ts)` was reported.
    written: u8,
    finished: bool,
}

/// A global state of the OAC protocol (plus the ghost sequential store).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OacState {
    store: Vec<Row>,
    mft: Ts,
    /// Bit `t` set: `finish(t)` reported.
    done: u32,
    next_read: u8,
    device_in: Vec<u8>,
    device_out: Vec<u8>,
    next_ts: Ts,
    cache: Vec<Option<Row>>,
    batches: Vec<Batch>,
    seq: Vec<Row>,
}

/// One atomic step of one actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OacAction {
    /// A reader announces batch `b`'s MFT (and computes its STE).
    Announce(u8),
    /// A reader reads the next row of batch `b`.
    ReadRow(u8),
    /// The device takes the batch whose turn it is from its queue (and, with [`SteAt::Device`],
    /// computes its STE).
    DeviceTake,
    /// The device evicts, validates, steps, stamps and caches the batch it took.
    DeviceRun,
    /// A writer writes the next row of batch `b` (taking it from the queue first if needed).
    WriteRow(u8),
    /// A writer reports `finish(ts)` of batch `b` to the MFT.
    Finish(u8),
    /// A writer removes batch `b` from the outstanding set.
    Deregister(u8),
}

impl Oac {
    /// A model over explicit row sets (`sets[b]` = the rows batch `b` reads and writes).
    pub fn new(
        sets: Vec<Vec<usize>>,
        rows: usize,
        readers: usize,
        writers: usize,
        mutant: Option<Mutant>,
    ) -> Result<Oac, OacConfigError> {
        if sets.is_empty() || sets.len() > 16 {
            return Err(OacConfigError::Batches(sets.len()));
        }
        if rows == 0 || rows > 16 {
            return Err(OacConfigError::Rows(rows));
        }
        if readers == 0 || writers == 0 {
            return Err(OacConfigError::NoThreads);
        }
        for (batch, set) in sets.iter().enumerate() {
            let mut sorted = set.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if set.is_empty() || sorted.len() != set.len() || sorted.iter().any(|&r| r >= rows) {
                return Err(OacConfigError::BadRowSet { batch, rows });
            }
        }
        if let Some(m) = mutant.filter(|m| !OAC_MUTANTS.contains(m)) {
            return Err(OacConfigError::NotOacMutant(m.name()));
        }
        let submitted = Self::sequential(&sets, rows);
        Ok(Oac {
            submitted,
            sets,
            rows,
            readers,
            writers,
            mutant,
            props: Properties::default(),
            ste_at: SteAt::Device,
        })
    }

    /// The standard workload at bound `(k, p)`: batch `b` touches rows `b mod p` and
    /// `(b+1) mod p` (one row when `p = 1`), so consecutive batches overlap on one row and
    /// every row is shared; 2 readers, 2 writers.
    pub fn standard(k: usize, p: usize, mutant: Option<Mutant>) -> Result<Oac, OacConfigError> {
        let sets = (0..k)
            .map(|b| {
                let mut s = vec![b % p.max(1)];
                if p > 1 {
                    s.push((b + 1) % p);
                }
                s
            })
            .collect();
        Oac::new(sets, p, 2, 2, mutant)
    }

    /// The same model, checking only the properties switched on in `props` (the final-state
    /// property is always checked).
    pub fn with_properties(mut self, props: Properties) -> Oac {
        self.props = props;
        self
    }

    /// The same model with the STE computed by `ste_at` (default [`SteAt::Device`]).
    pub fn with_ste_at(mut self, ste_at: SteAt) -> Oac {
        self.ste_at = ste_at;
        self
    }

    /// The row sets, one per batch.
    pub fn sets(&self) -> &[Vec<usize>] {
        &self.sets
    }

    fn on(&self, m: Mutant) -> bool {
        self.mutant == Some(m)
    }

    /// The initial store: row `r` holds `r`, from before the run (ts `-1`).
    fn initial_store(rows: usize) -> Vec<Row> {
        (0..rows).map(|r| Row { ts: -1, val: r as u32 }).collect()
    }

    /// The store after the sequential run of `sets` in submission order (batch `b` at ts `b`).
    fn sequential(sets: &[Vec<usize>], rows: usize) -> Vec<Row> {
        let mut store = Self::initial_store(rows);
        for (b, set) in sets.iter().enumerate() {
            for &r in set {
                store[r] = Row { ts: b as Ts, val: Self::step(b, store[r].val) };
            }
        }
        store
    }

    /// Where in the device's queue the batch it takes next is: the batch whose turn it is
    /// (`next_ts`, as the device stamps in submission order), if it has arrived.
    fn turn(&self, s: &OacState) -> Option<usize> {
        if self.on(Mutant::DeviceTakesArrivalOrder) {
            // The bug: the head of the queue, whichever batch a reader finished first.
            return (!s.device_in.is_empty()).then_some(0);
        }
        s.device_in.iter().position(|&b| b as Ts == s.next_ts)
    }

    /// The deterministic, order-sensitive model step of batch `b` on one row.
    fn step(b: usize, v: u32) -> u32 {
        v.wrapping_mul(2).wrapping_add(b as u32 + 1)
    }

    fn count(s: &OacState, phase: Phase) -> usize {
        s.batches.iter().filter(|b| b.phase == phase).count()
    }

    /// Whether batch `b`'s reader has read every row.
    fn all_read(&self, s: &OacState, b: usize) -> bool {
        s.batches[b].read.len() == self.sets[b].len()
    }

    /// Enqueue `b` for the device once it has both announced and read every row.
    fn maybe_enqueue(&self, s: &mut OacState, b: usize) {
        if s.batches[b].announced.is_some() && self.all_read(s, b) {
            s.batches[b].phase = Phase::Queued;
            s.device_in.push(b as u8);
        }
    }

    /// Start batch `b` reading if a reader is free and `b` is next.
    fn take_for_reading(&self, s: &mut OacState, b: usize) {
        if s.batches[b].phase == Phase::Waiting {
            s.batches[b].phase = Phase::Reading;
            s.next_read += 1;
        }
    }

    /// The least MFT announced by an outstanding batch, and (device STE) the current MFT.
    fn ste(&self, s: &OacState) -> Ts {
        let announced = s.batches.iter().filter(|x| x.registered).filter_map(|x| x.announced).min();
        match self.ste_at {
            SteAt::Announce => announced.unwrap_or(s.mft),
            SteAt::Device => announced.map_or(s.mft, |a| a.min(s.mft)),
        }
    }

    fn device_take(&self, s: &mut OacState) {
        let at = self.turn(s).expect("the turn's batch is queued");
        let b = s.device_in.remove(at) as usize;
        if self.ste_at == SteAt::Device {
            s.batches[b].ste = self.ste(s);
        }
        s.batches[b].phase = Phase::AtDevice;
    }

    fn device_run(&self, s: &mut OacState) -> Result<(), String> {
        let b = s
            .batches
            .iter()
            .position(|x| x.phase == Phase::AtDevice)
            .expect("a batch at the device");
        let ste = s.batches[b].ste;
        let bound = if self.on(Mutant::EvictStePlusOne) { ste + 1 } else { ste };
        let before = s.cache.clone();
        for e in s.cache.iter_mut() {
            if e.is_some_and(|r| r.ts <= bound) {
                *e = None;
            }
        }
        let ts = s.next_ts;
        let mut out = Vec::with_capacity(self.sets[b].len());
        for (j, &r) in self.sets[b].iter().enumerate() {
            let read = s.batches[b].read[j];
            let used = match s.cache[r] {
                Some(c) if !self.on(Mutant::ValidationSkipped) => {
                    let newer =
                        if self.on(Mutant::ValidateGe) { c.ts >= read.ts } else { c.ts > read.ts };
                    if newer { c } else { read }
                }
                _ => read,
            };
            let want = s.seq[r];
            if self.props.validation && used != want {
                let why = if read.ts >= want.ts {
                    "the read is not the newest version yet no newer version exists".to_string()
                } else if before[r].is_some_and(|c| c == want) && s.cache[r].is_none() {
                    format!(
                        "it needed cache entry (row {r}, ts {}) which this very eviction (ts ≤ {bound}) removed",
                        want.ts
                    )
                } else if s.cache[r] == Some(want) {
                    "validation did not take the newer cached version".to_string()
                } else {
                    format!(
                        "the newer version ts {} is not in the cache (evicted earlier or never inserted)",
                        want.ts
                    )
                };
                return Err(format!(
                    "batch {b} (ts {ts}) computes row {r} on (ts {}, v {}) but the sequential value is (ts {}, v {}): {why}",
                    used.ts, used.val, want.ts, want.val
                ));
            }
            let v = Self::step(b, used.val);
            out.push(v);
            let row = Row { ts, val: v };
            if !self.on(Mutant::CacheInsertSkipped) {
                s.cache[r] = Some(row);
            }
            // The ghost runs the same step on the sequential value, independently of `used`.
            s.seq[r] = Row { ts, val: Self::step(b, want.val) };
        }
        s.next_ts += 1;
        let batch = &mut s.batches[b];
        batch.ts = ts;
        batch.out = out;
        batch.read = Vec::new(); // no longer needed: forget it so equal futures merge
        batch.phase = Phase::Computed;
        s.device_out.push(b as u8);
        Ok(())
    }

    fn finish(&self, s: &mut OacState, b: usize) {
        let t = s.batches[b].ts;
        s.done |= 1 << t;
        if self.on(Mutant::MftCountsFinishes) {
            s.mft += 1; // one per finish, contiguous or not
        } else {
            while s.done & (1 << (s.mft + 1)) != 0 {
                s.mft += 1;
            }
        }
        s.batches[b].finished = true;
    }

    /// A writer takes computed batch `b` (the head of the device's output) on its first write
    /// or finish; a batch already being written stays as it is.
    fn start_writing(s: &mut OacState, b: usize) {
        if s.batches[b].phase == Phase::Computed {
            s.device_out.remove(0);
            s.batches[b].phase = Phase::Writing;
        }
    }

    fn deregister(s: &mut OacState, b: usize) {
        let batch = &mut s.batches[b];
        batch.registered = false;
        batch.phase = Phase::Done;
        // Forget what no longer matters so that equal futures merge.
        batch.out = Vec::new();
        batch.announced = None;
        batch.ste = 0;
    }

    /// The writer's steps after `finish` in the correct protocol order.
    fn writes_complete(&self, s: &OacState, b: usize) -> bool {
        s.batches[b].written as usize == self.sets[b].len()
    }
}

impl TransitionSystem for Oac {
    type State = OacState;
    type Action = OacAction;

    fn initial(&self) -> OacState {
        let init = Self::initial_store(self.rows);
        let batch = Batch {
            phase: Phase::Waiting,
            announced: None,
            registered: false,
            ste: 0,
            read: Vec::new(),
            ts: -1,
            out: Vec::new(),
            written: 0,
            finished: false,
        };
        OacState {
            store: init.clone(),
            mft: -1,
            done: 0,
            next_read: 0,
            device_in: Vec::new(),
            device_out: Vec::new(),
            next_ts: 0,
            cache: vec![None; self.rows],
            batches: vec![batch; self.sets.len()],
            seq: init,
        }
    }

    fn actions(&self, s: &OacState, out: &mut Vec<OacAction>) {
        let reader_free = Self::count(s, Phase::Reading) < self.readers;
        let read_first = self.on(Mutant::ReadBeforeAnnounce);
        for (b, batch) in s.batches.iter().enumerate() {
            let id = b as u8;
            match batch.phase {
                Phase::Waiting if reader_free && s.next_read as usize == b => {
                    out.push(if read_first {
                        OacAction::ReadRow(id)
                    } else {
                        OacAction::Announce(id)
                    });
                }
                Phase::Reading => {
                    if batch.announced.is_none() && (!read_first || self.all_read(s, b)) {
                        out.push(OacAction::Announce(id));
                    } else if !self.all_read(s, b) {
                        out.push(OacAction::ReadRow(id));
                    }
                }
                Phase::Writing => {
                    let complete = self.writes_complete(s, b);
                    if self.on(Mutant::MftBeforeWritesVisible) {
                        if !complete {
                            out.push(OacAction::WriteRow(id));
                        } else {
                            out.push(OacAction::Deregister(id));
                        }
                    } else if !complete {
                        out.push(OacAction::WriteRow(id));
                    } else if !batch.finished {
                        out.push(OacAction::Finish(id));
                    } else {
                        out.push(OacAction::Deregister(id));
                    }
                }
                _ => {}
            }
        }
        if s.batches.iter().any(|x| x.phase == Phase::AtDevice) {
            out.push(OacAction::DeviceRun);
        } else if self.turn(s).is_some() {
            out.push(OacAction::DeviceTake);
        }
        if let Some(&head) = s.device_out.first()
            && Self::count(s, Phase::Writing) < self.writers
        {
            out.push(if self.on(Mutant::MftBeforeWritesVisible) {
                OacAction::Finish(head)
            } else {
                OacAction::WriteRow(head)
            });
        }
    }

    fn apply(&self, s: &OacState, a: &OacAction) -> Result<OacState, String> {
        let mut n = s.clone();
        match *a {
            OacAction::Announce(b) => {
                let b = b as usize;
                self.take_for_reading(&mut n, b);
                n.batches[b].announced = Some(n.mft);
                n.batches[b].registered = true;
                if self.ste_at == SteAt::Announce {
                    n.batches[b].ste = self.ste(&n);
                }
                self.maybe_enqueue(&mut n, b);
            }
            OacAction::ReadRow(b) => {
                let b = b as usize;
                self.take_for_reading(&mut n, b);
                let j = n.batches[b].read.len();
                let r = self.sets[b][j];
                let row = n.store[r];
                n.batches[b].read.push(row);
                self.maybe_enqueue(&mut n, b);
            }
            OacAction::DeviceTake => self.device_take(&mut n),
            OacAction::DeviceRun => self.device_run(&mut n)?,
            OacAction::WriteRow(b) => {
                let b = b as usize;
                Self::start_writing(&mut n, b);
                let j = n.batches[b].written as usize;
                let r = self.sets[b][j];
                let row = Row { ts: n.batches[b].ts, val: n.batches[b].out[j] };
                if self.on(Mutant::WriteIgnoresTs) || row.ts > n.store[r].ts {
                    n.store[r] = row;
                }
                n.batches[b].written += 1;
            }
            OacAction::Finish(b) => {
                let b = b as usize;
                Self::start_writing(&mut n, b);
                self.finish(&mut n, b);
            }
            OacAction::Deregister(b) => Self::deregister(&mut n, b as usize),
        }
        Ok(n)
    }

    fn invariant(&self, s: &OacState) -> Result<(), String> {
        for (b, batch) in s.batches.iter().enumerate() {
            let has_ts = matches!(batch.phase, Phase::Computed | Phase::Writing);
            if self.props.mft && has_ts && batch.ts <= s.mft && !self.writes_complete(s, b) {
                return Err(format!(
                    "MFT = {} but batch {b} (ts {}) has written only {} of its {} rows",
                    s.mft,
                    batch.ts,
                    batch.written,
                    self.sets[b].len()
                ));
            }
        }
        Ok(())
    }

    fn final_check(&self, s: &OacState) -> Result<(), String> {
        if let Some(b) = s.batches.iter().position(|b| b.phase != Phase::Done) {
            return Err(format!(
                "deadlock: no action enabled but batch {b} is {:?}",
                s.batches[b].phase
            ));
        }
        for r in 0..self.rows {
            if s.store[r] != s.seq[r] {
                return Err(format!(
                    "final store row {r} = (ts {}, v {}) but the sequential run in device order gives (ts {}, v {})",
                    s.store[r].ts, s.store[r].val, s.seq[r].ts, s.seq[r].val
                ));
            }
            let want = self.submitted[r];
            if s.store[r] != want {
                return Err(format!(
                    "final store row {r} = (ts {}, v {}) but the sequential run in submission order gives (ts {}, v {})",
                    s.store[r].ts, s.store[r].val, want.ts, want.val
                ));
            }
        }
        Ok(())
    }

    fn describe(&self, s: &OacState, a: &OacAction) -> String {
        match *a {
            OacAction::Announce(b) => {
                let what = format!("reader: batch {b} announces MFT = {}", s.mft);
                match self.ste_at {
                    SteAt::Device => what,
                    SteAt::Announce => {
                        let after = self.apply(s, a).ok();
                        let ste = after.as_ref().map_or(0, |n| n.batches[b as usize].ste);
                        format!("{what} (STE = {ste})")
                    }
                }
            }
            OacAction::ReadRow(b) => {
                let j = s.batches[b as usize].read.len();
                let r = self.sets[b as usize][j];
                format!(
                    "reader: batch {b} reads row {r} = (ts {}, v {})",
                    s.store[r].ts, s.store[r].val
                )
            }
            OacAction::DeviceTake => {
                let b = self.turn(s).map_or(0, |at| s.device_in[at] as usize);
                match self.ste_at {
                    SteAt::Device => {
                        let announced: Vec<String> = s
                            .batches
                            .iter()
                            .enumerate()
                            .filter(|(_, x)| x.registered)
                            .filter_map(|(i, x)| x.announced.map(|a| format!("b{i}:{a}")))
                            .collect();
                        format!(
                            "device: takes batch {b}; STE = min(MFT {}, announced [{}]) = {}",
                            s.mft,
                            announced.join(" "),
                            self.ste(s)
                        )
                    }
                    SteAt::Announce => format!(
                        "device: takes batch {b} (STE {} from its announcement)",
                        s.batches[b].ste
                    ),
                }
            }
            OacAction::DeviceRun => {
                let b = s.batches.iter().position(|x| x.phase == Phase::AtDevice).unwrap_or(0);
                let rows: Vec<String> = self.sets[b]
                    .iter()
                    .zip(&s.batches[b].read)
                    .map(|(r, x)| {
                        format!(
                            "row {r} read (ts {}, v {}) cache {}",
                            x.ts,
                            x.val,
                            fmt_cache(s.cache[*r])
                        )
                    })
                    .collect();
                format!(
                    "device: batch {b} gets ts {}; evict ts ≤ {}{}; {}",
                    s.next_ts,
                    s.batches[b].ste,
                    if self.on(Mutant::EvictStePlusOne) { "+1" } else { "" },
                    rows.join("; ")
                )
            }
            OacAction::WriteRow(b) => {
                let batch = &s.batches[b as usize];
                let j = batch.written as usize;
                let r = self.sets[b as usize][j];
                format!(
                    "writer: batch {b} (ts {}) writes row {r} := {} over store (ts {}, v {})",
                    batch.ts, batch.out[j], s.store[r].ts, s.store[r].val
                )
            }
            OacAction::Finish(b) => {
                let after = self.apply(s, a).map_or(s.mft, |n| n.mft);
                format!(
                    "writer: batch {b} finish(ts {}): MFT {} -> {after}",
                    s.batches[b as usize].ts, s.mft
                )
            }
            OacAction::Deregister(b) => format!("writer: batch {b} leaves the outstanding set"),
        }
    }
}

fn fmt_cache(c: Option<Row>) -> String {
    c.map_or("none".to_string(), |c| format!("(ts {}, v {})", c.ts, c.val))
}
