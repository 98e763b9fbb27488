//! Adaptive action timing (paper 002 §4.2, Algorithm 1).
//!
//! In communication round `t` a node acts on an intent that starts at clock `C_start` when
//! `C_start < C_t + Q_Poisson(2·max(λ̂_t, Δ), p)`, where `C_t` is the node's clock at the start
//! of the round, `Δ = C_t − C_{t−1}`, and `λ̂` is an exponential moving average of the clocks per
//! round (`λ̂_t = (1−α)·λ̂_{t−1} + α·Δ`, not updated when `Δ = 0`), with `α = 0.1`, `λ̂_0 = 10`,
//! `p = 0.9999`.
//!
//! The Poisson quantile is computed here by summing the pmf (recurrence `P(k) = P(k−1)·λ/k`,
//! in log space for the start so large rates do not underflow): neither `rand_distr` (sampling
//! only) nor the workspace has an inverse CDF, and `statrs` (which does) pulls in `nalgebra` for
//! this one function.

/// Smoothing factor α of the clock-rate estimate.
pub const ALPHA: f64 = 0.1;
/// Initial clock-rate estimate λ̂₀ (clocks per round).
pub const LAMBDA_0: f64 = 10.0;
/// Quantile p of the soft upper bound.
pub const P: f64 = 0.9999;

/// The smallest `k` with `P(X ≤ k) ≥ p` for `X ~ Poisson(lambda)`.
///
/// ```
/// use ordo_pm::timing::poisson_quantile;
/// assert_eq!(poisson_quantile(0.0, 0.9999), 0);
/// assert_eq!(poisson_quantile(1.0, 0.5), 1);   // P(X ≤ 0) = 0.37, P(X ≤ 1) = 0.74
/// assert_eq!(poisson_quantile(20.0, 0.9999), 39);
/// ```
pub fn poisson_quantile(lambda: f64, p: f64) -> u64 {
    if lambda <= 0.0 || !lambda.is_finite() {
        return 0;
    }
    let p = p.clamp(0.0, 1.0 - 1e-15);
    // pmf(0) = e^{-λ}; sum in log space until the terms are representable.
    let mut log_pmf = -lambda;
    let mut cdf = log_pmf.exp();
    let mut k = 0u64;
    // The quantile lies far below λ + 40·sqrt(λ) + 40 for p ≤ 1 − 1e-15; cap the walk there.
    let cap = (lambda + 40.0 * lambda.sqrt() + 40.0) as u64;
    while cdf < p && k < cap {
        k += 1;
        log_pmf += lambda.ln() - (k as f64).ln();
        cdf += log_pmf.exp();
    }
    k
}

/// One node's clock-rate estimate and the timing decision.
///
/// ```
/// use ordo_pm::timing::ActionTiming;
/// let mut t = ActionTiming::new();
/// t.round(0);                         // first round: Δ = 0, λ̂ stays 10
/// assert!(t.should_act(38, 0));       // 38 < 0 + Q(20, 0.9999) = 39
/// assert!(!t.should_act(40, 0));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ActionTiming {
    lambda_hat: f64,
    last_clock: u64,
    delta: u64,
    horizon: u64,
}

impl Default for ActionTiming {
    fn default() -> Self {
        Self::new()
    }
}

impl ActionTiming {
    /// λ̂ = λ̂₀, clock 0.
    pub fn new() -> Self {
        let mut t = ActionTiming { lambda_hat: LAMBDA_0, last_clock: 0, delta: 0, horizon: 0 };
        t.horizon = poisson_quantile(2.0 * LAMBDA_0, P);
        t
    }

    /// Start of a communication round at clock `clock`: update λ̂ (skipped when the clock did
    /// not move) and the horizon `Q_Poisson(2·max(λ̂, Δ), p)`.
    pub fn round(&mut self, clock: u64) {
        self.delta = clock.saturating_sub(self.last_clock);
        self.last_clock = clock;
        if self.delta > 0 {
            self.lambda_hat = (1.0 - ALPHA) * self.lambda_hat + ALPHA * self.delta as f64;
        }
        self.horizon = poisson_quantile(2.0 * self.lambda_hat.max(self.delta as f64), P);
    }

    /// Whether to act now on an intent starting at `start`, the node being at `clock`.
    pub fn should_act(&self, start: u64, clock: u64) -> bool {
        start < clock.saturating_add(self.horizon)
    }

    /// The current estimate λ̂.
    pub fn lambda_hat(&self) -> f64 {
        self.lambda_hat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_is_the_smallest_k_reaching_p() {
        // Brute-force CDF with f64 factorials for small λ.
        for &lambda in &[0.5, 2.0, 7.0, 20.0] {
            for &p in &[0.5, 0.9, 0.9999] {
                let k = poisson_quantile(lambda, p);
                let cdf = |k: u64| -> f64 {
                    (0..=k)
                        .map(|i| {
                            let fact: f64 = (1..=i).map(|j| j as f64).product();
                            (-lambda).exp() * lambda.powi(i as i32) / fact
                        })
                        .sum()
                };
                assert!(cdf(k) >= p, "λ={lambda} p={p} k={k}");
                assert!(k == 0 || cdf(k - 1) < p, "λ={lambda} p={p} k={k} not smallest");
            }
        }
    }

    #[test]
    fn estimate_follows_clock_rate_and_ignores_idle_rounds() {
        let mut t = ActionTiming::new();
        let mut c = 0;
        for _ in 0..200 {
            c += 2;
            t.round(c);
        }
        assert!((t.lambda_hat() - 2.0).abs() < 0.01, "{}", t.lambda_hat());
        let before = t.lambda_hat();
        t.round(c); // idle round
        assert_eq!(t.lambda_hat(), before);
        // A burst is used at once through max(λ̂, Δ).
        t.round(c + 100);
        assert!(t.should_act(c + 100 + 150, c + 100));
    }
}
