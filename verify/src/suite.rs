//! The protocol models at a bound: which models exist, the CI bound, and the model checker as a
//! checker of the mutation catalog.

use ordo::mutation::Mutant;
use thiserror::Error;

use crate::interval::{INTERVAL_MUTANTS, Interval, IntervalConfigError, Variant};
use crate::model::{CheckError, Report, Search, check};
use crate::oac::{OAC_MUTANTS, Oac, OacConfigError, SteAt};
use crate::swap::{SWAP_MUTANTS, Swap};

/// How large the checked instances are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// OAC: batches.
    pub batches: usize,
    /// OAC: rows.
    pub rows: usize,
    /// OAC: reader threads.
    pub readers: usize,
    /// OAC: writer threads.
    pub writers: usize,
    /// Dispatcher: worker threads `m`.
    pub workers: usize,
    /// Dispatcher: steps started in total.
    pub steps: usize,
    /// Dispatcher: initial interval `y0` (decays by one per interval, down to 1).
    pub y0: usize,
    /// OAC: explicit row sets, one per batch (overrides `batches`); `None`: the standard sets
    /// of [`Oac::standard`].
    pub sets: Option<Vec<Vec<usize>>>,
}

impl Bound {
    /// The bound CI checks exhaustively (a few seconds in release): OAC with 5 batches over
    /// 3 rows (batch `b` touches rows `b mod 3`, `(b+1) mod 3`), 2 readers, 2 writers; the
    /// dispatcher with 3 workers, 8 steps, `y0 = 3` decaying to 1.
    pub const CI: Bound = Bound {
        batches: 5,
        rows: 3,
        readers: 2,
        writers: 2,
        workers: 3,
        steps: 8,
        y0: 3,
        sets: None,
    };

    /// The OAC model at this bound (standard row sets).
    pub fn oac(&self, mutant: Option<Mutant>) -> Result<Oac, ModelError> {
        let sets = match &self.sets {
            Some(sets) => sets.clone(),
            None => Oac::standard(self.batches, self.rows, None)?.sets().to_vec(),
        };
        Ok(Oac::new(sets, self.rows, self.readers, self.writers, mutant)?)
    }

    /// The dispatcher model at this bound.
    pub fn interval(
        &self,
        variant: Variant,
        mutant: Option<Mutant>,
    ) -> Result<Interval, ModelError> {
        Ok(Interval::new(self.workers, self.steps, self.y0, true, variant, mutant)?)
    }
}

/// A model could not be built or searched.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ModelError {
    /// Bad OAC bound.
    #[error(transparent)]
    Oac(#[from] OacConfigError),
    /// Bad dispatcher bound.
    #[error(transparent)]
    Interval(#[from] IntervalConfigError),
    /// The search ran out of room.
    #[error(transparent)]
    Check(#[from] CheckError),
}

/// One model at a bound, and its search report.
#[derive(Debug, Clone)]
pub struct ModelRun {
    /// What was checked, e.g. `oac k=5 p=3 readers=2 writers=2`.
    pub name: String,
    /// The report.
    pub report: Report,
}

/// Check the correct protocols at `bound` with stateright, breadth-first on `search.threads`
/// threads: the OAC protocol (STE computed by the device, as the engine does, and at the
/// announcement, as the paper does), the single-word dispatcher, the latter a second time
/// depth-first with symmetry reduction, and the partition buffer's swap protocol at its own CI
/// bound ([`Swap::ci`]) (its workers are interchangeable; OAC's batches are not:
/// each has its own row set and step, and its reader and writer pools hold no identity).
pub fn check_correct(bound: &Bound, search: Search) -> Result<Vec<ModelRun>, ModelError> {
    let bfs = Search { dfs: false, symmetry: false, ..search };
    let oac = bound.oac(None)?;
    let sets: Vec<String> = oac.sets().iter().map(|s| format!("{s:?}")).collect();
    let name = |who: &str| {
        format!(
            "OAC protocol, STE computed by the {who}: k={} batches over p={} rows (sets {}), {} readers, {} writers",
            oac.sets().len(),
            bound.rows,
            sets.join(" "),
            bound.readers,
            bound.writers
        )
    };
    let runs = vec![
        ModelRun {
            name: name("device (engine)"),
            report: check(&oac.clone().with_ste_at(SteAt::Device), bfs)?,
        },
        ModelRun {
            name: name("reader at announce (paper)"),
            report: check(&oac.with_ste_at(SteAt::Announce), bfs)?,
        },
        ModelRun {
            name: format!(
                "interval dispatcher (single-word CAS): m={} workers, {} steps, y0={} decaying",
                bound.workers, bound.steps, bound.y0
            ),
            report: check(&bound.interval(Variant::SingleWord, None)?, bfs)?,
        },
        ModelRun {
            name: format!(
                "interval dispatcher (single-word CAS), depth-first with workers' symmetry: m={} workers, {} steps, y0={} decaying",
                bound.workers, bound.steps, bound.y0
            ),
            report: check(
                &bound.interval(Variant::SingleWord, None)?,
                Search { dfs: true, symmetry: true, ..search },
            )?,
        },
        ModelRun { name: swap_name(&Swap::ci(None)), report: check(&Swap::ci(None), bfs)? },
    ];
    Ok(runs)
}

/// The partition buffer's swap model's name at its bound.
fn swap_name(m: &Swap) -> String {
    format!(
        "partition buffer at a swap: {} epochs of BETA over P={} partitions, buffer c={} ({} states each), {} batches in flight",
        m.epochs,
        m.plan.partitions,
        m.plan.buffer,
        m.plan.states.len(),
        m.depth
    )
}

/// The mutants that change a modelled protocol step (the model checker's share of the catalog).
pub fn protocol_mutants() -> Vec<Mutant> {
    OAC_MUTANTS.iter().chain(INTERVAL_MUTANTS.iter()).chain(SWAP_MUTANTS.iter()).copied().collect()
}

/// Run the model of the protocol that `mutant` changes, with the mutant on (OAC: STE computed by
/// the device, as the engine does). `None` when the mutant changes no modelled protocol (e.g. a
/// weak-memory ordering mutant: the model explores sequentially consistent interleavings).
/// Pass [`Search::default`] (breadth-first, one thread) for a shortest counterexample.
pub fn check_mutant(
    bound: &Bound,
    mutant: Mutant,
    search: Search,
) -> Option<Result<Report, ModelError>> {
    if OAC_MUTANTS.contains(&mutant) {
        Some(bound.oac(Some(mutant)).and_then(|m| Ok(check(&m, search)?)))
    } else if INTERVAL_MUTANTS.contains(&mutant) {
        Some(bound.interval(Variant::SingleWord, Some(mutant)).and_then(|m| Ok(check(&m, search)?)))
    } else if SWAP_MUTANTS.contains(&mutant) {
        Some(check(&Swap::ci(Some(mutant)), search).map_err(ModelError::from))
    } else {
        None
    }
}

/// Whether ordo-verify has a model of the protocol that the mutant named `name` changes (the
/// model column runs it in process): OAC, the dispatcher, the partition buffer's swap, PASSM+,
/// AMPNet. AdaPM's mutants are
/// checked on the shipped node by `pm/tests/model_node.rs`, a suite of ordo-pm's catalog.
pub fn has_model(name: &str) -> bool {
    protocol_mutants().iter().any(|m| m.name() == name)
        || crate::passm::PASSM_MUTANTS.iter().any(|m| m.name() == name)
        || crate::ampnet::AMPNET_MUTANTS.iter().any(|m| m.name() == name)
}

/// The mutants of the protocols modelled on stateright (AMPNet, PASSM+), checked at their CI
/// bounds: `None` when the mutant named `name` belongs to neither model; otherwise
/// `Some(Some(why))` when the model finds a counterexample to the property the mutant breaks
/// (the kill) and `Some(None)` when it survives.
pub fn check_stateright_mutant(name: &str) -> Option<Option<String>> {
    use stateright::{Checker, Model};
    if let Some(&mutant) = crate::passm::PASSM_MUTANTS.iter().find(|m| m.name() == name) {
        let model = crate::passm::Passm::ci(Some(mutant));
        let checker = model
            .clone()
            .checker()
            .finish_when(stateright::HasDiscoveries::AnyFailures)
            .spawn_bfs()
            .join();
        return Some(checker.discovery(crate::passm::ONE_WRITER).map(|path| {
            let path = crate::model::shortest(&model, crate::passm::ONE_WRITER, path);
            format!(
                "{}-step counterexample ({} states): {}",
                path.into_actions().len(),
                checker.unique_state_count(),
                crate::passm::ONE_WRITER
            )
        }));
    }
    if let Some(&mutant) = crate::ampnet::AMPNET_MUTANTS.iter().find(|m| m.name() == name) {
        let model = crate::ampnet::Ampnet::ci(Some(mutant));
        let checker = model.clone().checker().spawn_bfs().join();
        let broken = crate::ampnet::PROPERTIES.iter().find(|p| checker.discovery(p).is_some());
        return Some(match broken {
            Some(p) => {
                Some(format!("counterexample ({} states): {p}", checker.unique_state_count()))
            }
            None if model.fails() => Some("an instance can never complete".into()),
            None => None,
        });
    }
    None
}
