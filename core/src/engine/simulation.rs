//! Deterministic simulation (in progress).
