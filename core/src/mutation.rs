//! The mutation catalog: seeded protocol bugs that every checker must be shown to catch.
//!
//! A mutant is compiled in only with the crate feature `mutants`, and switched on for a whole
//! process by the environment variable `ORDO_MUTANT=<name>` (names: [`Mutant::name`]). Without the
//! feature, [`active`] is a constant `false` and the hooks vanish from the shipped code.
//! `cargo run -p ordo-verify -- mutants` runs every checker against every mutant in subprocesses.
//!
//! A hook in protocol code reads `if mutation::active(Mutant::X) { <the bug> } else { <the
//! correct code> }`, so the bug sits exactly where the invariant is kept.

/// A seeded bug. Each variant names the invariant it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mutant {
    /// `RowStore::write_if_newer` ignores the row's version: an older write overwrites a newer one.
    WriteIgnoresTs,
    /// The device evicts cache entries with `ts ≤ STE` instead of `ts < STE` (one too many).
    EvictStePlusOne,
    /// The device skips validation against the cache.
    ValidationSkipped,
    /// A reader reads its rows before announcing the MFT it read.
    ReadBeforeAnnounce,
    /// A writer reports `finish(ts)` to the MFT before its row writes are visible.
    MftBeforeWritesVisible,
    /// The device does not insert a batch's updated rows into the validation cache.
    CacheInsertSkipped,
    /// Validation replaces a row when the cache ts is `≥` the read ts instead of `>`.
    /// *Equivalent*: equal timestamps are the same version, so the replacement is a no-op.
    ValidateGe,
    /// The interval dispatcher accepts a finished step that started in an earlier interval.
    AcceptEarlierInterval,
    /// `RowStore::read` returns its copy without re-reading the TID word: breaks *no torn read*.
    StoreReadSkipsRecheck,
    /// `RowStore::write_if_newer` drops the Release fence between taking the row lock and writing
    /// the values: a reader can see new values yet miss the lock, which breaks *no torn read*.
    StoreWriteNoFence,
    /// `Mft::finish` drops the `SeqCst` fence between raising its done flag and scanning:
    /// two out-of-order finishers can both miss each other's flag, which breaks *no timestamp is
    /// left behind*.
    MftNoFence,
    /// `Mft::finish` raises its done flag with a Relaxed CAS (no release): whoever advances the
    /// prefix past `ts` does not carry `ts`'s row writes, which breaks *writes before `finish(ts)`
    /// are visible to a reader that acquires a prefix `> ts`*.
    MftFlagRelaxed,
    /// `Mft::finish` bumps the prefix by one per finished timestamp (a finish counter) instead of
    /// advancing over contiguously finished ones: out-of-order finishes let the MFT pass an
    /// unfinished timestamp, which breaks *the MFT never exceeds an unfinished ts*.
    MftCountsFinishes,
    /// `Mft::finish` skips the window check: a timestamp `capacity` or more ahead of the prefix
    /// overwrites a ring slot, which breaks *never silent corruption when a ts runs ahead*.
    MftWindowUnchecked,
    /// `Outstanding::ste` drops the `SeqCst` fence between reading the prefix and scanning the
    /// slots: a concurrently registering batch can be missed *and* read an older prefix, which
    /// breaks *every batch that can still reach the device acquired a prefix ≥ any STE*.
    SteScanNoFence,
    /// `Outstanding::ste` takes the minimum over announced slots only, not the current prefix:
    /// with no batch in flight it returns "evict everything", which breaks the same STE invariant
    /// for a batch that registers afterwards.
    SteIgnoresMft,
    /// `Outstanding::register` announces the MFT it read and returns it, with no fence and no
    /// re-read (the paper's "read MFT, then add to the outstanding dictionary" taken literally
    /// without a global lock): a delayed batch announces a prefix below an STE already handed
    /// out, which breaks the STE invariant.
    RegisterNoRecheck,
    /// `Mft::prefix` loads the prefix Relaxed instead of Acquire: a batch that reads prefix `p`
    /// is not ordered after the row writes of the timestamps `< p`, which breaks *writes before
    /// `finish(ts)` are visible to a reader that acquires a prefix `> ts`*.
    MftPrefixRelaxed,
    /// The interval dispatcher is the published Algorithm 2, whose CAS covers only the accepted
    /// count `I_done` (ABA across intervals; `y` and `I_first` reset by separate stores).
    PublishedAbaDispatcher,
    /// The AMPNet controller pumps while `active <= max_active_keys` instead of `<`: one instance
    /// more than the bound is in flight, which breaks *in-flight instances never exceed mak*.
    AmpMakOffByOne,
    /// The AMPNet `Phi` join sends a backward message to the input its *latest* forward came from
    /// instead of the origin recorded for the message's state, which breaks *every forward gets
    /// exactly one backward, on the edge it came from*.
    AmpPhiForgetsOrigin,
    /// An AMPNet parameterized node asks for its update one gradient before
    /// `min_update_interval` gradients have accumulated.
    AmpUpdateBeforeInterval,
    /// AdaPM (`ordo-pm`): the owner relocates a key to one intent holder while another node
    /// also holds active intent, which breaks *relocation only with a single intent holder*.
    PmRelocateWithTwoHolders,
    /// AdaPM: on relocation the new owner discards its replica's unflushed delta (pushes that
    /// arrived while the relocation was in flight), which breaks *conservation*.
    PmRelocateDropsReplicaDelta,
    /// AdaPM: a replica whose last intent expires is dropped without sending its delta, which
    /// breaks *no replica outlives its intents without flushing its delta*.
    PmReplicaExpiresUnflushed,
    /// AdaPM: a stale owner (which relocated the key away) takes a routed request as delivered
    /// instead of forwarding it, which breaks *conservation* and *routing terminates at the owner*.
    PmStaleOwnerNoForward,
    /// A PASSM step writes every block lock-free instead of only the block its worker owns:
    /// two workers write one block at once, which breaks *at most one writer per block* (and so
    /// loses updates and tears rows).
    PassmWritesForeignBlock,
    /// ASSM reads and writes partitions without their locks: two workers' read-modify-writes
    /// of one partition interleave, which breaks *no update is lost*.
    AssmNoLock,
    /// An engine writer writes a stamped batch as soon as it has it, without waiting for the
    /// batches before it to finish and without giving up after an earlier batch's failed write:
    /// later batches land on top of a failed one, which breaks *after a failed write the store
    /// equals the replay of the prefix the error names*.
    WritesNotHeldBack,
}

impl Mutant {
    /// Every mutant, in catalog order.
    pub const ALL: [Mutant; 29] = [
        Mutant::WriteIgnoresTs,
        Mutant::EvictStePlusOne,
        Mutant::ValidationSkipped,
        Mutant::ReadBeforeAnnounce,
        Mutant::MftBeforeWritesVisible,
        Mutant::CacheInsertSkipped,
        Mutant::ValidateGe,
        Mutant::AcceptEarlierInterval,
        Mutant::StoreReadSkipsRecheck,
        Mutant::StoreWriteNoFence,
        Mutant::MftNoFence,
        Mutant::MftFlagRelaxed,
        Mutant::MftCountsFinishes,
        Mutant::MftWindowUnchecked,
        Mutant::SteScanNoFence,
        Mutant::SteIgnoresMft,
        Mutant::RegisterNoRecheck,
        Mutant::MftPrefixRelaxed,
        Mutant::PublishedAbaDispatcher,
        Mutant::AmpMakOffByOne,
        Mutant::AmpPhiForgetsOrigin,
        Mutant::AmpUpdateBeforeInterval,
        Mutant::PmRelocateWithTwoHolders,
        Mutant::PmRelocateDropsReplicaDelta,
        Mutant::PmReplicaExpiresUnflushed,
        Mutant::PmStaleOwnerNoForward,
        Mutant::PassmWritesForeignBlock,
        Mutant::AssmNoLock,
        Mutant::WritesNotHeldBack,
    ];

    /// The name used in `ORDO_MUTANT` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::WriteIgnoresTs => "write-ignores-ts",
            Mutant::EvictStePlusOne => "evict-ste-plus-one",
            Mutant::ValidationSkipped => "validation-skipped",
            Mutant::ReadBeforeAnnounce => "read-before-announce",
            Mutant::MftBeforeWritesVisible => "mft-before-writes-visible",
            Mutant::CacheInsertSkipped => "cache-insert-skipped",
            Mutant::ValidateGe => "validate-ge",
            Mutant::AcceptEarlierInterval => "accept-earlier-interval",
            Mutant::StoreReadSkipsRecheck => "store-read-skips-recheck",
            Mutant::StoreWriteNoFence => "store-write-no-fence",
            Mutant::MftNoFence => "mft-no-fence",
            Mutant::MftFlagRelaxed => "mft-flag-relaxed",
            Mutant::MftCountsFinishes => "mft-counts-finishes",
            Mutant::MftWindowUnchecked => "mft-window-unchecked",
            Mutant::SteScanNoFence => "ste-scan-no-fence",
            Mutant::SteIgnoresMft => "ste-ignores-mft",
            Mutant::RegisterNoRecheck => "register-no-recheck",
            Mutant::MftPrefixRelaxed => "mft-prefix-relaxed",
            Mutant::PublishedAbaDispatcher => "published-aba-dispatcher",
            Mutant::AmpMakOffByOne => "amp-mak-off-by-one",
            Mutant::AmpPhiForgetsOrigin => "amp-phi-forgets-origin",
            Mutant::AmpUpdateBeforeInterval => "amp-update-before-interval",
            Mutant::PmRelocateWithTwoHolders => "pm-relocate-with-two-holders",
            Mutant::PmRelocateDropsReplicaDelta => "pm-relocate-drops-replica-delta",
            Mutant::PmReplicaExpiresUnflushed => "pm-replica-expires-unflushed",
            Mutant::PmStaleOwnerNoForward => "pm-stale-owner-no-forward",
            Mutant::PassmWritesForeignBlock => "passm-writes-foreign-block",
            Mutant::AssmNoLock => "assm-no-lock",
            Mutant::WritesNotHeldBack => "writes-not-held-back",
        }
    }

    /// Parse a name from [`Mutant::name`].
    pub fn from_name(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Why the mutant is equivalent to the correct code, if it is.
    pub fn equivalent_because(self) -> Option<&'static str> {
        match self {
            Mutant::ValidateGe => Some(
                "equal timestamps are the same version of a row: replacing it with itself changes nothing",
            ),
            _ => None,
        }
    }
}

/// Whether mutant `m` is switched on in this process (`ORDO_MUTANT`, feature `mutants`).
#[inline]
pub fn active(m: Mutant) -> bool {
    #[cfg(feature = "mutants")]
    {
        static ACTIVE: std::sync::OnceLock<Option<Mutant>> = std::sync::OnceLock::new();
        *ACTIVE
            .get_or_init(|| std::env::var("ORDO_MUTANT").ok().and_then(|n| Mutant::from_name(&n)))
            == Some(m)
    }
    #[cfg(not(feature = "mutants"))]
    {
        let _ = m;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_validate_ge_is_equivalent() {
        for m in Mutant::ALL {
            assert_eq!(Mutant::from_name(m.name()), Some(m));
            assert_eq!(m.equivalent_because().is_some(), m == Mutant::ValidateGe);
        }
        assert_eq!(Mutant::from_name("nope"), None);
    }
}
