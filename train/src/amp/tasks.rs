//! The two tasks as instance sources and graphs for the runtime.

use std::path::Path;

use ordo_mp::models::mlp::mlp;
use ordo_mp::models::rnn::{RnnSpec, rnn};
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{Graph, MpError, Payload, State};

use super::list_reduction::{CLASSES, Example, VOCAB};
use crate::option_error::OptionError;
use crate::rng::SplitMix64;
use crate::sgd::idx::Split;

/// Instances in memory: a state and the controller's payloads per instance.
pub type Instances = Vec<(State, Vec<Payload>)>;

/// Glorot-uniform weights from `(seed, layer)`.
pub fn glorot(seed: u64) -> impl FnMut(usize, usize) -> Payload {
    let mut layer = 0;
    move |din, dout| {
        layer += 1;
        let mut g = SplitMix64::new(seed, 1000 + layer);
        let a = (6.0 / (din + dout) as f32).sqrt();
        Payload::from_shape_vec((din, dout), g.uniform(din * dout, a).collect())
            .unwrap_or_else(|_| Payload::zeros((din, dout)))
    }
}

/// The first `n` examples of `split` in batches of `batch` (an instance is a batch, as in the
/// paper): pixels scaled to `[0, 1]`, labels as `B × 1`. Instance ids start at `first_id`.
pub fn mnist_instances(split: &Split, n: usize, batch: usize, first_id: u64) -> Instances {
    let n = n.min(split.n);
    (0..n.div_ceil(batch))
        .map(|k| {
            let rows: Vec<usize> = (k * batch..((k + 1) * batch).min(n)).collect();
            let x = Payload::from_shape_fn((rows.len(), split.dim), |(r, j)| {
                split.image(rows[r])[j] as f32 / 255.0
            });
            let y = Payload::from_shape_fn((rows.len(), 1), |(r, _)| split.labels[rows[r]] as f32);
            (State::new(first_id + k as u64), vec![x, y])
        })
        .collect()
}

/// The MLP of B.1: 784 → 784 → 784 → 784 → 10 with ReLUs (4 layers), SGD.
pub fn mnist_graph(
    hidden: usize,
    opt: Optimizer,
    mui: usize,
    workers: usize,
    seed: u64,
) -> Result<Graph, MpError> {
    Ok(mlp(&[784, hidden, hidden, hidden, 10], &mut glorot(seed), opt, mui, workers)?.0)
}

/// Examples bucketed by length into batches of at most `batch` (B.2: "we bucket training
/// instances into batches of 100 sequences"); tokens one-hot, time major; a zero initial
/// hidden state; labels. Instance ids start at `first_id`.
pub fn list_instances(
    examples: &[Example],
    batch: usize,
    hidden: usize,
    first_id: u64,
) -> Instances {
    let mut by_len: std::collections::BTreeMap<usize, Vec<&Example>> = Default::default();
    for e in examples {
        by_len.entry(e.tokens.len()).or_default().push(e);
    }
    let mut out = Vec::new();
    for (len, exs) in by_len {
        for chunk in exs.chunks(batch) {
            let b = chunk.len();
            let mut x = Payload::zeros((len * b, VOCAB));
            for (s, e) in chunk.iter().enumerate() {
                for (t, &tok) in e.tokens.iter().enumerate() {
                    x[[t * b + s, tok]] = 1.0;
                }
            }
            let y = Payload::from_shape_fn((b, 1), |(s, _)| chunk[s].answer as f32);
            let id = first_id + out.len() as u64;
            out.push((
                State::new(id).with_len(len as u32),
                vec![x, Payload::zeros((b, hidden)), y],
            ));
        }
    }
    out
}

/// The RNN of B.2: hidden 128, ReLU, `replicas` copies of the cell.
pub fn list_graph(
    hidden: usize,
    replicas: usize,
    opt: Optimizer,
    mui: usize,
    workers: usize,
    seed: u64,
) -> Result<Graph, MpError> {
    let spec =
        RnnSpec { vocab: VOCAB, hidden, classes: CLASSES, replicas, opt, min_update_interval: mui };
    Ok(rnn(spec, &mut glorot(seed), workers)?.0)
}

/// The graph described in `file` (`ordo_mp::text`), Glorot weights from `seed`, on
/// `(mui, workers)`; its `Linear` layers may take `bytes` with their gradients and optimizer
/// state (see [`parse_graph`]).
pub fn text_graph(
    file: &Path,
    opt: Optimizer,
    (mui, workers): (usize, usize),
    seed: u64,
    bytes: u64,
) -> Result<Graph, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("graph description {}: {e}", file.display()))?;
    Ok(parse_graph(&file.display().to_string(), &text, opt, (mui, workers), seed, bytes)?)
}

/// Bytes per `Linear` weight: the weight, its gradient, two optimizer moments and a snapshot.
const BYTES_PER_WEIGHT: u64 = 5 * 4;

/// [`text_graph`] on the text of the file `name`: every `Linear D_IN D_OUT` is sized with checked
/// arithmetic before its weights are drawn, and once the layers so far would take more than
/// `bytes` the parse stops allocating and the graph is refused naming the layer's size.
pub fn parse_graph(
    name: &str,
    text: &str,
    opt: Optimizer,
    (mui, workers): (usize, usize),
    seed: u64,
    bytes: u64,
) -> Result<Graph, OptionError> {
    let mut weights = glorot(seed);
    let (mut used, mut refused) = (0u64, None);
    let mut init = |din: usize, dout: usize| {
        let size =
            (din as u64).checked_mul(dout as u64).and_then(|w| w.checked_mul(BYTES_PER_WEIGHT));
        match size.and_then(|s| s.checked_add(used)).filter(|&u| u <= bytes) {
            Some(u) if refused.is_none() => {
                used = u;
                weights(din, dout)
            }
            _ => {
                refused.get_or_insert((din, dout));
                Payload::zeros((0, 0))
            }
        }
    };
    let parsed = ordo_mp::text::parse(text, &mut init, opt, mui, workers);
    if let Some((din, dout)) = refused {
        let why = format!(
            "Linear {din} {dout}: the graph's layers need more than the {} this run can give them",
            crate::memory::human(bytes)
        );
        return Err(OptionError::new("--graph", name, why));
    }
    parsed.map(|(g, _)| g).map_err(|e| OptionError::new("--graph", name, e.to_string()))
}

/// Load Fashion-MNIST from `dir`.
pub fn load_fashion(
    dir: &Path,
) -> Result<crate::sgd::idx::FashionMnist, crate::sgd::idx::IdxError> {
    crate::sgd::idx::FashionMnist::load(dir)
}
