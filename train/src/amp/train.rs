//! The epoch loop: train on a shuffled order, average replicas, validate; record a curve.

use std::sync::Arc;
use std::time::Duration;

use ordo_mp::staleness::StalenessHistogram;
use ordo_mp::{Graph, MpError, RunConfig, RunReport, Source, run};
use thiserror::Error;

use super::lr_schedule::LrSchedule;
use crate::rng::SplitMix64;

/// One evaluation's measurements (one per epoch, or `evals_per_epoch` per epoch).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpochPoint {
    /// Epoch, from 1 (the epoch this evaluation falls in).
    pub epoch: usize,
    /// Epochs of training done at this evaluation (`epoch` at an epoch's end; `2.25` after a
    /// quarter of the third).
    pub at: f64,
    /// Wall time since the start, training and every validation so far (s).
    pub wall_s: f64,
    /// Training examples per second since the previous evaluation.
    pub train_per_s: f64,
    /// Validation examples per second of this evaluation.
    pub val_per_s: f64,
    /// Mean training loss since the previous evaluation.
    pub train_loss: f64,
    /// Validation accuracy.
    pub val_acc: f64,
    /// Learning rate of this epoch ([`LrSchedule`]).
    pub lr: f32,
    /// Most instances in flight during training since the previous evaluation.
    pub max_active: usize,
    /// Staleness of the gradients applied since the previous evaluation, over all
    /// parameterized nodes.
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
    /// Base learning rate, and how it changes over the epochs.
    pub lr: (f32, LrSchedule),
    /// Validations per epoch (1: at each epoch's end).
    pub evals_per_epoch: usize,
}

/// Why an AMPNet run stopped.
#[derive(Debug, Error)]
pub enum TrainError {
    /// The graph or the runtime failed.
    #[error(transparent)]
    Mp(#[from] MpError),
    /// A loss or a parameter became NaN or infinite ([`MpError::NonFiniteLoss`],
    /// [`MpError::NonFiniteParam`]): the run stopped there instead of training on.
    #[error("the run diverged: {what} in epoch {epoch}; lower --lr (this epoch's rate was {lr})")]
    Diverged {
        /// What became non-finite, and where: the instance and its step in the epoch, or the
        /// node and its update (counted from 1 since the graph was built).
        what: String,
        /// The epoch, counted from 1.
        epoch: usize,
        /// The epoch's learning rate (`--lr` through `--lr-schedule`).
        lr: f32,
    },
}

/// Where the epoch `epoch` at rate `lr` stands: `steps` instances of it completed before the
/// current run. Turns a run's non-finite loss or parameter into [`TrainError::Diverged`].
struct InEpoch {
    epoch: usize,
    lr: f32,
    steps: usize,
}

impl InEpoch {
    /// A run's error: a non-finite loss as the divergence it is, the rest as is.
    fn run_error(&self, e: MpError) -> TrainError {
        match e {
            MpError::NonFiniteLoss { instance, loss, step } => self.diverged(format!(
                "the loss of instance {instance} became {loss} at step {} of the epoch",
                self.steps + step
            )),
            MpError::NonFiniteParam { kind, update } => self.diverged(format!(
                "a parameter of a {kind} node became NaN or infinite at its update {update}"
            )),
            e => TrainError::Mp(e),
        }
    }

    fn diverged(&self, what: String) -> TrainError {
        TrainError::Diverged { what, epoch: self.epoch, lr: self.lr }
    }
}

fn examples(src: &dyn Source, order: &[usize]) -> f64 {
    order.iter().map(|&i| src.instance(i).1.last().map_or(0, |y| y.nrows())).sum::<usize>() as f64
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Train `graph` on `train` for `s.epochs` epochs, validating on `val` `s.evals_per_epoch`
/// times per epoch; `tick` is called after each validation.
///
/// Each epoch's order is cut into `lcm(replica_syncs, evals_per_epoch)` runs; the replicas
/// are synchronized after every `1/replica_syncs` of the epoch and validated after every
/// `1/evals_per_epoch`, after that point's synchronization (if any), so what is validated is
/// the averaged model. The learning rate is set once per epoch.
///
/// A loss that comes back NaN or infinite, or an update that leaves a parameter so, stops the
/// run there: [`TrainError::Diverged`], naming the instance, the epoch and the rate to lower.
pub fn train(
    graph: &mut Graph,
    train: Arc<dyn Source>,
    val: Arc<dyn Source>,
    s: &Schedule,
    mut tick: impl FnMut(&EpochPoint),
) -> Result<Vec<EpochPoint>, TrainError> {
    let mut g = SplitMix64::new(s.seed, 7);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let val_order: Vec<usize> = (0..val.len()).collect();
    let n_val = examples(&*val, &val_order);
    let (syncs, evals) = (s.replica_syncs.max(1), s.evals_per_epoch.max(1));
    let parts = syncs / gcd(syncs, evals) * evals;
    let mut wall = Duration::ZERO;
    let mut curve = Vec::new();
    for epoch in 1..=s.epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, g.below(i as u32 + 1) as usize);
        }
        let lr = s.lr.1.lr(s.lr.0, epoch, s.epochs);
        graph.set_learning_rate(lr);
        let cfg = RunConfig { max_active_keys: s.mak, ..RunConfig::default() };
        let mut before = total_staleness(graph);
        let chunk = order.len().div_ceil(parts).max(1);
        let n_chunks = order.len().div_ceil(chunk);
        let (mut t, mut trained) = (RunReport::default(), 0.0);
        let mut at = InEpoch { epoch, lr, steps: 0 };
        for (i, part) in order.chunks(chunk).enumerate() {
            let r = run(graph, train.clone(), part.to_vec(), &cfg).map_err(|e| at.run_error(e))?;
            at.steps += r.results.len();
            let last = i + 1 == n_chunks;
            if (i + 1) % (parts / syncs) == 0 || last {
                graph.sync_replicas(s.replica_step);
                if s.replica_moments {
                    graph.average_replica_moments();
                }
            }
            trained += examples(&*train, part);
            t.results.extend(r.results);
            t.max_active = t.max_active.max(r.max_active);
            t.elapsed += r.elapsed;
            if (i + 1) % (parts / evals) != 0 && !last {
                continue;
            }
            let now = total_staleness(graph);
            let staleness = now.since(&before);
            before = now;
            let v = run(graph, val.clone(), val_order.clone(), &RunConfig { train: false, ..cfg })
                .map_err(|e| at.run_error(e))?;
            wall += t.elapsed + v.elapsed;
            let p = EpochPoint {
                epoch,
                at: (epoch - 1) as f64 + (i + 1) as f64 / n_chunks as f64,
                wall_s: wall.as_secs_f64(),
                train_per_s: trained / t.elapsed.as_secs_f64(),
                val_per_s: n_val / v.elapsed.as_secs_f64(),
                train_loss: t.mean_loss(),
                val_acc: v.accuracy(),
                lr,
                max_active: t.max_active,
                staleness,
            };
            tick(&p);
            curve.push(p);
            (t, trained) = (RunReport::default(), 0.0);
        }
    }
    Ok(curve)
}

/// Staleness over all parameterized nodes since the graph was built.
fn total_staleness(graph: &Graph) -> StalenessHistogram {
    let mut all = StalenessHistogram::default();
    graph.staleness().iter().for_each(|(_, _, h)| all.merge(h));
    all
}

/// The first evaluation reaching `target` validation accuracy: (epochs trained, wall seconds).
pub fn time_to_target(curve: &[EpochPoint], target: f64) -> Option<(f64, f64)> {
    curve.iter().find(|p| p.val_acc >= target).map(|p| (p.at, p.wall_s))
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
            lr: (0.003, LrSchedule::Constant),
            evals_per_epoch: 1,
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

    /// A rate far too large: the loss becomes NaN or infinite within the first epoch, and the
    /// run stops there with an error naming the instance, its step, the epoch and `--lr`,
    /// instead of training on for the other epochs (at mak 1 and at 4).
    #[test]
    fn divergence_stops_the_run_naming_the_step_epoch_and_lr() {
        let (tr, va) = (generate(400, 3, 1), generate(100, 3, 2));
        for mak in [1, 4] {
            let mut g = list_graph(16, 1, Optimizer::sgd(1e30), 1, 2, 1).unwrap();
            let s = Schedule {
                epochs: 3,
                mak,
                seed: 1,
                replica_syncs: 1,
                replica_step: 1.0,
                replica_moments: false,
                lr: (1e30, LrSchedule::Constant),
                evals_per_epoch: 1,
            };
            let (tr, va) = (list_instances(&tr, 50, 16, 0), list_instances(&va, 50, 16, 0));
            let mut ticks = 0;
            let e = train(&mut g, Arc::new(tr), Arc::new(va), &s, |_| ticks += 1).unwrap_err();
            assert!(matches!(e, TrainError::Diverged { epoch: 1, .. }), "mak {mak}: {e}");
            let m = e.to_string();
            let step = m.contains("the loss of instance ") && m.contains(" at step ");
            assert!(step || m.contains(" node became NaN or infinite at its update "), "{m}");
            assert!(m.contains("in epoch 1; lower --lr (this epoch's rate was "), "{m}");
            assert_eq!(ticks, 0, "mak {mak}: validated a diverged epoch");
        }
    }

    /// One replica at mak 1 (deterministic): a run with `clip`, `schedule` and `evals` per
    /// epoch; its curve and final parameters.
    fn small_run(
        clip: Option<f32>,
        schedule: LrSchedule,
        evals: usize,
    ) -> (Vec<EpochPoint>, Vec<Vec<ordo_mp::Payload>>) {
        let (tr, va) = (generate(600, 3, 1), generate(200, 3, 2));
        let mut g = list_graph(16, 1, Optimizer::adam(0.004), 1, 2, 1).unwrap();
        g.set_clip_norm(clip);
        let s = Schedule {
            epochs: 3,
            mak: 1,
            seed: 1,
            replica_syncs: 1,
            replica_step: 1.0,
            replica_moments: false,
            lr: (0.004, schedule),
            evals_per_epoch: evals,
        };
        let (tr, va) = (list_instances(&tr, 50, 16, 0), list_instances(&va, 50, 16, 0));
        let curve = train(&mut g, Arc::new(tr), Arc::new(va), &s, |_| {}).unwrap();
        (curve, g.params())
    }

    /// Validating mid-epoch changes nothing the end-of-epoch validation sees: at mak 1 the
    /// extra cuts drain nothing and validation does not train, so the epochs' accuracies and
    /// final weights are those of one validation per epoch.
    #[test]
    fn evaluations_within_an_epoch_leave_training_unchanged() {
        let (once, w1) = small_run(None, LrSchedule::Constant, 1);
        let (thrice, w3) = small_run(None, LrSchedule::Constant, 3);
        assert_eq!(w1, w3);
        assert_eq!(thrice.len(), 3 * once.len());
        let ats: Vec<f64> = thrice.iter().map(|p| p.at).collect();
        assert!(ats.windows(2).all(|w| w[1] > w[0]) && ats[2] == 1.0 && ats[8] == 3.0, "{ats:?}");
        let ends: Vec<f64> =
            thrice.iter().filter(|p| p.at.fract() == 0.0).map(|p| p.val_acc).collect();
        assert_eq!(ends, once.iter().map(|p| p.val_acc).collect::<Vec<_>>());
    }

    /// Each epoch trains at the schedule's rate; a bound no gradient reaches leaves training
    /// bit-identical, a tight one changes it.
    #[test]
    fn schedule_and_clipping_reach_every_parameterized_node() {
        let step = "step:1:0.5".parse().unwrap();
        let (curve, w_step) = small_run(None, step, 1);
        assert_eq!(curve.iter().map(|p| p.lr).collect::<Vec<_>>(), [0.004, 0.002, 0.001]);
        let (_, w) = small_run(None, LrSchedule::Constant, 1);
        assert_ne!(w, w_step);
        assert_eq!(small_run(Some(f32::MAX), LrSchedule::Constant, 1).1, w);
        assert_ne!(small_run(Some(1e-4), LrSchedule::Constant, 1).1, w);
    }
}
