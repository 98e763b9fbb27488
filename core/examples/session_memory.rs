//! Peak memory of a session that is never finished: `n` tiny batches streamed through one `Oac`
//! session, the computation order taken as it is stamped (`drain`) or left to the report
//! (`keep`, what every session did before `Session::drain_order`). Prints the process's peak
//! resident set (`VmHWM` of `/proc/self/status`, Linux) after each tenth of the stream, so the
//! growth, or its absence, shows; run each mode in its own process.
//!
//! ```text
//! cargo run --release -p ordo --example session_memory -- drain 10000000
//! cargo run --release -p ordo --example session_memory -- keep 10000000
//! ```

use ordo::engine::{
    Batch, BatchRows, CpuDevice, Engine, EngineConfig, EngineError, Mode, Model, StepError,
};
use ordo::row_store::RowStore;
use std::time::Instant;

const ROWS: u64 = 1024;

/// One float per row, nudged towards the batch's value.
struct Tiny;

impl Model for Tiny {
    type Data = f32;
    type Error = StepError;
    fn row_width(&self) -> usize {
        1
    }
    fn step(&mut self, x: &f32, rows: &mut BatchRows<'_>) -> Result<(), StepError> {
        rows.values_mut().iter_mut().for_each(|v| *v = 0.5 * (*v + x));
        Ok(())
    }
}

/// The process's peak resident set in KiB (`VmHWM`), or 0 where `/proc` has none.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() -> Result<(), EngineError> {
    let mut args = std::env::args().skip(1);
    let drain = match args.next().as_deref() {
        Some("drain") => true,
        Some("keep") => false,
        _ => return Err(EngineError::Config("usage: session_memory drain|keep [batches]")),
    };
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000_000);
    let store = RowStore::zeros(ROWS as usize, 1);
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(1, 1))?;
    let start = Instant::now();
    println!(
        "mode {} · {n} batches · peak RSS before: {} KiB",
        if drain { "drain" } else { "keep" },
        peak_kib()
    );
    let (mut drained, mut checksum) = (0u64, 0u64);
    engine.session(&mut CpuDevice::new(), &mut Tiny, &store, |s| {
        for id in 0..n {
            let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            s.submit(Batch { id, rows: vec![x % ROWS], data: (x % 7) as f32 })?;
            if drain && id % 1024 == 1023 {
                for stamp in s.drain_order() {
                    drained += 1;
                    checksum = checksum.wrapping_mul(31).wrapping_add(stamp.batch_id);
                }
                let _ = s.completions();
            }
            if (id + 1) % (n / 10).max(1) == 0 {
                println!(
                    "{:>10} batches  peak RSS {:>8} KiB  retained {:>9}  {:.1} s",
                    id + 1,
                    peak_kib(),
                    s.retained(),
                    start.elapsed().as_secs_f64()
                );
            }
        }
        let report = s.close()?;
        drained += report.order.len() as u64;
        Ok::<_, EngineError>(())
    })?;
    println!("stamped {drained} of {n} (checksum {checksum:x}) · peak RSS {} KiB", peak_kib());
    Ok(())
}
