//! Staleness telemetry for parameterized nodes: how many updates a node applied between an
//! instance's forward read of its parameters and the update that applies that instance's
//! gradient (0 in synchronous training; at most about `max_active_keys − 1` per update
//! interval with asynchrony).

use ordo::engine::STALENESS_BUCKETS;

/// A histogram of staleness over gradients, bucketed like ordo's engine
/// [`Progress`](ordo::engine::Progress): 0, 1, 2–3, 4–7, …, ≥ 2^(`STALENESS_BUCKETS` − 2).
///
/// ```
/// let mut h = ordo_mp::staleness::StalenessHistogram::default();
/// h.record(0);
/// h.record(3);
/// assert_eq!(h.buckets()[0], 1);
/// assert_eq!(h.buckets()[2], 1);
/// assert_eq!(h.max(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StalenessHistogram {
    buckets: [u64; STALENESS_BUCKETS],
    max: u64,
    sum: u64,
}

impl StalenessHistogram {
    /// Count one gradient applied `gap` updates after its forward read.
    pub fn record(&mut self, gap: u64) {
        let b = if gap == 0 { 0 } else { (gap.ilog2() as usize + 1).min(STALENESS_BUCKETS - 1) };
        self.buckets[b] += 1;
        self.max = self.max.max(gap);
        self.sum += gap;
    }

    /// Gradients per bucket.
    pub fn buckets(&self) -> &[u64; STALENESS_BUCKETS] {
        &self.buckets
    }

    /// Gradients counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The largest staleness seen.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Mean staleness (0 when nothing was counted).
    pub fn mean(&self) -> f64 {
        let n = self.count();
        if n == 0 { 0.0 } else { self.sum as f64 / n as f64 }
    }

    /// The counts added since `earlier` (a snapshot of the same histogram); the maximum stays
    /// this histogram's.
    pub fn since(&self, earlier: &StalenessHistogram) -> StalenessHistogram {
        StalenessHistogram {
            buckets: std::array::from_fn(|i| self.buckets[i] - earlier.buckets[i]),
            max: self.max,
            sum: self.sum - earlier.sum,
        }
    }

    /// Add `other`'s counts.
    pub fn merge(&mut self, other: &StalenessHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }
}
