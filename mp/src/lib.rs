//! ordo-mp: AMPNet (paper 004), asynchronous model-parallel training.
//!
//! A model is a static IR graph ([`GraphBuilder`], [`nodes`]) whose nodes live on workers that
//! talk only by [`Message`]s; the [`Controller`] pumps instances and bounds the instances in
//! flight by `max_active_keys`; parameterized nodes update after `min_update_interval`
//! gradients. [`run`] executes a graph on threads; [`replay::replay`] replays a run's recorded
//! order sequentially.
//!
//! How this crate fits with the others: `docs/ARCHITECTURE.md` in the repository; the terms
//! and the papers it cites: `docs/GLOSSARY.md` and `docs/PAPERS.md`.
#![warn(missing_docs)]

pub mod accumulate;
pub mod clip;
pub mod controller;
pub mod device_clock;
pub mod error;
pub mod gather;
pub mod graph;
pub mod message;
pub mod models;
pub mod mutation;
pub mod node;
pub mod node_id;
pub mod nodes;
pub mod optimizer;
pub mod ppt;
pub mod queue;
pub mod recorded;
pub mod replay;
pub mod runtime;
pub(crate) mod slot;
pub mod staleness;
pub mod state;
pub mod text;
pub mod trace;

pub use controller::{Controller, InstanceResult, Source};
pub use error::MpError;
pub use graph::{Graph, GraphBuilder};
pub use message::{Direction, Message, Payload};
pub use node::{Emit, IrNode, Out};
pub use node_id::NodeId;
pub use runtime::{RunConfig, RunReport, run};
pub use state::State;
