//! `ordo-train amp`: AMPNet on mnist or list-reduction, with a progress bar, CSV and PNG.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use ordo::engine::STALENESS_BUCKETS;
use ordo_mp::optimizer::Optimizer;

use super::list_reduction::{CLASSES, VOCAB, generate};
use super::lr_schedule::LrSchedule;
use super::tasks::{
    list_graph, list_instances, load_fashion, mnist_graph, mnist_instances, text_graph,
};
use super::train::{EpochPoint, Schedule, time_to_target, train};
use crate::memory::{Budget, Estimate, n, product};
use crate::option_error::{MAX_THREADS, OptionError, count, fraction, positive, within};
use crate::plot::{Chart, Series, line_chart};

/// Which task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Task {
    /// 4-layer MLP (784 hidden, ReLU, SGD lr 0.1) on Fashion-MNIST (the paper used MNIST).
    Mnist,
    /// Vanilla ReLU RNN (hidden 128) on the list-reduction task of Appendix B.2.
    ListReduction,
}

/// Which optimizer the parameterized nodes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Opt {
    /// (Momentum) SGD.
    Sgd,
    /// Adam.
    Adam,
}

/// The optimizer `opt` (else `default`) at learning rate `lr` with `momentum` (SGD's μ or
/// Adam's β₁) if given.
fn optimizer(opt: Option<Opt>, default: Opt, lr: f32, momentum: Option<f32>) -> Optimizer {
    let mut o = match opt.unwrap_or(default) {
        Opt::Sgd => Optimizer::sgd(lr),
        Opt::Adam => Optimizer::adam(lr),
    };
    if let Some(m) = momentum {
        match &mut o {
            Optimizer::Sgd { momentum, .. } | Optimizer::Adam { beta1: momentum, .. } => {
                *momentum = m
            }
        }
    }
    o
}

/// Arguments of `ordo-train amp`.
#[derive(Debug, Args)]
pub struct AmpArgs {
    /// The task.
    #[arg(long, value_enum)]
    pub task: Task,
    /// Workers (threads).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// `max_active_keys`: instances in flight at most.
    #[arg(long, default_value_t = 1)]
    pub mak: usize,
    /// `min_update_interval` of every parameterized node.
    #[arg(long, default_value_t = 1)]
    pub mui: usize,
    /// Replicas of the RNN cell (list-reduction).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Replica averages per epoch (1: at the epoch's end, as §5 does).
    #[arg(long, default_value_t = 1)]
    pub replica_syncs: usize,
    /// Step of each replica synchronization: `w ← w₀ + step · mean(wᵢ − w₀)` from the
    /// previous one's `w₀`. 1: the average (§5); the replica count: the sum of the replicas'
    /// moves (as far as one cell applying every update would go, to first order). On
    /// list-reduction every step above 1 converged slower (BENCHMARKS.md, fourth pass).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub replica_step: f32,
    /// At each replica synchronization also average the replicas' optimizer memory (Adam
    /// moments, momentum), so they continue as one layer.
    #[arg(long)]
    pub replica_moments: bool,
    /// Sleep as long as a device of this many flop/s would compute, instead of computing
    /// (Appendix C); accuracies are then meaningless, throughputs are the point.
    #[arg(long, allow_negative_numbers = true)]
    pub emulate_flops: Option<f64>,
    /// Epochs.
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Training examples (a subsample; mnist has 60,000, list-reduction generates 10⁵).
    #[arg(long)]
    pub train_examples: Option<usize>,
    /// Validation examples (mnist: the test split; list-reduction generates 10⁴).
    #[arg(long)]
    pub val_examples: Option<usize>,
    /// Examples per instance (the paper's batch of 100).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Hidden size (mnist 784, list-reduction 128 by default).
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Learning rate (mnist: SGD 0.1; list-reduction: Adam 0.002 by default).
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    /// Optimizer (mnist: SGD, list-reduction: Adam by default).
    #[arg(long, value_enum)]
    pub optimizer: Option<Opt>,
    /// Momentum μ of SGD, or β₁ of Adam (default 0 for SGD, 0.9 for Adam). Asynchrony acts as
    /// momentum of its own (Mitliagkas et al., cited in §6), so high `--mak` may want less.
    #[arg(long, allow_negative_numbers = true)]
    pub momentum: Option<f32>,
    /// Clip each parameterized node's update (its mean gradient, all its parameters together)
    /// to this L2 norm before the optimizer step (Pascanu et al. 2013; the usual guard of a
    /// vanilla RNN). Default: no clipping.
    #[arg(long, allow_negative_numbers = true)]
    pub clip_norm: Option<f32>,
    /// Learning-rate schedule over the epochs, set at each epoch's start: `constant`,
    /// `cosine` (one half-cosine over `--epochs`) or `step:N:F` (times F every N epochs).
    #[arg(long, default_value = "constant")]
    pub lr_schedule: LrSchedule,
    /// Validations per epoch (after the replica synchronization at that point, if any): the
    /// time to target at 1/K-epoch resolution; every validation's time counts in `wall_s`.
    /// Replicas are synchronized `--replica-syncs` times per epoch whatever K is.
    #[arg(long, default_value_t = 1)]
    pub evals_per_epoch: usize,
    /// Target validation accuracy for the time-to-target figure.
    #[arg(long, allow_negative_numbers = true)]
    pub target: Option<f64>,
    /// Seed (data, weights, shuffles).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fashion-MNIST directory.
    #[arg(long, default_value = "../shared/datasets/fashion_mnist")]
    pub data: PathBuf,
    /// Load the graph from this text description (`ordo_mp::text`) instead of building the
    /// task's; its controller must take the task's inputs (mnist: data, labels;
    /// list-reduction: tokens, initial state, labels). `--replicas` and `--hidden` then do not
    /// apply.
    #[arg(long)]
    pub graph: Option<PathBuf>,
    /// Where to write `epochs.csv`, `accuracy_time.png`, `accuracy_epochs.png` (with
    /// `--emulate-flops`, `epochs.csv` alone, without accuracy), then `COMPLETE` (the run id)
    /// once all are written; locked for the run (see `ordo-train kge --help`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Refuse a run whose estimated memory exceeds this many bytes (a number, or with a K, M,
    /// G or T suffix) [default: the cgroup's limit, or else the available memory].
    #[arg(long, value_parser = crate::memory::parse_bytes)]
    pub memory_limit: Option<u64>,
}

/// Tokens of the longest list-reduction example (the reduction and 9 digits).
const MAX_LIST_LEN: u64 = 10;

impl AmpArgs {
    /// The hidden size the task's graph uses.
    fn hidden(&self) -> usize {
        self.hidden.unwrap_or(match self.task {
            Task::Mnist => 784,
            Task::ListReduction => 128,
        })
    }

    /// The optimizer the task's nodes get (for [`crate::cli::check`]).
    pub fn optimizer_for_check(&self) -> Optimizer {
        let (default, lr) = match self.task {
            Task::Mnist => (Opt::Sgd, 0.1),
            Task::ListReduction => (Opt::Adam, 0.002),
        };
        optimizer(self.optimizer, default, self.lr.unwrap_or(lr), self.momentum)
    }

    /// Every option on its own, before any file is read: the one place `amp` refuses a value
    /// (the memory it needs is [`check_memory`](Self::check_memory)'s).
    pub fn validate(&self) -> Result<(), OptionError> {
        count("--workers", self.workers, MAX_THREADS)?;
        for (flag, v) in [
            ("--mak", self.mak),
            ("--mui", self.mui),
            ("--replicas", self.replicas),
            ("--replica-syncs", self.replica_syncs),
            ("--epochs", self.epochs),
            ("--batch", self.batch),
            ("--evals-per-epoch", self.evals_per_epoch),
            ("--hidden", self.hidden()),
        ] {
            count(flag, v, usize::MAX)?;
        }
        for (flag, v) in
            [("--train-examples", self.train_examples), ("--val-examples", self.val_examples)]
        {
            if let Some(v) = v {
                count(flag, v, usize::MAX)?;
            }
        }
        positive("--replica-step", self.replica_step.into())?;
        if let Some(f) = self.emulate_flops {
            positive("--emulate-flops", f)?;
        }
        if let Some(lr) = self.lr {
            positive("--lr", lr.into())?;
        }
        if let Some(m) = self.momentum {
            within("--momentum", m.into(), (0.0, 1.0), true)?;
        }
        if let Some(c) = self.clip_norm {
            positive("--clip-norm", c.into())?;
        }
        if let Some(t) = self.target {
            fraction("--target", t)?;
            if self.emulate_flops.is_some() {
                let why = "does not go with --emulate-flops, which measures no accuracy";
                return Err(OptionError::new("--target", t, why));
            }
        }
        Ok(())
    }

    /// The memory of the run against `budget`, from the options alone (the task's data are
    /// 60,000 images at most, or generated to `--train-examples`): parameters with their
    /// gradients and optimizer state per replica, the instances held in memory, the
    /// activations of `--mak` instances in flight and the workers' stacks. A `--graph` file's
    /// `Linear` sizes are counted as it is read (see [`text_graph`]) against what is left.
    pub fn check_memory(&self, budget: Budget) -> Result<u64, OptionError> {
        const F: u64 = 4;
        let h = n(self.hidden());
        let batch = n(self.batch);
        let mut e = Estimate::default();
        // Weights, gradient, two optimizer moments and a snapshot: 5 floats per parameter.
        let params = match (self.task, &self.graph) {
            (_, Some(_)) => Some(0),
            (Task::Mnist, None) => {
                (|| product(&[h, h.checked_mul(2)?.checked_add(797)?])?.checked_add(10))()
            }
            (Task::ListReduction, None) => (|| {
                let per = product(&[h, h.checked_add(n(VOCAB) + n(CLASSES) + 1)?])?;
                product(&[per, n(self.replicas)])
            })(),
        };
        e.add(
            "--hidden",
            self.hidden(),
            "parameters and optimizer state",
            params.and_then(|p| product(&[p, 5, F])),
        );
        let per_example = match self.task {
            Task::Mnist => Some(785 * F),
            Task::ListReduction => {
                h.checked_add(MAX_LIST_LEN * (n(VOCAB) + 2)).and_then(|x| x.checked_mul(F))
            }
        };
        let (train, val) = match self.task {
            Task::Mnist => (
                self.train_examples.unwrap_or(60_000).min(60_000),
                self.val_examples.unwrap_or(10_000).min(10_000),
            ),
            Task::ListReduction => {
                (self.train_examples.unwrap_or(100_000), self.val_examples.unwrap_or(10_000))
            }
        };
        e.add(
            "--train-examples",
            train,
            "training instances",
            per_example.and_then(|b| b.checked_mul(n(train))),
        );
        e.add(
            "--val-examples",
            val,
            "validation instances",
            per_example.and_then(|b| b.checked_mul(n(val))),
        );
        // Activations (forward and backward) of every layer of each instance in flight.
        let width = h.checked_add(784);
        let flight = width.and_then(|w| product(&[n(self.mak), batch, w, MAX_LIST_LEN, 2, F]));
        e.add("--mak", self.mak, "activations of the instances in flight", flight);
        e.add("--workers", self.workers, "worker stacks", product(&[n(self.workers), 2 << 20]));
        e.check(budget)
    }
}

/// Run `ordo-train amp`.
pub fn run(a: AmpArgs) -> Result<(), Box<dyn std::error::Error>> {
    a.validate()?;
    let budget = Budget::of_process(a.memory_limit);
    let used = a.check_memory(budget)?;
    // What a --graph file's Linear layers may take.
    let left = budget.bytes.saturating_sub(used);
    let base_lr = a.lr.unwrap_or(match a.task {
        Task::Mnist => 0.1,
        Task::ListReduction => 0.002,
    });
    let (mut graph, train_src, val_src, target): (
        _,
        Arc<dyn ordo_mp::Source>,
        Arc<dyn ordo_mp::Source>,
        f64,
    ) = match a.task {
        Task::Mnist => {
            let d = load_fashion(&a.data)?;
            let train_set =
                mnist_instances(&d.train, a.train_examples.unwrap_or(60_000), a.batch, 0);
            let val_set = mnist_instances(&d.test, a.val_examples.unwrap_or(10_000), a.batch, 0);
            let opt = optimizer(a.optimizer, Opt::Sgd, base_lr, a.momentum);
            let g = match &a.graph {
                Some(file) => text_graph(file, opt, (a.mui, a.workers), a.seed, left)?,
                None => mnist_graph(a.hidden.unwrap_or(784), opt, a.mui, a.workers, a.seed)?,
            };
            (g, Arc::new(train_set), Arc::new(val_set), a.target.unwrap_or(0.80))
        }
        Task::ListReduction => {
            let hidden = a.hidden.unwrap_or(128);
            let tr = generate(a.train_examples.unwrap_or(100_000), a.seed, 1);
            let va = generate(a.val_examples.unwrap_or(10_000), a.seed, 2);
            let opt = optimizer(a.optimizer, Opt::Adam, base_lr, a.momentum);
            let g = match &a.graph {
                Some(file) => text_graph(file, opt, (a.mui, a.workers), a.seed, left)?,
                None => list_graph(hidden, a.replicas, opt, a.mui, a.workers, a.seed)?,
            };
            (
                g,
                Arc::new(list_instances(&tr, a.batch, hidden, 0)),
                Arc::new(list_instances(&va, a.batch, hidden, 0)),
                a.target.unwrap_or(0.5),
            )
        }
    };
    // Locked (and checked writable) before training; marked complete after the last file.
    let out = a.out.as_deref().map(crate::outdir::OutputLock::take_out).transpose()?;
    if let Some(f) = a.emulate_flops {
        println!(
            "--emulate-flops {f}: every node sleeps as long as a device of {f} flop/s would \
             compute and computes nothing, so this run measures throughput and staleness; \
             its weights do not train and no accuracy is printed"
        );
    }
    let emulated = a.emulate_flops.is_some();
    graph.emulate(a.emulate_flops);
    graph.set_clip_norm(a.clip_norm);
    let bar = indicatif::ProgressBar::new((a.epochs * a.evals_per_epoch.max(1)) as u64);
    let style = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] validation {pos}/{len} {msg}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    let label = format!("{:?} mak {} workers {} replicas {}", a.task, a.mak, a.workers, a.replicas);
    let schedule = Schedule {
        epochs: a.epochs,
        mak: a.mak,
        seed: a.seed,
        replica_syncs: a.replica_syncs,
        replica_step: a.replica_step,
        replica_moments: a.replica_moments,
        lr: (base_lr, a.lr_schedule),
        evals_per_epoch: a.evals_per_epoch,
    };
    let curve = train(&mut graph, train_src, val_src, &schedule, |p| {
        match emulated {
            true => bar.set_message(format!("{:.0} train ex/s", p.train_per_s)),
            false => bar
                .set_message(format!("val acc {:.4}, {:.0} train ex/s", p.val_acc, p.train_per_s)),
        }
        bar.inc(1);
    })?;
    bar.finish();
    for p in &curve {
        let line: Vec<String> =
            columns(p, emulated).into_iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("{}", line.join(" "));
    }
    let mean_rate = curve.iter().map(|p| p.train_per_s).sum::<f64>() / curve.len().max(1) as f64;
    match time_to_target(&curve, target) {
        _ if emulated => println!(
            "summary: {label}: emulated at {} flop/s (throughput only); {mean_rate:.0} train ex/s",
            a.emulate_flops.unwrap_or_default()
        ),
        Some((e, t)) => println!(
            "summary: {label}: target {target} reached after {e} epochs, {t:.2}s; {mean_rate:.0} train ex/s"
        ),
        None => println!(
            "summary: {label}: target {target} not reached in {} epochs; {mean_rate:.0} train ex/s",
            a.epochs
        ),
    }
    // Per parameterized node, over the whole run: the histogram the engine's Observer keeps.
    for (n, kind, h) in graph.staleness() {
        println!(
            "staleness node {} ({kind}): mean {:.2} max {} buckets [0, 1, 2-3, 4-7, …] {:?}",
            n.0,
            h.mean(),
            h.max(),
            h.buckets()
        );
    }
    if let Some(lock) = &out {
        write_outputs(lock.dir(), &label, &curve, emulated)?;
        lock.complete()?;
    }
    Ok(())
}

/// One epoch's measurements as (name, value) columns: the printed line and the CSV row. The
/// staleness buckets are those of [`StalenessHistogram`](ordo_mp::staleness::StalenessHistogram).
/// Without `val_acc` when `emulated` (the weights did not train).
fn columns(p: &EpochPoint, emulated: bool) -> Vec<(String, String)> {
    let mut c: Vec<(String, String)> = vec![
        ("epoch".into(), p.epoch.to_string()),
        ("at".into(), format!("{:.4}", p.at)),
        ("lr".into(), format!("{}", p.lr)),
        ("wall_s".into(), format!("{:.4}", p.wall_s)),
        ("val_acc".into(), format!("{:.6}", p.val_acc)),
        ("train_loss".into(), format!("{:.6}", p.train_loss)),
        ("train_per_s".into(), format!("{:.1}", p.train_per_s)),
        ("val_per_s".into(), format!("{:.1}", p.val_per_s)),
        ("max_active".into(), p.max_active.to_string()),
        ("staleness_mean".into(), format!("{:.4}", p.staleness.mean())),
        ("staleness_max".into(), p.staleness.max().to_string()),
    ];
    if emulated {
        c.retain(|(k, _)| k != "val_acc");
    }
    let buckets = p.staleness.buckets();
    c.extend((0..STALENESS_BUCKETS).map(|b| (format!("staleness_b{b}"), buckets[b].to_string())));
    c
}

fn write_outputs(
    dir: &std::path::Path,
    label: &str,
    curve: &[EpochPoint],
    emulated: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    // Written beside its name and renamed over it, as the charts are (`atomic_fs::replace_file`).
    crate::atomic_fs::replace_file(&dir.join("epochs.csv"), |tmp| {
        let mut csv = csv::Writer::from_path(tmp)?;
        csv.write_record(columns(&EpochPoint::default(), emulated).into_iter().map(|(k, _)| k))?;
        for p in curve {
            csv.write_record(columns(p, emulated).into_iter().map(|(_, v)| v))?;
        }
        Ok::<(), Box<dyn std::error::Error>>(csv.flush()?)
    })?;
    if emulated {
        return Ok(());
    }
    let series = |x: fn(&EpochPoint) -> f64| {
        vec![Series {
            label: label.to_string(),
            points: curve.iter().map(|p| (x(p), p.val_acc)).collect(),
        }]
    };
    let chart = |x_label| Chart {
        title: "validation accuracy",
        x_label,
        y_label: "accuracy",
        log2_x: false,
    };
    line_chart(&dir.join("accuracy_time.png"), &chart("wall time (s)"), &series(|p| p.wall_s))?;
    line_chart(&dir.join("accuracy_epochs.png"), &chart("epoch"), &series(|p| p.at))?;
    Ok(())
}
