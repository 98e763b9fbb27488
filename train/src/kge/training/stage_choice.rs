//! Whether an oac batch goes through the engine's reader and writer threads or runs its stages
//! on the device thread, chosen from what the batches cost.
//!
//! OAC's pipeline pays when a core is free for its reader and writer: on an idle 2-core
//! machine oac trains the main job's setting 1.2–1.3× faster than sync, with sync's bits. When
//! every core is busy with other work (one busy-loop process per core), the reader and writer
//! wait for a core like the step does, and for the same batches oac spent 1.16–1.23× sync's
//! CPU time per positive (rows written on one core and read on another, the validation cache,
//! the hand-offs) for about the same share of the machine: 0.91× sync, pooled over 24 pairs
//! (BENCHMARKS.md, "The step chooses by its cycle"). `Session::submit_inline` runs a batch's
//! read, step and write on the device thread once the pipeline is empty, doing the work sync
//! does. [`StageChoice`] picks per batch, from the time between one submit's start and the
//! next's per positive *written* in it, with [`WayChoice`]'s probes over [`SCHEDULE`], and
//! favours inline ([`FAVOUR_INLINE`]): where the two run equally fast, inline leaves the cores
//! the pipeline would spend to the machine's other work. Inline is probed only while the
//! pipeline gets fewer than [`PROBE_BELOW_CORES`] cores, which spares an idle run most inline
//! probes but not every cost: idle, `auto` ran the main job at 0.93–0.97× the pipelined
//! default (BENCHMARKS.md, issue 34, ninth pass), which is why it is not the default.
//!
//! **The choice never changes a bit:** `Session::submit_inline` stamps an inline batch after
//! every batch submitted before it and before every batch submitted after it, and with the
//! trainer's one reader (`threads = 1`, the default) the pipeline stamps in submission order
//! too, so the computation order, and every bit of the result, is sync's either way. With more
//! readers the order may differ between runs, as it always could; the saved order replays the
//! result in every case.

use std::time::Instant;

use crate::cpu_clock::process_cpu_s;
use crate::kge::model::way_choice::{Schedule, Way, WayChoice};

/// Which batches of an oac run go where: the environment variable [`STAGES_VAR`] says, read
/// once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagesPolicy {
    /// Every batch through the pipeline (the default: on an idle machine the chooser's probes
    /// cost the main job's setting 0–4 %, and beside other work it buys no speed).
    Pipelined,
    /// [`StageChoice`] picks per batch: oac's speed where a core is free, and beside other
    /// work about 11 % less CPU per positive at the same speed.
    Auto,
    /// Every batch inline: sync's work per positive, with oac's bookkeeping.
    Inline,
}

/// The environment variable that sets [`StagesPolicy`]: `pipelined` (or unset), `auto`,
/// `inline`.
pub const STAGES_VAR: &str = "ORDO_KGE_STAGES";

impl StagesPolicy {
    /// The policy [`STAGES_VAR`] names; `Err` with the value if it names none.
    pub fn from_env() -> Result<StagesPolicy, String> {
        match std::env::var(STAGES_VAR) {
            Err(_) => Ok(StagesPolicy::Pipelined),
            Ok(v) => StagesPolicy::parse(&v).ok_or(v),
        }
    }

    fn parse(v: &str) -> Option<StagesPolicy> {
        match v {
            "" | "pipelined" => Some(StagesPolicy::Pipelined),
            "auto" => Some(StagesPolicy::Auto),
            "inline" => Some(StagesPolicy::Inline),
            _ => None,
        }
    }
}

/// Where a batch's stages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stages {
    /// Through the engine's reader and writer threads (`Session::submit`).
    Pipelined,
    /// On the device thread, after the pipeline empties (`Session::submit_inline`).
    Inline,
}

impl Way for Stages {
    const BOTH: [Stages; 2] = [Stages::Pipelined, Stages::Inline];
}

/// The schedule of [`StageChoice`], in batches. A switch costs the first batches after it:
/// to inline, the first submit waits for the pipeline to empty; to the pipeline, the first
/// submits only fill its queues (the engine's default depths held about ten batches), and the
/// pipeline reached its steady cost per written batch only after 10–20 batches (traced on the
/// main job's setting, idle: about 1.9, then 1.0, then 0.85 ms a batch by tens, against 1.2
/// inline), so [`Schedule::warmup`] skips 16. (Since the trainer's queues hold at least 2,048
/// positives, `super::train`'s `queue_depth`, they hold about 18 batches of the main job's
/// 256; the warm-up was not traced again.) A probe then times 48 batches of each way; runs
/// grow from 64 to 2048 batches (on the main job's setting an epoch is 552), so on a machine
/// whose load does not change, the slower way runs 64 of about every 2,200 batches.
pub const SCHEDULE: Schedule = Schedule {
    cold: 32,
    probe: 64,
    warmup: 16,
    first_run: 64,
    longest_run: 2048,
    margin: 0.03,
    favour: (Stages::Inline as usize, FAVOUR_INLINE),
};

/// A probe of inline runs only if, over the run before it, the process received fewer cores
/// than this (its CPU time over the wall time): the pipeline overlaps the reader's and
/// writer's work with the step only on cores of its own, and while it gets them it wins every
/// probe (measured on the main job's setting, idle: oac through the pipeline received 1.49–1.63
/// cores, inline and sync 1.04–1.08; beside one busy loop per core 0.69–0.85). Skipping those
/// probes spares an idle run their cost (64 batches at about 1.4× a pipelined batch's, plus
/// the pipeline's refill, every run). Where the process's CPU clock is unknown, every probe
/// runs.
pub const PROBE_BELOW_CORES: f64 = 1.2;

/// How much faster than inline the pipeline must run to be chosen: an inline batch costs the
/// machine what a sync batch does, where the pipeline spent 1.16–1.23× sync's CPU time per
/// positive beside other work, so the pipeline must buy time for its cores. With the switch
/// margin, the pipeline takes over from inline when it is about 6% faster, and inline takes
/// over from the pipeline as soon as it is faster. (A favour of 8% was tried: right after a long
/// inline run the pipeline's first few dozen batches ran about 10% under its steady speed, and
/// one idle run of the main job kept inline for four epochs, at 0.82× the pipeline's speed.)
pub const FAVOUR_INLINE: f64 = 0.03;

/// The choice of [`Stages`] for each batch of a session (see the module docs).
///
/// **What a batch costs is counted by what was written, not by what was submitted.** Through
/// the pipeline, submits are bursty: a few return at once while its queues have room, then
/// one does the device work of several batches (measured on the main job's setting: five
/// submits of 5–80 µs, then one of 5–18 ms). Summed over a probe of a few dozen batches, the
/// submits' times depend on where the bursts fall. So each interval between two submits counts
/// the batches written in it (the session's pending batches before the first, plus one, less
/// those before the second), and a probe divides its time by those.
#[derive(Debug, Clone)]
pub struct StageChoice {
    choice: WayChoice<Stages>,
    /// When the current run began: wall clock and process CPU time (see
    /// [`PROBE_BELOW_CORES`]).
    run_began: Option<(Instant, f64)>,
    /// The batch submitted last, whose interval ends when the next one starts: its way, start,
    /// positives and the session's pending batches before it.
    pending: Option<(Stages, Instant, usize, usize)>,
}

impl Default for StageChoice {
    /// Starts with [`SCHEDULE`]'s cold batches through the pipeline, then probes.
    fn default() -> Self {
        StageChoice {
            choice: WayChoice::new(Stages::Pipelined, SCHEDULE),
            run_began: None,
            pending: None,
        }
    }
}

impl StageChoice {
    /// A batch of `positives` positives is submitted at `now`, with `pending` batches of the
    /// session submitted and not yet written (`Session::pending`): records the interval since
    /// the last submit and returns where this batch runs.
    pub fn start(&mut self, now: Instant, positives: usize, pending: usize) -> Stages {
        self.start_with_cpu(now, positives, pending, process_cpu_s())
    }

    /// [`start`](Self::start), with the process CPU time `cpu` (seconds) read at `now`.
    fn start_with_cpu(
        &mut self,
        now: Instant,
        positives: usize,
        pending: usize,
        cpu: Option<f64>,
    ) -> Stages {
        if let Some((way, began, n, before)) = self.pending.take() {
            let written = (before + 1).saturating_sub(pending);
            self.choice.record(way, now.saturating_duration_since(began), written * n);
        }
        if self.choice.probe_due() {
            let cores = self.run_began.zip(cpu).map(|((t, c), cpu)| {
                (cpu - c) / now.saturating_duration_since(t).as_secs_f64().max(1e-9)
            });
            let pipeline_has_cores = self.choice.chosen() == Stages::Pipelined
                && cores.is_some_and(|k| k >= PROBE_BELOW_CORES);
            if pipeline_has_cores {
                self.choice.skip_probe();
            }
            self.run_began = None;
        }
        if self.run_began.is_none() && self.choice.in_run() {
            self.run_began = cpu.map(|c| (now, c));
        }
        let way = self.choice.next();
        self.pending = Some((way, now, positives, pending));
        way
    }

    /// The batches stop for a while (an epoch ends, to be evaluated): the last batch's cycle
    /// is not recorded, since its end is not the next batch's start.
    pub fn pause(&mut self) {
        self.pending = None;
        // Nor do the pause's cores (an evaluation's) count for the probe's gate.
        self.run_began = None;
    }

    /// Where the batches run between probes.
    pub fn chosen(&self) -> Stages {
        self.choice.chosen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Submits `batches` batches of 1000 positives, each written before the next is
    /// submitted, a batch on `w` taking `cost(w)` µs from its start to the next one's, with a
    /// pause of `gap` µs every `epoch` batches.
    fn run(
        s: &mut StageChoice,
        batches: u32,
        epoch: u32,
        gap: u64,
        cost: impl Fn(Stages) -> u64,
    ) -> Vec<Stages> {
        let mut now = Instant::now();
        (0..batches)
            .map(|i| {
                if i > 0 && i % epoch == 0 {
                    s.pause();
                    now += Duration::from_micros(gap);
                }
                let w = s.start(now, 1000, 0);
                now += Duration::from_micros(cost(w));
                w
            })
            .collect()
    }

    #[test]
    fn bursty_submits_count_by_the_batches_written() {
        // Inline: 1000 µs a batch, each written before the next submit. The pipeline: 1100 µs
        // a batch, but its submits come in bursts of forty: thirty-nine return at once and
        // queue, the fortieth does the device work of all forty. Timed per submit, a probe's
        // 48 timed batches after its 16 warm-up ones hold one burst, 917 µs a batch; counted
        // by the batches written, 1100. So inline must be chosen.
        let mut s = StageChoice::default();
        let (mut now, mut queued) = (Instant::now(), 0usize);
        for _ in 0..6000 {
            let w = s.start(now, 1000, queued);
            match w {
                Stages::Inline => {
                    // The first inline submit writes every queued batch first.
                    now += Duration::from_micros(1000 + 1100 * queued as u64);
                    queued = 0;
                }
                Stages::Pipelined if queued == 39 => {
                    now += Duration::from_micros(1100 * 40);
                    queued = 0;
                }
                Stages::Pipelined => queued += 1,
            }
        }
        assert_eq!(s.chosen(), Stages::Inline);
    }

    #[test]
    fn the_cheaper_way_is_chosen_from_the_cycles() {
        for cheaper in [Stages::Pipelined, Stages::Inline] {
            let mut s = StageChoice::default();
            let chose = run(&mut s, 4000, 4000, 0, |w| if w == cheaper { 800 } else { 1000 });
            assert_eq!(s.chosen(), cheaper);
            let dear = chose[1000..].iter().filter(|&&w| w != cheaper).count();
            assert!(dear <= 3 * SCHEDULE.probe as usize, "{cheaper:?}: {dear} dear batches");
        }
    }

    /// Submits `batches` batches as [`run`] does (1 ms a batch through the pipeline, 0.98
    /// inline), with the process
    /// receiving `cores` cores while the pipeline runs and one inline; returns the choices.
    fn run_on_cores(s: &mut StageChoice, batches: u32, cores: f64) -> Vec<Stages> {
        let (mut now, mut cpu) = (Instant::now(), 0.0);
        (0..batches)
            .map(|_| {
                let w = s.start_with_cpu(now, 1000, 0, Some(cpu));
                let ms = if w == Stages::Pipelined { 1.0 } else { 0.98 };
                now += Duration::from_secs_f64(ms * 1e-3);
                cpu += ms * 1e-3 * if w == Stages::Pipelined { cores } else { 1.0 };
                w
            })
            .collect()
    }

    #[test]
    fn inline_is_probed_only_when_the_pipeline_lacks_cores() {
        // The pipeline with 1.5 cores: no inline probe after the cold run, ever.
        let mut s = StageChoice::default();
        let chose = run_on_cores(&mut s, 5000, 1.5);
        assert!(chose.iter().all(|&w| w == Stages::Pipelined));
        // With 0.8 cores inline is probed, and (2% faster) chosen.
        let mut s = StageChoice::default();
        let chose = run_on_cores(&mut s, 5000, 0.8);
        assert_eq!(s.chosen(), Stages::Inline);
        assert!(chose[4999] == Stages::Inline);
    }

    #[test]
    fn the_policy_names_parse_and_others_are_refused() {
        assert_eq!(StagesPolicy::parse(""), Some(StagesPolicy::Pipelined));
        assert_eq!(StagesPolicy::parse("pipelined"), Some(StagesPolicy::Pipelined));
        assert_eq!(StagesPolicy::parse("auto"), Some(StagesPolicy::Auto));
        assert_eq!(StagesPolicy::parse("inline"), Some(StagesPolicy::Inline));
        assert_eq!(StagesPolicy::parse("Auto"), None);
    }

    #[test]
    fn an_epoch_boundary_is_not_a_cycle() {
        // Inline is 10% cheaper per batch, and an epoch of 100 batches ends with a 1 s pause.
        // Counted as the cycle of the epoch's last batch, a pause would land in whichever way
        // that batch ran and swing the probes; paused, it counts nowhere.
        let mut s = StageChoice::default();
        let chose =
            run(&mut s, 6000, 100, 1_000_000, |w| if w == Stages::Inline { 900 } else { 1000 });
        assert_eq!(s.chosen(), Stages::Inline);
        let dear = chose[1000..].iter().filter(|&&w| w == Stages::Pipelined).count();
        // Only the probes: about one per 1,100 batches once the runs have grown.
        assert!(dear <= 6 * SCHEDULE.probe as usize, "{dear} batches through the pipeline");
    }
}
