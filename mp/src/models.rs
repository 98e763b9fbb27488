//! The paper's models as IR graphs: the MLP of B.1 and the RNN of Figure 2 with the replicas
//! of Figure 4b.

pub mod mlp;
pub mod rnn;

use crate::message::Payload;

/// Initial weights for a `d_in × d_out` layer (the caller's generator).
pub type Init<'a> = &'a mut dyn FnMut(usize, usize) -> Payload;
