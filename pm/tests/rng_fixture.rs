//! Recorded fixtures of the seeded streams: the first values of `ordo_pm::rng`'s generator and
//! sampling, and one short seeded `Simulation` run's outcome, compared with constants recorded
//! when they were chosen. A dependency update that changes ChaCha8's output, or an edit of the
//! sampling, fails here instead of silently changing what a seed means.

use ordo_pm::PmMode;
use ordo_pm::rng::{below, between, index, seeded};
use ordo_pm::sim::Simulation;
use rand::Rng;

#[test]
fn generator_stream_is_recorded() {
    let mut g = seeded(0);
    let got: Vec<u64> = (0..4).map(|_| g.next_u64()).collect();
    assert_eq!(got, FIXTURE_SEED0, "ChaCha8 stream of seed 0: {got:#018x?}");
    let mut g = seeded(0x0123_4567_89AB_CDEF);
    let got: Vec<u64> = (0..4).map(|_| g.next_u64()).collect();
    assert_eq!(got, FIXTURE_SEED_BIG, "ChaCha8 stream of a large seed: {got:#018x?}");
}

#[test]
fn sampling_stream_is_recorded() {
    let mut g = seeded(42);
    let got: Vec<u64> = (0..12).map(|_| below(&mut g, 1000)).collect();
    assert_eq!(got, FIXTURE_BELOW, "below(1000) of seed 42");
    let got: Vec<i64> = (0..8).map(|_| between(&mut g, -3, 4)).collect();
    assert_eq!(got, FIXTURE_BETWEEN, "between(-3, 4) after it");
    let got: Vec<usize> = (0..8).map(|_| index(&mut g, 7)).collect();
    assert_eq!(got, FIXTURE_INDEX, "index(7) after it");
}

/// A short seeded run: intents, pushes and clock advances with only part of the traffic
/// delivered between steps, so the delivery order (drawn from the seed) decides the counters
/// and where keys end up.
fn short_run(seed: u64) -> (ordo_pm::stats::PmStats, u64) {
    const NODES: usize = 4;
    const KEYS: u64 = 12;
    let mut sim = Simulation::new(NODES, KEYS, 1, PmMode::AdaPm, seed).unwrap();
    let mut ops = seeded(seed ^ 0xA5A5);
    for step in 0..300u64 {
        let n = index(&mut ops, NODES);
        let key = below(&mut ops, KEYS);
        match below(&mut ops, 4) {
            0 | 1 => sim.intent_now(n, &[key], step / 8 + 2).unwrap(),
            2 => sim.push(n, key, &[between(&mut ops, -3, 4) as f32]).unwrap(),
            _ => sim.advance_clock(n).unwrap(),
        }
        if step % 5 == 0 {
            sim.round_all().unwrap();
        }
        for _ in 0..below(&mut ops, 3) {
            sim.deliver_one().unwrap();
        }
    }
    sim.quiesce().unwrap();
    sim.check_quiescent().unwrap();
    // FNV-1a over the final owner of each key.
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for k in 0..KEYS {
        let owner = (0..NODES).find(|&n| sim.node(n).owns(k)).unwrap() as u64;
        h = (h ^ owner).wrapping_mul(0x0100_0000_01B3);
    }
    (sim.stats(), h)
}

#[test]
fn seeded_simulation_outcome_is_recorded() {
    let (s, owners) = short_run(3);
    let got = [s.messages, s.bytes_sent, s.relocations, s.replications, s.forwards, owners];
    assert_eq!(got, FIXTURE_RUN, "messages, bytes, relocations, replications, forwards, owners");
}

/// Seed 0 is the all-zero key: these are the published ChaCha8 keystream test vector for the zero
/// key and nonce (`3e00ef2f895f40d6 7f5bb8e81f09a5a1 ...`), read as little-endian words.
const FIXTURE_SEED0: [u64; 4] =
    [0xD640_5F89_2FEF_003E, 0xA1A5_091F_E8B8_5B7F, 0x3B7F_9ACE_C30E_842C, 0x1E1A_71EF_88E1_1B18];
const FIXTURE_SEED_BIG: [u64; 4] =
    [1496423549967873325, 9349171451971464826, 6154439535356884908, 1919921795290682294];
const FIXTURE_BELOW: [u64; 12] = [348, 285, 493, 367, 825, 67, 489, 266, 466, 798, 594, 826];
const FIXTURE_BETWEEN: [i64; 8] = [-1, 0, 0, -2, -1, -2, 1, 2];
const FIXTURE_INDEX: [usize; 8] = [5, 0, 4, 3, 0, 1, 5, 0];
const FIXTURE_RUN: [u64; 6] = [532, 26548, 34, 52, 145, 11102445344134307789];
