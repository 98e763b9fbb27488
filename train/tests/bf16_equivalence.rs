//! `--precision bf16`'s rounding is keyed by (seed, row, batch), never by the schedule: an OAC
//! run equals the synchronous replay of its order, and the same replay twice in one process
//! (its rows rounded on threads that rounded other rows before) gives the same bits. The
//! mutation table's check of `bf16-rounding-keyed-by-thread` (`train/src/mutation.rs`). The
//! same equivalence with stale reads forced is `tests/e2e_kge_bf16.rs`.

use ordo_train::kge::data::dataset::Dataset;
use ordo_train::kge::model::precision::Precision;
use ordo_train::kge::training::train::{TrainConfig, TrainMode, replay, train};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn bf16_oac_equals_its_replay_and_a_replay_itself() {
    let d = Dataset::load("nations").unwrap();
    let cfg = TrainConfig {
        dim: 16,
        epochs: 2,
        batch_size: 64,
        negatives: 8,
        chunk: 8,
        seed: 5,
        threads: 2,
        precision: Precision::Bf16,
        ..TrainConfig::default()
    };
    let oac = train(&d, &cfg, TrainMode::Oac, &mut |_| {}, None).unwrap();
    let first = replay(&d, &cfg, &oac.order).unwrap();
    let second = replay(&d, &cfg, &oac.order).unwrap();
    let rows = bits(&oac.entity_rows());
    assert!(rows.iter().all(|b| b & 0xFFFF == 0), "every stored value a bf16");
    assert_eq!(bits(&first.entity_rows()), bits(&second.entity_rows()), "a replay twice");
    assert_eq!(rows, bits(&first.entity_rows()), "oac and its replay");
    assert_eq!(bits(&oac.dense), bits(&first.dense));
}
