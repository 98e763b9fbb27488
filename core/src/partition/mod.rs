//! Tables larger than memory: rows in `P` partition files on disk, a buffer of `c` of them in
//! memory, and orders of edge buckets that keep swaps near their lower bound (Marius'
//! partition buffer and BETA order; PyTorch-BigGraph's inside-out order as the baseline).
//! Behind feature `partition`.
//!
//! * [`ordering`]: buckets, buffer states, plans, swap costs and their lower bound (no I/O).
//!
//! Nothing here knows about knowledge graphs: a trainer maps its batches to buckets.
pub mod ordering;
