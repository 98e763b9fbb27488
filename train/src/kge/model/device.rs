//! [`Device`]: where the KGE step runs (a leaf: the run's configuration names it without
//! importing the CUDA step).

/// Where the KGE step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// The host (the tested, accuracy-benchmarked step).
    #[default]
    Cpu,
    /// A CUDA GPU through ordo-gpu (kernels compiled by NVRTC at run time).
    Cuda,
}
