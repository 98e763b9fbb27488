//! `--precision`: how the entity rows (embedding and optimizer state) are stored. The step
//! computes in `f32` either way; with [`Precision::Bf16`] each row it writes is first rounded
//! to bf16s, stochastically ([`super::bf16_rounding`]), and the store keeps four values per
//! word instead of two ([`ordo::precision::Precision::Bf16`]): half the bytes a row copy moves.
//!
//! bf16 runs on the CPU step and the engine's in-memory store only: `--device cuda`, `--pm`
//! and `--storage` are refused with it before anything runs (their kernels, nodes and
//! partition files hold `f32` rows).

/// The number format of the stored entity rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats: the values the step computes, stored as they are.
    #[default]
    F32,
    /// bfloat16: each value the step writes rounded stochastically to one of its two nearest
    /// bf16s, keyed by (seed, row, batch), so the rounding is the same in every mode and after
    /// a resume.
    Bf16,
}

impl Precision {
    /// The store's packing of this precision.
    pub fn store(self) -> ordo::precision::Precision {
        match self {
            Precision::F32 => ordo::precision::Precision::F32,
            Precision::Bf16 => ordo::precision::Precision::Bf16,
        }
    }

    /// The name on the command line and in saved manifests (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        self.store().name()
    }

    /// The precision a manifest names (`None` for an unknown name).
    pub fn from_name(name: &str) -> Option<Self> {
        [Precision::F32, Precision::Bf16].into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
