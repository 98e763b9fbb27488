//! The memory a `kge` run will need, estimated from its [`Options`] and the data against the
//! process's budget before any table is allocated.

use super::error::BoxError;
use super::options::Options;
use crate::kge::backends::partitioned::{PartitionOpts, StorageKind};
use crate::kge::backends::pm::PmConfig;
use crate::kge::data::dataset::Dataset;
use crate::kge::run::config::TrainConfig;
use crate::kge::run::mode::TrainMode;
use crate::memory::{Budget, Estimate, n, product};
use crate::option_error::OptionError;

impl Options {
    /// The memory a run of `modes` on `d` will need, against `budget`: the one place `kge`
    /// checks sizes, after the data is read and before any table is allocated. Counts the
    /// entity table with its optimizer state and the snapshot evaluation takes (and the copy a
    /// checkpoint writes), the relation parameters, the batches in flight (two per engine
    /// thread, two more, and the staleness bound's), the sampled-evaluation buffers (one per
    /// rayon thread), the recorded order and statistics of every epoch (kept for the replay
    /// and the checkpoint, so `--epochs` is bounded by memory and a huge value is refused
    /// here rather than stalling), the threads' stacks and, with `--pm`, a replica of every row
    /// on every node. With `--storage` (`partitions`), the entity table is the partition
    /// buffer's `c + 2` partitions (`c`, one crossing a swap, one being written back) and the
    /// streamed evaluation's one partition of embeddings and its queries.
    pub(super) fn check_memory(
        &self,
        cfg: &TrainConfig,
        d: &Dataset,
        pm: Option<&PmConfig>,
        modes: &[TrainMode],
        budget: Budget,
        partitions: Option<&PartitionOpts>,
    ) -> Result<u64, OptionError> {
        cfg.sampling(d)
            .check()
            .map_err(|e| OptionError::new("--neg-sampling", "distinct", e.to_string()))?;
        const F: u64 = 4; // bytes per f32
        let dim = n(cfg.dim);
        let row = cfg.optimizer.checked_state_width(dim).and_then(|s| s.checked_add(dim));
        let ents = n(d.entities.len());
        let rels = n(d.relations.len()) * if cfg.reciprocal { 2 } else { 1 };
        let mut e = Estimate::default();
        // RowStore words (a version word and two f32s or four bf16s per word), the snapshot
        // evaluation reads, and the full rows a checkpoint or resume holds beside the store.
        let copy = if self.checkpoint.is_some() || self.resume.is_some() { row } else { Some(dim) };
        let per_word = n(cfg.precision.store().per_word());
        let words = row.map(|w| 1 + w.div_ceil(per_word));
        let per_entity = (|| {
            words?
                .checked_mul(8)?
                .checked_add(dim.checked_mul(F)?)?
                .checked_add(copy?.checked_mul(F)?)
        })();
        match partitions {
            None => e.add(
                "--dim",
                cfg.dim,
                "entity table",
                per_entity.and_then(|b| b.checked_mul(ents)),
            ),
            Some(p) => {
                let part = ents.div_ceil(n(p.partitions.max(1)));
                let buffer = words.and_then(|w| product(&[n(p.buffer) + 2, part, w, 8]));
                e.add("--buffer", p.buffer, "partition buffer (c + 2 partitions)", buffer);
                let queries = n(d.valid.len() + d.test.len()) * 4;
                let eval = product(&[part + queries, dim, F]);
                e.add("--dim", cfg.dim, "streamed evaluation", eval)
            }
        };
        // Parameters, optimizer state (at most 2·dim + 1) and gradient of each relation row.
        let per_rel = dim.checked_mul(4).and_then(|x| x.checked_add(1));
        e.add(
            "--dim",
            cfg.dim,
            "relation parameters",
            per_rel.and_then(|x| product(&[x, rels, F])),
        );
        // A batch's gathered rows (full rows in, gradients out) and its scores.
        let (batch, negatives) = (n(cfg.batch_size), n(cfg.negatives));
        let row_io = row.and_then(|r| r.checked_add(dim)).and_then(|r| r.checked_mul(F));
        // A batch gathers each distinct row once: never more rows than entities.
        let pos_rows = batch.checked_mul(3).map(|r| r.min(ents));
        let pos_bytes = row_io.and_then(|r| product(&[r, pos_rows?]));
        let chunks = batch.div_ceil(n(cfg.chunk));
        let neg_bytes = (|| {
            let rows = product(&[chunks, 2, negatives])?.min(ents);
            product(&[rows, row_io?])?.checked_add(product(&[batch, 2, negatives, 2, F])?)
        })();
        let workers = match pm {
            Some(pm) => n(pm.nodes),
            None => n(cfg.threads) * 2 + 2,
        };
        let in_flight = |b: Option<u64>| b.and_then(|b| b.checked_mul(workers));
        // A term sized by several options names the one furthest above its default.
        let def = TrainConfig::default();
        let ratio = |v: usize, default: usize| v as f64 / default.max(1) as f64;
        let blame = |of: &[(&'static str, usize, usize)]| {
            let worst = of.iter().max_by(|a, b| ratio(a.1, a.2).total_cmp(&ratio(b.1, b.2)));
            worst.map_or(("--batch-size", cfg.batch_size), |&(o, v, _)| (o, v))
        };
        let dim_of = ("--dim", cfg.dim, def.dim);
        let (batch_of, negatives_of) = (
            ("--batch-size", cfg.batch_size, def.batch_size),
            ("--negatives", cfg.negatives, def.negatives),
        );
        let (o, v) = blame(&[batch_of, dim_of]);
        e.add(o, v, "batches in flight", in_flight(pos_bytes));
        let (o, v) = blame(&[negatives_of, batch_of, dim_of]);
        e.add(o, v, "negatives in flight", in_flight(neg_bytes));
        if pm.is_none() && modes.contains(&TrainMode::Bounded) {
            let per_batch = pos_bytes.and_then(|p| p.checked_add(neg_bytes?));
            let bytes = per_batch.and_then(|b| b.checked_mul(n(cfg.staleness)));
            let (o, v) = blame(&[
                ("--staleness", cfg.staleness, def.staleness),
                negatives_of,
                batch_of,
                dim_of,
            ]);
            e.add(o, v, "batches the staleness bound admits", bytes);
        }
        let rayon = n(rayon::current_num_threads());
        let sample = product(&[n(cfg.eval_sample), F, rayon]);
        e.add("--eval-sample", cfg.eval_sample, "sampled evaluation", sample);
        // Each epoch's recorded order (a u64 id per batch) and its statistics, per mode.
        let per_epoch =
            n(d.train.len()).div_ceil(batch).checked_mul(8).and_then(|b| b.checked_add(256));
        let orders = per_epoch.and_then(|b| product(&[b, n(cfg.epochs), n(modes.len())]));
        e.add("--epochs", cfg.epochs, "recorded orders and epoch statistics", orders);
        // Reserved (if not all touched) stack of every thread: 2 MiB each, Rust's default.
        let stacks = product(&[workers, 2 << 20]);
        match pm {
            Some(pm) => e.add("--pm-nodes", pm.nodes, "thread stacks", stacks),
            None => e.add("--threads", cfg.threads, "thread stacks", stacks),
        };
        if let Some(pm) = pm {
            let replicas = row.and_then(|r| product(&[n(pm.nodes), ents, r, F]));
            e.add("--pm-nodes", pm.nodes, "row replicas on every node", replicas);
        }
        e.check(budget)
    }
}

impl Options {
    /// Before a `--storage` run allocates or writes anything: a disk run's folder must have room
    /// for the partition files and one newer generation of each (a resumed run: the newer
    /// generations; a one-epoch run: the files and two partitions being written), and the
    /// memory the run holds must fit `budget` ([`check_memory`](Self::check_memory)). Without `--buffer` and with `--memory-limit`,
    /// `c` is the largest buffer that fits. Refuses with the figures.
    pub(super) fn fit_partitions(
        &self,
        cfg: &TrainConfig,
        d: &Dataset,
        mut opts: PartitionOpts,
        budget: Budget,
    ) -> Result<PartitionOpts, BoxError> {
        if let (StorageKind::Disk, Some(dir)) = (opts.storage, &opts.dir) {
            let g = ordo::partition::Geometry {
                rows: d.entities.len(),
                width: cfg.row_width(),
                partitions: opts.partitions,
            };
            let table = (0..g.partitions).map(|p| g.file_len(p)).fold(0u64, u64::saturating_add);
            let resumed = dir.join("manifest.json").exists();
            // A fresh run's initial files go once written back (`discard_initial`): one epoch
            // needs the table and the two partitions the I/O threads may be writing; a later
            // epoch keeps the last checkpoint's files beside the new ones.
            let largest = (0..g.partitions).map(|p| g.file_len(p)).max().unwrap_or(0);
            let writing = largest.saturating_mul(2);
            let files = match (resumed, cfg.epochs) {
                (true, _) => table,
                (false, 0 | 1) => table.saturating_add(writing),
                (false, _) => table.saturating_mul(2),
            };
            let dense = n(d.relations.len()).saturating_mul(n(cfg.row_width())).saturating_mul(8);
            crate::space::ensure(dir, files.saturating_add(dense), 2 * n(g.partitions) + 4)?;
        }
        let modes = [self.mode()];
        if self.buffer.is_none() && self.memory_limit.is_some() {
            for c in (2..=opts.partitions).rev() {
                let fits = PartitionOpts { buffer: c, ..opts.clone() };
                if self.check_memory(cfg, d, None, &modes, budget, Some(&fits)).is_ok() {
                    return Ok(fits);
                }
            }
            opts.buffer = 2;
        }
        self.check_memory(cfg, d, None, &modes, budget, Some(&opts))?;
        Ok(opts)
    }
}

impl Options {
    /// The memory `kge eval` will hold beside the dataset, against `budget`, before the save is
    /// loaded: `table` is the saved entity table's rows, columns and whether it is mapped
    /// ([`entities_shape`](crate::kge::io::npy::entities_shape)); a mapped table is read from the page cache and is not counted,
    /// one that must be read is. Counts the relation table (at most two rows per relation, no
    /// wider than an entity), the filter of the evaluated queries (their keys, and at most
    /// every triple's answer twice over), the ranks, and per rayon thread the scores of one
    /// query block against every entity (full ranking) or the sample, and its stack. What each
    /// term is: [`evaluate_loaded`](crate::kge::io::npy::evaluate_loaded). Refuses with the figures.
    pub(super) fn check_eval_memory(
        &self,
        cfg: &TrainConfig,
        d: &Dataset,
        (rows, cols, mapped): (usize, usize, bool),
        budget: Budget,
    ) -> Result<u64, OptionError> {
        const F: u64 = 4; // bytes per f32
        let mut e = Estimate::default();
        if !mapped {
            let table = product(&[n(rows), n(cols), F]);
            e.add("--load", "(entities.npy not little-endian f32)", "entity table, read", table);
        }
        let rels = product(&[n(d.relations.len()), 2, n(cols), F]);
        e.add("--load", "(relations.npy)", "relation table", rels);
        let limit = if cfg.eval_limit == 0 { d.test.len() } else { cfg.eval_limit };
        let queries = n(limit.min(d.test.len()));
        // A map entry and an empty answer list per query side, 128 bytes at most.
        let keys = product(&[queries, 2, 128]);
        let all = n(d.train.len() + d.valid.len() + d.test.len());
        let filter = keys.and_then(|k| k.checked_add(product(&[all, 2, F, 2])?));
        e.add("--eval-limit", cfg.eval_limit, "filter of the evaluated queries", filter);
        e.add("--eval-limit", cfg.eval_limit, "ranks", product(&[queries, 2, 8]));
        let rayon = n(rayon::current_num_threads());
        let scores = match cfg.eval_sample {
            0 => product(&[rayon, n(2 * crate::kge::eval::ranking::BLOCK + 2), n(rows), F]),
            k => product(&[rayon, n(k), F]),
        };
        e.add("--eval-sample", cfg.eval_sample, "scores of the queries ranked at once", scores);
        e.add("--eval-sample", cfg.eval_sample, "thread stacks", product(&[rayon, 2 << 20]));
        e.check(budget)
    }
}
