//! loom models of the interval dispatcher (`ordo::dispatcher::IntervalDispatcher`) and of the
//! published Algorithm 2 it corrects (fixture `fixtures/published_algorithm2.rs`).
//!
//! Run: `RUSTFLAGS="--cfg ordo_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2
//! LOOM_MAX_BRANCHES=20000 CARGO_TARGET_DIR=/work/target-loom cargo test --release -p ordo
//! --test loom_dispatcher`.
//!
//! **Ghost staleness.** Each worker keeps a ghost count of accepted steps in *std* atomics,
//! which loom does not instrument, so loom never switches threads inside a ghost update: a
//! ghost update made right after a dispatcher call is atomic with that call's last atomic
//! operation. Right after `try_start_step` returns (its last operation is the start index's
//! fetch-and-add) a worker reads the ghost count; right after an accepting `finish_step`
//! returns it increments it. The difference is the step's staleness τ as loom scheduled it,
//! except that the step that closes an interval is counted at the end of its opening of the next
//! one (one step later at most). So the corrected dispatcher must keep ghost τ ≤ y, the paper's
//! bound; the published algorithm does not.
#![cfg(ordo_loom)]

#[path = "fixtures/published_algorithm2.rs"]
mod published;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex as GhostMutex;
use std::sync::atomic::{AtomicU64 as GhostU64, Ordering::SeqCst};

use loom::sync::Arc;
use loom::thread;
use ordo::dispatcher::{
    Decay, Dispatcher, Fixed, IntervalDispatcher, IntervalInfo, UpdateInterval,
};
use published::PublishedAlgorithm2;

/// What a worker learns from one finished step.
struct Finished {
    accepted: bool,
    /// The interval that counted it, and the reported τ (the corrected dispatcher only).
    detail: Option<(IntervalInfo, u64)>,
}

/// A dispatcher under test.
trait Subject: Send + Sync + 'static {
    fn start(&self, worker: usize) -> Option<u64>;
    fn finish(&self, worker: usize, step: u64) -> Finished;
    /// The `y` bound for an accepted step.
    fn y_bound(&self, f: &Finished) -> u64;
}

impl Subject for PublishedAlgorithm2 {
    fn start(&self, worker: usize) -> Option<u64> {
        let (ok, i) = self.try_start_step(worker as u64);
        ok.then_some(i as u64)
    }
    fn finish(&self, worker: usize, step: u64) -> Finished {
        Finished { accepted: self.finish_step(worker as u64, step as i64), detail: None }
    }
    fn y_bound(&self, _: &Finished) -> u64 {
        1 // the fixture models below run it with a fixed y = 1
    }
}

impl<P: UpdateInterval + 'static> Subject for IntervalDispatcher<P> {
    fn start(&self, worker: usize) -> Option<u64> {
        self.try_start_step(worker)
    }
    fn finish(&self, worker: usize, step: u64) -> Finished {
        let d = self.finish_step_detailed(worker, step);
        Finished { accepted: d.accepted, detail: d.interval.zip(d.tau) }
    }
    fn y_bound(&self, f: &Finished) -> u64 {
        f.detail.map_or(0, |(info, _)| info.y.into())
    }
}

/// Ghost state of one execution (module docs).
#[derive(Default)]
struct Ghost {
    accepted: GhostU64,
    /// (start index, interval, reported τ) of every accepted step of the corrected dispatcher.
    log: GhostMutex<Vec<(u64, IntervalInfo, u64)>>,
}

/// One worker: `steps` start/finish pairs, checking every accepted step as it is accepted.
fn work<S: Subject>(d: &S, ghost: &Ghost, worker: usize, steps: usize) {
    for _ in 0..steps {
        let Some(i) = d.start(worker) else { continue };
        let seen = ghost.accepted.load(SeqCst);
        let f = d.finish(worker, i);
        if !f.accepted {
            continue;
        }
        let tau = ghost.accepted.fetch_add(1, SeqCst) - seen;
        let y = d.y_bound(&f);
        assert!(tau <= y, "staleness τ = {tau} > y = {y} for the step started as {i}");
        if let Some((info, reported)) = f.detail {
            assert!(i >= info.first, "step {i} accepted across the boundary at {}", info.first);
            assert!(1 <= info.order && info.order <= info.y, "order {info:?}");
            assert!(reported < u64::from(info.order), "reported τ {reported} ≥ order {info:?}");
            ghost.log.lock().unwrap().push((i, info, reported));
        }
    }
}

/// After the threads: each interval's accepted steps took distinct places `1..=y` (a repeated
/// place is the ABA signature), intervals are strictly ordered by `I_first`, and every step of
/// an earlier interval began before any later interval opened.
fn check_intervals(log: &[(u64, IntervalInfo, u64)]) {
    let mut by_place: Vec<(u64, u32, u32, u64)> =
        log.iter().map(|&(i, info, _)| (info.first, info.order, info.y, i)).collect();
    by_place.sort_unstable();
    for w in by_place.windows(2) {
        let ((f0, o0, y0, i0), (f1, o1, y1, _)) = (w[0], w[1]);
        assert!((f0, o0) != (f1, o1), "two steps took place {o0} of interval {f0}");
        if f0 == f1 {
            assert_eq!(y0, y1, "y changed inside interval {f0}");
        } else {
            assert!(i0 < f1, "step {i0} of interval {f0} began after interval {f1} opened");
        }
    }
}

/// Spawn one thread per `(worker, steps)` of `plan`, each running [`work`].
fn spawn_workers<S: Subject>(
    d: &Arc<S>,
    ghost: &Arc<Ghost>,
    plan: &[(usize, usize)],
) -> Vec<thread::JoinHandle<()>> {
    plan.iter()
        .map(|&(w, steps)| {
            let (d, ghost) = (d.clone(), ghost.clone());
            thread::spawn(move || work(&*d, &ghost, w, steps))
        })
        .collect()
}

/// Join the threads, then check the intervals.
fn join_and_check(handles: Vec<thread::JoinHandle<()>>, ghost: &Ghost) {
    for h in handles {
        h.join().unwrap();
    }
    check_intervals(&ghost.log.lock().unwrap());
}

/// `threads` workers doing `steps` each against `make()`.
fn run<S: Subject>(make: impl Fn() -> S + Sync + Send + 'static, threads: usize, steps: usize) {
    loom::model(move || {
        let d = Arc::new(make());
        let ghost = Arc::new(Ghost::default());
        let plan: Vec<_> = (0..threads).map(|w| (w, steps)).collect();
        join_and_check(spawn_workers(&d, &ghost, &plan), &ghost);
    });
}

fn fixed(m: usize, y: u32) -> impl Fn() -> IntervalDispatcher<Fixed> + Sync + Send + 'static {
    move || IntervalDispatcher::new(m, y, Fixed).unwrap()
}

/// (a) The ABA scenario: three workers, one step each, y = 1. Schedule loom finds (one
/// preemption): A reads `I_done = 0` and is preempted before its CAS; B is accepted and closes
/// the interval (I_first = 2, I_done = 0); C starts, is accepted and closes the next one;
/// A's CAS from 0 to 1 now succeeds — a step started before two accepted steps, τ = 2 > y = 1.
#[test]
fn published_algorithm2_violates_tau_bound_and_loom_finds_it() {
    let caught = catch_unwind(AssertUnwindSafe(|| {
        run(|| PublishedAlgorithm2::new(3, 1, |y| y), 3, 1);
    }));
    let err = caught.expect_err("loom must find the ABA race of the published Algorithm 2");
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("staleness τ = 2 > y = 1"), "unexpected failure: {msg}");
}

/// (a) The same scenario against the corrected dispatcher: no violation in any interleaving.
#[test]
fn corrected_dispatcher_passes_the_aba_scenario() {
    run(fixed(3, 1), 3, 1);
}

/// (b) τ ≤ y and no step accepted across an interval boundary, three workers, y = 2, so
/// intervals close while other steps are in flight and a second interval opens.
#[test]
fn tau_bounded_by_y_three_workers_y2() {
    run(fixed(3, 2), 3, 1);
}

/// (b) A worker's second step races the interval changes caused by the others (y = 2: the
/// first step of worker 0 may close an interval that its second step then has to start in).
#[test]
fn tau_bounded_by_y_repeated_steps() {
    loom::model(|| {
        let d = Arc::new(IntervalDispatcher::new(3, 2, Fixed).unwrap());
        let ghost = Arc::new(Ghost::default());
        join_and_check(spawn_workers(&d, &ghost, &[(0, 2), (1, 1), (2, 1)]), &ghost);
    });
}

/// (c) A policy changing y (decay by one per accepted step from y = 2) never breaks the bound:
/// the first interval has y = 2, later ones y = 1, while steps race the change.
#[test]
fn decay_changes_of_y_keep_tau_bounded() {
    run(|| IntervalDispatcher::new(3, 2, Decay::new(1).unwrap()).unwrap(), 3, 1);
}

/// The worker bound shrinking under the workers changes who may start, never τ ≤ y, and every
/// started step is decided exactly once.
#[test]
fn changing_m_keeps_tau_bounded() {
    loom::model(|| {
        let d = Arc::new(IntervalDispatcher::with_capacity(2, 3, 1, Fixed).unwrap());
        let ghost = Arc::new(Ghost::default());
        let mut handles = spawn_workers(&d, &ghost, &[(0, 1), (1, 1)]);
        let d2 = d.clone();
        handles.push(thread::spawn(move || d2.set_workers(1).unwrap()));
        join_and_check(handles, &ghost);
        let t = d.telemetry().unwrap();
        assert_eq!(t.accepted + t.rejected, t.started, "every started step decided once");
        assert_eq!(d.workers(), 1);
    });
}

/// `Sequential`: at most one step in flight, and the dispatcher orders each step's model write
/// (here a Relaxed store, as Hogwild would do) before the next step's model read.
#[test]
fn sequential_runs_one_step_at_a_time_and_publishes_its_update() {
    use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use ordo::dispatcher::Sequential;
    loom::model(|| {
        let d = Arc::new(Sequential::new(3).unwrap());
        let model = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(GhostU64::new(0));
        let handles: Vec<_> = (0..3)
            .map(|w| {
                let (d, model, in_flight) = (d.clone(), model.clone(), in_flight.clone());
                thread::spawn(move || {
                    let Some(i) = d.try_start_step(w) else { return };
                    assert_eq!(in_flight.fetch_add(1, SeqCst), 0, "two steps in flight");
                    // Step i runs on the model of steps 0..i: it must see all i of them.
                    assert_eq!(model.load(Relaxed), i, "step {i} missed an earlier update");
                    model.store(i + 1, Relaxed);
                    in_flight.fetch_sub(1, SeqCst);
                    assert!(d.finish_step(w, i));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}
