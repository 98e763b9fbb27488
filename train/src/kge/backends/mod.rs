//! Training outside the engine's in-memory session: with the entity table in a partition buffer
//! on disk ([`partitioned`], `--storage`), and with the parameters in AdaPM ([`pm`], `--pm`, its
//! own asynchronous regime, not the engine).
//!
//! May import every room but [`cli`](super::cli).

pub mod partitioned;
pub mod pm;
