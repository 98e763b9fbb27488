//! Orders of edge buckets for a buffer of `c` of `P` partitions, and what each costs in swaps.
//!
//! An edge bucket `(i, j)` holds the edges from partition `i` to partition `j`; an epoch trains
//! all `P²` buckets, and a bucket can train only while both its partitions are in the buffer.
//! A [`Plan`] is a sequence of buffer states: the first holds `c` partitions, each later one
//! swaps one partition out and one in, and each bucket is trained in exactly one state that
//! holds both its partitions.
//!
//! **The lower bound on swaps** ([`swap_lower_bound`]): every partition must enter the buffer
//! once (`swaps ≥ P − c`), and the `P(P−1)/2` unordered pairs of distinct partitions must each
//! meet in some state: the first state holds `c(c−1)/2` pairs and a swap brings one partition
//! next to `c − 1` others, so `swaps ≥ ⌈(P(P−1)/2 − c(c−1)/2) / (c − 1)⌉` (Marius' argument).
//!
//! Two orders:
//! * [`beta`]: Marius' BETA principle: fix `c − 1` partitions (the residents with pairs left,
//!   topped up by loading the partitions with the most pairs left) and cycle the last slot
//!   through every partition they have not met; repeat. Checked against a brute-force optimum
//!   for `P ≤ 6` (equal but at `P = 6, c = 3`: 7 vs 6) and against the bound at larger sizes
//!   (`P = 16, c = 4`: 42 swaps, bound 38; inside-out 96).
//! * [`inside_out`]: PyTorch-BigGraph's inside-out bucket order (bucket `(i, j)` by
//!   `max(i, j)`, the new partition's row and column together), run through the same buffer
//!   with the eviction that is optimal for a fixed sequence (the partition needed farthest
//!   ahead leaves): the baseline.

use std::collections::BTreeSet;

/// The edges from partition `src` to partition `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bucket {
    /// Partition of the edges' sources.
    pub src: usize,
    /// Partition of the edges' destinations.
    pub dst: usize,
}

/// One partition out of the buffer, another in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swap {
    /// The partition that leaves (written back if changed).
    pub evict: usize,
    /// The partition that enters (read from its file).
    pub load: usize,
}

/// One state of the buffer and the buckets trained in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferState {
    /// The swap that made this state from the previous one (`None` for the first state).
    pub swap: Option<Swap>,
    /// The partitions in the buffer, ascending.
    pub resident: Vec<usize>,
    /// The buckets trained in this state, in order; both partitions of each are resident.
    pub buckets: Vec<Bucket>,
}

/// A bad buffer geometry: checked before anything is planned or loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// No partitions.
    #[error("there must be at least one partition")]
    NoPartitions,
    /// A buffer larger than the number of partitions.
    #[error("a buffer of {buffer} partitions is larger than the {partitions} partitions")]
    BufferLargerThanPartitions {
        /// Buffer size asked for.
        buffer: usize,
        /// Partitions.
        partitions: usize,
    },
    /// A buffer of fewer than two partitions (with more than one partition): bucket `(i, j)`
    /// with `i ≠ j` needs both in memory.
    #[error("a buffer of {buffer} cannot hold both partitions of a bucket (at least 2)")]
    BufferTooSmall {
        /// Buffer size asked for.
        buffer: usize,
    },
}

/// An epoch's sequence of buffer states.
///
/// **Invariant** (checked by [`Plan::check`], kept by [`beta`] and [`inside_out`]): the first
/// state holds `min(c, P)` partitions, each later state differs from the one before by its
/// [`swap`](BufferState::swap), and every bucket of the `P × P` grid is trained exactly once,
/// in a state that holds both its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `P`.
    pub partitions: usize,
    /// `c`.
    pub buffer: usize,
    /// The states, in order.
    pub states: Vec<BufferState>,
}

/// What a plan moves per epoch, against the lower bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapCost {
    /// Swaps (states after the first).
    pub swaps: usize,
    /// Partitions read from disk: the first state's `c` and one per swap.
    pub loads: usize,
    /// [`swap_lower_bound`] of the geometry.
    pub lower_bound_swaps: usize,
}

impl SwapCost {
    /// Bytes read per epoch for partitions of `partition_bytes` bytes.
    pub fn bytes_read(&self, partition_bytes: u64) -> u64 {
        self.loads as u64 * partition_bytes
    }

    /// The fewest bytes any plan reads: the first state and the lower bound's swaps.
    pub fn lower_bound_bytes(&self, partition_bytes: u64, buffer: usize) -> u64 {
        (buffer + self.lower_bound_swaps) as u64 * partition_bytes
    }
}

pub(crate) fn check_geometry(partitions: usize, buffer: usize) -> Result<(), PlanError> {
    if partitions == 0 {
        return Err(PlanError::NoPartitions);
    }
    if buffer > partitions {
        return Err(PlanError::BufferLargerThanPartitions { buffer, partitions });
    }
    if buffer < 2 && partitions > 1 {
        return Err(PlanError::BufferTooSmall { buffer });
    }
    Ok(())
}

/// The fewest swaps any plan for `P` partitions and a buffer of `c` needs (module docs).
pub fn swap_lower_bound(partitions: usize, buffer: usize) -> Result<usize, PlanError> {
    check_geometry(partitions, buffer)?;
    if buffer >= partitions {
        return Ok(0);
    }
    let pairs = |n: usize| n * (n - 1) / 2;
    let by_pairs = (pairs(partitions) - pairs(buffer)).div_ceil(buffer - 1);
    Ok(by_pairs.max(partitions - buffer))
}

/// Buckets of the pairs `{a, b}` (both directions, or the one diagonal bucket) in a fixed order.
fn buckets_of_pair(a: usize, b: usize) -> impl Iterator<Item = Bucket> {
    let (lo, hi) = (a.min(b), a.max(b));
    let both = [Bucket { src: lo, dst: hi }, Bucket { src: hi, dst: lo }];
    both.into_iter().take(if lo == hi { 1 } else { 2 })
}

impl Plan {
    /// Swaps and loads per epoch, against the lower bound.
    pub fn cost(&self) -> SwapCost {
        let swaps = self.states.len().saturating_sub(1);
        SwapCost {
            swaps,
            loads: self.buffer.min(self.partitions) + swaps,
            lower_bound_swaps: swap_lower_bound(self.partitions, self.buffer).unwrap_or(0),
        }
    }

    /// The buckets in training order.
    pub fn buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.states.iter().flat_map(|s| s.buckets.iter().copied())
    }

    /// Check the [`Plan`] invariant; the message says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let (p, c) = (self.partitions, self.buffer.min(self.partitions));
        let mut seen = vec![false; p * p];
        let mut prev: Option<&BufferState> = None;
        for (k, state) in self.states.iter().enumerate() {
            if state.resident.len() != c || state.resident.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("state {k}: resident {:?} is not {c} sorted", state.resident));
            }
            if let Some(prev) = prev {
                let Some(Swap { evict, load }) = state.swap else {
                    return Err(format!("state {k}: no swap"));
                };
                let mut expect: Vec<usize> =
                    prev.resident.iter().copied().filter(|&x| x != evict).collect();
                expect.push(load);
                expect.sort_unstable();
                if !prev.resident.contains(&evict) || expect != state.resident {
                    return Err(format!("state {k}: swap {evict}->{load} does not lead here"));
                }
            }
            for b in &state.buckets {
                if !state.resident.contains(&b.src) || !state.resident.contains(&b.dst) {
                    return Err(format!("state {k}: bucket {b:?} not resident"));
                }
                if std::mem::replace(&mut seen[b.src * p + b.dst], true) {
                    return Err(format!("bucket {b:?} trained twice"));
                }
            }
            prev = Some(state);
        }
        match seen.iter().position(|s| !s) {
            Some(i) => Err(format!("bucket ({}, {}) never trained", i / p, i % p)),
            None => Ok(()),
        }
    }
}

/// Pairs `{a, b}` (`a ≤ b`) still to meet, as a `P × P` upper-triangle bitmap.
struct Pending {
    p: usize,
    open: Vec<bool>,
}

impl Pending {
    fn new(p: usize) -> Self {
        Pending { p, open: vec![true; p * p] }
    }
    fn is_open(&self, a: usize, b: usize) -> bool {
        self.open[a.min(b) * self.p + a.max(b)]
    }
    /// Close every open pair within `resident`, returning their buckets in a fixed order.
    fn close_within(&mut self, resident: &[usize]) -> Vec<Bucket> {
        let mut out = Vec::new();
        for (x, &a) in resident.iter().enumerate() {
            for &b in &resident[x..] {
                if self.is_open(a, b) {
                    self.open[a.min(b) * self.p + a.max(b)] = false;
                    out.extend(buckets_of_pair(a, b));
                }
            }
        }
        out
    }
    fn left(&self, a: usize) -> usize {
        (0..self.p).filter(|&b| self.is_open(a, b)).count()
    }
    fn any(&self) -> bool {
        self.open.iter().enumerate().any(|(i, &o)| o && i / self.p <= i % self.p)
    }
}

/// The BETA-style plan for `partitions` and a buffer of `buffer` (module docs).
///
/// ```
/// use ordo::partition::ordering::{beta, swap_lower_bound};
/// let plan = beta(8, 4).unwrap();
/// plan.check().unwrap();
/// assert!(plan.cost().swaps >= swap_lower_bound(8, 4).unwrap());
/// ```
pub fn beta(partitions: usize, buffer: usize) -> Result<Plan, PlanError> {
    check_geometry(partitions, buffer)?;
    let c = buffer.min(partitions).max(1);
    let mut pending = Pending::new(partitions);
    let mut resident: Vec<usize> = (0..c).collect();
    let mut states = vec![BufferState {
        swap: None,
        buckets: pending.close_within(&resident),
        resident: resident.clone(),
    }];
    let mut swap_to =
        |resident: &mut Vec<usize>, pending: &mut Pending, evict: usize, load: usize| {
            resident.retain(|&x| x != evict);
            resident.push(load);
            resident.sort_unstable();
            let buckets = pending.close_within(resident);
            states.push(BufferState {
                swap: Some(Swap { evict, load }),
                resident: resident.clone(),
                buckets,
            });
        };
    while pending.any() {
        // The fixed set: the residents that still have pairs to meet (most first), filled up to
        // c − 1 by loading the partitions with the most pairs left, each over the resident
        // with the fewest.
        let mut fixed: Vec<usize> =
            resident.iter().copied().filter(|&r| pending.left(r) > 0).collect();
        fixed.sort_by_key(|&r| (std::cmp::Reverse(pending.left(r)), r));
        fixed.truncate(c - 1);
        while fixed.len() < c - 1 {
            let Some(load) = (0..partitions)
                .filter(|x| !resident.contains(x) && pending.left(*x) > 0)
                .max_by_key(|&x| (pending.left(x), std::cmp::Reverse(x)))
            else {
                break;
            };
            let evict = *resident
                .iter()
                .filter(|r| !fixed.contains(r))
                .min_by_key(|&&r| (pending.left(r), r))
                .expect("fewer than c − 1 fixed leaves a slot");
            swap_to(&mut resident, &mut pending, evict, load);
            fixed.push(load);
        }
        // Cycle the last slot through every partition the fixed set has not met.
        let cycle: Vec<usize> = (0..partitions)
            .filter(|x| !resident.contains(x) && fixed.iter().any(|&f| pending.is_open(f, *x)))
            .collect();
        let mut slot = *resident
            .iter()
            .filter(|r| !fixed.contains(r))
            .min_by_key(|&&r| (pending.left(r), r))
            .expect("c − 1 fixed leaves a slot");
        for x in cycle {
            swap_to(&mut resident, &mut pending, slot, x);
            slot = x;
        }
    }
    Ok(Plan { partitions, buffer, states })
}

/// PyTorch-BigGraph's inside-out bucket sequence: for `k = 0, 1, …`, the buckets whose larger
/// partition is `k`: `(k, 0), (0, k), (k, 1), (1, k), …, (k, k)`.
pub fn inside_out_buckets(partitions: usize) -> Vec<Bucket> {
    let mut out = Vec::with_capacity(partitions * partitions);
    for k in 0..partitions {
        for i in 0..k {
            out.push(Bucket { src: k, dst: i });
            out.push(Bucket { src: i, dst: k });
        }
        out.push(Bucket { src: k, dst: k });
    }
    out
}

/// The inside-out sequence run through a buffer of `buffer` (module docs): the baseline.
pub fn inside_out(partitions: usize, buffer: usize) -> Result<Plan, PlanError> {
    check_geometry(partitions, buffer)?;
    let c = buffer.min(partitions).max(1);
    let seq = inside_out_buckets(partitions);
    let mut resident: BTreeSet<usize> = BTreeSet::new();
    for b in &seq {
        for x in [b.src, b.dst] {
            if resident.len() < c {
                resident.insert(x);
            }
        }
    }
    let mut states = vec![BufferState {
        swap: None,
        resident: resident.iter().copied().collect(),
        buckets: Vec::new(),
    }];
    for (k, b) in seq.iter().enumerate() {
        for need in [b.src, b.dst] {
            if resident.contains(&need) {
                continue;
            }
            // Belady: evict the resident not needed by this bucket whose next use is farthest.
            let next_use = |x: usize| {
                seq[k..].iter().position(|n| n.src == x || n.dst == x).unwrap_or(usize::MAX)
            };
            let evict = *resident
                .iter()
                .filter(|&&x| x != b.src && x != b.dst)
                .max_by_key(|&&x| (next_use(x), x))
                .expect("c ≥ 2");
            resident.remove(&evict);
            resident.insert(need);
            states.push(BufferState {
                swap: Some(Swap { evict, load: need }),
                resident: resident.iter().copied().collect(),
                buckets: Vec::new(),
            });
        }
        states.last_mut().expect("first state").buckets.push(*b);
    }
    Ok(Plan { partitions, buffer, states })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, VecDeque};

    /// The fewest swaps of any plan, by breadth-first search over (buffer, pairs met).
    fn brute_force_swaps(p: usize, c: usize) -> usize {
        let pair_bit = |a: usize, b: usize| 1u64 << (a.min(b) * p + a.max(b));
        let all: u64 = (0..p)
            .flat_map(|a| (a..p).map(move |b| (a, b)))
            .fold(0, |m, (a, b)| m | pair_bit(a, b));
        let close = |set: u32, met: u64| {
            let mut met = met;
            for a in 0..p {
                for b in a..p {
                    if set & (1 << a) != 0 && set & (1 << b) != 0 {
                        met |= pair_bit(a, b);
                    }
                }
            }
            met
        };
        let mut dist: HashMap<(u32, u64), usize> = HashMap::new();
        let mut queue = VecDeque::new();
        // Every first buffer of c partitions.
        for set in 0u32..(1 << p) {
            if set.count_ones() as usize == c {
                let key = (set, close(set, 0));
                dist.insert(key, 0);
                queue.push_back(key);
            }
        }
        while let Some((set, met)) = queue.pop_front() {
            let d = dist[&(set, met)];
            if met == all {
                return d;
            }
            for out in (0..p).filter(|&x| set & (1 << x) != 0) {
                for inn in (0..p).filter(|&x| set & (1 << x) == 0) {
                    let next = set & !(1 << out) | (1 << inn);
                    let key = (next, close(next, met));
                    if let std::collections::hash_map::Entry::Vacant(e) = dist.entry(key) {
                        e.insert(d + 1);
                        queue.push_back(key);
                    }
                }
            }
        }
        unreachable!("every pair can be met")
    }

    #[test]
    fn lower_bound_is_below_the_brute_force_optimum_and_beta_reaches_it_but_once() {
        for p in 2..=6 {
            for c in 2..=p {
                let opt = brute_force_swaps(p, c);
                let bound = swap_lower_bound(p, c).unwrap();
                let b = beta(p, c).unwrap();
                b.check().unwrap_or_else(|e| panic!("beta({p}, {c}): {e}"));
                let io = inside_out(p, c).unwrap();
                io.check().unwrap_or_else(|e| panic!("inside_out({p}, {c}): {e}"));
                assert!(bound <= opt, "P={p} c={c}: bound {bound} > optimum {opt}");
                assert!(opt <= b.cost().swaps, "P={p} c={c}: beta beats the optimum?");
                // The optimum on every small geometry but P = 6, c = 3 (7 vs 6).
                assert!(
                    b.cost().swaps <= opt + usize::from((p, c) == (6, 3)),
                    "P={p} c={c}: beta {} vs optimum {opt}",
                    b.cost().swaps
                );
                assert!(
                    b.cost().swaps <= io.cost().swaps,
                    "P={p} c={c}: beta worse than inside-out"
                );
            }
        }
    }

    #[test]
    fn known_bounds_and_counts() {
        // c = 2: every swap meets one pair: C(P,2) − 1 swaps, and both orders reach it.
        assert_eq!(swap_lower_bound(4, 2), Ok(5));
        assert_eq!(beta(4, 2).unwrap().cost().swaps, 5);
        // c = P: nothing to swap.
        assert_eq!(
            beta(5, 5).unwrap().cost(),
            SwapCost { swaps: 0, loads: 5, lower_bound_swaps: 0 }
        );
        assert_eq!(swap_lower_bound(16, 4), Ok(38));
        // Larger geometries: BETA within 25% of the lower bound, inside-out far from it
        // (P = 16, c = 4: 42 and 96 against 38).
        for (p, c) in [(8, 4), (16, 4), (16, 8), (32, 8)] {
            let (bound, b) = (swap_lower_bound(p, c).unwrap(), beta(p, c).unwrap().cost().swaps);
            let io = inside_out(p, c).unwrap().cost().swaps;
            assert!(
                4 * b <= 5 * bound && b < io,
                "P={p} c={c}: bound {bound} beta {b} inside-out {io}"
            );
        }
        let cost = beta(16, 4).unwrap().cost();
        assert_eq!(cost.bytes_read(10), (4 + cost.swaps as u64) * 10);
        assert_eq!(cost.lower_bound_bytes(10, 4), 42 * 10);
    }

    #[test]
    fn bad_geometry_is_an_error() {
        assert_eq!(
            beta(4, 5).unwrap_err(),
            PlanError::BufferLargerThanPartitions { buffer: 5, partitions: 4 }
        );
        assert_eq!(inside_out(4, 1).unwrap_err(), PlanError::BufferTooSmall { buffer: 1 });
        assert_eq!(swap_lower_bound(0, 0).unwrap_err(), PlanError::NoPartitions);
        assert!(beta(1, 1).unwrap().check().is_ok());
    }

    #[test]
    fn check_catches_a_broken_plan() {
        let mut plan = beta(4, 2).unwrap();
        plan.states.last_mut().unwrap().buckets.pop();
        assert!(plan.check().unwrap_err().contains("never trained"));
        let mut plan = beta(4, 2).unwrap();
        plan.states[1].swap = Some(Swap { evict: 3, load: 2 });
        assert!(plan.check().is_err());
    }
}
