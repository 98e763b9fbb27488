//! `ordo-train sgd`: train an MLP or CNN on Fashion-MNIST with a dispatcher of paper 001 or
//! with paper 003's ASSM / PASSM / PASSM+.

use super::dispatchers::{Kind, Spec, YPolicy, build};
use super::idx::FashionMnist;
use super::output::{WORKER_COLUMNS, worker_cells, write_outputs};
use super::train::{EvalPoint, ModelKind, TrainOptions, train};
use crate::memory::{Budget, Estimate, n, product};
use crate::option_error::{
    MAX_THREADS, OptionError, count, fraction, non_negative, positive, within,
};
use ordo::dispatcher::ProbeConfig;
use ordo::sgd::{Every, Stop};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `ordo-train sgd` (defaults: the paper's η = 0.005, μ = 0.5, batch 16, y0 = 64).
#[derive(Debug, clap::Args)]
pub struct SgdArgs {
    /// Folder with Fashion-MNIST's IDX files (`train-images-idx3-ubyte[.gz]`, …).
    #[arg(long, default_value = "../shared/datasets/fashion_mnist")]
    pub data: PathBuf,
    /// Dispatching algorithm.
    #[arg(long, value_enum, default_value_t = Kind::Interval)]
    pub dispatcher: Kind,
    /// Initial asynchrony interval y (interval only).
    #[arg(long, default_value_t = 64)]
    pub y: u32,
    /// How y changes (interval only).
    #[arg(long, value_enum, default_value_t = YPolicy::Fixed)]
    pub y_policy: YPolicy,
    /// Accepted steps per y − 1 (y-policy decay).
    #[arg(long, default_value_t = 4096)]
    pub decay_every: u64,
    /// Candidates per probing phase (y-policy probe).
    #[arg(long, default_value_t = 8)]
    pub probe_window: u32,
    /// Accepted steps per probed candidate (y-policy probe).
    #[arg(long, default_value_t = 512)]
    pub probe_steps: u64,
    /// Accepted steps per execution phase (y-policy probe).
    #[arg(long, default_value_t = 4096)]
    pub exec_steps: u64,
    /// Worker threads m.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Learning rate: η for sync/async/elasync/interval (θ ← θ − η·v); for assm/passm/passm-plus
    /// paper 003's γ (x ← x − (1 − m)·γ·u), so γ = η / (1 − m) is the same step.
    #[arg(long, default_value_t = 0.005, allow_negative_numbers = true)]
    pub lr: f32,
    /// Momentum μ (paper 003's m).
    #[arg(long, default_value_t = 0.5, allow_negative_numbers = true)]
    pub momentum: f32,
    /// passm-plus: epochs where the method flips, ASSM → PASSM → ASSM … (paper 003 Table D:
    /// 75,135,165,210,225).
    #[arg(long, value_delimiter = ',')]
    pub switch_at: Vec<u64>,
    /// assm/passm/passm-plus: epochs where γ is dampened by --lr-drop (e.g. 150,225).
    #[arg(long, value_delimiter = ',')]
    pub lr_drops: Vec<u64>,
    /// The dampening factor at each --lr-drops epoch.
    #[arg(long, default_value_t = 0.1)]
    pub lr_drop: f32,
    /// assm/passm/passm-plus: weight decay (L2 coefficient added to the subgradient).
    #[arg(long, default_value_t = 0.0)]
    pub weight_decay: f32,
    /// Minibatch size.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// The network.
    #[arg(long, value_enum, default_value_t = ModelKind::Mlp)]
    pub model: ModelKind,
    /// Hidden units of the MLP (784-hidden-10).
    #[arg(long, default_value_t = 128)]
    pub hidden: usize,
    /// Stop after this many model updates.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Stop after this many seconds (default 30 when --steps is not given).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Stop once the test accuracy reaches this (0..1).
    #[arg(long)]
    pub target_acc: Option<f64>,
    /// Evaluate on the test split every this many seconds.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub eval_every: f64,
    /// Evaluate on the first N test examples only (default: all 10,000).
    #[arg(long)]
    pub eval_limit: Option<usize>,
    /// Seed of the shuffle and the initial weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write curve.csv, steps.csv and PNG plots here, then COMPLETE (the run id) once all are
    /// written; locked for the run (see `ordo-train kge --help`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Refuse a run whose estimated memory exceeds this many bytes (a number, or with a K, M,
    /// G or T suffix) [default: the cgroup's limit, or else the available memory].
    #[arg(long, value_parser = crate::memory::parse_bytes)]
    pub memory_limit: Option<u64>,
}

fn seconds(name: &'static str, s: f64) -> Result<Duration, OptionError> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| OptionError::new(name, s, "must be a positive number of seconds"))
}

/// Accepted steps of the per-step record (`steps.csv`) a run bounded only by `--steps` keeps.
fn step_record_bytes() -> u64 {
    std::mem::size_of::<ordo::sgd::StepRecord>() as u64
}

impl SgdArgs {
    /// Every option on its own, before any file is read: the one place `sgd` refuses a value
    /// (those that need the data are [`validate_for`](Self::validate_for)'s).
    pub fn validate(&self) -> Result<(), OptionError> {
        count("--threads", self.threads, MAX_THREADS)?;
        count("--batch", self.batch, usize::MAX)?;
        count("--hidden", self.hidden, usize::MAX)?;
        count("--y", self.y as usize, usize::MAX)?;
        count("--probe-window", self.probe_window as usize, usize::MAX)?;
        for (flag, v) in [
            ("--decay-every", self.decay_every),
            ("--probe-steps", self.probe_steps),
            ("--exec-steps", self.exec_steps),
        ] {
            if v == 0 {
                return Err(OptionError::new(flag, v, "must be at least 1"));
            }
        }
        if self.steps == Some(0) {
            return Err(OptionError::new("--steps", 0, "must be at least 1"));
        }
        if let Some(n) = self.eval_limit {
            count("--eval-limit", n, usize::MAX)?;
        }
        positive("--lr", self.lr.into())?;
        within("--momentum", self.momentum.into(), (0.0, 1.0), true)?;
        within("--lr-drop", self.lr_drop.into(), (0.0, 1.0), false)?;
        positive("--lr-drop", self.lr_drop.into())?;
        non_negative("--weight-decay", self.weight_decay.into())?;
        if let Some(s) = self.seconds {
            seconds("--seconds", s)?;
        }
        seconds("--eval-every", self.eval_every)?;
        if let Some(t) = self.target_acc {
            fraction("--target-acc", t)?;
        }
        Ok(())
    }

    /// The checks that need the data, before training allocates anything: a batch no larger
    /// than the training set (a larger one never completes a step), and the memory of the
    /// model's copies, the batches and the per-step record against `budget`.
    pub fn validate_for(&self, train_examples: usize, budget: Budget) -> Result<u64, OptionError> {
        if self.batch > train_examples {
            let why = format!("larger than the {train_examples} training examples");
            return Err(OptionError::new("--batch", self.batch, why));
        }
        let threads = n(self.threads);
        // The MLP's 784·h + h + 10·h + 10 floats: weights, momentum and each worker's copy and
        // gradient.
        let params = (|| {
            let h = n(self.hidden);
            product(&[h, 795])?.checked_add(10)
        })();
        let copies = threads.checked_mul(2).and_then(|t| t.checked_add(2));
        let mut e = Estimate::default();
        let model = params.and_then(|p| product(&[p, copies?, 4]));
        e.add("--hidden", self.hidden, "model, momentum and per-worker copies", model);
        let width = n(self.hidden).checked_add(784);
        let batches = width.and_then(|w| product(&[n(self.batch), w, 4, 2, threads]));
        e.add("--batch", self.batch, "batches and activations", batches);
        e.add("--threads", self.threads, "thread stacks", product(&[threads, 2 << 20]));
        if let (Some(steps), None) = (self.steps, self.seconds) {
            e.add("--steps", steps, "per-step record", product(&[steps, step_record_bytes()]));
        }
        e.check(budget)
    }

    /// The dispatcher request.
    pub fn spec(&self) -> Spec {
        Spec {
            kind: self.dispatcher,
            threads: self.threads,
            y: self.y,
            policy: self.y_policy,
            decay_every: self.decay_every,
            y_probe: ProbeConfig {
                window: self.probe_window,
                spacing: u64::from(self.y / 8).max(1),
                probe_steps: self.probe_steps,
                exec_steps: self.exec_steps,
            },
            ..Spec::paper(self.dispatcher, self.threads)
        }
    }

    /// The training options.
    pub fn options(&self) -> Result<TrainOptions, OptionError> {
        let stop = match (self.steps, self.seconds) {
            (None, None) => Stop::time(Duration::from_secs(30)),
            (steps, secs) => Stop {
                max_updates: steps,
                max_time: secs.map(|s| seconds("--seconds", s)).transpose()?,
            },
        };
        Ok(TrainOptions {
            threads: self.threads,
            lr: self.lr,
            momentum: self.momentum,
            batch: self.batch,
            model: self.model,
            hidden: self.hidden,
            stop,
            eval_every: Every::Time(seconds("--eval-every", self.eval_every)?),
            eval_limit: self.eval_limit,
            target_acc: self.target_acc,
            seed: self.seed,
            switch_at: self.switch_at.clone(),
            lr_drops: self.lr_drops.clone(),
            lr_drop: self.lr_drop,
            weight_decay: self.weight_decay,
        })
    }
}

/// Run `ordo-train sgd`.
pub fn run(args: SgdArgs) -> Result<(), Box<dyn std::error::Error>> {
    args.validate()?;
    let spec = args.spec();
    let built = build(&spec)?;
    let opts = args.options()?;
    let data = FashionMnist::load(&args.data)?;
    args.validate_for(data.train.n, Budget::of_process(args.memory_limit))?;
    // Locked (and checked writable) before training; marked complete after the last file.
    let out = args.out.as_deref().map(crate::outdir::OutputLock::take_out).transpose()?;
    eprintln!(
        "{}: m = {} threads, {}, μ = {}, batch {}, {}, {} train / {} test",
        spec.label(),
        opts.threads,
        spec.kind.step_size(opts.lr, opts.momentum),
        opts.momentum,
        opts.batch,
        match opts.model {
            ModelKind::Mlp => format!("MLP 784-{}-10", opts.hidden),
            ModelKind::Cnn => "LeNet-like CNN".to_string(),
        },
        data.train.n,
        data.test.n
    );
    let bar = progress_bar(&opts);
    // indicatif hides the bar (and its println) when stderr is not a terminal: print plainly.
    let say = |line: String| if bar.is_hidden() { eprintln!("{line}") } else { bar.println(line) };
    say(format!(
        "{:>9} {:>8} {:>9} {:>8} {:>8} {:>7}",
        "updates", "wall s", "test loss", "test acc", "accept", "mean τ"
    ));
    let mut on_eval = |p: &EvalPoint| {
        say(row(p));
        match opts.stop.max_updates {
            Some(_) => bar.set_position(p.updates),
            None => bar.set_position((p.wall_s * 1000.0) as u64),
        }
        bar.set_message(format!("acc {:.3}", p.test_acc));
    };
    let outcome =
        train(&data, &built.algo, &opts, &mut on_eval, built.feed.as_deref().map(|f| f as _))?;
    bar.finish_and_clear();
    if let Some(last) = outcome.curve.last() {
        eprintln!("final: {}", row(last));
    }
    eprintln!(
        "best test accuracy {:.4}; {} steps started, accept rate {:.3}, mean τ {:.2}, max τ {}",
        outcome.best_acc(),
        outcome.report.started(),
        outcome.report.accept_rate(),
        outcome.report.mean_tau(),
        outcome.report.max_tau()
    );
    for line in worker_lines(&outcome.workers) {
        eprintln!("{line}");
    }
    if let Some(lock) = &out {
        write_outputs(lock.dir(), &spec.label(), &outcome)?;
        lock.complete()?;
        eprintln!("wrote {}", lock.dir().display());
    }
    Ok(())
}

/// ASSM / PASSM / PASSM+ per-worker telemetry as table lines (none for other algorithms).
pub fn worker_lines(workers: &[ordo::sgd::WorkerTelemetry]) -> Vec<String> {
    if workers.is_empty() {
        return Vec::new();
    }
    let line = |first: String, cells: &[String]| {
        cells.iter().fold(format!("{first:>6}"), |acc, c| format!("{acc} {c:>14}"))
    };
    let header: Vec<String> = WORKER_COLUMNS.iter().map(|c| c.to_string()).collect();
    let mut lines = vec![line("worker".into(), &header)];
    for (w, t) in workers.iter().enumerate() {
        lines.push(line(w.to_string(), &worker_cells(t)));
    }
    lines
}

fn row(p: &EvalPoint) -> String {
    format!(
        "{:>9} {:>8.2} {:>9.4} {:>8.4} {:>8.3} {:>7.2}",
        p.updates, p.wall_s, p.test_loss, p.test_acc, p.accept_rate, p.mean_tau
    )
}

fn progress_bar(opts: &TrainOptions) -> indicatif::ProgressBar {
    let (len, unit) = match (opts.stop.max_updates, opts.stop.max_time) {
        (Some(n), _) => (n, "updates"),
        (None, Some(t)) => (t.as_millis() as u64, "ms"),
        (None, None) => (0, ""),
    };
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{msg}}"
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
