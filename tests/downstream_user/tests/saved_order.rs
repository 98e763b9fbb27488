//! The user saves a run's report (the computation order) to a file with serde, and a fresh
//! process loads it and replays it: the tables are bitwise the trained ones.
//!
//! The test runs itself a second time as that fresh process (`current_exe`, this one test,
//! with the paths in the environment).

use ordo::engine::{Engine, EngineConfig, Mode, RunReport, replay_into};
use ordo_downstream_user::{Factors, TwoTables, batch};
use std::path::PathBuf;
use std::process::Command;

const CHILD: &str = "ORDO_USER_REPLAY_DIR";
const TEST: &str = "a_saved_order_replays_in_a_fresh_process_bitwise";

fn bits(store: &TwoTables) -> Vec<u32> {
    let (a, b) = store.tables();
    a.iter().chain(&b).map(|x| x.to_bits()).collect()
}

/// The fresh process: load the report, replay it, save the tables' bits.
fn replay_saved(dir: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let report: RunReport = serde_json::from_slice(&std::fs::read(dir.join("order.json"))?)?;
    let store = TwoTables::new(8, 7);
    let mut model = Factors { users: 8, bias: 0.0 };
    replay_into(&mut model, &store, &report.batch_ids(), |id| Some(batch(id, 8, 7, None)))?;
    std::fs::write(dir.join("replayed.json"), serde_json::to_vec(&bits(&store))?)?;
    Ok(())
}

#[test]
fn a_saved_order_replays_in_a_fresh_process_bitwise() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::var_os(CHILD) {
        return replay_saved(dir.into());
    }
    let store = TwoTables::new(8, 7);
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2))?;
    let mut model = Factors { users: 8, bias: 0.0 };
    let report = engine.run(&mut model, &store, (0..150).map(|i| batch(i, 8, 7, None)))?;

    let dir = std::env::temp_dir().join(format!("ordo-user-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("order.json"), serde_json::to_vec(&report)?)?;
    let status = Command::new(std::env::current_exe()?)
        .args(["--exact", TEST, "--test-threads", "1"])
        .env(CHILD, &dir)
        .status()?;
    assert!(status.success(), "the fresh process failed: {status}");
    let replayed: Vec<u32> = serde_json::from_slice(&std::fs::read(dir.join("replayed.json"))?)?;
    std::fs::remove_dir_all(&dir)?;
    assert_eq!(replayed, bits(&store), "the fresh process's replay differs");
    Ok(())
}
