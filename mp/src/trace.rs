//! The recorded order: which messages each node applied, in order ([`crate::replay`] replays
//! it).

use crate::message::MessageKey;

/// One step of a node: the controller's start, or the message (by key) it applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The controller pumped its first instances.
    Start,
    /// The node applied this message.
    Msg(MessageKey),
}

/// Per node, the messages it applied in the order it applied them. Each node lives on one
/// worker, which applies its messages one at a time, so this order is total per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// `per_node[n]`: node `n`'s steps.
    pub per_node: Vec<Vec<Applied>>,
}

impl Trace {
    /// Steps in total.
    pub fn len(&self) -> usize {
        self.per_node.iter().map(Vec::len).sum()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
