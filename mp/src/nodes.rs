//! The IR nodes (paper §4), one per file.

pub mod bcast;
pub mod collect;
pub mod concat;
pub mod cond;
pub mod distribute;
pub mod isu;
pub mod linear;
pub mod lookup;
pub mod loss;
pub mod phi;
pub mod relu;
pub mod replicate;
pub mod ungroup;

pub use bcast::Bcast;
pub use collect::Collect;
pub use concat::Concat;
pub use cond::Cond;
pub use distribute::{Assign, Distribute};
pub use isu::Isu;
pub use linear::Linear;
pub use lookup::Lookup;
pub use loss::SoftmaxLoss;
pub use phi::Phi;
pub use relu::Relu;
pub use replicate::Replicate;
pub use ungroup::Ungroup;
