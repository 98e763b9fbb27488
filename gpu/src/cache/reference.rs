//! The reference validation cache: a hash map, written for obviousness, that defines the
//! semantics every table backend must match (see the module docs of [`crate::cache`]).

use super::{CacheConfig, CacheError, MAX_TS, check_len, check_rows};
use std::collections::HashMap;

/// The validation cache's semantics as a plain hash map row → (ts, values).
///
/// ```
/// use ordo_gpu::cache::{CacheConfig, ReferenceValidationCache};
/// let mut c = ReferenceValidationCache::new(CacheConfig { width: 1, capacity: 4 }).unwrap();
/// c.insert(&[3, 5], 0, &[1.0, 2.0]).unwrap();
/// let mut vals = [9.0, 9.0];
/// // Row 3 read the initial value (version 0), row 5 already read the write of ts 0 (version 1).
/// let replaced = c.validate(&[3, 5], &[0, 1], &mut vals).unwrap();
/// assert_eq!((replaced, vals), (vec![1, 0], [1.0, 9.0])); // replaced by version 1 = ts 0
/// assert_eq!(c.evict(1), 2); // ts 0 < STE 1
/// ```
#[derive(Debug, Clone)]
pub struct ReferenceValidationCache {
    config: CacheConfig,
    entries: HashMap<u64, (u64, Vec<f32>)>,
    last_ts: Option<u64>,
}

impl ReferenceValidationCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Result<Self, CacheError> {
        if config.capacity == 0 || config.width == 0 {
            return Err(CacheError::BadSize("capacity and width must be positive"));
        }
        Ok(ReferenceValidationCache { config, entries: HashMap::new(), last_ts: None })
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no live entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cached `(ts, values)` of `row`, if live.
    pub fn get(&self, row: u64) -> Option<(u64, &[f32])> {
        self.entries.get(&row).map(|(ts, v)| (*ts, v.as_slice()))
    }

    /// For each row: if the cache holds a version newer than `read_versions[i]`
    /// (see [`version_word`](super::version_word)), copy the cached values over row `i` of
    /// `values`. Returns, per row, the version that replaced it (`ts + 1`), `0` if kept.
    pub fn validate(
        &self,
        rows: &[u64],
        read_versions: &[u64],
        values: &mut [f32],
    ) -> Result<Vec<u64>, CacheError> {
        let w = self.config.width;
        check_rows(rows)?;
        check_len("read versions", rows.len(), read_versions.len())?;
        check_len("values", rows.len() * w, values.len())?;
        let mut replaced = vec![0; rows.len()];
        for (i, row) in rows.iter().enumerate() {
            if let Some((ts, cached)) = self.entries.get(row)
                && ts + 1 > read_versions[i]
            {
                values[i * w..(i + 1) * w].copy_from_slice(cached);
                replaced[i] = ts + 1;
            }
        }
        Ok(replaced)
    }

    /// Put every row with `ts` (timestamps strictly increase across inserts).
    pub fn insert(&mut self, rows: &[u64], ts: u64, values: &[f32]) -> Result<(), CacheError> {
        let w = self.config.width;
        check_rows(rows)?;
        check_len("values", rows.len() * w, values.len())?;
        if ts > MAX_TS {
            return Err(CacheError::TsTooLarge { ts });
        }
        if let Some(last) = self.last_ts
            && ts <= last
        {
            return Err(CacheError::TsNotIncreasing { ts, last });
        }
        let incoming = rows.iter().filter(|r| !self.entries.contains_key(r)).count();
        if self.entries.len() + incoming > self.config.capacity {
            return Err(CacheError::Overflow {
                live: self.entries.len(),
                incoming,
                capacity: self.config.capacity,
            });
        }
        for (i, &row) in rows.iter().enumerate() {
            self.entries.insert(row, (ts, values[i * w..(i + 1) * w].to_vec()));
        }
        self.last_ts = Some(ts);
        Ok(())
    }

    /// Drop every entry with `ts < ste`; returns how many.
    pub fn evict(&mut self, ste: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, (ts, _)| *ts >= ste);
        before - self.entries.len()
    }
}
