//! Optimizers a parameterized node applies on an update message (Appendix A): momentum SGD and
//! Adam.

use crate::message::Payload;

/// The optimizer and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `v ← μ v + g; w ← w − lr v` (plain SGD when `momentum` is 0).
    Sgd {
        /// Learning rate.
        lr: f32,
        /// Momentum μ.
        momentum: f32,
    },
    /// Adam (Kingma & Ba 2014).
    Adam {
        /// Learning rate.
        lr: f32,
        /// β₁.
        beta1: f32,
        /// β₂.
        beta2: f32,
        /// ε.
        eps: f32,
    },
}

impl Optimizer {
    /// Plain SGD with learning rate `lr`.
    pub fn sgd(lr: f32) -> Optimizer {
        Optimizer::Sgd { lr, momentum: 0.0 }
    }

    /// Adam with the usual β₁ = 0.9, β₂ = 0.999, ε = 1e-8.
    pub fn adam(lr: f32) -> Optimizer {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8 }
    }

    /// The learning rate.
    pub fn lr(&self) -> f32 {
        match *self {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => lr,
        }
    }

    /// The same optimizer at learning rate `lr` (a schedule's step).
    ///
    /// ```
    /// use ordo_mp::optimizer::Optimizer;
    /// assert_eq!(Optimizer::adam(0.002).with_lr(0.001), Optimizer::adam(0.001));
    /// ```
    pub fn with_lr(mut self, new: f32) -> Optimizer {
        match &mut self {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => *lr = new,
        }
        self
    }
}

/// An optimizer's per-parameter memory (momentum, Adam moments, step count).
#[derive(Debug, Clone, PartialEq)]
pub struct OptState {
    opt: Optimizer,
    m: Vec<Payload>,
    v: Vec<Payload>,
    t: i32,
    /// Clip each step's gradients to this global norm ([`crate::clip`]); `None`: never.
    clip_norm: Option<f32>,
}

impl OptState {
    /// Fresh memory for parameters shaped like `params`.
    pub fn new(opt: Optimizer, params: &[&Payload]) -> OptState {
        let zeros = |p: &&Payload| Payload::zeros(p.raw_dim());
        OptState {
            opt,
            m: params.iter().map(zeros).collect(),
            v: params.iter().map(zeros).collect(),
            t: 0,
            clip_norm: None,
        }
    }

    /// The optimizer (its current learning rate included).
    pub fn optimizer(&self) -> Optimizer {
        self.opt
    }

    /// Set the learning rate of the following steps (a schedule); the memory is kept.
    pub fn set_lr(&mut self, lr: f32) {
        self.opt = self.opt.with_lr(lr);
    }

    /// Clip the following steps' gradients to global norm `max_norm` (`None`: do not clip).
    pub fn set_clip_norm(&mut self, max_norm: Option<f32>) {
        self.clip_norm = max_norm;
    }

    /// The clipping bound, if any.
    pub fn clip_norm(&self) -> Option<f32> {
        self.clip_norm
    }

    /// The moments (`m` then `v`, per parameter), mutably (replica synchronization).
    pub(crate) fn moments_mut(&mut self) -> Vec<&mut Payload> {
        self.m.iter_mut().chain(self.v.iter_mut()).collect()
    }

    /// Apply one step with gradients `grads` (same order and shapes as the parameters),
    /// clipped first to the clipping bound if one is set and exceeded.
    ///
    /// ```
    /// use ordo_mp::optimizer::{OptState, Optimizer};
    /// let mut w = ndarray::arr2(&[[1.0f32]]);
    /// let mut s = OptState::new(Optimizer::sgd(0.5), &[&w]);
    /// s.step(&mut [&mut w], &[ndarray::arr2(&[[2.0f32]])]);
    /// assert_eq!(w[[0, 0]], 0.0);
    /// ```
    pub fn step(&mut self, params: &mut [&mut Payload], grads: &[Payload]) {
        self.t += 1;
        let clipped: Vec<Payload>;
        let grads = match self.clip_norm.and_then(|c| crate::clip::clip_factor(grads, c)) {
            Some(f) => {
                clipped = grads.iter().map(|g| g.mapv(|x| x * f)).collect();
                &clipped[..]
            }
            None => grads,
        };
        for (i, (w, g)) in params.iter_mut().zip(grads).enumerate() {
            match self.opt {
                Optimizer::Sgd { lr, momentum: 0.0 } => w.scaled_add(-lr, g),
                Optimizer::Sgd { lr, momentum } => {
                    let v = &mut self.m[i];
                    v.zip_mut_with(g, |v, &g| *v = momentum * *v + g);
                    w.scaled_add(-lr, v);
                }
                Optimizer::Adam { lr, beta1, beta2, eps } => {
                    let (m, v) = (&mut self.m[i], &mut self.v[i]);
                    m.zip_mut_with(g, |m, &g| *m = beta1 * *m + (1.0 - beta1) * g);
                    v.zip_mut_with(g, |v, &g| *v = beta2 * *v + (1.0 - beta2) * g * g);
                    let c1 = 1.0 - beta1.powi(self.t);
                    let c2 = 1.0 - beta2.powi(self.t);
                    ndarray::Zip::from(&mut **w).and(&*m).and(&*v).for_each(|w, &m, &v| {
                        *w -= lr * (m / c1) / ((v / c2).sqrt() + eps);
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clipped step moves the weights as a step with the pre-scaled gradient does; an
    /// unclipped one is the plain step.
    #[test]
    fn clipping_applies_to_the_step_only_above_the_bound() {
        let g = ndarray::arr2(&[[3.0f32, 4.0]]);
        let step = |clip: Option<f32>, g: &Payload| {
            let mut w = ndarray::arr2(&[[1.0f32, 1.0]]);
            let mut s = OptState::new(Optimizer::sgd(0.5), &[&w]);
            s.set_clip_norm(clip);
            s.step(&mut [&mut w], std::slice::from_ref(g));
            w
        };
        assert_eq!(step(Some(1.0), &g), step(None, &(&g * 0.2f32)));
        assert_eq!(step(Some(5.0), &g), step(None, &g));
        assert_ne!(step(Some(1.0), &g), step(None, &g));
    }

    #[test]
    fn set_lr_changes_the_next_steps_only() {
        let mut w = ndarray::arr2(&[[0.0f32]]);
        let mut s = OptState::new(Optimizer::sgd(1.0), &[&w]);
        s.step(&mut [&mut w], &[ndarray::arr2(&[[1.0f32]])]);
        s.set_lr(0.25);
        s.step(&mut [&mut w], &[ndarray::arr2(&[[1.0f32]])]);
        assert_eq!(w[[0, 0]], -1.25);
        assert_eq!(s.optimizer().lr(), 0.25);
    }
}
