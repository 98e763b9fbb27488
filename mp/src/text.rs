//! The graph from a text description: one statement per line, `#` starts a comment.
//!
//! ```text
//! node NAME KIND ARGS… [@WORKER]   a node; @W places it on worker W, else round-robin (§3.1)
//! chain A B C …                    output 0 of each node to input 0 of the next
//! edge A.OUT B.IN                  output OUT of A to input IN of B
//! replicas A B …                   replicas (§5): they start as copies of A, averaged by the trainer
//! ```
//!
//! Kinds: `Controller grad|nograd …` (one word per output: whether its gradient comes back),
//! `Linear D_IN D_OUT`, `Relu`, `SoftmaxLoss`, `Concat N`, `Phi N`, `Ungroup`,
//! `Cond mod N` (the replicas' router: the replica the controller stamped on the instance, mod N;
//! the controller balances over the largest `replicas` group), `Cond loop-end` (0 while the loop
//! counter is below the sequence length, 1 at the end), `Isu enter|increment|exit`.
//! A byte-order mark at the start is ignored, lines may end in `\n` or `\r\n`, and words are
//! separated by any whitespace, so a file saved by any editor reads the same.
//! Every `Linear` takes its weights from the initializer, in file order, and the optimizer and
//! `min_update_interval` given to [`parse`].

use std::collections::HashMap;

use thiserror::Error;

use crate::controller::Controller;
use crate::error::MpError;
use crate::graph::{Graph, GraphBuilder};
use crate::models::Init;
use crate::models::rnn::{by_replica, enter_loop, exit_loop, loop_end};
use crate::node_id::NodeId;
use crate::nodes::{Concat, Isu, Linear, Phi, Relu, SoftmaxLoss, Ungroup};
use crate::optimizer::Optimizer;

/// What is wrong with a graph description.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum TextError {
    /// A statement that does not parse or names what does not exist (lines count from 1).
    #[error("line {line}: {msg}")]
    Line {
        /// The line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// The builder refused a statement of this line (a port out of range or taken twice).
    #[error("line {line}: {source}")]
    Graph {
        /// The line.
        line: usize,
        /// The builder's error.
        source: MpError,
    },
    /// The whole graph does not validate (a port left open, not exactly one controller, a
    /// worker beyond the count).
    #[error("graph: {0}")]
    Build(#[from] MpError),
}

fn number(line: usize, word: Option<&str>, what: &str) -> Result<usize, TextError> {
    let word = word.ok_or_else(|| TextError::Line { line, msg: format!("{what} missing") })?;
    word.parse()
        .map_err(|_| TextError::Line { line, msg: format!("{what} `{word}` is not a number") })
}

/// Parse `text` into a graph on `workers` workers; `Linear` nodes get `init`'s weights,
/// optimizer `opt` and `min_update_interval` `mui`. Returns the graph and the nodes by name.
///
/// ```
/// use ordo_mp::{optimizer::Optimizer, text::parse};
/// let text = "node c Controller grad nograd\nnode l Linear 4 3 @1\nnode loss SoftmaxLoss\n\
///             chain c l loss\nedge c.1 loss.1\nedge loss.0 c.0\n";
/// let mut init = |i, o| ndarray::Array2::zeros((i, o));
/// let (g, names) = parse(text, &mut init, Optimizer::sgd(0.1), 1, 2).unwrap();
/// assert_eq!((g.len(), g.topology().place[names["l"].0]), (3, 1));
/// let bad = parse("node c Controller grad\nnode x Lstm 3", &mut init, Optimizer::sgd(0.1), 1, 2);
/// assert_eq!(bad.err().unwrap().to_string(), "line 2: unknown node kind `Lstm`");
/// ```
pub fn parse(
    text: &str,
    init: Init,
    opt: Optimizer,
    mui: usize,
    workers: usize,
) -> Result<(Graph, HashMap<String, NodeId>), TextError> {
    let mut b = GraphBuilder::new();
    let mut names: HashMap<String, NodeId> = HashMap::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |msg: String| TextError::Line { line, msg };
        let graph = |source| TextError::Graph { line, source };
        let words: Vec<&str> = raw.split('#').next().unwrap_or("").split_whitespace().collect();
        let Some((&stmt, rest)) = words.split_first() else { continue };
        let node =
            |name: &str| names.get(name).copied().ok_or_else(|| err(format!("no node `{name}`")));
        let port = |at: &str| -> Result<(NodeId, usize), TextError> {
            let (n, p) =
                at.split_once('.').ok_or_else(|| err(format!("`{at}` is not NODE.PORT")))?;
            Ok((node(n)?, number(line, Some(p), "port")?))
        };
        match stmt {
            "node" => {
                let (name, kind, mut args) = match rest {
                    [name, kind, args @ ..] => (*name, *kind, args.to_vec()),
                    _ => return Err(err("`node NAME KIND …` expected".into())),
                };
                let worker = match args.last().and_then(|w| w.strip_prefix('@')) {
                    Some(w) => {
                        let w = number(line, Some(w), "worker")?;
                        args.pop();
                        Some(w)
                    }
                    None => None,
                };
                if names.contains_key(name) {
                    return Err(err(format!("node `{name}` defined twice")));
                }
                let arg = |k: usize, what: &str| number(line, args.get(k).copied(), what);
                let id = match (kind, args.first().copied()) {
                    ("Controller", _) => {
                        let grads = args
                            .iter()
                            .map(|a| match *a {
                                "grad" => Ok(true),
                                "nograd" => Ok(false),
                                other => Err(err(format!("`{other}`: grad or nograd expected"))),
                            })
                            .collect::<Result<Vec<bool>, _>>()?;
                        b.controller(Controller::new(grads)).map_err(graph)?
                    }
                    ("Linear", _) => {
                        let w = init(arg(0, "input size")?, arg(1, "output size")?);
                        b.add(Linear::new(w, opt, mui).map_err(graph)?)
                    }
                    ("Relu", _) => b.add(Relu::new()),
                    ("SoftmaxLoss", _) => b.add(SoftmaxLoss::new()),
                    ("Concat", _) => b.add(Concat::new(arg(0, "inputs")?)),
                    ("Phi", _) => b.add(Phi::new(arg(0, "inputs")?)),
                    ("Ungroup", _) => b.add(Ungroup::new()),
                    ("Cond", Some("mod")) => b.add(by_replica(arg(1, "replicas")?.max(1))),
                    ("Cond", Some("loop-end")) => b.add(loop_end()),
                    ("Isu", Some("enter")) => b.add(enter_loop()),
                    ("Isu", Some("increment")) => b.add(Isu::increment()),
                    ("Isu", Some("exit")) => b.add(exit_loop()),
                    ("Cond" | "Isu", a) => {
                        return Err(err(format!("unknown {kind} `{}`", a.unwrap_or(""))));
                    }
                    _ => return Err(err(format!("unknown node kind `{kind}`"))),
                };
                if let Some(w) = worker {
                    b.place(id, w).map_err(graph)?;
                }
                names.insert(name.to_string(), id);
            }
            "chain" => {
                let ids = rest.iter().map(|n| node(n)).collect::<Result<Vec<_>, _>>()?;
                b.chain(&ids).map_err(graph)?;
            }
            "edge" => {
                let [from, to] = rest else {
                    return Err(err("`edge A.OUT B.IN` expected".into()));
                };
                let ((a, o), (c, p)) = (port(from)?, port(to)?);
                b.connect(a, o, c, p).map_err(graph)?;
            }
            "replicas" => {
                let ids = rest.iter().map(|n| node(n)).collect::<Result<Vec<_>, _>>()?;
                b.replicas(ids).map_err(graph)?;
            }
            other => return Err(err(format!("unknown statement `{other}`"))),
        }
    }
    Ok((b.build(workers)?, names))
}
