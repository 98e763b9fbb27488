//! The instruction sets a loop of lane-wise operations is compiled for, the widest one the CPU
//! has chosen at run time ([`Lanes::run`], through `pulp`'s dispatch: no `unsafe` here). A loop
//! written once, `#[inline(always)]`, gives the same bits on each set where every lane runs the
//! same IEEE-754 or integer operations in the same order (Rust never fuses a product and a sum
//! on its own). The bf16 row copies of a [`RowStore`](crate::row_store::RowStore) and the KGE
//! step's bf16 rounding run their loops so.
//!
//! ```
//! use ordo::lanes::Lanes;
//! let widest = Lanes::detected();
//! assert!(widest.is_available() && Lanes::Baseline.is_available());
//! let doubled = widest.run(#[inline(always)] || [1.0f32, 2.0, 3.0].map(|x| 2.0 * x));
//! assert_eq!(doubled, Lanes::Baseline.run(|| [1.0f32, 2.0, 3.0].map(|x| 2.0 * x)));
//! ```

/// An instruction set a lane-wise loop is compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lanes {
    /// Whatever the build targets (on x86-64 without `-C target-cpu`, SSE2: four `f32` lanes).
    Baseline,
    /// x86-64-v3: AVX2 (eight `f32` lanes) with FMA, BMI and the like. x86-64 only.
    Avx2,
    /// x86-64-v4: AVX-512 F, BW, CD, DQ and VL (sixteen `f32` lanes). x86-64 only.
    Avx512,
}

impl Lanes {
    /// Every set, narrowest first.
    pub const ALL: [Lanes; 3] = [Lanes::Baseline, Lanes::Avx2, Lanes::Avx512];

    /// `pulp`'s dispatch target for this set, if this CPU has it.
    #[cfg(target_arch = "x86_64")]
    fn arch(self) -> Option<pulp::Arch> {
        match self {
            Lanes::Baseline => Some(pulp::Arch::Scalar),
            Lanes::Avx2 => pulp::x86::V3::try_new().map(pulp::Arch::V3),
            Lanes::Avx512 => pulp::x86::V4::try_new().map(pulp::Arch::V4),
        }
    }

    /// Whether this CPU runs the set.
    pub fn is_available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.arch().is_some();
        #[cfg(not(target_arch = "x86_64"))]
        return self == Lanes::Baseline;
    }

    /// The widest set this CPU runs.
    pub fn detected() -> Lanes {
        Self::ALL.into_iter().rev().find(|l| l.is_available()).unwrap_or(Lanes::Baseline)
    }

    /// `f()` compiled for this set (its inlined loops vectorized at its width), or for the
    /// baseline where this CPU lacks it. Pass an `#[inline(always)]` closure: one the compiler
    /// leaves out of line runs on the baseline whatever the set (a profile names it apart).
    #[inline(always)]
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        return self.arch().unwrap_or(pulp::Arch::Scalar).dispatch(f);
        #[cfg(not(target_arch = "x86_64"))]
        return f();
    }
}
