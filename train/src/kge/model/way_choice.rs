//! Which of two ways of running the same work is cheaper right now, chosen from timings of
//! both: explore, then exploit for longer each time the choice holds.
//!
//! The trainer has two such choices, each made while it runs because the machine's load
//! decides them and no setting chosen before the run can know it: how many threads a step runs
//! on ([`super::step_threads`]) and whether a batch goes through the engine's reader and writer
//! threads or runs on the device thread ([`crate::kge::training::stage_choice`]). Both give the same bits
//! either way, so a choice made from wall-clock times keeps every run reproducible; [`WayChoice`]
//! holds the part they share, and each caller says what one unit of work costs (its own clock).
//!
//! **How it chooses.** A *probe* runs [`Schedule::probe`] units on each way, in turn (which
//! goes first alternates from probe to probe), and compares their cost per positive, without
//! the first [`Schedule::warmup`] units of each way (a switch costs the first units after it:
//! a thread wakes, rows move to another core, a pipeline fills or drains). The cheaper way then
//! runs alone for a *run* of units: [`Schedule::first_run`] after a change, four times the
//! previous run (at most [`Schedule::longest_run`]) when the probe confirms the choice. The
//! current way is kept unless the other is cheaper by more than [`Schedule::margin`], so that
//! noise does not flap it, and a way that costs the machine less than its wall time shows can
//! be favoured ([`Schedule::favour`]). On a machine whose load does not change, the slower way
//! runs `probe` of every `longest_run` units once the runs have grown.

use std::fmt::Debug;
use std::time::Duration;

/// One of exactly two ways, numbered 0 and 1 by their place in [`BOTH`](Way::BOTH).
pub trait Way: Copy + Eq + Debug {
    /// The two ways: way 0, then way 1. The trainer's enums list them in declaration order,
    /// so a constant may write a way's index as `way as usize` ([`Schedule::favour`]).
    const BOTH: [Self; 2];

    /// 0 or 1.
    fn index(self) -> usize {
        usize::from(self == Self::BOTH[1])
    }

    /// The other way.
    fn other(self) -> Self {
        Self::BOTH[1 - self.index()]
    }
}

/// How long each phase of [`WayChoice`]'s explore-exploit cycle lasts, in units of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Units run on the starting way before the first probe (a run's first units page in its
    /// buffers and fill the caches, whichever way they run: a probe must not see them).
    pub cold: u32,
    /// Units each way runs in one probe.
    pub probe: u32,
    /// The first units of each way in a probe, not timed.
    pub warmup: u32,
    /// Units the winner runs alone after a probe that changed the choice.
    pub first_run: u32,
    /// The longest run between two probes.
    pub longest_run: u32,
    /// How much cheaper per positive the other way must be, as a fraction of the current one's
    /// cost, to replace it.
    pub margin: f64,
    /// A way that costs the machine less than its wall time shows (less CPU time: it leaves
    /// more to other work), and how much: the other way's cost counts `1 + favour` times in
    /// every comparison, so it must be that much faster to be chosen. 0 for neither.
    pub favour: (usize, f64),
}

/// What a probe has measured so far: nanoseconds and positives per way, and how many of its
/// `2 × probe` units have run.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    nanos: [u64; 2],
    positives: [u64; 2],
    units: u32,
}

/// The choice between two ways, remade from their timings (see the module docs).
#[derive(Debug, Clone)]
pub struct WayChoice<W: Way> {
    schedule: Schedule,
    /// The way that runs between probes.
    chosen: W,
    /// Units left in the current run; a probe runs when it reaches 0.
    run_left: u32,
    /// Length of the current run (×4 each time a probe confirms `chosen`).
    run_len: u32,
    /// The probe in progress (meaningful while `run_left == 0`).
    probe: Probe,
    /// Whether the next probe runs the other way first (flips after each probe).
    other_first: bool,
}

impl<W: Way> WayChoice<W> {
    /// Starts with `schedule.cold` units on `start`, then probes.
    pub fn new(start: W, schedule: Schedule) -> Self {
        WayChoice {
            schedule,
            chosen: start,
            run_left: schedule.cold,
            run_len: schedule.first_run,
            probe: Probe::default(),
            other_first: false,
        }
    }

    /// The way the next unit runs.
    pub fn next(&self) -> W {
        if self.run_left > 0 {
            return self.chosen;
        }
        let first = if self.other_first { self.chosen.other() } else { self.chosen };
        if self.probe.units < self.schedule.probe { first } else { first.other() }
    }

    /// The way that runs between probes.
    pub fn chosen(&self) -> W {
        self.chosen
    }

    /// Whether the next unit belongs to a run (not to a probe).
    pub fn in_run(&self) -> bool {
        self.run_left > 0
    }

    /// Whether the next unit would start a probe.
    pub fn probe_due(&self) -> bool {
        self.run_left == 0 && self.probe.units == 0
    }

    /// Skip the probe that is due: the current way runs another run of the same length.
    pub fn skip_probe(&mut self) {
        if self.probe_due() {
            self.run_left = self.run_len;
        }
    }

    /// Whether the next unit is a probe's timed unit (not a run's, nor a warm-up).
    fn timing(&self) -> bool {
        self.run_left == 0 && self.probe.units % self.schedule.probe >= self.schedule.warmup
    }

    /// Record that a unit on `way` (as [`next`](Self::next) said) cost `took` for `positives`
    /// positives.
    pub fn record(&mut self, way: W, took: Duration, positives: usize) {
        if self.run_left > 0 {
            self.run_left -= 1;
            return;
        }
        let s = self.schedule;
        if self.timing() {
            let (p, i) = (&mut self.probe, way.index());
            p.nanos[i] =
                p.nanos[i].saturating_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
            p.positives[i] = p.positives[i].saturating_add(positives as u64);
        }
        self.probe.units += 1;
        if self.probe.units < 2 * s.probe {
            return;
        }
        let p = self.probe;
        let (favoured, favour) = s.favour;
        let weight = |w: W| if w.index() == favoured { 1.0 } else { 1.0 + favour };
        let cost =
            |w: W| weight(w) * p.nanos[w.index()] as f64 / p.positives[w.index()].max(1) as f64;
        let (current, other) = (cost(self.chosen), cost(self.chosen.other()));
        if other < current * (1.0 - s.margin) {
            self.chosen = self.chosen.other();
            self.run_len = s.first_run;
        } else {
            self.run_len = (self.run_len * 4).min(s.longest_run);
        }
        self.run_left = self.run_len;
        self.probe = Probe::default();
        self.other_first = !self.other_first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Ab {
        A,
        B,
    }

    impl Way for Ab {
        const BOTH: [Ab; 2] = [Ab::A, Ab::B];
    }

    const S: Schedule = Schedule {
        cold: 16,
        probe: 8,
        warmup: 3,
        first_run: 16,
        longest_run: 1024,
        margin: 0.03,
        favour: (0, 0.0),
    };

    /// Runs `units` units where a unit on `w` costs `cost(w, unit)` µs per positive.
    fn run(t: &mut WayChoice<Ab>, units: u32, cost: impl Fn(Ab, u32) -> u64) -> Vec<Ab> {
        (0..units)
            .map(|i| {
                let w = t.next();
                t.record(w, Duration::from_micros(cost(w, i) * 1000), 1000);
                w
            })
            .collect()
    }

    #[test]
    fn the_cheaper_way_runs_and_the_other_only_in_probes() {
        for (start, cheaper) in [(Ab::A, Ab::A), (Ab::A, Ab::B), (Ab::B, Ab::A)] {
            let mut t = WayChoice::new(start, S);
            let chose = run(&mut t, 5000, |w, _| if w == cheaper { 10 } else { 12 });
            let dear = chose.iter().filter(|&&w| w != cheaper).count();
            // Probes hold at most `probe` dear units each; runs grow 4× up to `longest_run`,
            // and the cold start may be the dear way's.
            assert!(dear <= (S.cold + 10 * S.probe) as usize, "{cheaper:?}: {dear} dear units");
            assert!(dear >= S.probe as usize, "{cheaper:?}: the other way was never timed");
            assert_eq!(chose[4999], cheaper);
            assert_eq!(t.chosen(), cheaper);
        }
    }

    #[test]
    fn a_change_of_load_changes_the_choice_within_a_longest_run() {
        let mut t = WayChoice::new(Ab::B, S);
        // B cheaper for 3000 units, then A.
        let cost = |w: Ab, i: u32| match (w, i < 3000) {
            (Ab::B, true) | (Ab::A, false) => 10,
            _ => 12,
        };
        let chose = run(&mut t, 6000, cost);
        assert_eq!(chose[2999], Ab::B);
        let switched = chose[3000..].iter().position(|&w| w == Ab::A).unwrap();
        let settled = 3000 + switched + (S.longest_run + 4 * S.probe) as usize;
        assert!(chose[settled..].iter().filter(|&&w| w == Ab::B).count() < 40);
        assert!(switched <= (S.longest_run + 2 * S.probe) as usize);
    }

    #[test]
    fn noise_within_the_margin_does_not_flap_the_choice() {
        let mut t = WayChoice::new(Ab::B, S);
        // A 2% cheaper: within the margin, so B stays chosen.
        let chose = run(&mut t, 3000, |w, _| if w == Ab::A { 98 } else { 100 });
        let a = chose.iter().filter(|&&w| w == Ab::A).count();
        assert!(a <= 10 * S.probe as usize, "{a} units on A");
    }

    #[test]
    fn a_favoured_way_holds_unless_the_other_is_faster_by_its_favour() {
        // A favoured by 5%: B 4% faster does not take over from A, B 10% faster does; and A
        // takes over from B (the start) when it is as fast.
        let favour_a = Schedule { favour: (Ab::A.index(), 0.05), ..S };
        for (b_cost, winner) in [(96, Ab::A), (90, Ab::B)] {
            let mut t = WayChoice::new(Ab::A, favour_a);
            run(&mut t, 3000, |w, _| if w == Ab::A { 100 } else { b_cost });
            assert_eq!(t.chosen(), winner, "B at {b_cost}");
        }
        let mut t = WayChoice::new(Ab::B, favour_a);
        run(&mut t, 3000, |_, _| 100);
        assert_eq!(t.chosen(), Ab::A);
    }

    #[test]
    fn warm_up_units_are_not_timed() {
        // The first `warmup` units after each switch cost 100× (a pipeline filling): A's are
        // dear only then, so A, 10% cheaper once warm, must still be chosen.
        let mut t = WayChoice::new(Ab::B, S);
        let mut last = None;
        let mut since = 0;
        let chose: Vec<Ab> = (0..3000)
            .map(|_| {
                let w = t.next();
                since = if last == Some(w) { since + 1 } else { 0 };
                last = Some(w);
                let us = match (w, since < S.warmup) {
                    (Ab::A, true) => 1000,
                    (Ab::A, false) => 9,
                    (Ab::B, _) => 10,
                };
                t.record(w, Duration::from_micros(us * 1000), 1000);
                w
            })
            .collect();
        assert_eq!(chose[2999], Ab::A);
    }
}
