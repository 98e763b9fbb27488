//! PASSM+ block ownership (paper 003 §4; `core/src/sgd/passm.rs`, `assm.rs`, `phase_gate.rs`)
//! as a stateright [`Model`]: no two workers write the same block at the same time.
//!
//! `workers` workers, one block each (worker `c` owns block `c`), each running `steps` steps.
//! Before every step a worker picks its method (PASSM+ switches between ASSM and PASSM; the
//! model lets every step pick either) and enters the phase gate (`ordo::sgd::PhaseGate`): one
//! atomic step that succeeds only if the gate admits that method or nothing is in flight (then
//! the method flips). Then:
//! - a **PASSM** step writes its own block lock-free (begin write, end write: two steps, so
//!   another worker can act in between); with [`Mutant::PassmWritesForeignBlock`] it writes every
//!   block, one after the other, lock-free;
//! - an **ASSM** step picks any block, takes its lock (enabled only when free), writes it and
//!   unlocks;
//!
//! and leaves the gate.
//!
//! Property [`ONE_WRITER`]: in every state, every block has at most one writer in its write.
//! It holds because a PASSM owner is its block's only PASSM writer, ASSM writers exclude each
//! other by the block lock, and the gate never lets an ASSM and a PASSM step be in flight
//! together. [`Passm::without_gate`] removes the gate, to show that it is needed.
//!
//! What it cannot see: the values written (the trainers' replay tests and the ASSM/PASSM
//! proptests do), and memory orderings (loom's job on the real gate).

use ordo::mutation::Mutant;
use stateright::{Model, Property};

/// The property: at most one writer per block at any time.
pub const ONE_WRITER: &str = "at most one writer per block";
/// Every worker can finish all its steps.
pub const ALL_DONE: &str = "every worker finishes";

/// The mutants this model is the checker of.
pub const PASSM_MUTANTS: [Mutant; 1] = [Mutant::PassmWritesForeignBlock];

/// A step's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Lock-per-block ASSM.
    Assm,
    /// Lock-free, owner-writes PASSM.
    Passm,
}

/// Where a worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pc {
    /// Between steps.
    Idle,
    /// Entered the gate with a step of this method; not yet writing.
    Entered(Method),
    /// ASSM: holds the lock of this block, not yet writing.
    Locked(u8),
    /// In the write of this block (ASSM with its lock, or PASSM lock-free).
    Writing(Method, u8),
}

/// A worker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Worker {
    /// Its program counter.
    pub pc: Pc,
    /// Steps finished.
    pub done: u8,
}

/// A global state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PassmState {
    /// The gate: admitted method and steps in flight.
    pub gate: (Method, u8),
    /// Per block: locked by an ASSM writer.
    pub locked: Vec<bool>,
    /// Per block: workers in its write.
    pub writers: Vec<u8>,
    /// The workers.
    pub workers: Vec<Worker>,
}

/// One atomic step of worker `.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Enter the gate with a step of this method.
    Enter(u8, Method),
    /// ASSM: lock this block.
    Lock(u8, u8),
    /// Begin writing this block.
    BeginWrite(u8, u8),
    /// End the write in progress.
    EndWrite(u8),
    /// Leave the gate.
    Leave(u8),
}

/// The PASSM+ block-ownership model.
#[derive(Debug, Clone)]
pub struct Passm {
    /// Workers, one block each.
    pub workers: u8,
    /// Steps per worker.
    pub steps: u8,
    /// Whether the phase gate is there (it is, in `ordo`).
    pub gate: bool,
    /// The mutant on, if any.
    pub mutant: Option<Mutant>,
}

impl Passm {
    /// The CI bound: 3 workers, 2 steps each.
    ///
    /// # Example
    /// ```
    /// use ordo_verify::passm::Passm;
    /// use stateright::{Checker, Model};
    /// Passm::ci(None).checker().spawn_bfs().join().assert_properties();
    /// ```
    pub fn ci(mutant: Option<Mutant>) -> Passm {
        Passm { workers: 3, steps: 2, gate: true, mutant }
    }

    /// The same model with no phase gate (every enter succeeds).
    pub fn without_gate(mut self) -> Passm {
        self.gate = false;
        self
    }

    fn foreign_writes(&self) -> bool {
        self.mutant == Some(Mutant::PassmWritesForeignBlock)
    }

    /// The next block a PASSM step of worker `w` writes after writing `last` (if any): its own
    /// block; with the mutant, every block in order.
    fn next_passm_block(&self, w: u8, last: Option<u8>) -> Option<u8> {
        match (self.foreign_writes(), last) {
            (false, None) => Some(w),
            (false, Some(_)) => None,
            (true, None) => Some(0),
            (true, Some(b)) => (b + 1 < self.workers).then_some(b + 1),
        }
    }
}

impl Model for Passm {
    type State = PassmState;
    type Action = Action;

    fn init_states(&self) -> Vec<PassmState> {
        let n = self.workers as usize;
        vec![PassmState {
            gate: (Method::Assm, 0),
            locked: vec![false; n],
            writers: vec![0; n],
            workers: vec![Worker { pc: Pc::Idle, done: 0 }; n],
        }]
    }

    fn actions(&self, s: &PassmState, actions: &mut Vec<Action>) {
        for (w, wk) in s.workers.iter().enumerate() {
            let w = w as u8;
            match wk.pc {
                Pc::Idle if wk.done < self.steps => {
                    for m in [Method::Assm, Method::Passm] {
                        let (admitted, in_flight) = s.gate;
                        if !self.gate || admitted == m || in_flight == 0 {
                            actions.push(Action::Enter(w, m));
                        }
                    }
                }
                Pc::Idle => {}
                Pc::Entered(Method::Assm) => {
                    for b in 0..self.workers {
                        if !s.locked[b as usize] {
                            actions.push(Action::Lock(w, b));
                        }
                    }
                }
                Pc::Entered(Method::Passm) => {
                    let b = self.next_passm_block(w, None).expect("a first block");
                    actions.push(Action::BeginWrite(w, b));
                }
                Pc::Locked(b) => actions.push(Action::BeginWrite(w, b)),
                Pc::Writing(..) => actions.push(Action::EndWrite(w)),
            }
        }
    }

    fn next_state(&self, s: &PassmState, a: Action) -> Option<PassmState> {
        let mut s = s.clone();
        match a {
            Action::Enter(w, m) => {
                let in_flight = if s.gate.0 == m || !self.gate { s.gate.1 } else { 0 };
                s.gate = (m, in_flight + 1);
                s.workers[w as usize].pc = Pc::Entered(m);
            }
            Action::Lock(w, b) => {
                s.locked[b as usize] = true;
                s.workers[w as usize].pc = Pc::Locked(b);
            }
            Action::BeginWrite(w, b) => {
                s.writers[b as usize] += 1;
                let m = if s.workers[w as usize].pc == Pc::Locked(b) {
                    Method::Assm
                } else {
                    Method::Passm
                };
                s.workers[w as usize].pc = Pc::Writing(m, b);
            }
            Action::EndWrite(w) => {
                let Pc::Writing(m, b) = s.workers[w as usize].pc else { return None };
                s.writers[b as usize] -= 1;
                let next = match m {
                    Method::Assm => {
                        s.locked[b as usize] = false;
                        None
                    }
                    Method::Passm => self.next_passm_block(w, Some(b)),
                };
                match next {
                    Some(nb) => {
                        s.writers[nb as usize] += 1;
                        s.workers[w as usize].pc = Pc::Writing(m, nb);
                    }
                    None => return self.next_state(&s, Action::Leave(w)),
                }
            }
            Action::Leave(w) => {
                s.gate.1 = s.gate.1.saturating_sub(1);
                let wk = &mut s.workers[w as usize];
                wk.pc = Pc::Idle;
                wk.done += 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_WRITER, |_, s: &PassmState| s.writers.iter().all(|&n| n <= 1)),
            Property::sometimes(ALL_DONE, |m: &Passm, s: &PassmState| {
                s.workers.iter().all(|w| w.done == m.steps)
            }),
        ]
    }
}
