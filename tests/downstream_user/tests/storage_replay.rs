//! A user's two-table storage trains through the engine and replays through the storage replay
//! (`replay_into`) onto a fresh pair of tables, bit for bit, without concatenating them.

use ordo::engine::{Engine, EngineConfig, Mode, Model, replay_into};
use ordo_downstream_user::{Factors, TwoTables, batch};

#[test]
fn a_two_table_storage_equals_the_replay_onto_two_tables() -> Result<(), Box<dyn std::error::Error>>
{
    let (users, items) = (9, 6);
    let store = TwoTables::new(users, items);
    let engine = Engine::new(EngineConfig::new(Mode::Oac).threads(2, 2))?;
    let mut model = Factors { users: users as u64, bias: 0.0 };
    let report = engine.run(&mut model, &store, (0..200).map(|i| batch(i, 9, 6, None)))?;

    let fresh = TwoTables::new(users, items);
    assert_ne!(fresh.tables(), store.tables(), "the run changed the tables");
    let mut replayed = Factors { users: users as u64, bias: 0.0 };
    replay_into(&mut replayed, &fresh, &report.batch_ids(), |id| Some(batch(id, 9, 6, None)))?;
    let bits = |(a, b): (Vec<f32>, Vec<f32>)| -> Vec<u32> {
        a.iter().chain(&b).map(|x| x.to_bits()).collect()
    };
    assert_eq!(bits(fresh.tables()), bits(store.tables()));
    assert_eq!(replayed.dense(), model.dense());
    Ok(())
}
