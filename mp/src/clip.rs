//! Gradient-norm clipping (Pascanu, Mikolov & Bengio 2013), the usual guard of a vanilla RNN
//! against exploding gradients: a parameterized node rescales its mean gradient before the
//! optimizer step when the gradient's norm exceeds a bound.

use crate::message::Payload;

/// The global L2 norm of `grads` (all of a node's parameters together).
///
/// ```
/// let g = [ndarray::arr2(&[[3.0f32]]), ndarray::arr2(&[[4.0f32]])];
/// assert_eq!(ordo_mp::clip::global_norm(&g), 5.0);
/// ```
pub fn global_norm(grads: &[Payload]) -> f32 {
    // Summed in f64 so the norm of a large layer does not lose the small entries.
    let sq: f64 = grads.iter().flat_map(|g| g.iter()).map(|&x| f64::from(x) * f64::from(x)).sum();
    sq.sqrt() as f32
}

/// The factor that clips `grads` to global norm `max_norm`: `Some(max_norm / norm)` when their
/// norm exceeds the bound (and is finite), `None` when they are left as they are. One pass
/// over the gradients, for a caller that scales a copy ([`crate::optimizer::OptState::step`]).
///
/// ```
/// let g = [ndarray::arr2(&[[3.0f32, 4.0]])];
/// assert_eq!(ordo_mp::clip::clip_factor(&g, 1.0), Some(0.2));
/// assert_eq!(ordo_mp::clip::clip_factor(&g, 5.0), None);
/// ```
pub fn clip_factor(grads: &[Payload], max_norm: f32) -> Option<f32> {
    let norm = global_norm(grads);
    (norm > max_norm && norm.is_finite()).then(|| max_norm / norm)
}

/// Clip `grads` to global norm at most `max_norm`.
///
/// Invariant (*clipping*): gradients whose global norm is at most `max_norm` are left
/// untouched, bit for bit; larger ones are all scaled by the one factor `max_norm / norm`, so
/// their direction is kept. Returns the factor applied (1 when untouched).
///
/// ```
/// let mut g = [ndarray::arr2(&[[3.0f32, 4.0]])];
/// assert_eq!(ordo_mp::clip::clip_global_norm(&mut g, 1.0), 0.2);
/// assert!((ordo_mp::clip::global_norm(&g) - 1.0).abs() < 1e-6);
/// ```
pub fn clip_global_norm(grads: &mut [Payload], max_norm: f32) -> f32 {
    let Some(factor) = clip_factor(grads, max_norm) else { return 1.0 };
    grads.iter_mut().for_each(|g| g.mapv_inplace(|x| x * factor));
    factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_gradient_is_scaled_to_the_bound_keeping_its_direction() {
        let mut g = vec![ndarray::arr2(&[[6.0f32, -8.0]]), ndarray::arr2(&[[0.0f32], [0.0]])];
        let f = clip_global_norm(&mut g, 2.0);
        assert!((f - 0.2).abs() < 1e-7);
        assert!((global_norm(&g) - 2.0).abs() < 1e-6);
        assert_eq!(g[0], ndarray::arr2(&[[6.0f32 * f, -8.0 * f]]));
    }

    #[test]
    fn a_small_gradient_is_left_bit_identical() {
        let orig = vec![ndarray::arr2(&[[0.1f32, -0.3], [1e-7, 0.7]])];
        let mut g = orig.clone();
        assert_eq!(clip_global_norm(&mut g, global_norm(&orig)), 1.0);
        let bits = |g: &[Payload]| g[0].iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g), bits(&orig));
    }
}
