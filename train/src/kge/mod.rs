//! Knowledge-graph embeddings (link prediction) on the OAC engine.

pub mod cli;
