//! The mutation mechanism, and the catalog of `ordo`'s own seeded bugs (engine and primitives).
//!
//! A mutant is a seeded protocol bug that some checker must be shown to catch. Each crate keeps
//! the catalog of its own mutants beside its code, declared with [`mutation_catalog!`](crate::mutation_catalog):
//! `ordo` here, `ordo-pm` in `pm/src/mutation.rs`, `ordo-mp` in `mp/src/mutation.rs`. The macro
//! gives the crate a `Mutant` enum, an `active(Mutant)` hook test and a [`Catalog`] constant,
//! `CATALOG`: the data the mutation table's runner (`cargo run -p ordo-verify -- mutants`) reads
//! to know which package and feature compile the hooks and which test files can kill them.
//!
//! A mutant is compiled in only with the crate feature `mutants` (which turns on `ordo/mutants`),
//! and switched on for a whole process by the environment variable `ORDO_MUTANT=<name>`. Without
//! the feature, [`is_active`] (and so every crate's `active`) is a constant `false` and the hooks
//! vanish from the shipped code.
//!
//! A hook in protocol code reads `if mutation::active(Mutant::X) { <the bug> } else { <the
//! correct code> }`, so the bug sits exactly where the invariant is kept. Variant names are
//! unique across all catalogs: the runner finds a mutant's hooks by the text `Mutant::X`.

/// A checker of the mutation table: one column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Checker {
    /// Explicit-state models on stateright: in `ordo-verify` (OAC, dispatcher, AMPNet, PASSM+)
    /// or a crate's model test over its shipped state machine (`pm/tests/model_*.rs`).
    Model,
    /// Property and equivalence tests on the real code.
    Proptest,
    /// loom models of the real code (`--cfg ordo_loom`).
    Loom,
    /// shuttle schedules of the real code (`--cfg ordo_shuttle`).
    Shuttle,
    /// cargo-fuzz targets on the real code.
    Fuzz,
}

impl Checker {
    /// Every checker, in table order.
    pub const ALL: [Checker; 5] =
        [Checker::Model, Checker::Proptest, Checker::Loom, Checker::Shuttle, Checker::Fuzz];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Model => "model",
            Checker::Proptest => "proptest",
            Checker::Loom => "loom",
            Checker::Shuttle => "shuttle",
            Checker::Fuzz => "fuzz",
        }
    }

    /// Parse [`Checker::name`].
    pub fn from_name(s: &str) -> Option<Checker> {
        Checker::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// Test files of one crate that one checker runs with the crate's mutants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suite {
    /// The column they fill.
    pub checker: Checker,
    /// The files, relative to the workspace root; one `*` in the file name matches any text
    /// (`core/tests/loom_*.rs`).
    pub files: &'static str,
}

/// One mutant as the runner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The name used in `ORDO_MUTANT` and in the table.
    pub name: &'static str,
    /// The text that marks a hook in the sources: `Mutant::<Variant>`.
    pub hook: &'static str,
    /// Why the mutant is equivalent to the correct code, if it is.
    pub equivalent: Option<&'static str>,
    /// Checkers that must each kill it (beyond "some checker kills it").
    pub killed_by: &'static [Checker],
}

/// One crate's mutation catalog: where its hooks compile and what can kill them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Catalog {
    /// The cargo package that holds the hooks.
    pub package: &'static str,
    /// Its directory, relative to the workspace root.
    pub dir: &'static str,
    /// The package feature that compiles the hooks.
    pub feature: &'static str,
    /// The test files that run against its mutants, per checker.
    pub suites: &'static [Suite],
    /// Its mutants, in catalog order.
    pub mutants: &'static [Entry],
}

/// Whether the mutant named `name` is switched on in this process (`ORDO_MUTANT`, feature
/// `mutants`); a constant `false` without the feature.
#[inline]
pub fn is_active(name: &str) -> bool {
    #[cfg(feature = "mutants")]
    {
        static ACTIVE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        ACTIVE.get_or_init(|| std::env::var("ORDO_MUTANT").ok()).as_deref() == Some(name)
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = name;
        false
    }
}

/// Declare a crate's mutation catalog: a `Mutant` enum (one variant per seeded bug, its doc
/// naming the invariant it breaks), `Mutant::{ALL, name, from_name, equivalent_because}`, the
/// hook test `active(Mutant) -> bool`, and `CATALOG: ordo::mutation::Catalog`.
///
/// ```
/// mod mutation {
///     ordo::mutation_catalog! {
///         package: "my-crate", dir: "my-crate", feature: "mutants",
///         suites: [Proptest => "my-crate/tests/prop_*.rs"],
///         /// The queue pops from the wrong end, which breaks *FIFO order*.
///         MyQueueLifo = "my-queue-lifo", killed_by: [Proptest];
///         /// Replaces a value with itself. *Equivalent*.
///         MySelfWrite = "my-self-write", equivalent: "writes the value it read";
///     }
/// }
/// use mutation::Mutant;
/// assert_eq!(Mutant::from_name("my-queue-lifo"), Some(Mutant::MyQueueLifo));
/// assert!(!mutation::active(Mutant::MyQueueLifo)); // without feature `mutants`: always false
/// assert_eq!(mutation::CATALOG.mutants[1].hook, "Mutant::MySelfWrite");
/// ```
#[macro_export]
macro_rules! mutation_catalog {
    (
        package: $package:literal, dir: $dir:literal, feature: $feature:literal,
        suites: [$($checker:ident => $files:literal),* $(,)?],
        $(
            $(#[doc = $doc:literal])*
            $variant:ident = $name:literal
            $(, equivalent: $why:literal)?
            $(, killed_by: [$($must:ident),* $(,)?])?
            ;
        )*
    ) => {
        /// A seeded bug of this crate. Each variant names the invariant it breaks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Mutant {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Mutant {
            /// Every mutant, in catalog order.
            pub const ALL: &'static [Mutant] = &[$(Mutant::$variant),*];

            /// The name used in `ORDO_MUTANT` and in reports.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Mutant::$variant => $name,)*
                }
            }

            /// Parse a name from [`Mutant::name`].
            pub fn from_name(name: &str) -> Option<Mutant> {
                Mutant::ALL.iter().copied().find(|m| m.name() == name)
            }

            /// Why the mutant is equivalent to the correct code, if it is.
            pub const fn equivalent_because(self) -> Option<&'static str> {
                match self {
                    $(Mutant::$variant => $crate::__mutation_opt!($($why)?),)*
                }
            }
        }

        /// Whether mutant `m` is switched on in this process (`ORDO_MUTANT`, feature `mutants`);
        /// a constant `false` without the feature.
        #[inline]
        pub fn active(m: Mutant) -> bool {
            $crate::mutation::is_active(m.name())
        }

        /// This crate's catalog, as the mutation table's runner reads it.
        pub const CATALOG: $crate::mutation::Catalog = $crate::mutation::Catalog {
            package: $package,
            dir: $dir,
            feature: $feature,
            suites: &[$($crate::mutation::Suite {
                checker: $crate::mutation::Checker::$checker,
                files: $files,
            }),*],
            mutants: &[$($crate::mutation::Entry {
                name: $name,
                hook: concat!("Mutant::", stringify!($variant)),
                equivalent: $crate::__mutation_opt!($($why)?),
                killed_by: &[$($($crate::mutation::Checker::$must),*)?],
            }),*],
        };
    };
}

/// `Some(x)` or `None`: an optional field of [`mutation_catalog!`](crate::mutation_catalog).
#[doc(hidden)]
#[macro_export]
macro_rules! __mutation_opt {
    () => {
        None
    };
    ($x:literal) => {
        Some($x)
    };
}

crate::mutation_catalog! {
    package: "ordo", dir: "core", feature: "mutants",
    suites: [
        Proptest => "core/tests/prop_*.rs",
        Loom => "core/tests/loom_*.rs",
        Shuttle => "core/tests/shuttle_*.rs",
        // The engine's schedule fuzzer only: `cli_validate` stops at option checks, reaches no
        // protocol, and would double every mutant's fuzz time.
        Fuzz => "fuzz/fuzz_targets/engine_schedule.rs",
        // The partition buffer's memory bound under a slow disk: a real-code test, no
        // proptest, but only it sees an eviction that does not wait.
        Proptest => "core/tests/partition_write_back_bound.rs",
    ],
    /// `RowStore::write_if_newer` ignores the row's version: an older write overwrites a newer one.
    WriteIgnoresTs = "write-ignores-ts";
    /// The device evicts cache entries with `ts ≤ STE` instead of `ts < STE` (one too many).
    EvictStePlusOne = "evict-ste-plus-one";
    /// The device skips validation against the cache.
    ValidationSkipped = "validation-skipped";
    /// A reader reads its rows before announcing the MFT it read.
    ReadBeforeAnnounce = "read-before-announce";
    /// A writer reports `finish(ts)` to the MFT before its row writes are visible.
    MftBeforeWritesVisible = "mft-before-writes-visible";
    /// The device does not insert a batch's updated rows into the validation cache.
    CacheInsertSkipped = "cache-insert-skipped";
    /// Validation replaces a row when the cache ts is `≥` the read ts instead of `>`.
    /// *Equivalent*: equal timestamps are the same version, so the replacement is a no-op.
    ValidateGe = "validate-ge",
        equivalent: "equal timestamps are the same version of a row: replacing it with itself changes nothing";
    /// The interval dispatcher accepts a finished step that started in an earlier interval.
    AcceptEarlierInterval = "accept-earlier-interval";
    /// `RowStore::read` returns its copy without re-reading the TID word: breaks *no torn read*.
    StoreReadSkipsRecheck = "store-read-skips-recheck";
    /// `RowStore::write_if_newer` drops the Release fence between taking the row lock and writing
    /// the values: a reader can see new values yet miss the lock, which breaks *no torn read*.
    StoreWriteNoFence = "store-write-no-fence";
    /// `Mft::finish` drops the `SeqCst` fence between raising its done flag and scanning:
    /// two out-of-order finishers can both miss each other's flag, which breaks *no timestamp is
    /// left behind*.
    MftNoFence = "mft-no-fence";
    /// `Mft::finish` raises its done flag with a Relaxed CAS (no release): whoever advances the
    /// prefix past `ts` does not carry `ts`'s row writes, which breaks *writes before `finish(ts)`
    /// are visible to a reader that acquires a prefix `> ts`*.
    MftFlagRelaxed = "mft-flag-relaxed";
    /// `Mft::finish` bumps the prefix by one per finished timestamp (a finish counter) instead of
    /// advancing over contiguously finished ones: out-of-order finishes let the MFT pass an
    /// unfinished timestamp, which breaks *the MFT never exceeds an unfinished ts*.
    MftCountsFinishes = "mft-counts-finishes";
    /// `Mft::finish` skips the window check: a timestamp `capacity` or more ahead of the prefix
    /// overwrites a ring slot, which breaks *never silent corruption when a ts runs ahead*.
    MftWindowUnchecked = "mft-window-unchecked";
    /// `Outstanding::ste` drops the `SeqCst` fence between reading the prefix and scanning the
    /// slots: a concurrently registering batch can be missed *and* read an older prefix, which
    /// breaks *every batch that can still reach the device acquired a prefix ≥ any STE*.
    SteScanNoFence = "ste-scan-no-fence";
    /// `Outstanding::ste` takes the minimum over announced slots only, not the current prefix:
    /// with no batch in flight it returns "evict everything", which breaks the same STE invariant
    /// for a batch that registers afterwards.
    SteIgnoresMft = "ste-ignores-mft";
    /// `Outstanding::register` announces the MFT it read and returns it, with no fence and no
    /// re-read (the paper's "read MFT, then add to the outstanding dictionary" taken literally
    /// without a global lock): a delayed batch announces a prefix below an STE already handed
    /// out, which breaks the STE invariant.
    RegisterNoRecheck = "register-no-recheck";
    /// `Mft::prefix` loads the prefix Relaxed instead of Acquire: a batch that reads prefix `p`
    /// is not ordered after the row writes of the timestamps `< p`, which breaks *writes before
    /// `finish(ts)` are visible to a reader that acquires a prefix `> ts`*.
    MftPrefixRelaxed = "mft-prefix-relaxed";
    /// The interval dispatcher is the published Algorithm 2, whose CAS covers only the accepted
    /// count `I_done` (ABA across intervals; `y` and `I_first` reset by separate stores).
    PublishedAbaDispatcher = "published-aba-dispatcher";
    /// A PASSM step writes every block lock-free instead of only the block its worker owns:
    /// two workers write one block at once, which breaks *at most one writer per block* (and so
    /// loses updates and tears rows).
    PassmWritesForeignBlock = "passm-writes-foreign-block";
    /// ASSM reads and writes partitions without their locks: two workers' read-modify-writes
    /// of one partition interleave, which breaks *no update is lost*.
    AssmNoLock = "assm-no-lock";
    /// An engine writer writes a stamped batch as soon as it has it, without waiting for the
    /// batches before it to finish and without giving up after an earlier batch's failed write:
    /// later batches land on top of a failed one, which breaks *after a failed write the store
    /// equals the replay of the prefix the error names*.
    WritesNotHeldBack = "writes-not-held-back";
    /// A failed writer rolls back every row of its undo buffer, not only those whose old values
    /// it saved: rows it never wrote get an earlier batch's floats, which breaks *after a failed
    /// write the store equals the replay of the prefix the error names*.
    RollBackUnsavedRows = "roll-back-unsaved-rows";
    /// A failed writer that kept no copies of its rows (its storage promised writes that fail
    /// only on bad arguments, then failed midway) rolls back nothing and leaves the store
    /// untorn: its landed rows stay, yet the error names the prefix before it, which breaks
    /// *after a failed write the store equals the replay of the prefix the error names*.
    RollBackWithoutCopies = "roll-back-without-copies";
    /// `PartitionedStorage::evict` drops a changed partition without writing it back: the
    /// partition leaves the buffer before its last write-back, which breaks *a row's version and
    /// values leave the buffer and come back together* (its updates are lost).
    PartitionEvictWithoutWriteBack = "partition-evict-without-write-back", killed_by: [Proptest, Model];
    /// `PartitionedStorage::admit` takes a partition's slot before its load finished (its rows
    /// as they are before the bytes arrive), which breaks *a batch reads a partition only after
    /// its load completed*.
    PartitionReadBeforeLoad = "partition-read-before-load", killed_by: [Proptest, Model];
    /// A write-back writes the partition's file as it was loaded, not the buffer's copy: a
    /// stale copy, which breaks the same invariant as an eviction without write-back.
    PartitionWriteBackStale = "partition-write-back-stale", killed_by: [Proptest, Model];
    /// `Walk` counts a buffer state finished once its batches are submitted, not written: a
    /// partition leaves the buffer while a batch of an earlier state that touches it is still in
    /// flight, which breaks *a partition leaves the buffer only when no unwritten batch touches
    /// it*.
    PartitionEvictUnfinished = "partition-evict-unfinished", killed_by: [Proptest, Model, Shuttle];
    /// An owned session's device thread takes the stamps into the caller's outbox while it
    /// holds the outbox lock, running the device work that is ready (model steps) under it: a
    /// step that waits for a lock its caller holds while reading the outbox (a binding's
    /// interpreter lock) deadlocks, which breaks *the outbox lock is never held across device
    /// work*.
    OutboxHeldAcrossStep = "outbox-held-across-step";
    /// `Session::submit_inline` runs its batch without first emptying the pipeline: batches
    /// submitted before it may be stamped after it, or still be on the device while it is
    /// collected, which breaks *an inline batch is stamped after every batch submitted before
    /// it*.
    InlineWithoutDrain = "inline-without-drain", killed_by: [Proptest];
    /// An owned session's device thread sends a batch given to `OwnedSession::submit_inline`
    /// through the pipeline instead: a batch submitted before it may be stamped after it, which
    /// breaks *an inline batch is stamped after every batch submitted before it* for the owned
    /// session.
    OwnedInlinePipelined = "owned-inline-pipelined", killed_by: [Proptest];
    /// The cache index sizes its table by a block's last row id, as if every batch's rows were
    /// sorted: a block in the model's order whose largest id comes earlier is indexed past
    /// the table, which breaks *a batch's rows may come in any order* (the engine stops on
    /// its device stage).
    CacheIndexSizedByLastRow = "cache-index-sized-by-last-row", killed_by: [Proptest];
    /// The device takes read batches in the order the readers finish them, not in submission
    /// order: racing readers permute the recorded order, which breaks *the device takes the
    /// batch at position `p` only after positions `0..p`* (an `Oac` run then equals the replay
    /// of its own order, but not the sequential run of its input).
    DeviceTakesArrivalOrder = "device-takes-arrival-order", killed_by: [Proptest, Model];
    /// `PartitionedStorage::evict` queues a changed partition's write-back without first
    /// waiting for the write-backs queued before: behind a disk slower than the trainer,
    /// evicted partitions pile up in memory, one per swap, which breaks *at most `c + 2`
    /// partitions are in memory however slow the disk* (the walk's `c + 1` and one evicted
    /// partition waiting for its write-back).
    PartitionEvictSkipsWriteBackWait = "partition-evict-skips-write-back-wait", killed_by: [Proptest];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_validate_ge_is_equivalent() {
        for &m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
            assert_eq!(m.equivalent_because().is_some(), m == Mutant::ValidateGe);
        }
        assert_eq!(Mutant::from_name("nope"), None);
    }

    #[test]
    fn the_catalog_lists_every_mutant_with_its_hook() {
        assert_eq!(CATALOG.mutants.len(), Mutant::ALL.len());
        for (e, &m) in CATALOG.mutants.iter().zip(Mutant::ALL) {
            assert_eq!(e.name, m.name());
            assert_eq!(e.hook, format!("Mutant::{m:?}"));
            assert_eq!(e.equivalent, m.equivalent_because());
        }
        assert_eq!(
            CATALOG.suites[1],
            Suite { checker: Checker::Loom, files: "core/tests/loom_*.rs" }
        );
    }
}
