//! How many threads the KGE step runs on, one or two, chosen from what the step measures.
//!
//! The step computes a batch's chunks a pair at a time, the second chunk of a pair on another
//! rayon thread (`EmbeddingModel::gradients_with`). On an idle machine that second thread is worth
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
//! chunk adds run in chunk order either way, stated at `EmbeddingModel::gradients_with`; each row's
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
//! **How it chooses:** as [`WayChoice`] says, over steps, with the schedule [`SCHEDULE`]: probes
//! of [`PROBE_STEPS`] steps on each choice, runs from [`FIRST_RUN`] to [`LONGEST_RUN`] steps
//! between them, after [`COLD_STEPS`] on two threads. Every switch pays a few slow steps while
//! the other thread wakes. Timing a step costs two clock reads (tens of nanoseconds) against a
//! step of milliseconds.

use std::time::{Duration, Instant};

use super::way_choice::{Schedule, Way, WayChoice};

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

/// The step's explore-exploit schedule, in steps.
pub const SCHEDULE: Schedule = Schedule {
    cold: COLD_STEPS,
    probe: PROBE_STEPS,
    warmup: WARMUP_STEPS,
    first_run: FIRST_RUN,
    longest_run: LONGEST_RUN,
    margin: SWITCH_MARGIN,
    favour: (0, 0.0),
};

/// Threads a step runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// Every chunk on the calling thread.
    One,
    /// Chunks a pair at a time on two of rayon's threads.
    Two,
}

impl Way for Threads {
    const BOTH: [Threads; 2] = [Threads::One, Threads::Two];
}

/// The step's choice of [`Threads`], remade from its own timings (see the module docs).
#[derive(Debug, Clone)]
pub struct StepThreads {
    /// The choice, from the steps' cycles.
    choice: WayChoice<Threads>,
    /// The step under way: its choice and start, from [`start`](Self::start).
    running: Option<(Threads, Instant)>,
    /// The last step run, whose cycle ends when the next one starts: its choice, start, own
    /// time and positives.
    pending: Option<(Threads, Instant, Duration, usize)>,
}

impl Default for StepThreads {
    /// Starts with [`COLD_STEPS`] steps on two threads, then probes.
    fn default() -> Self {
        StepThreads { choice: WayChoice::new(Threads::Two, SCHEDULE), running: None, pending: None }
    }
}

impl StepThreads {
    /// A step starts at `now`: records the last step's cycle (capped, see [`CYCLE_CAP`]) and
    /// returns this step's choice. Call [`stepped`](Self::stepped) when it has run.
    pub fn start(&mut self, now: Instant) -> Threads {
        if let Some((threads, began, took, positives)) = self.pending.take() {
            let cycle = now.saturating_duration_since(began).min(took * CYCLE_CAP);
            self.choice.record(threads, cycle, positives);
        }
        let threads = self.choice.next();
        self.running = Some((threads, now));
        threads
    }

    /// The steps stop for a while (the trainer runs its batches the other way, see
    /// [`crate::kge::training::stage_choice`]): the last step's cycle is not recorded, since the next
    /// step's start does not end it.
    pub fn pause(&mut self) {
        self.pending = None;
    }

    /// Whether a step's cycle waits for the next start to end it (a test's view of
    /// [`pause`](Self::pause)).
    #[cfg(test)]
    pub(crate) fn cycle_open(&self) -> bool {
        self.pending.is_some()
    }

    /// The step that [`start`](Self::start) began ran for `took`, over `positives` positives;
    /// its cost is known when the next step starts.
    pub fn stepped(&mut self, took: Duration, positives: usize) {
        if let Some((threads, began)) = self.running.take() {
            self.pending = Some((threads, began, took, positives));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Two threads: a 1 ms step, then 60 ms before the next (an evaluation after every step,
        // say), counted as 4 ms; one thread: a 2 ms step, then 2.5 ms: a 4.5 ms cycle, counted
        // whole (under its 8 ms cap). Two threads are cheaper as counted; uncapped they would
        // cost 61 ms.
        let mut s = StepThreads::default();
        let chose = run_cycles(&mut s, 2000, |t| match t {
            Threads::Two => (1000, 60_000),
            Threads::One => (2000, 2500),
        });
        assert_eq!(chose[1999], Threads::Two);
    }
}
