//! Metrics of trained embeddings as a run's configuration evaluates them: full filtered
//! ranking, or sampled ranking with `eval_sample`.

use super::config::TrainConfig;
use crate::kge::data::dataset::Triple;
use crate::kge::eval::ranking::{Filter, Metrics, evaluate, evaluate_sampled};
use ndarray::{ArrayView2, s};

/// Metrics on `triples` of the entity embeddings `entities` (`N × dim`, row-major) and the
/// relation parameters `relations`: full filtered ranking, or sampled with `cfg.eval_sample`.
pub fn metrics_of_embeddings(
    cfg: &TrainConfig,
    entities: &[f32],
    relations: &[f32],
    triples: &[Triple],
    filter: &Filter,
) -> Metrics {
    let (dim, rdim) = (cfg.dim, cfg.step_config().relation_dim());
    let ents = ArrayView2::from_shape((entities.len() / dim.max(1), dim), entities)
        .expect("rows are dim wide");
    let rel = ArrayView2::from_shape((relations.len() / rdim, rdim), relations).expect("rdim wide");
    let model = (cfg.score, cfg.reciprocal);
    match cfg.eval_sample {
        0 => evaluate(model, ents, rel, triples, filter),
        k => evaluate_sampled(model, ents, rel, triples, filter, (k, cfg.seed)),
    }
}

/// Metrics of the embeddings in `store` and `model` on `triples`.
pub fn metrics(
    cfg: &TrainConfig,
    store_rows: &[f32],
    relations: &[f32],
    triples: &[Triple],
    filter: &Filter,
) -> Metrics {
    let (dim, w, rdim) = (cfg.dim, cfg.row_width(), cfg.step_config().relation_dim());
    let rows =
        ArrayView2::from_shape((store_rows.len() / w, w), store_rows).expect("rows are w wide");
    let rel = ArrayView2::from_shape((relations.len() / rdim, rdim), relations).expect("rdim wide");
    let (model, ents) = ((cfg.score, cfg.reciprocal), rows.slice(s![.., ..dim]));
    match cfg.eval_sample {
        0 => evaluate(model, ents, rel, triples, filter),
        k => evaluate_sampled(model, ents, rel, triples, filter, (k, cfg.seed)),
    }
}
