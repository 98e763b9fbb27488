//! Threads as nodes: worker threads drive every node of an in-process cluster concurrently with
//! random intents, pushes, pulls and clock advances (seeded); at quiescence each key holds its
//! initial value plus all pushes, has one owner, and every node reads the same value. Also the
//! `RowStorage` contract of a node handle.

use ordo::row_store::{StoreError, Version};
use ordo::storage::RowStorage;
use ordo_pm::PmMode;
use ordo_pm::cluster::Cluster;
use ordo_pm::rng::{below, between, seeded};
use std::time::Duration;

const NODES: usize = 3;
const KEYS: u64 = 8;

fn run(mode: PmMode, seed: u64) {
    let cluster = Cluster::in_process(NODES, KEYS, 1, mode, |k| vec![k as f32]).unwrap();
    let sums: Vec<Vec<i64>> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..NODES)
            .map(|n| {
                let h = cluster.handle(n).unwrap();
                sc.spawn(move || {
                    let mut rng = seeded(seed * 31 + n as u64);
                    let mut sum = vec![0i64; KEYS as usize];
                    let mut row = [0.0f32];
                    for _ in 0..400 {
                        let key = below(&mut rng, KEYS);
                        match below(&mut rng, 4) {
                            0 => {
                                let start = h.clock() + below(&mut rng, 3);
                                h.intent(&[key], start, start + 1 + below(&mut rng, 5)).unwrap()
                            }
                            1 => {
                                let d = between(&mut rng, -3, 4);
                                h.push(&[key], &[d as f32]).unwrap();
                                sum[key as usize] += d;
                            }
                            2 => {
                                h.pull(&[key], &mut row).unwrap();
                            }
                            _ => h.advance_clock(),
                        }
                    }
                    sum
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    cluster.quiesce(Duration::from_secs(30)).unwrap();
    for key in 0..KEYS {
        let expect = key as f32 + sums.iter().map(|s| s[key as usize]).sum::<i64>() as f32;
        let owners = (0..NODES)
            .filter(|&n| cluster.handle(n).unwrap().with_node(|node| node.owns(key)))
            .count();
        assert_eq!(owners, 1, "{mode}: key {key} has {owners} owners");
        for n in 0..NODES {
            let mut row = [0.0f32];
            cluster.handle(n).unwrap().pull(&[key], &mut row).unwrap();
            assert_eq!(row[0], expect, "{mode}: node {n} reads key {key}");
        }
    }
}

#[test]
fn threads_as_nodes_conserve_every_push_in_every_mode() {
    for (i, mode) in PmMode::ALL.into_iter().enumerate() {
        run(mode, i as u64);
    }
}

#[test]
fn node_handle_keeps_the_row_storage_contract() {
    let cluster = Cluster::in_process(2, 2, 2, PmMode::AdaPm, |_| vec![0.0; 2]).unwrap();
    let h = cluster.handle(1).unwrap(); // key 0 lives on node 0: remote for this handle
    let mut row = [0.0; 2];
    assert_eq!(h.read(0, &mut row), Ok(Version::Initial));
    assert_eq!(h.write_if_newer(0, 5, &[1.0, 2.0]), Ok(true));
    assert_eq!(h.write_if_newer(0, 3, &[9.0, 9.0]), Ok(false)); // older: not landed
    assert_eq!(h.read(0, &mut row), Ok(Version::Written(5)));
    assert_eq!(row, [1.0, 2.0]);
    assert_eq!(h.rows(), 2);
    assert_eq!(h.read(2, &mut row), Err(StoreError::RowOutOfRange { row: 2, rows: 2 }));
    assert_eq!(
        h.write_if_newer(0, 6, &[1.0]),
        Err(StoreError::DimMismatch { expected: 2, got: 1 })
    );
    assert_eq!(h.snapshot().unwrap(), vec![1.0, 2.0, 0.0, 0.0]);
}
