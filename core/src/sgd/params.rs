//! The global model: parameters and momentum as atomic `f32` words (Hogwild, no UB).

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The global model `θ` and its momentum velocity `v`, shared by all workers.
///
/// Invariant (Hogwild semantics, paper 001 §3 and its ref. 14): every word is an atomic
/// `f32` (bit-cast `u32`), so concurrent copies and updates never tear a word and never
/// race in the Rust sense; they may interleave *between* words and lose concurrent updates
/// of the same word, which Hogwild SGD tolerates. All data accesses are `Relaxed`: no word
/// publishes another, and the joins / barriers of the runtime give the happens-before edges
/// where a complete view is needed (monitor snapshots between sync steps, final result).
///
/// `version` counts model updates: each update takes the next number
/// ([`take_version`](Self::take_version)); the runtime defines staleness from it (see
/// [`run_dispatched`](super::run_dispatched)).
#[derive(Debug)]
pub struct SharedParams {
    theta: Box<[AtomicU32]>,
    velocity: Box<[AtomicU32]>,
    version: AtomicU64,
}

impl SharedParams {
    /// A model holding `init`, with zero velocity and version 0.
    ///
    /// ```
    /// let p = ordo::sgd::SharedParams::new(&[1.0, 2.0]);
    /// p.apply(&[1.0, -1.0], 0.5, 0.0);
    /// assert_eq!(p.to_vec(), [0.5, 2.5]);
    /// assert_eq!(p.version(), 1);
    /// ```
    pub fn new(init: &[f32]) -> Self {
        Self {
            theta: init.iter().map(|x| AtomicU32::new(x.to_bits())).collect(),
            velocity: init.iter().map(|_| AtomicU32::new(0f32.to_bits())).collect(),
            version: AtomicU64::new(0),
        }
    }

    /// The number of parameters.
    pub fn len(&self) -> usize {
        self.theta.len()
    }

    /// `true` for a model with no parameters.
    pub fn is_empty(&self) -> bool {
        self.theta.is_empty()
    }

    /// The number of updates begun so far.
    pub fn version(&self) -> u64 {
        // Relaxed: a counter; the runtime reads it under its accept lock where order matters.
        self.version.load(Ordering::Relaxed)
    }

    /// Copy `θ` into `out` (`out.len() == self.len()`).
    pub fn copy_into(&self, out: &mut [f32]) {
        debug_assert_eq!(out.len(), self.theta.len());
        for (o, w) in out.iter_mut().zip(self.theta.iter()) {
            // Relaxed: Hogwild read, see the type's invariant.
            *o = f32::from_bits(w.load(Ordering::Relaxed));
        }
    }

    /// θ as a vector.
    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.len()];
        self.copy_into(&mut v);
        v
    }

    /// Apply one gradient with SGD + momentum (`v ← μ·v + g; θ ← θ − η·v`, word by word, Hogwild)
    /// and return the version number this update took.
    pub fn apply(&self, grad: &[f32], lr: f32, momentum: f32) -> u64 {
        let version = self.take_version();
        self.apply_range(0, grad, lr, momentum);
        version
    }

    /// Take the next version number without touching the words (the runtime takes it under its
    /// accept lock, then applies with [`apply_range`](Self::apply_range)).
    pub fn take_version(&self) -> u64 {
        // Relaxed: a ticket; uniqueness comes from the RMW, order from the runtime's accept lock.
        self.version.fetch_add(1, Ordering::Relaxed)
    }

    /// Apply `grad` to the words `start..start + grad.len()` (momentum update as in
    /// [`apply`](Self::apply)), without taking a version.
    pub fn apply_range(&self, start: usize, grad: &[f32], lr: f32, momentum: f32) {
        let end = start + grad.len();
        let words = self.theta[start..end].iter().zip(&self.velocity[start..end]);
        for ((t, v), g) in words.zip(grad) {
            // Relaxed loads/stores: Hogwild update, see the type's invariant (a concurrent
            // update of the same word may be lost; that is the accepted semantics).
            let vel = momentum * f32::from_bits(v.load(Ordering::Relaxed)) + g;
            v.store(vel.to_bits(), Ordering::Relaxed);
            let theta = f32::from_bits(t.load(Ordering::Relaxed)) - lr * vel;
            t.store(theta.to_bits(), Ordering::Relaxed);
        }
    }
}
