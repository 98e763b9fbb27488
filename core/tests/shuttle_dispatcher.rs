//! shuttle: the interval dispatcher (`ordo::dispatcher::IntervalDispatcher`) at 6 workers and
//! hundreds of steps, beyond what loom explores (3 workers, one or two steps each), under
//! shuttle's randomized and PCT schedulers on the shipped source (through ordo's sync shim).
//!
//! Run: `RUSTFLAGS="--cfg ordo_shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release
//! -p ordo --test shuttle_dispatcher`.
//!
//! **Oracle.** Each worker keeps a ghost count of accepted steps in *std* atomics, which shuttle
//! does not schedule on, so a ghost update right after a dispatcher call is atomic with that
//! call's last shuttle-visible operation (as in `loom_dispatcher.rs`). Every accepted step must
//! have ghost staleness τ ≤ y, have started at or after its interval's `I_first`, and take a
//! place `1..=y` of its interval no other step took; intervals are disjoint in start indices.
//! Shuttle sees only sequentially consistent interleavings: orderings are loom's job.
#![cfg(ordo_shuttle)]

use std::collections::BTreeSet;
use std::sync::Mutex as GhostMutex;
use std::sync::atomic::{AtomicU64 as GhostU64, Ordering::SeqCst};

use ordo::dispatcher::{
    Decay, Dispatcher, Fixed, IntervalDispatcher, IntervalInfo, UpdateInterval,
};
use shuttle::sync::Arc;
use shuttle::thread;

/// Ghost state of one execution.
#[derive(Default)]
struct Ghost {
    accepted: GhostU64,
    /// (start index, interval) of every accepted step.
    log: GhostMutex<Vec<(u64, IntervalInfo)>>,
}

/// `workers` threads, `steps` start/finish pairs each, against `d`; panics on a violation.
fn run_workers<P: UpdateInterval + 'static>(
    d: IntervalDispatcher<P>,
    workers: usize,
    steps: usize,
) {
    let d = Arc::new(d);
    let ghost = Arc::new(Ghost::default());
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (d, ghost) = (d.clone(), ghost.clone());
            thread::spawn(move || {
                for _ in 0..steps {
                    let Some(i) = d.try_start_step(w) else { continue };
                    let seen = ghost.accepted.load(SeqCst);
                    let f = d.finish_step_detailed(w, i);
                    if !f.accepted {
                        continue;
                    }
                    let tau = ghost.accepted.fetch_add(1, SeqCst) - seen;
                    let info = f.interval.expect("an accepted step names its interval");
                    assert!(tau <= u64::from(info.y), "staleness τ = {tau} > y = {}", info.y);
                    assert!(i >= info.first, "step {i} accepted across the boundary {info:?}");
                    assert!(1 <= info.order && info.order <= info.y, "place {info:?}");
                    ghost.log.lock().unwrap().push((i, info));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let log = ghost.log.lock().unwrap();
    let mut places = BTreeSet::new();
    for &(_, info) in log.iter() {
        assert!(places.insert((info.first, info.order)), "two steps took place {info:?}");
    }
    // Intervals are disjoint: every step of an interval began before the next one opened.
    let firsts: BTreeSet<u64> = log.iter().map(|(_, info)| info.first).collect();
    for &(i, info) in log.iter() {
        if let Some(&next) = firsts.range(info.first + 1..).next() {
            assert!(
                i < next,
                "step {i} of interval {} began after interval {next} opened",
                info.first
            );
        }
    }
    let t = d.telemetry().unwrap();
    assert_eq!(t.accepted, log.len() as u64, "telemetry counts every accepted step");
    assert_eq!(t.accepted + t.rejected, t.started, "every started step decided once");
}

/// Randomized scheduler: 6 workers × 50 steps = 300 steps, y = 2 (intervals close constantly).
#[test]
fn six_workers_keep_the_interval_invariants_random() {
    shuttle::check_random(
        || run_workers(IntervalDispatcher::new(6, 2, Fixed).unwrap(), 6, 50),
        300,
    );
}

/// PCT (depth 3): 8 workers × 40 steps with y decaying from 4, so y changes while steps race.
#[test]
fn eight_workers_with_decaying_y_keep_the_interval_invariants_pct() {
    shuttle::check_pct(
        || run_workers(IntervalDispatcher::new(8, 4, Decay::new(5).unwrap()).unwrap(), 8, 40),
        300,
        3,
    );
}
