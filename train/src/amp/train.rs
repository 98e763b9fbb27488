//! The epoch loop: train on a shuffled order, average replicas, validate; record a curve.

use std::sync::Arc;
use std::time::Duration;

use ordo_mp::staleness::StalenessHistogram;
use ordo_mp::{Graph, MpError, RunConfig, RunReport, Source, run};

use crate::rng::SplitMix64;

/// One epoch's measurements.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpochPoint {
    /// Epoch, from 1.
    pub epoch: usize,
    /// Wall time since the start, training and validation (s).
    pub wall_s: f64,
    /// Training examples per second this epoch.
    pub train_per_s: f64,
    /// Validation examples per second this epoch.
    pub val_per_s: f64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Validation accuracy.
    pub val_acc: f64,
    /// Most instances in flight during training.
    pub max_active: usize,
    /// Staleness of the gradients applied this epoch, over all parameterized nodes.
    pub staleness: StalenessHistogram,
}

/// How to train.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Epochs.
    pub epochs: usize,
    /// `max_active_keys` (training and validation).
    pub mak: usize,
    /// Shuffle seed.
    pub seed: u64,
    /// Replica averages per epoch (§5 averages once, at the epoch's end): the epoch's order is
    /// cut into this many runs, each followed by an average, so the pipeline drains this often.
    pub replica_syncs: usize,
    /// The synchronization's step ([`Graph::sync_replicas`]): 1 averages the replicas (§5),
    /// the replica count applies the sum of their moves.
    pub replica_step: f32,
    /// Also average the replicas' optimizer memory at each synchronization
    /// ([`Graph::average_replica_moments`]).
    pub replica_moments: bool,
}

fn examples(src: &dyn Source, order: &[usize]) -> f64 {
    order.iter().map(|&i| src.instance(i).1.last().map_or(0, |y| y.nrows())).sum::<usize>() as f64
}

/// Train `graph` on `train` for `s.epochs` epochs, validating on `val` after each; `tick` is
/// called after each epoch.
pub fn train(
    graph: &mut Graph,
    train: Arc<dyn Source>,
    val: Arc<dyn Source>,
    s: &Schedule,
    mut tick: impl FnMut(&EpochPoint),
) -> Result<Vec<EpochPoint>, MpError> {
    let mut g = SplitMix64::new(s.seed, 7);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let val_order: Vec<usize> = (0..val.len()).collect();
    let (n_train, n_val) = (examples(&*train, &order), examples(&*val, &val_order));
    let mut wall = Duration::ZERO;
    let mut curve = Vec::new();
    for epoch in 1..=s.epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, g.below(i as u32 + 1) as usize);
        }
        let cfg = RunConfig { max_active_keys: s.mak, ..RunConfig::default() };
        let before = total_staleness(graph);
        let chunk = order.len().div_ceil(s.replica_syncs.max(1)).max(1);
        let mut t = RunReport::default();
        for part in order.chunks(chunk) {
            let r = run(graph, train.clone(), part.to_vec(), &cfg)?;
            graph.sync_replicas(s.replica_step);
            if s.replica_moments {
                graph.average_replica_moments();
            }
            t.results.extend(r.results);
            t.max_active = t.max_active.max(r.max_active);
            t.elapsed += r.elapsed;
        }
        let staleness = total_staleness(graph).since(&before);
        let v = run(graph, val.clone(), val_order.clone(), &RunConfig { train: false, ..cfg })?;
        wall += t.elapsed + v.elapsed;
        let p = EpochPoint {
            epoch,
            wall_s: wall.as_secs_f64(),
            train_per_s: n_train / t.elapsed.as_secs_f64(),
            val_per_s: n_val / v.elapsed.as_secs_f64(),
            train_loss: t.mean_loss(),
            val_acc: v.accuracy(),
            max_active: t.max_active,
            staleness,
        };
        tick(&p);
        curve.push(p);
    }
    Ok(curve)
}

/// Staleness over all parameterized nodes since the graph was built.
fn total_staleness(graph: &Graph) -> StalenessHistogram {
    let mut all = StalenessHistogram::default();
    graph.staleness().iter().for_each(|(_, _, h)| all.merge(h));
    all
}

/// The first epoch reaching `target` validation accuracy: (epochs, wall seconds).
pub fn time_to_target(curve: &[EpochPoint], target: f64) -> Option<(usize, f64)> {
    curve.iter().find(|p| p.val_acc >= target).map(|p| (p.epoch, p.wall_s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amp::list_reduction::generate;
    use crate::amp::tasks::{list_graph, list_instances};
    use ordo_mp::optimizer::Optimizer;

    /// The RNN with two replicas and four instances in flight learns list reduction well above
    /// the majority class (the answer distribution's mode is below 0.25).
    #[test]
    fn list_reduction_rnn_learns_asynchronously() {
        let (tr, va) = (generate(3000, 5, 1), generate(500, 5, 2));
        let mut counts = [0usize; 10];
        va.iter().for_each(|e| counts[e.answer] += 1);
        let majority = *counts.iter().max().unwrap() as f64 / va.len() as f64;
        let mut g = list_graph(64, 2, Optimizer::adam(0.003), 1, 2, 1).unwrap();
        let s = Schedule {
            epochs: 4,
            mak: 4,
            seed: 1,
            replica_syncs: 1,
            replica_step: 1.0,
            replica_moments: false,
        };
        let curve = train(
            &mut g,
            Arc::new(list_instances(&tr, 50, 64, 0)),
            Arc::new(list_instances(&va, 50, 64, 0)),
            &s,
            |_| {},
        )
        .unwrap();
        let last = curve.last().unwrap();
        assert!(last.max_active <= 4 && last.max_active > 1);
        // With several instances in flight some gradients are applied after other updates.
        assert!(last.staleness.count() > 0 && last.staleness.max() > 0);
        assert!(last.val_acc > majority + 0.1, "val acc {} vs majority {majority}", last.val_acc);
    }
}
