//! The state a run starts from: the configuration checked, the relation parameters and the
//! entity store initialized from the seed. Kept apart from [`crate::kge::run::config`] because
//! building them can fail with a [`TrainError`], whose checkpoint errors depend on the
//! configuration.

use super::error::TrainError;
use crate::kge::data::dataset::Dataset;
use crate::kge::model::init::{entity_store_in, init_relations};
use crate::kge::model::score::ScoreFn;
use crate::kge::model::step::EmbeddingModel;
use crate::kge::run::config::TrainConfig;
use ordo::row_store::RowStore;

impl TrainConfig {
    /// A fresh model and entity store, initialized from the seed.
    pub fn init(&self, d: &Dataset) -> Result<(EmbeddingModel, RowStore), TrainError> {
        let model = self.init_model(d)?;
        Ok((model, self.init_store(d)?))
    }

    /// The entity store of [`init`](Self::init) alone.
    pub fn init_store(&self, d: &Dataset) -> Result<RowStore, TrainError> {
        let init = (self.init, self.init_scale);
        let (n, width, precision) = (d.entities.len(), self.row_width(), self.precision.store());
        entity_store_in(precision, n, self.dim, width, init, self.seed).map_err(TrainError::Memory)
    }

    /// The model of [`init`](Self::init) alone, after checking the configuration: a resumed
    /// run takes its entity store from the checkpoint and never builds the initial one.
    pub fn init_model(&self, d: &Dataset) -> Result<EmbeddingModel, TrainError> {
        self.score.check_dim(self.dim)?;
        if self.batch_size == 0 || self.negatives == 0 || self.chunk == 0 {
            return Err(TrainError::Config(
                "--batch-size, --negatives and --chunk must be positive",
            ));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(TrainError::Config("--lr must be a positive number"));
        }
        let non_negative = |x: f32| x >= 0.0 && x.is_finite();
        if !(non_negative(self.init_scale) && non_negative(self.reg) && self.margin.is_finite()) {
            return Err(TrainError::Config(
                "--init-scale and --reg-weight must be non-negative numbers, --margin a number",
            ));
        }
        let sc = self.step_config();
        let init = (self.init, self.init_scale);
        let rel = init_relations(
            sc.relation_rows(d.relations.len()),
            sc.relation_dim(),
            init,
            self.score == ScoreFn::RotatE,
            self.seed,
        );
        Ok(EmbeddingModel::with_relations(sc, d.relations.len(), rel))
    }
}
