//! Multi-process conservation check: run under `mpirun -n N`. Every rank is one node and applies
//! a seeded random mix of intents, pushes, pulls and clock advances in every mode in turn; at
//! quiescence each key must have exactly one owner and equal its initial value plus every
//! rank's pushes (each rank replays every rank's seeded op sequence to know them).
//! Exits non-zero on a violation.

use std::process::ExitCode;

use ordo_pm::PmMode;
use ordo_pm::mpi::run_node;
use ordo_pm::rng::{below, between, seeded};

const KEYS: u64 = 16;
const OPS: usize = 600;

#[derive(Debug, Clone, Copy)]
enum Op {
    Intent(u64, u64, u64),
    Push(u64, i64),
    Pull(u64),
    Advance,
}

fn ops(rank: usize) -> Vec<Op> {
    let mut rng = seeded(1000 + rank as u64);
    let mut clock = 0;
    (0..OPS)
        .map(|_| {
            let key = below(&mut rng, KEYS);
            match below(&mut rng, 4) {
                0 => {
                    let start = clock + below(&mut rng, 3);
                    Op::Intent(key, start, start + 1 + below(&mut rng, 5))
                }
                1 => Op::Push(key, between(&mut rng, -3, 4)),
                2 => Op::Pull(key),
                _ => {
                    clock += 1;
                    Op::Advance
                }
            }
        })
        .collect()
}

fn main() -> ExitCode {
    // The MPI universe lives for one `run_node`; MPI cannot be re-initialized in a process, so
    // the mode comes from the command line (`.ci/run` loops over them).
    let mode: PmMode = match std::env::args().nth(1).unwrap_or_else(|| "adapm".into()).parse() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let outcome = run_node(
        KEYS,
        1,
        mode,
        |k| vec![k as f32],
        |h, rank, _| {
            let mut row = [0.0f32];
            for op in ops(rank) {
                match op {
                    Op::Intent(k, s, e) => h.intent(&[k], s, e).map(|_| ()),
                    Op::Push(k, d) => h.push(&[k], &[d as f32]),
                    Op::Pull(k) => h.pull(&[k], &mut row).map(|_| ()),
                    Op::Advance => {
                        h.advance_clock();
                        Ok(())
                    }
                }?;
            }
            Ok::<(), ordo_pm::PmError>(())
        },
    );
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pm-mpi-check: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = o.result {
        eprintln!("pm-mpi-check rank {}: {e}", o.rank);
        return ExitCode::FAILURE;
    }
    let mut expect: Vec<i64> = (0..KEYS as i64).collect();
    for r in 0..o.nodes {
        for op in ops(r) {
            if let Op::Push(k, d) = op {
                expect[k as usize] += d;
            }
        }
    }
    let mut ok = true;
    for (k, ((&owners, &value), &want)) in o.owners.iter().zip(&o.table).zip(&expect).enumerate() {
        if owners != 1 || value != want as f32 {
            eprintln!(
                "pm-mpi-check rank {} mode {mode}: key {k} owners={owners} value={value} expected={want}",
                o.rank
            );
            ok = false;
        }
    }
    if o.rank == 0 {
        let s = o.stats;
        println!(
            "pm-mpi-check {mode}: {} ranks, {} keys, {}: remote_share={:.3} bytes_sent={} relocations={} replications={}",
            o.nodes,
            KEYS,
            if ok { "conserved" } else { "VIOLATED" },
            s.remote_share(),
            s.bytes_sent,
            s.relocations,
            s.replications
        );
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
