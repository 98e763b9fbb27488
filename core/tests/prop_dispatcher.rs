//! Property tests of the dispatchers against sequential models.
//!
//! Several logical workers issue start/finish in a random interleaving (each worker with at most
//! one step in flight, as in the paper's Algorithm 1), the worker bound `m` changes, and the
//! `y` policy is Fixed, Decay or Probe (fed random losses). After every operation the dispatcher
//! must answer exactly as the model of intervals: same start index, same accept/reject, same τ
//! (accepted steps between a step's start and its acceptance), same interval and place in it,
//! same interval state, and the same telemetry. A final test runs real threads and checks the
//! interval invariants on the recorded decisions.
#![cfg(not(ordo_loom))]

use ordo::dispatcher::{
    Async, ClosedInterval, Decay, Decision, Dispatcher, Fixed, IntervalDispatcher, IntervalInfo,
    IntervalState, MAX_Y, Probe, ProbeConfig, Sequential, UpdateInterval,
};
use proptest::prelude::*;

const WORKERS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Start(usize),
    Finish(usize),
    SetWorkers(usize),
    Loss(f64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0..WORKERS).prop_map(Op::Start),
        6 => (0..WORKERS).prop_map(Op::Finish),
        1 => (0..=WORKERS + 1).prop_map(Op::SetWorkers),
        1 => (0.0..10.0f64).prop_map(Op::Loss),
    ];
    prop::collection::vec(op, 1..200)
}

#[derive(Debug, Clone, Copy)]
enum PolicyKind {
    Fixed,
    Decay(u64),
    Probe(ProbeConfig),
}

fn policy_kind() -> impl Strategy<Value = PolicyKind> {
    prop_oneof![
        Just(PolicyKind::Fixed),
        (1..6u64).prop_map(PolicyKind::Decay),
        (1..4u32, 1..3u64, 1..6u64, 1..6u64).prop_map(|(window, spacing, p, x)| {
            PolicyKind::Probe(ProbeConfig { window, spacing, probe_steps: p, exec_steps: x })
        }),
    ]
}

/// A policy of either kind, with the loss feed Probe needs. Probe is boxed: under
/// `--cfg ordo_shuttle` its shuttle mutexes make it far larger than the other variants.
enum AnyPolicy {
    Fixed(Fixed),
    Decay(Decay),
    Probe(Box<Probe>),
}

impl AnyPolicy {
    fn new(kind: PolicyKind, y0: u32) -> Self {
        match kind {
            PolicyKind::Fixed => AnyPolicy::Fixed(Fixed),
            PolicyKind::Decay(n) => AnyPolicy::Decay(Decay::new(n).unwrap()),
            PolicyKind::Probe(cfg) => AnyPolicy::Probe(Box::new(Probe::new(y0, 16, cfg).unwrap())),
        }
    }
    fn record_loss(&self, loss: f64) {
        if let AnyPolicy::Probe(p) = self {
            p.record_loss(loss);
        }
    }
}

impl UpdateInterval for AnyPolicy {
    fn next_y(&self, closed: &ClosedInterval) -> u32 {
        match self {
            AnyPolicy::Fixed(p) => p.next_y(closed),
            AnyPolicy::Decay(p) => p.next_y(closed),
            AnyPolicy::Probe(p) => p.next_y(closed),
        }
    }
}

/// The sequential model of intervals (paper 001, Algorithm 2 without concurrency).
struct Model {
    started: u64,
    cur: IntervalState,
    closed_total: u64,
    rejected: u64,
    m: usize,
    /// Per worker: (start index, steps accepted when it started).
    in_flight: [Option<(u64, u64)>; WORKERS],
    policy: AnyPolicy,
}

impl Model {
    fn accepted(&self) -> u64 {
        self.closed_total + u64::from(self.cur.done)
    }

    fn start(&mut self, w: usize) -> Option<u64> {
        if w >= self.m {
            return None;
        }
        let i = self.started;
        self.started += 1;
        self.in_flight[w] = Some((i, self.accepted()));
        Some(i)
    }

    fn finish(&mut self, w: usize) -> Decision {
        let (i, accepted_at_start) = self.in_flight[w].take().unwrap();
        if self.cur.done >= self.cur.y || i < self.cur.first {
            self.rejected += 1;
            return Decision::REJECTED;
        }
        let tau = self.accepted() - accepted_at_start;
        self.cur.done += 1;
        let info = IntervalInfo { first: self.cur.first, y: self.cur.y, order: self.cur.done };
        if self.cur.done == self.cur.y {
            self.closed_total += u64::from(self.cur.y);
            let closed = ClosedInterval {
                first: self.cur.first,
                y: self.cur.y,
                accepted_total: self.closed_total,
                next_first: self.started,
            };
            let y = self.policy.next_y(&closed).clamp(1, MAX_Y);
            self.cur = IntervalState { first: self.started, done: 0, y };
        }
        Decision { accepted: true, tau: Some(tau), interval: Some(info) }
    }
}

fn check_against_model(
    kind: PolicyKind,
    y0: u32,
    m0: usize,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let d = IntervalDispatcher::with_capacity(m0, WORKERS, y0, AnyPolicy::new(kind, y0)).unwrap();
    let mut model = Model {
        started: 0,
        cur: IntervalState { first: 0, done: 0, y: y0 },
        closed_total: 0,
        rejected: 0,
        m: m0,
        in_flight: [None; WORKERS],
        policy: AnyPolicy::new(kind, y0),
    };
    // Worker w's step in flight, as the real dispatcher handed it out.
    let mut real_in_flight: [Option<u64>; WORKERS] = [None; WORKERS];
    for (n, op) in ops.iter().enumerate() {
        match *op {
            Op::Start(w) if real_in_flight[w].is_none() => {
                let got = d.try_start_step(w);
                prop_assert_eq!(got, model.start(w), "op {}: start({})", n, w);
                real_in_flight[w] = got;
            }
            Op::Finish(w) => {
                if let Some(i) = real_in_flight[w].take() {
                    let got = d.finish_step_detailed(w, i);
                    prop_assert_eq!(got, model.finish(w), "op {}: finish({}, {})", n, w, i);
                    if let (Some(tau), Some(info)) = (got.tau, got.interval) {
                        prop_assert!(tau < u64::from(info.y), "τ = {} ≥ y = {}", tau, info.y);
                    }
                }
            }
            Op::SetWorkers(m) => {
                let got = d.set_workers(m);
                let ok = (1..=WORKERS).contains(&m);
                prop_assert_eq!(got.is_ok(), ok, "set_workers({})", m);
                if ok {
                    model.m = m;
                }
                prop_assert_eq!(d.workers(), model.m);
            }
            Op::Loss(l) => {
                d.policy().record_loss(l);
                model.policy.record_loss(l);
            }
            Op::Start(_) => {} // Algorithm 1: a worker finishes its step before starting another
        }
        prop_assert_eq!(d.current(), model.cur, "op {}: interval state", n);
    }
    let t = d.telemetry().unwrap();
    prop_assert_eq!(
        (t.started, t.accepted, t.rejected),
        (model.started, model.accepted(), model.rejected)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn interval_dispatcher_matches_the_sequential_model(
        kind in policy_kind(),
        y0 in 1..6u32,
        m0 in 1..=WORKERS,
        ops in ops(),
    ) {
        check_against_model(kind, y0, m0, &ops)?;
    }

    /// Async accepts everything; τ = steps accepted since the step started.
    #[test]
    fn async_reports_exact_staleness(ops in ops()) {
        let d = Async::with_capacity(WORKERS, WORKERS).unwrap();
        let mut accepted = 0u64;
        let mut started = 0u64;
        let mut in_flight: [Option<(u64, u64)>; WORKERS] = [None; WORKERS];
        for op in &ops {
            match *op {
                Op::Start(w) if in_flight[w].is_none() => {
                    prop_assert_eq!(d.try_start_step(w), Some(started));
                    in_flight[w] = Some((started, accepted));
                    started += 1;
                }
                Op::Finish(w) => if let Some((i, a0)) = in_flight[w].take() {
                    let got = d.finish_step_detailed(w, i);
                    prop_assert_eq!(got, Decision { accepted: true, tau: Some(accepted - a0), interval: None });
                    accepted += 1;
                }
                _ => {}
            }
        }
        prop_assert_eq!(d.telemetry().unwrap().accepted, accepted);
    }

    /// Sequential admits one step at a time and accepts exactly that step.
    #[test]
    fn sequential_runs_one_step_at_a_time(ops in ops()) {
        let d = Sequential::new(WORKERS).unwrap();
        let mut in_flight: Option<(usize, u64)> = None;
        let mut next = 0u64;
        for op in &ops {
            match *op {
                Op::Start(w) => {
                    let got = d.try_start_step(w);
                    if in_flight.is_none() {
                        prop_assert_eq!(got, Some(next));
                        in_flight = Some((w, next));
                        next += 1;
                    } else {
                        prop_assert_eq!(got, None);
                    }
                }
                Op::Finish(w) => {
                    let step = in_flight.filter(|&(o, _)| o == w).map(|(_, i)| i);
                    let probe = step.unwrap_or(next); // never the step in flight
                    let got = d.finish_step(w, probe);
                    prop_assert_eq!(got, step.is_some());
                    if got {
                        in_flight = None;
                    }
                }
                _ => {}
            }
        }
    }
}

/// Real threads (a smoke test: which races occur depends on the machine; the deterministic
/// check is the model test above): every accepted step began inside its interval, took a
/// distinct place in it, and reported τ < y; started = accepted + rejected.
#[test]
fn concurrent_runs_keep_the_interval_invariants() {
    use std::sync::{Arc, Mutex};
    for y in [1u32, 3, 8] {
        let d = Arc::new(IntervalDispatcher::new(4, y, Decay::new(500).unwrap()).unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        std::thread::scope(|s| {
            for w in 0..4 {
                let (d, log) = (d.clone(), log.clone());
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..3000 {
                        let i = d.try_start_step(w).unwrap();
                        let dec = d.finish_step_detailed(w, i);
                        if let (Some(info), Some(tau)) = (dec.interval, dec.tau) {
                            mine.push((info.first, info.order, info.y, i, tau));
                        }
                    }
                    log.lock().unwrap().extend(mine);
                });
            }
        });
        let mut log = log.lock().unwrap().clone();
        log.sort_unstable();
        for &(first, order, iy, i, tau) in &log {
            assert!(i >= first && order >= 1 && order <= iy && tau < u64::from(order));
        }
        for w in log.windows(2) {
            assert!((w[0].0, w[0].1) != (w[1].0, w[1].1), "place taken twice: {w:?}");
            if w[0].0 != w[1].0 {
                assert!(w[0].3 < w[1].0, "step of an earlier interval after a later opened");
            }
        }
        let t = d.telemetry().unwrap();
        assert_eq!(t.accepted, log.len() as u64);
        assert_eq!(t.started, t.accepted + t.rejected);
        assert_eq!(t.started, 12_000);
    }
}
