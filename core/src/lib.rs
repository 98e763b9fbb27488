//! # ordo — asynchronous training with the exact result of synchronous training
//!
//! The crate holds the lock-free primitives of Optimistic Asynchrony Control (OAC, paper 000)
//! and Interval-Asynchrony (paper 001), and the pipeline engine that composes them.
//!
//! Every primitive states its invariant in the doc comment of the type that keeps it.
//!
//! In the repository, `docs/ARCHITECTURE.md` shows how the crates fit together, the path of a
//! batch through the engine and where each protocol is checked; `docs/GLOSSARY.md` defines the
//! terms (MFT, STE, TID, …) and `docs/PAPERS.md` says which paper "paper 000" to "paper 004" is.
//!
//! # Writing a trainer on ordo
//!
//! `core/examples/matrix_factorization.rs` (in the repository) is a complete trainer that uses only this public API
//! (`cargo run --release -p ordo --example matrix_factorization`). Its parts:
//!
//! 1. **Rows live in a store.** Every parameter that a batch touches sparsely (a user's or an
//!    item's factor, with its optimizer state if any) is one row of a
//!    [`RowStore`](row_store::RowStore) (or of any [`RowStorage`](storage::RowStorage)).
//! 2. **A batch names its rows.** A [`Batch`](engine::Batch) carries an id, its distinct row
//!    ids (in the order the step wants its rows; this example sorts them) and the trainer's
//!    data (the ratings). The example's loader rebuilds any batch from its id.
//! 3. **The math is a [`Model`](engine::Model).** `step` updates the batch's rows in place
//!    and any dense parameters in `self` (the global mean); it must be deterministic.
//! 4. **A session streams batches.** [`Engine::session`](engine::Engine::session) starts the
//!    readers, the device and the writers once; inside it the trainer
//!    [`submit`](engine::Session::submit)s batches from any iterator (queues are bounded, so a
//!    full pipeline blocks the loader), and [`finish`](engine::Session::finish)es each epoch,
//!    which returns the epoch's [`RunReport`](engine::RunReport): the computation order.
//!    A stream that never ends takes the order as it is stamped
//!    ([`drain_order`](engine::Session::drain_order)) and runs in flat memory; a bad batch
//!    (empty, a row twice, out of range) is refused with a typed
//!    [`InvalidBatch`](engine::EngineError::InvalidBatch) before it enters the pipeline.
//!    A trainer that cannot put its loop in one closure (an event loop, a binding) owns its
//!    session instead: [`Engine::start`](engine::Engine::start) returns an
//!    [`OwnedSession`](engine::OwnedSession) that is `Send` and runs the device on its own
//!    thread.
//! 4. **The device is one interface.** Both take a device: the
//!    [`CpuDevice`](engine::CpuDevice) steps each batch on the session's thread; a device that
//!    keeps batches in flight (a GPU pipeline) implements the same
//!    [`DeviceQueue`](engine::DeviceQueue), of which the in-thread step is the depth-1 case.
//!    [`Engine::run`](engine::Engine::run) is one epoch of a session on the `CpuDevice`.
//! 6. **The order is the proof.** In [`Mode::Oac`](engine::Mode::Oac) the store and dense
//!    parameters equal, bit for bit, [`replay_ids`](engine::replay_ids) of the recorded batch
//!    ids on the initial state: the synchronous run. The example checks it and exits 1 if not.
//!
//! ```
//! use ordo::engine::{Batch, BatchRows, CpuDevice, Engine, EngineConfig, Mode, Model, StepError, replay_ids};
//! use ordo::row_store::RowStore;
//!
//! /// Rank-1 factorization: rows 0..4 are users, 4..8 items; data = (user, item, rating).
//! struct Mf;
//! impl Model for Mf {
//!     type Data = (u64, u64, f32);
//!     type Error = StepError;
//!     fn row_width(&self) -> usize { 1 }
//!     fn step(&mut self, &(u, i, r): &(u64, u64, f32), rows: &mut BatchRows<'_>) -> Result<(), StepError> {
//!         let (pu, pi) = (rows.position(u).ok_or("no user")?, rows.position(4 + i).ok_or("no item")?);
//!         let (x, y) = (rows.row(pu)[0], rows.row(pi)[0]);
//!         let err = x * y - r;
//!         rows.row_mut(pu)[0] -= 0.1 * err * y;
//!         rows.row_mut(pi)[0] -= 0.1 * err * x;
//!         Ok(())
//!     }
//! }
//! let batch = |id: u64| Batch { id, rows: vec![id % 4, 4 + id % 3], data: (id % 4, id % 3, 1.0) };
//! let store = RowStore::from_fn(8, 1, |r, _| 0.5 + r as f32 * 0.1);
//! let initial = store.snapshot();
//! let engine = Engine::new(EngineConfig::new(Mode::Oac))?;
//! let order = engine.session(&mut CpuDevice::new(), &mut Mf, &store, |s| {
//!     let mut order = Vec::new();
//!     for epoch in 0..3 {
//!         s.submit_all((0..40).map(|k| batch(epoch * 40 + k)))?;
//!         order.extend(s.finish()?.batch_ids());
//!     }
//!     Ok::<_, ordo::engine::EngineError>(order)
//! })?;
//! let mut table = initial;
//! replay_ids(&mut Mf, &mut table, &order, |id| Some(batch(id)))?;
//! assert_eq!(store.snapshot(), table); // bit for bit
//! # Ok::<(), ordo::engine::EngineError>(())
//! ```
//!
//! # Checking your code with loom
//!
//! ordo's primitives ([`RowStore`](row_store::RowStore), [`Mft`](mft::Mft),
//! [`Outstanding`](outstanding::Outstanding), the [dispatchers](dispatcher), the
//! [`sgd`] block store) take every atomic, fence, `Arc` and spin from
//! [loom](https://docs.rs/loom) when the build sets `--cfg ordo_loom`: ordo's own cfg, so a
//! crate's usual `--cfg loom` leaves ordo on std. A trainer's own concurrent code over them is
//! then model-checked with ordo's code inside every interleaving loom explores:
//!
//! 1. In your `Cargo.toml`, loom as a dev-dependency under that cfg, the version ordo uses
//!    (0.7: ordo's atomics and your `loom::model` must be one loom), and the cfg declared:
//!    ```toml
//!    [target.'cfg(ordo_loom)'.dev-dependencies]
//!    loom = "0.7"
//!
//!    [lints.rust]
//!    unexpected_cfgs = { level = "warn", check-cfg = ['cfg(ordo_loom)'] }
//!    ```
//! 2. A loom test file starts with `#![cfg(ordo_loom)]` and creates ordo's values inside
//!    `loom::model(|| ..)`, sharing them with `loom::sync::Arc` across `loom::thread::spawn`.
//!    Check that the model reaches the states your assertions are about (seed a false one: it
//!    must fail). In `tests/downstream_ordo_loom`, reads on the main thread before it joined
//!    the writers saw none of their writes in any schedule loom ran: a checking reader belongs
//!    in a spawned thread.
//! 3. Your other tests get `#[cfg(not(ordo_loom))]`: under the cfg, ordo's primitives work
//!    only inside a loom model, and the [`Engine`](engine::Engine) (whose stages run on std
//!    threads) is not for loom models at all.
//! 4. Run in the dev profile, in a target folder of its own (the cfg rebuilds every crate):
//!    `RUSTFLAGS="--cfg ordo_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo
//!    test`. ordo needs debug assertions under this cfg (its loom checks include its own
//!    `debug_assert!`s, such as one writer per PASSM block) and does not compile without
//!    them: for `--release`, add `-C debug-assertions` to `RUSTFLAGS`.
//!
//! The repository's `tests/downstream_ordo_loom` crate follows this recipe and runs in CI.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
// `EngineError` is returned at most once per run or epoch, and carries the lists a caller needs
// to know what the store holds after a stop; its size costs nothing that matters.
#![allow(clippy::result_large_err)]

pub(crate) mod bf16_lanes;
pub mod dispatcher;
pub mod engine;
pub mod lanes;
pub mod mft;
// Public in every build: every crate's catalog is declared with `mutation_catalog!`, whose hooks
// call `mutation::is_active`, a constant `false` without feature `mutants`; no test-only crate.
pub mod mutation;
pub mod outstanding;
#[cfg(feature = "partition")]
pub mod partition;
pub mod precision;
pub mod row_store;
pub mod sgd;
pub mod storage;
pub(crate) mod sync;
pub mod tables;
/// The validation cache lives in the engine (the device stage keeps it, and it caches the
/// engine's row blocks); re-exported here under its historical path.
pub use engine::validation_cache;
