//! A sequential Rust port of the validation-cache kernels (`src/kernels/validation_cache.cu`):
//! the same hash, linear probing, key encoding, tombstones and compaction, one function per
//! kernel with the per-thread body as a loop body. It lets the table algorithm and the
//! orchestration be tested on machines without a GPU; the CUDA tests then compare the kernels
//! with [`ReferenceValidationCache`](super::ReferenceValidationCache) on the same streams.

use super::{CacheConfig, CacheError, TableBackend, ValidationCache, check_len, hash};

const EMPTY: u64 = 0;
const TOMB: u64 = u64::MAX;

/// A batch in host memory, as [`HostTable`] takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// Row ids, strictly increasing.
    pub rows: Vec<u64>,
    /// Version read from the store per row ([`version_word`](super::version_word)).
    pub read_versions: Vec<u64>,
    /// `rows.len() × width` floats, row-major.
    pub values: Vec<f32>,
    /// Set by validation: the version that replaced the row, `0` if the row was kept.
    pub replaced: Vec<u64>,
}

impl HostBatch {
    /// A batch with `replaced` all `0`.
    pub fn new(rows: Vec<u64>, read_versions: Vec<u64>, values: Vec<f32>) -> Self {
        let replaced = vec![0; rows.len()];
        HostBatch { rows, read_versions, values, replaced }
    }
}

/// The table in host memory.
#[derive(Debug, Clone)]
pub struct HostTable {
    width: usize,
    keys: Vec<u64>,
    versions: Vec<u64>,
    values: Vec<f32>,
}

/// The validation cache over the host port of the kernels.
pub type SimValidationCache = ValidationCache<HostTable>;

impl SimValidationCache {
    /// An empty cache sized by `config`.
    pub fn new_host(config: CacheConfig) -> Result<Self, CacheError> {
        let slots = config.checked_slots()?;
        let table = HostTable {
            width: config.width,
            keys: vec![EMPTY; slots],
            versions: vec![0; slots],
            values: vec![0.0; slots * config.width],
        };
        ValidationCache::with_backend(table, config)
    }
}

impl HostTable {
    fn mask(&self) -> u64 {
        self.keys.len() as u64 - 1
    }

    /// The slot holding `row`, probing like `vc_find` in the kernel source.
    fn find(&self, row: u64) -> Option<usize> {
        let key = row + 1;
        let mut s = hash(row) & self.mask();
        for _ in 0..self.keys.len() {
            let k = self.keys[s as usize];
            if k == EMPTY {
                return None;
            }
            if k == key {
                return Some(s as usize);
            }
            s = (s + 1) & self.mask();
        }
        None
    }

    /// The slot to write `row` into, claiming an empty one like `vc_claim` (the kernel does the
    /// claim with `atomicCAS(EMPTY → key)`; tombstones are never reused before a rehash).
    fn claim(keys: &mut [u64], row: u64) -> Option<usize> {
        let key = row + 1;
        let mask = keys.len() as u64 - 1;
        let mut s = hash(row) & mask;
        for _ in 0..keys.len() {
            let k = &mut keys[s as usize];
            if *k == EMPTY {
                *k = key;
                return Some(s as usize);
            }
            if *k == key {
                return Some(s as usize);
            }
            s = (s + 1) & mask;
        }
        None
    }
}

impl TableBackend for HostTable {
    type Batch = HostBatch;
    type Error = CacheError;

    fn slots(&self) -> usize {
        self.keys.len()
    }

    fn width(&self) -> usize {
        self.width
    }

    fn rows<'b>(&self, batch: &'b HostBatch) -> &'b [u64] {
        &batch.rows
    }

    fn check_batch(&self, b: &HostBatch) -> Result<(), CacheError> {
        check_len("read versions", b.rows.len(), b.read_versions.len())?;
        check_len("replaced versions", b.rows.len(), b.replaced.len())?;
        check_len("values", b.rows.len() * self.width, b.values.len())
    }

    /// `vc_validate`: one block per batch row.
    fn validate(&mut self, b: &mut HostBatch, replace_equal: bool) -> Result<(), CacheError> {
        let w = self.width;
        for i in 0..b.rows.len() {
            let hit = self.find(b.rows[i]).filter(|&s| {
                let v = self.versions[s];
                v > b.read_versions[i] || (replace_equal && v == b.read_versions[i])
            });
            b.replaced[i] = hit.map_or(0, |s| self.versions[s]);
            if let Some(s) = hit {
                b.values[i * w..(i + 1) * w].copy_from_slice(&self.values[s * w..(s + 1) * w]);
            }
        }
        Ok(())
    }

    /// `vc_insert`: one block per batch row.
    fn insert(&mut self, b: &HostBatch, version: u64) -> Result<(), CacheError> {
        let w = self.width;
        for (i, &row) in b.rows.iter().enumerate() {
            // The orchestration keeps the load ≤ ½, so a slot always exists.
            let s = HostTable::claim(&mut self.keys, row)
                .ok_or(CacheError::BadSize("table full (orchestration bug)"))?;
            self.versions[s] = version;
            self.values[s * w..(s + 1) * w].copy_from_slice(&b.values[i * w..(i + 1) * w]);
        }
        Ok(())
    }

    /// `vc_evict`: one thread per slot.
    fn evict(&mut self, bound: u64) -> Result<(), CacheError> {
        for s in 0..self.keys.len() {
            let k = self.keys[s];
            if k != EMPTY && k != TOMB && self.versions[s] <= bound {
                self.keys[s] = TOMB;
            }
        }
        Ok(())
    }

    fn clear(&mut self) -> Result<(), CacheError> {
        self.keys.fill(EMPTY);
        Ok(())
    }

    /// Clear the spare table, then `vc_rehash`: one block per old slot.
    fn rehash(&mut self) -> Result<(), CacheError> {
        let w = self.width;
        let mut keys = vec![EMPTY; self.keys.len()];
        let mut versions = vec![0; self.keys.len()];
        let mut values = vec![0.0; self.values.len()];
        for s in 0..self.keys.len() {
            let k = self.keys[s];
            if k == EMPTY || k == TOMB {
                continue;
            }
            let t = HostTable::claim(&mut keys, k - 1)
                .ok_or(CacheError::BadSize("table full (orchestration bug)"))?;
            versions[t] = self.versions[s];
            values[t * w..(t + 1) * w].copy_from_slice(&self.values[s * w..(s + 1) * w]);
        }
        self.keys = keys;
        self.versions = versions;
        self.values = values;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ReferenceValidationCache;
    use ordo::engine::{BatchRows, RowBlock};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// One step of a random device-stage stream.
    #[derive(Debug, Clone)]
    enum Op {
        /// Validate then insert a batch of these rows (deduplicated and sorted), reading
        /// versions `lag` batches old.
        Step { rows: Vec<u64>, lag: u64 },
        /// Evict with STE this far behind the next ts.
        Evict { behind: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (prop::collection::vec(0u64..40, 0..8), 0u64..4)
                .prop_map(|(rows, lag)| Op::Step { rows, lag }),
            1 => (0u64..5).prop_map(|behind| Op::Evict { behind }),
        ]
    }

    /// Run `ops` on the port and the reference; compare every validation and every error.
    fn run(ops: &[Op], capacity: usize) -> Result<(), TestCaseError> {
        let config = CacheConfig { width: 2, capacity };
        let mut sim = SimValidationCache::new_host(config).unwrap();
        let mut reference = ReferenceValidationCache::new(config).unwrap();
        // The engine's CPU cache (no capacity): fed only the inserts the others accepted.
        let mut engine = ordo::validation_cache::CpuValidationCache::new();
        let mut ts = 0u64;
        for op in ops {
            match op {
                Op::Step { rows, lag } => {
                    let mut rows = rows.clone();
                    rows.sort_unstable();
                    rows.dedup();
                    // A read version: the write of some older batch, or the initial value.
                    let read: Vec<u64> =
                        rows.iter().map(|r| (ts + r % 3).saturating_sub(*lag + r % 2)).collect();
                    let values: Vec<f32> =
                        rows.iter().flat_map(|&r| [r as f32, -(r as f32)]).collect();
                    let mut b = HostBatch::new(rows.clone(), read.clone(), values.clone());
                    let mut want = values.clone();
                    sim.validate(&mut b).unwrap();
                    let replaced = reference.validate(&rows, &read, &mut want).unwrap();
                    prop_assert_eq!(&b.replaced, &replaced);
                    prop_assert_eq!(&b.values, &want);
                    let read_ts: Vec<Option<u64>> =
                        read.iter().map(|&v| v.checked_sub(1)).collect();
                    let mut engine_values = values.clone();
                    let st = engine.validate(
                        &read_ts,
                        &mut BatchRows::new(&rows, 2, &mut engine_values).unwrap(),
                    );
                    prop_assert_eq!(&engine_values, &want);
                    prop_assert_eq!(
                        st.replaced as usize,
                        replaced.iter().filter(|&&v| v != 0).count()
                    );
                    // The step: mark the values with the ts.
                    b.values.iter_mut().for_each(|v| *v += ts as f32 * 100.0);
                    let got = sim.insert(&b, ts);
                    let want = reference.insert(&rows, ts, &b.values);
                    if want.is_ok() {
                        let block = RowBlock::new(rows.clone(), 2, b.values.clone()).unwrap();
                        engine.insert(ts, &Arc::new(block));
                    }
                    prop_assert_eq!(got, want);
                    ts += 1;
                }
                Op::Evict { behind } => {
                    let ste = ts.saturating_sub(*behind);
                    prop_assert_eq!(sim.evict(ste).unwrap(), reference.evict(ste));
                    engine.evict_before(ste);
                }
            }
            prop_assert_eq!(sim.len(), reference.len());
            // The engine's cache counts rows of held blocks (a superseded update of a row still
            // counts until its block is evicted), an upper bound on the distinct rows we hold.
            prop_assert!(sim.len() <= engine.len());
        }
        // Clearing empties the table; the next run may start its timestamps again.
        sim.clear().unwrap();
        prop_assert!(sim.is_empty());
        let mut b = HostBatch::new(vec![1], vec![0], vec![0.0; 2]);
        sim.validate(&mut b).unwrap();
        prop_assert_eq!(&b.replaced, &vec![0]);
        sim.insert(&b, 0).unwrap();
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// The port of the kernels (with compaction and overflow checks) behaves exactly like the
        /// reference on random streams, including which inserts overflow, and validates like
        /// the engine's CPU cache.
        #[test]
        fn port_matches_reference(ops in prop::collection::vec(op(), 1..60), cap in 4usize..24) {
            run(&ops, cap)?;
        }
    }

    /// The host port on the streams of `tests/cuda_cache.rs` (same generator and parameters):
    /// the overflow case does overflow and the others do not, so the GPU test's premises hold.
    #[test]
    fn gpu_test_streams_have_the_intended_shape() {
        use crate::workload::{Rng, random_stream};
        let overflows = |seed: u64, width: usize, capacity: usize, lag: u64| {
            let config = CacheConfig { width, capacity };
            let mut sim = SimValidationCache::new_host(config).unwrap();
            let mut cpu = ReferenceValidationCache::new(config).unwrap();
            let mut n = 0;
            for (ts, st) in random_stream(&mut Rng::new(seed), 300, 24, 400, lag).iter().enumerate()
            {
                assert_eq!(sim.evict(st.ste).unwrap(), cpu.evict(st.ste));
                let vals = vec![ts as f32; st.rows.len() * width];
                let mut b = HostBatch::new(st.rows.clone(), st.read_versions.clone(), vals.clone());
                sim.validate(&mut b).unwrap();
                let got = sim.insert(&b, ts as u64);
                assert_eq!(got, cpu.insert(&st.rows, ts as u64, &vals));
                n += usize::from(got.is_err());
            }
            n
        };
        for (seed, width) in [(1, 1), (2, 3), (3, 64), (4, 129)] {
            assert_eq!(overflows(seed, width, 8 * 24, 8), 0);
        }
        assert!(overflows(9, 4, 40, 6) > 0);
        assert_eq!(overflows(10, 2, 2 * 24, 1), 0);
    }

    #[test]
    fn validation_replaces_only_strictly_newer_entries() {
        let config = CacheConfig { width: 1, capacity: 4 };
        let mut sim = SimValidationCache::new_host(config).unwrap();
        sim.insert(&HostBatch::new(vec![1, 2], vec![0, 0], vec![10.0, 20.0]), 4).unwrap();
        // Row 1 read version 5 = ts 4 (same version: no replacement); row 2 read ts 3.
        let mut b = HostBatch::new(vec![1, 2, 3], vec![5, 4, 0], vec![1.0, 2.0, 3.0]);
        sim.validate(&mut b).unwrap();
        assert_eq!(b.values, [1.0, 20.0, 3.0]);
        assert_eq!(b.replaced, [0, 5, 0]);
    }

    #[test]
    fn overflow_is_reported_before_anything_changes() {
        let config = CacheConfig { width: 1, capacity: 2 };
        let mut sim = SimValidationCache::new_host(config).unwrap();
        sim.insert(&HostBatch::new(vec![1, 2], vec![0, 0], vec![1.0, 2.0]), 0).unwrap();
        let err = sim.insert(&HostBatch::new(vec![3], vec![0], vec![3.0]), 1).unwrap_err();
        assert_eq!(err, CacheError::Overflow { live: 2, incoming: 1, capacity: 2 });
        // Re-inserting live rows needs no room; after evicting ts 0 there is room again.
        sim.insert(&HostBatch::new(vec![1, 2], vec![0, 0], vec![5.0, 6.0]), 1).unwrap();
        assert_eq!(sim.evict(2).unwrap(), 2);
        sim.insert(&HostBatch::new(vec![3], vec![0], vec![3.0]), 2).unwrap();
        assert_eq!(sim.len(), 1);
    }

    #[test]
    fn tombstones_trigger_compaction_and_keep_lookups_right() {
        // capacity 2 → 4 slots; evictions leave tombstones that force rehashes.
        let config = CacheConfig { width: 1, capacity: 2 };
        let mut sim = SimValidationCache::new_host(config).unwrap();
        for ts in 0..50u64 {
            let rows = vec![ts % 7, 7 + ts % 5];
            let b = HostBatch::new(rows.clone(), vec![0, 0], vec![ts as f32; 2]);
            sim.insert(&b, ts).unwrap();
            let mut probe = HostBatch::new(rows, vec![0, 0], vec![-1.0; 2]);
            sim.validate(&mut probe).unwrap();
            assert_eq!(probe.values, [ts as f32; 2], "ts {ts}");
            assert_eq!(sim.evict(ts + 1).unwrap(), 2);
        }
        let tombstones = sim.backend().keys.iter().filter(|&&k| k == TOMB).count();
        assert!(tombstones <= 2, "compaction must have dropped old tombstones");
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let config = CacheConfig { width: 2, capacity: 4 };
        let mut sim = SimValidationCache::new_host(config).unwrap();
        let mut b = HostBatch::new(vec![2, 1], vec![0, 0], vec![0.0; 4]);
        assert_eq!(sim.validate(&mut b), Err(CacheError::RowsNotSorted { index: 1 }));
        let b = HostBatch::new(vec![1], vec![0], vec![0.0; 3]);
        assert!(matches!(sim.insert(&b, 0), Err(CacheError::LengthMismatch { .. })));
        let b = HostBatch::new(vec![u64::MAX], vec![0], vec![0.0; 2]);
        assert!(matches!(sim.insert(&b, 0), Err(CacheError::RowIdTooLarge { .. })));
        let b = HostBatch::new(vec![1], vec![0], vec![0.0; 2]);
        sim.insert(&b, 3).unwrap();
        assert_eq!(sim.insert(&b, 3), Err(CacheError::TsNotIncreasing { ts: 3, last: 3 }));
        assert_eq!(
            CacheConfig::for_in_flight(usize::MAX, 2, 1),
            Err(CacheError::BadSize("live_batches × rows_per_batch overflows"))
        );
    }
}
