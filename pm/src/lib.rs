//! ordo-pm: AdaPM, an intent-signaling parameter manager (paper 002).
//!
//! How this crate fits with the others: `docs/ARCHITECTURE.md` in the repository; the terms
//! and the papers it cites: `docs/GLOSSARY.md` and `docs/PAPERS.md`.
//!
//! A table of `keys` rows of `width` floats lives across `nodes` nodes. Each key has exactly one
//! *owner* holding its main copy; other nodes may hold *replicas*. Trainers call, per node:
//! - [`Node::intent`]`(keys, start, end)`: this node will access `keys` while its clock is in
//!   `[start, end)`;
//! - [`Node::advance_clock`];
//! - [`Node::pull`] and [`Node::push`] (additive);
//! - [`sampling::sample_local`]: negatives from locally held keys.
//!
//! The owner relocates a key to the one node with active intent, or replicates it to every node
//! with active intent when several have it ([`node`]); nodes act on an intent when the adaptive
//! timing rule says so ([`timing`]); replica deltas flow to owners and fresh values back in sync
//! rounds; requests for a key held elsewhere are routed to its current owner ([`routing`]). The
//! invariants are stated once each in [`node`] (and routing's termination in [`routing`]).
//! Baselines are the same code under another [`PmMode`].
//!
//! Nodes exchange [`Message`]s through a [`Transport`]; [`sim::Simulation`] runs them
//! deterministically for tests.

#![warn(missing_docs)]

pub mod cluster;
pub mod error;
pub mod intent;
pub mod message;
pub mod mode;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod mutation;
pub mod node;
pub mod rng;
pub mod routing;
pub mod sampling;
pub mod sim;
pub mod stats;
pub mod timing;
pub mod transport;

pub use error::PmError;
pub use message::{Key, Message, NodeId, OwnerRecord, ToOwner};
pub use mode::PmMode;
pub use node::{Node, Outbox, ProtocolState, PullOutcome, Replica};
pub use stats::PmStats;
pub use transport::{InProcessTransport, Transport};
