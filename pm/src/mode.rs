//! The parameter-management strategies: AdaPM and the baselines of paper 002 §5, by flag.

use std::fmt;
use std::str::FromStr;

/// Which parameter-management strategy the nodes run. All share the same code; the mode only
/// switches which actions the owner may take on intent signals (see [`crate::node`]).
///
/// ```
/// use ordo_pm::PmMode;
/// let m: PmMode = "no-relocation".parse().unwrap();
/// assert!(!m.relocates() && m.replicates());
/// assert_eq!(m.to_string(), "no-relocation");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PmMode {
    /// AdaPM: relocate when one node has active intent, replicate when several do, adaptive
    /// action timing (paper 002 §4).
    #[default]
    AdaPm,
    /// Static partition (classic parameter server): key `k` stays on node `k % n`; every
    /// non-local access is remote. Intents are ignored.
    Static,
    /// Static full replication: every node holds a replica of every key it does not own, synced
    /// every round. Intents are ignored.
    Replicate,
    /// AdaPM without relocation: replicas only (also for a single intent holder).
    NoRelocation,
    /// AdaPM without replication: relocation only (with several holders, accesses are remote).
    NoReplication,
    /// AdaPM with immediate (non-adaptive) action timing: act on an intent as soon as signaled.
    Immediate,
}

impl PmMode {
    /// Every mode, in table order.
    pub const ALL: [PmMode; 6] = [
        PmMode::AdaPm,
        PmMode::Static,
        PmMode::Replicate,
        PmMode::NoRelocation,
        PmMode::NoReplication,
        PmMode::Immediate,
    ];

    /// The flag value (`--pm <name>`).
    pub fn name(self) -> &'static str {
        match self {
            PmMode::AdaPm => "adapm",
            PmMode::Static => "static",
            PmMode::Replicate => "replicate",
            PmMode::NoRelocation => "no-relocation",
            PmMode::NoReplication => "no-replication",
            PmMode::Immediate => "immediate",
        }
    }

    /// Whether intent signals drive actions at all.
    pub fn uses_intents(self) -> bool {
        !matches!(self, PmMode::Static | PmMode::Replicate)
    }

    /// Whether the owner may relocate a key.
    pub fn relocates(self) -> bool {
        matches!(self, PmMode::AdaPm | PmMode::NoReplication | PmMode::Immediate)
    }

    /// Whether the owner may create replicas on intent.
    pub fn replicates(self) -> bool {
        matches!(self, PmMode::AdaPm | PmMode::NoRelocation | PmMode::Immediate)
    }

    /// Whether intents are acted on by the adaptive timing rule (else immediately).
    pub fn adaptive_timing(self) -> bool {
        !matches!(self, PmMode::Immediate)
    }
}

impl fmt::Display for PmMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown `--pm` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown pm mode {0:?} (expected one of adapm, static, replicate, no-relocation, no-replication, immediate)"
)]
pub struct UnknownMode(pub String);

impl FromStr for PmMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PmMode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| UnknownMode(s.to_string()))
    }
}
