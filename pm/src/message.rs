//! The messages nodes exchange. A transport must deliver the messages from one node to another
//! in the order they were sent (FIFO per ordered pair of nodes; MPI's non-overtaking rule and a
//! channel per receiver both give it): routing relies on it (see [`crate::routing`]).

use std::collections::{BTreeMap, BTreeSet};

/// A node's index, `0..nodes`.
pub type NodeId = usize;
/// A parameter's key, `0..keys`.
pub type Key = u64;

/// The main copy of a key and the owner's bookkeeping for it; moves whole on relocation, so the
/// responsibility for a key follows its allocation (paper 002 §3).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "mpi", derive(serde::Serialize, serde::Deserialize))]
pub struct OwnerRecord {
    /// The key's value.
    #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
    pub value: Vec<f32>,
    /// Number of updates applied to the main copy (never decreases, travels with the record).
    pub version: u64,
    /// Nodes with active intent, with the epoch of that intent (the holder's count of
    /// inactive → active transitions for this key).
    pub holders: BTreeMap<NodeId, u64>,
    /// The latest ended epoch per node: an `IntentOn` overtaken by its own `IntentOff` on a
    /// forwarded path is recognised and ignored.
    pub ended: BTreeMap<NodeId, u64>,
    /// Nodes the owner has sent a replica to and not yet seen it dropped.
    pub replicas: BTreeSet<NodeId>,
    /// Number of relocations of this key so far (its ownership epoch).
    pub moves: u64,
    /// Updated since the replicas were last refreshed.
    pub dirty: bool,
    /// Per replica node, the highest [`ToOwner::Flush`] sequence number applied to `value`;
    /// echoed in refreshes so the replica knows which of its flushes the value already holds.
    pub flushed: BTreeMap<NodeId, u64>,
}

/// A request for a key's owner; routed (see [`crate::routing`]).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "mpi", derive(serde::Serialize, serde::Deserialize))]
pub enum ToOwner {
    /// `node`'s intent for the key became active (its `epoch`-th activation).
    IntentOn {
        /// Signaling node.
        node: NodeId,
        /// Activation count at `node`.
        epoch: u64,
    },
    /// `node`'s intent ended; `delta` is its replica's unflushed delta (if it held a replica).
    IntentOff {
        /// Signaling node.
        node: NodeId,
        /// The epoch that ended.
        epoch: u64,
        /// The dropped replica's unflushed delta.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes::option"))]
        delta: Option<Vec<f32>>,
    },
    /// An additive update from a node holding neither the key nor a replica.
    Push {
        /// The update.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        delta: Vec<f32>,
    },
    /// A replica's accumulated delta (sync round).
    Flush {
        /// The replica's node.
        node: NodeId,
        /// The node's flush sequence number (increasing per node).
        seq: u64,
        /// The delta since its last flush.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        delta: Vec<f32>,
    },
    /// A remote read; answered with [`Message::PullReply`].
    Pull {
        /// The reader's node.
        node: NodeId,
        /// The reader's request id.
        req: u64,
    },
    /// A conditional overwrite (the engine's `RowStorage::write_if_newer`): lands iff the main
    /// copy's version is `≤ ts`, and then sets the version to `ts + 1`; answered with
    /// [`Message::WriteReply`].
    Write {
        /// The writer's node.
        node: NodeId,
        /// The writer's request id.
        req: u64,
        /// The write's timestamp.
        ts: u64,
        /// The new value.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        values: Vec<f32>,
    },
    /// `node` refused a replica (its intent had ended before the replica arrived).
    Refuse {
        /// The refusing node.
        node: NodeId,
    },
}

/// A message between nodes.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "mpi", derive(serde::Serialize, serde::Deserialize))]
pub enum Message {
    /// A request for the key's owner, forwarded until it reaches it; `hops` counts forwards.
    Routed {
        /// The key.
        key: Key,
        /// How often it was forwarded so far.
        hops: u32,
        /// The request.
        body: ToOwner,
    },
    /// Ownership of `key` moves to the receiver.
    Relocate {
        /// The key.
        key: Key,
        /// The main copy and its bookkeeping.
        record: OwnerRecord,
    },
    /// Start a replica (for the receiver's intent `epoch`).
    ReplicaCreate {
        /// The key.
        key: Key,
        /// The owner's value.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        value: Vec<f32>,
        /// The owner's version.
        version: u64,
        /// The sending owner.
        owner: NodeId,
        /// The highest flush sequence number of the receiver that `value` holds.
        acked: u64,
    },
    /// Fresh value for a replica.
    Refresh {
        /// The key.
        key: Key,
        /// The owner's value.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        value: Vec<f32>,
        /// The owner's version.
        version: u64,
        /// The sending owner.
        owner: NodeId,
        /// The highest flush sequence number of the receiver that `value` holds.
        acked: u64,
    },
    /// Answer to [`ToOwner::Write`].
    WriteReply {
        /// The key.
        key: Key,
        /// The writer's request id.
        req: u64,
        /// Whether the write landed.
        landed: bool,
        /// The answering owner.
        owner: NodeId,
    },
    /// Answer to [`ToOwner::Pull`].
    PullReply {
        /// The key.
        key: Key,
        /// The reader's request id.
        req: u64,
        /// The value.
        #[cfg_attr(feature = "mpi", serde(with = "crate::message::row_bytes"))]
        value: Vec<f32>,
        /// Its version.
        version: u64,
        /// The answering owner.
        owner: NodeId,
    },
}

impl Message {
    /// The bytes this message takes on the wire in the MPI encoding (tag + key + ids as 8 bytes
    /// each, floats as 4): what `bytes_sent` counts.
    pub fn wire_bytes(&self) -> u64 {
        let floats = |v: &Vec<f32>| 8 + 4 * v.len() as u64;
        let head = 8 + 8;
        head + match self {
            Message::Routed { body, .. } => {
                8 + match body {
                    ToOwner::IntentOn { .. } => 16,
                    ToOwner::IntentOff { delta, .. } => 16 + 8 + delta.as_ref().map_or(0, floats),
                    ToOwner::Push { delta } => floats(delta),
                    ToOwner::Flush { delta, .. } => 16 + floats(delta),
                    ToOwner::Pull { .. } => 16,
                    ToOwner::Write { values, .. } => 24 + floats(values),
                    ToOwner::Refuse { .. } => 8,
                }
            }
            Message::Relocate { record, .. } => {
                floats(&record.value)
                    + 24
                    + 16 * (record.holders.len() + record.ended.len() + record.flushed.len()) as u64
                    + 8 * record.replicas.len() as u64
            }
            Message::ReplicaCreate { value, .. } | Message::Refresh { value, .. } => {
                floats(value) + 32
            }
            Message::PullReply { value, .. } => floats(value) + 24,
            Message::WriteReply { .. } => 24,
        }
    }

    /// The key the message is about.
    pub fn key(&self) -> Key {
        match self {
            Message::Routed { key, .. }
            | Message::Relocate { key, .. }
            | Message::ReplicaCreate { key, .. }
            | Message::Refresh { key, .. }
            | Message::PullReply { key, .. }
            | Message::WriteReply { key, .. } => *key,
        }
    }
}

/// Serde for a row of floats (the `value`/`delta` fields above) as one CBOR byte string of
/// little-endian `f32`s, 4 bytes each, written and read in one pass, instead of an array of
/// CBOR floats with a header each: the per-float headers were most of an MPI rank's
/// encoding and decoding time. It is also the size [`Message::wire_bytes`] counts.
///
/// `serde_bytes` writes the byte string, a `bytemuck` cast gives the bytes: the floats' memory,
/// so the wire order is the host's. The MPI transport is built for little-endian hosts only
/// (every platform it targets); a big-endian build fails to compile below.
#[cfg(feature = "mpi")]
pub(crate) mod row_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};
    use serde_bytes::{ByteBuf, Bytes};

    #[cfg(not(target_endian = "little"))]
    compile_error!("ordo-pm's MPI wire format sends f32 rows as little-endian bytes");

    fn bytes(row: &[f32]) -> &Bytes {
        Bytes::new(bytemuck::cast_slice(row))
    }

    /// The floats of a byte string; a length that is not a multiple of 4 is refused, not
    /// truncated or padded.
    fn floats<E: Error>(b: &[u8]) -> Result<Vec<f32>, E> {
        if !b.len().is_multiple_of(4) {
            return Err(E::invalid_length(b.len(), &"a byte string of little-endian f32s"));
        }
        Ok(bytemuck::pod_collect_to_vec(b))
    }

    pub fn serialize<S: Serializer>(row: &[f32], s: S) -> Result<S::Ok, S::Error> {
        bytes(row).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        floats(&ByteBuf::deserialize(d)?)
    }

    /// The same for an optional row.
    pub mod option {
        use super::{ByteBuf, bytes, floats};
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        pub fn serialize<S: Serializer>(row: &Option<Vec<f32>>, s: S) -> Result<S::Ok, S::Error> {
            row.as_deref().map(bytes).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f32>>, D::Error> {
            Option::<ByteBuf>::deserialize(d)?.map(|b| floats(&b)).transpose()
        }
    }
}

#[cfg(all(test, feature = "mpi"))]
mod tests {
    use super::*;

    fn round_trip(m: &Message) -> (Message, usize) {
        let mut bytes = Vec::new();
        ciborium::into_writer(m, &mut bytes).unwrap();
        (ciborium::from_reader(&bytes[..]).unwrap(), bytes.len())
    }

    #[test]
    fn rows_cross_the_wire_bit_exact_as_four_bytes_per_float() {
        let row: Vec<f32> = (0..200).map(|i| (i as f32 * 0.37).sin() * 1e-3).collect();
        let msgs = [
            Message::Refresh { key: 7, value: row.clone(), version: 3, owner: 1, acked: 2 },
            Message::Routed {
                key: 9,
                hops: 1,
                body: ToOwner::IntentOff { node: 2, epoch: 4, delta: Some(row.clone()) },
            },
            Message::Routed {
                key: 9,
                hops: 0,
                body: ToOwner::IntentOff { node: 2, epoch: 5, delta: None },
            },
        ];
        for m in &msgs {
            let (back, len) = round_trip(m);
            assert_eq!(&back, m);
            if let Message::Refresh { .. } = m {
                // 800 bytes of floats plus a few bytes of header and fields.
                assert!(len < 850, "{len} bytes");
            }
        }
        // A byte string whose length is not a multiple of 4 is refused, not truncated.
        let mut bad = Vec::new();
        let m = Message::Refresh { key: 1, value: vec![1.0], version: 0, owner: 0, acked: 0 };
        ciborium::into_writer(&m, &mut bad).unwrap();
        let at = bad.windows(5).position(|w| w == [0x44, 0, 0, 0x80, 0x3f]).unwrap();
        bad[at] = 0x43; // byte string of 3: the row's last byte is now read as the next field
        bad.remove(at + 4);
        assert!(ciborium::from_reader::<Message, _>(&bad[..]).is_err());
    }
}
