//! The optimizers of the KGE step: Adagrad, row-wise Adagrad, PyTorch-BigGraph's pair of the two
//! and Adam, sparse (only the rows a batch uses move).
//!
//! **State travels with the row.** An entity row in the engine's store is
//! `[embedding (dim) | optimizer state (state_width(dim))]`, so the state is read, validated and
//! written back with the embedding, and OAC's equivalence to the synchronous replay covers it.
//! Adam keeps its step count per row (the row's own number of updates), so no global counter
//! leaks between batches that share no row.

/// Adagrad's denominator guard (`--device cuda` passes the same to ordo-gpu's kernels).
pub const ADAGRAD_EPS: f32 = 1e-10;
/// Adam's first-moment decay.
pub const ADAM_BETA1: f32 = 0.9;
/// Adam's second-moment decay.
pub const ADAM_BETA2: f32 = 0.999;
/// Adam's denominator guard.
pub const ADAM_EPS: f32 = 1e-8;

/// The optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// Adagrad (Duchi et al. 2011): `acc += g²; w −= lr·g/(√acc + ε)`.
    #[default]
    Adagrad,
    /// Adam (Kingma & Ba 2015) with bias correction by the row's own step count.
    Adam,
    /// Row-wise Adagrad, PyTorch-BigGraph's optimizer of embeddings (Lerer et al. 2019): one
    /// sum per row, of the mean squared gradient: `acc += mean(g²); w −= lr·g/(√acc + ε)`. Its
    /// state is one float instead of `dim`, so a row moved through the store is about half as
    /// many bytes as with [`Adagrad`](Optimizer::Adagrad).
    #[value(name = "row-adagrad")]
    #[serde(rename = "row-adagrad")]
    RowAdagrad,
    /// PyTorch-BigGraph 1.0's pair: row-wise Adagrad (as [`RowAdagrad`](Optimizer::RowAdagrad))
    /// for the entity rows and element-wise Adagrad (as [`Adagrad`](Optimizer::Adagrad)) for
    /// the relation parameters, as `torchbiggraph.train`'s `make_optimizer` gives its
    /// embeddings `RowAdagrad` and the model's other parameters torch's `Adagrad`. An entity
    /// row is `dim + 1` floats, as with row-wise Adagrad.
    #[value(name = "pbg-adagrad")]
    #[serde(rename = "pbg-adagrad")]
    PbgAdagrad,
}

impl Optimizer {
    /// The optimizer of the relation parameters: element-wise Adagrad for
    /// [`PbgAdagrad`](Optimizer::PbgAdagrad), the optimizer itself for every other. The
    /// relation side sizes its state and updates with this one, the entity rows with `self`.
    pub fn for_relations(self) -> Optimizer {
        match self {
            Optimizer::PbgAdagrad => Optimizer::Adagrad,
            other => other,
        }
    }

    /// Floats of state per parameter row of `dim` floats: Adagrad's sums (`dim`), Adam's two
    /// moments and step count (`2·dim + 1`), row-wise Adagrad's one sum (and PBG's pair's, for
    /// an entity row; its relations' is [`for_relations`](Self::for_relations)'s).
    pub fn state_width(self, dim: usize) -> usize {
        self.checked_state_width(dim as u64)
            .and_then(|w| usize::try_from(w).ok())
            .expect("a dimension whose tables fit in memory (checked before they are sized)")
    }

    /// [`state_width`](Self::state_width) without overflow: `None` where it exceeds `u64`. The
    /// memory estimate sizes a run's tables with it before any exists.
    pub fn checked_state_width(self, dim: u64) -> Option<u64> {
        match self {
            Optimizer::Adagrad => Some(dim),
            Optimizer::Adam => dim.checked_mul(2)?.checked_add(1),
            Optimizer::RowAdagrad | Optimizer::PbgAdagrad => Some(1),
        }
    }

    /// One update of `w` (a row of `dim` floats) with gradient `g` and state `state`
    /// (`state_width(dim)` floats). [`PbgAdagrad`](Optimizer::PbgAdagrad) updates an entity row
    /// here (row-wise); a relation row goes through [`for_relations`](Self::for_relations).
    pub fn update(self, w: &mut [f32], state: &mut [f32], g: &[f32], lr: f32) {
        match self {
            Optimizer::Adagrad => {
                for ((w, a), g) in w.iter_mut().zip(state.iter_mut()).zip(g) {
                    *a += g * g;
                    *w -= lr * g / (a.sqrt() + ADAGRAD_EPS);
                }
            }
            Optimizer::Adam => {
                let dim = w.len();
                let (m, rest) = state.split_at_mut(dim);
                let (v, t) = rest.split_at_mut(dim);
                // The count is a float so the row stays one f32 slice; exact up to 2²⁴ updates.
                t[0] += 1.0;
                let step = t[0] as i32;
                let c1 = 1.0 - ADAM_BETA1.powi(step);
                let c2 = 1.0 - ADAM_BETA2.powi(step);
                for j in 0..dim {
                    m[j] = ADAM_BETA1 * m[j] + (1.0 - ADAM_BETA1) * g[j];
                    v[j] = ADAM_BETA2 * v[j] + (1.0 - ADAM_BETA2) * g[j] * g[j];
                    w[j] -= lr * (m[j] / c1) / ((v[j] / c2).sqrt() + ADAM_EPS);
                }
            }
            Optimizer::RowAdagrad | Optimizer::PbgAdagrad => {
                // Summed in index order: the same bits for the same gradient.
                let mean = g.iter().map(|g| g * g).sum::<f32>() / g.len().max(1) as f32;
                state[0] += mean;
                let step = lr / (state[0].sqrt() + ADAGRAD_EPS);
                for (w, g) in w.iter_mut().zip(g) {
                    *w -= step * g;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_adagrad_keeps_one_sum_of_mean_squares_per_row() {
        assert_eq!(Optimizer::RowAdagrad.state_width(100), 1);
        let (mut w, mut s) = (vec![1.0f32, -1.0], vec![0.0; 1]);
        Optimizer::RowAdagrad.update(&mut w, &mut s, &[2.0, -1.0], 0.1);
        // acc = (4 + 1) / 2 = 2.5; w −= 0.1 · g / √2.5, one step size for the whole row.
        assert_eq!(s, [2.5]);
        let step = 0.1 / 2.5f32.sqrt();
        assert!((w[0] - (1.0 - 2.0 * step)).abs() < 1e-6, "{w:?}");
        assert!((w[1] - (-1.0 + step)).abs() < 1e-6, "{w:?}");
        Optimizer::RowAdagrad.update(&mut w, &mut s, &[1.0, 1.0], 0.1);
        assert_eq!(s, [3.5], "the sum grows by each step's mean square");
    }

    #[test]
    fn pbg_adagrad_is_row_wise_for_entities_and_element_wise_for_relations() {
        let opt = Optimizer::PbgAdagrad;
        assert_eq!((opt.state_width(100), opt.for_relations().state_width(100)), (1, 100));
        assert_eq!(Optimizer::RowAdagrad.for_relations(), Optimizer::RowAdagrad);
        assert_eq!(Optimizer::Adam.for_relations(), Optimizer::Adam);
        // An entity row moves as with row-wise Adagrad, bit for bit.
        let (g, mut a, mut b) = ([2.0f32, -1.0, 0.5], [1.0f32, -1.0, 0.0], [1.0f32, -1.0, 0.0]);
        let (mut sa, mut sb) = ([0.0f32; 1], [0.0f32; 1]);
        for _ in 0..3 {
            opt.update(&mut a, &mut sa, &g, 0.1);
            Optimizer::RowAdagrad.update(&mut b, &mut sb, &g, 0.1);
        }
        assert_eq!((a, sa), (b, sb));
        // A relation row keeps one sum per element: its first step is −lr·sign(g).
        let (mut w, mut s) = ([1.0f32, -1.0], [0.0f32; 2]);
        opt.for_relations().update(&mut w, &mut s, &[2.0, -0.5], 0.1);
        assert_eq!(s, [4.0, 0.25]);
        assert!((w[0] - 0.9).abs() < 1e-6 && (w[1] + 0.9).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn adagrad_and_adam_take_their_textbook_first_steps() {
        let (mut w, mut s) = (vec![1.0f32, -1.0], vec![0.0; 2]);
        Optimizer::Adagrad.update(&mut w, &mut s, &[2.0, -0.5], 0.1);
        // First Adagrad step: w − lr·sign(g).
        assert!((w[0] - 0.9).abs() < 1e-6 && (w[1] + 0.9).abs() < 1e-6, "{w:?}");
        assert_eq!(s, [4.0, 0.25]);
        let (mut w, mut s) = (vec![1.0f32, -1.0], vec![0.0; Optimizer::Adam.state_width(2)]);
        Optimizer::Adam.update(&mut w, &mut s, &[2.0, -0.5], 0.1);
        // First bias-corrected Adam step is also w − lr·sign(g).
        assert!((w[0] - 0.9).abs() < 1e-5 && (w[1] + 0.9).abs() < 1e-5, "{w:?}");
        assert_eq!(s[4], 1.0, "the row's step count");
        Optimizer::Adam.update(&mut w, &mut s, &[0.0, 0.0], 0.1);
        assert_eq!(s[4], 2.0);
        assert!(w[0] < 0.9, "momentum keeps moving w: {w:?}");
    }
}
