//! How many threads the KGE step runs on, one or two, chosen from what the step measures.
//!
//! The step computes a batch's chunks a pair at a time, the second chunk of a pair on another
//! rayon thread (`KgeModel::gradients_with`). On an idle machine that second thread is worth
//! 1.1–1.2×; when every core is busy (one busy-loop process per core) it costs about as much,
//! mostly because each step on two threads is first handed to a rayon worker, which must wait
//! for a core before it starts: 0.6–1.3 ms a step beside the hogs, 142 µs idle, while the
//! joins themselves hardly wait (BENCHMARKS.md, "The step chooses its threads"). The trainers'
//! binaries now build rayon's pool around the thread that steps (`crate::pool`), which removes
//! the hand-off; the second thread still competes for a core with the engine's reader and
//! writer, and with whatever else the machine runs. Which one pays depends on the machine's
//! load at the moment, which no setting chosen before the run can know, so [`StepThreads`]
//! times both and runs the faster.
//!
//! **The choice never changes a bit:** the step gives the same bits on one thread or two (the
//! chunk adds run in chunk order either way, stated at `KgeModel::gradients_with`; each row's
//! update reads only its own gradient and state), so a choice made from wall-clock times keeps
//! every run reproducible.
//!
//! **What it times: the step's cycle, not the step.** A step's cost is the time from its start
//! to the next step's start: the step, then whatever the device thread does or waits for
//! before the next one (validating the next batch's rows, waiting for the reader to bring it).
//! Timing only the step missed what the second thread costs the rest of the pipeline: on the
//! main job's setting (WordNet 3.0, batches of 256) a step on two threads is shorter, but the
//! second thread takes a core from the engine's reader and writer, and oac's training epochs
//! ran 1.06–1.14× faster with every step on one thread (BENCHMARKS.md, "The step chooses by
//! its cycle").
//! A cycle counts at most [`CYCLE_CAP`] times the step's own time, so that one long gap (an
//! epoch's end and its evaluation, a stall elsewhere) weighs as a few slow steps, not as
//! hundreds: it can still tip the probe it falls in, and the next probe, [`FIRST_RUN`] steps
//! later, undoes that.
//!
//! **How it chooses** (explore, then exploit for longer each time the choice holds): a *probe*
//! runs [`PROBE_STEPS`] steps on each choice, in turn (which goes first alternates from probe
//! to probe), and compares their cycle time per positive. The faster then runs alone for
//! a *run* of steps: [`FIRST_RUN`] after a change, four times the previous run (at most
//! [`LONGEST_RUN`]) when the probe confirms the choice. The current choice is kept unless the
//! other is cheaper by more than [`SWITCH_MARGIN`], so that noise does not flap it. On a
//! machine whose load does not change, the slower choice runs `PROBE_STEPS` of every
//! `LONGEST_RUN` steps once the runs have grown (after [`COLD_STEPS`], 3 probes and runs of 64
//! and 256 steps), and every switch pays a few slow steps while the other thread wakes. Timing
//! a step costs two clock reads (tens of nanoseconds) against a step of milliseconds.

use std::time::{Duration, Instant};

/// A cycle counts at most this many times the step's own time (see the module docs).
pub const CYCLE_CAP: u32 = 4;

/// Steps run on two threads before the first probe: the first steps of a run page in the
/// step's buffers and fill the caches, whichever choice they run on, and were measured up to
/// 10× the steady cost, which a probe must not see.
pub const COLD_STEPS: u32 = 16;

/// Steps each choice runs in one probe.
pub const PROBE_STEPS: u32 = 8;
/// The first steps of each choice in a probe, not timed: a step on two threads after a run on
/// one waits for rayon's sleeping worker and for the rows to reach its core, and its first
/// steps were measured up to 1.8× the steady cost (idle 2-core Xeon, WordNet 3.0 throughput
/// config).
pub const WARMUP_STEPS: u32 = 3;
/// Steps the winner runs alone after a probe that changed the choice.
pub const FIRST_RUN: u32 = 16;
/// The longest run between two probes.
pub const LONGEST_RUN: u32 = 1024;
/// How much cheaper per positive the other choice must be, as a fraction of the current one's
/// cost, to replace it, either way. (With the step alone timed, leaving two threads took
/// 10%, against the noise of single steps; on cycles that margin kept two threads on the main
/// job's setting, where one is 6–14% faster, and 3% did not flap in the measurements.)
pub const SWITCH_MARGIN: f64 = 0.03;

/// Threads a step runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Every chunk on the calling thread.
    One,
    /// Chunks a pair at a time on two of rayon's threads.
    Two,
}

impl Threads {
    fn index(self) -> usize {
        self as usize
    }

    fn other(self) -> Threads {
        match self {
            Threads::One => Threads::Two,
            Threads::Two => Threads::One,
        }
    }
}

/// What a probe has measured so far: nanoseconds and positives per choice (indexed by
/// [`Threads::index`]), and how many of its `2 × PROBE_STEPS` steps have run.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    nanos: [u64; 2],
    positives: [u32; 2],
    steps: u32,
}

/// The step's choice of [`Threads`], remade from its own timings (see the module docs).
#[derive(Debug, Clone)]
pub struct StepThreads {
    /// The choice that runs between probes.
    chosen: Threads,
    /// Steps left in the current run; a probe runs when it reaches 0.
    run_left: u32,
    /// Length of the current run (×4 each time a probe confirms `chosen`).
    run_len: u32,
    /// The probe in progress (meaningful while `run_left == 0`).
    probe: Probe,
    /// Whether the next probe runs the other choice first (flips after each probe).
    other_first: bool,
    /// The step under way: its choice and start, from [`start`](Self::start).
    running: Option<(Threads, Instant)>,
    /// The last step run, whose cycle ends when the next one starts: its choice, start, own
    /// time and positives.
    pending: Option<(Threads, Instant, Duration, usize)>,
}

impl Default for StepThreads {
    /// Starts with [`COLD_STEPS`] steps on two threads, then probes.
    fn default() -> Self {
        StepThreads {
            chosen: Threads::Two,
            run_left: COLD_STEPS,
            run_len: FIRST_RUN,
            probe: Probe::default(),
            other_first: false,
            running: None,
            pending: None,
        }
    }
}

impl StepThreads {
    /// The choice for the next step.
    fn next(&self) -> Threads {
        if self.run_left > 0 {
            return self.chosen;
        }
        let first = if self.other_first { self.chosen.other() } else { self.chosen };
        if self.probe.steps < PROBE_STEPS { first } else { first.other() }
    }

    /// A step starts at `now`: records the last step's cycle (capped, see [`CYCLE_CAP`]) and
    /// returns this step's choice. Call [`stepped`](Self::stepped) when it has run.
    pub fn start(&mut self, now: Instant) -> Threads {
        if let Some((threads, began, took, positives)) = self.pending.take() {
            let cycle = now.saturating_duration_since(began).min(took * CYCLE_CAP);
            self.record(threads, cycle, positives);
        }
        let threads = self.next();
        self.running = Some((threads, now));
        threads
    }

    /// The step that [`start`](Self::start) began ran for `took`, over `positives` positives;
    /// its cost is known when the next step starts.
    pub fn stepped(&mut self, took: Duration, positives: usize) {
        if let Some((threads, began)) = self.running.take() {
            self.pending = Some((threads, began, took, positives));
        }
    }

    /// Record that a step on `threads` (as [`next`](Self::next) said) cost `took` for
    /// `positives` positives.
    fn record(&mut self, threads: Threads, took: Duration, positives: usize) {
        if self.run_left > 0 {
            self.run_left -= 1;
            return;
        }
        let p = &mut self.probe;
        if p.steps % PROBE_STEPS >= WARMUP_STEPS {
            let i = threads.index();
            p.nanos[i] =
                p.nanos[i].saturating_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
            p.positives[i] =
                p.positives[i].saturating_add(u32::try_from(positives).unwrap_or(u32::MAX));
        }
        p.steps += 1;
        if p.steps < 2 * PROBE_STEPS {
            return;
        }
        let cost = |t: Threads| p.nanos[t.index()] as f64 / p.positives[t.index()].max(1) as f64;
        let (current, other) = (cost(self.chosen), cost(self.chosen.other()));
        if other < current * (1.0 - SWITCH_MARGIN) {
            self.chosen = self.chosen.other();
            self.run_len = FIRST_RUN;
        } else {
            self.run_len = (self.run_len * 4).min(LONGEST_RUN);
        }
        self.run_left = self.run_len;
        self.probe = Probe::default();
        self.other_first = !self.other_first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` steps where a step on `t` costs `cost(t, step)` µs per positive.
    fn run(s: &mut StepThreads, steps: u32, cost: impl Fn(Threads, u32) -> u64) -> Vec<Threads> {
        (0..steps)
            .map(|i| {
                let t = s.next();
                s.record(t, Duration::from_micros(cost(t, i) * 1000), 1000);
                t
            })
            .collect()
    }

    #[test]
    fn the_faster_choice_runs_and_the_slower_only_in_probes() {
        for faster in [Threads::One, Threads::Two] {
            let mut s = StepThreads::default();
            let chose = run(&mut s, 5000, |t, _| if t == faster { 10 } else { 12 });
            let slow = chose.iter().filter(|&&t| t != faster).count();
            // Probes hold at most PROBE_STEPS slow steps each; runs grow 4× up to LONGEST_RUN.
            assert!(slow <= 10 * PROBE_STEPS as usize, "{faster:?}: {slow} slow steps");
            assert!(slow >= PROBE_STEPS as usize, "{faster:?}: the other choice was never timed");
            assert_eq!(chose[4999], faster);
        }
    }

    #[test]
    fn a_change_of_load_changes_the_choice_within_a_longest_run() {
        let mut s = StepThreads::default();
        // Idle for 3000 steps (two threads faster), then loaded (one thread faster).
        let cost = |t: Threads, i: u32| match (t, i < 3000) {
            (Threads::Two, true) | (Threads::One, false) => 10,
            _ => 12,
        };
        let chose = run(&mut s, 6000, cost);
        assert_eq!(chose[2999], Threads::Two);
        let switched = chose[3000..].iter().position(|&t| t == Threads::One).unwrap();
        let settled = 3000 + switched + (LONGEST_RUN + 4 * PROBE_STEPS) as usize;
        assert!(chose[settled..].iter().filter(|&&t| t == Threads::Two).count() < 40);
        assert!(switched <= (LONGEST_RUN + 2 * PROBE_STEPS) as usize);
    }

    #[test]
    fn noise_within_the_margin_does_not_flap_the_choice() {
        let mut s = StepThreads::default();
        // One thread 2% cheaper: within the margin, so two threads stay chosen.
        let chose = run(&mut s, 3000, |t, _| if t == Threads::One { 98 } else { 100 });
        let one = chose.iter().filter(|&&t| t == Threads::One).count();
        assert!(one <= 10 * PROBE_STEPS as usize, "{one} steps on one thread");
    }

    /// Steps of `step` µs followed by a wait of `wait` µs before the next starts, per choice,
    /// through `start` and `stepped`; returns the choices.
    fn run_cycles(
        s: &mut StepThreads,
        steps: u32,
        mut cost: impl FnMut(Threads) -> (u64, u64),
    ) -> Vec<Threads> {
        let mut now = Instant::now();
        (0..steps)
            .map(|_| {
                let t = s.start(now);
                let (step, wait) = cost(t);
                s.stepped(Duration::from_micros(step), 1000);
                now += Duration::from_micros(step + wait);
                t
            })
            .collect()
    }

    #[test]
    fn the_choice_follows_the_cycle_not_the_step() {
        // Two threads: a shorter step, but a longer wait after it (a starved reader), so a
        // longer cycle; one thread must be chosen. Timing the step alone would choose two.
        let mut s = StepThreads::default();
        let chose = run_cycles(&mut s, 3000, |t| match t {
            Threads::Two => (800, 500),
            Threads::One => (1000, 100),
        });
        assert_eq!(chose[2999], Threads::One);
        let two = chose[1000..].iter().filter(|&&t| t == Threads::Two).count();
        assert!(two <= 4 * PROBE_STEPS as usize, "{two} steps on two threads");
    }

    #[test]
    fn a_cycle_counts_at_most_the_cap_times_its_step() {
        // A probe's timed step on two threads: 1 ms, then 60 ms before the next step starts
        // (an epoch's evaluation, say). It counts as 4 ms; a 1.5 ms cycle counts whole.
        for (gap_us, counted_us) in [(60_000, 4_000), (500, 1_500)] {
            let mut s = StepThreads {
                run_left: 0,
                probe: Probe { steps: WARMUP_STEPS, ..Probe::default() },
                ..StepThreads::default()
            };
            let t0 = Instant::now();
            assert_eq!(s.start(t0), Threads::Two);
            s.stepped(Duration::from_millis(1), 1000);
            s.start(t0 + Duration::from_micros(1000 + gap_us));
            assert_eq!(s.probe.nanos[Threads::Two.index()], counted_us * 1000);
            assert_eq!(s.probe.positives[Threads::Two.index()], 1000);
        }
    }
}
