//! Local sampling (paper 002 §3): draw negatives among the keys a node holds locally (owned or
//! replicated), so sampling causes no remote access.

use crate::message::Key;
use crate::node::Node;
use crate::rng::index;

/// Up to `n` keys drawn uniformly (with replacement) from those `node` holds locally and that
/// `accept` admits (e.g. "is an entity, not a relation"); fewer only if none is held.
///
/// ```
/// use ordo_pm::{Node, PmMode, sampling::sample_local};
/// let node = Node::new(0, 2, 10, 1, PmMode::Static, |_| vec![0.0]).unwrap();
/// let mut rng = ordo_pm::rng::seeded(1);
/// let s = sample_local(&node, 5, &mut rng, |_| true);
/// assert_eq!(s.len(), 5);
/// assert!(s.iter().all(|k| k % 2 == 0)); // node 0 owns the even keys
/// ```
pub fn sample_local<R: rand::Rng + ?Sized>(
    node: &Node,
    n: usize,
    rng: &mut R,
    accept: impl Fn(Key) -> bool,
) -> Vec<Key> {
    let mut pool: Vec<Key> = node.local_keys().filter(|&k| accept(k)).collect();
    if pool.is_empty() {
        return Vec::new();
    }
    pool.sort_unstable(); // HashMap order is random per process: keep draws seed-determined
    (0..n).map(|_| pool[index(rng, pool.len())]).collect()
}
