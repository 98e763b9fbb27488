//! Staleness telemetry: synchronous training applies every gradient to the parameters its
//! forward read (staleness 0); with several instances in flight some gradients are applied
//! after other instances' updates, and never more than `max_active_keys − 1` of them (one
//! update per gradient at `min_update_interval = 1`).

mod common;

use std::sync::Arc;

use ordo_mp::models::mlp::mlp;
use ordo_mp::optimizer::Optimizer;
use ordo_mp::{RunConfig, run};

fn staleness(mak: usize) -> Vec<ordo_mp::staleness::StalenessHistogram> {
    let dims = [12, 16, 16, 4];
    let data = common::dense_instances(40, 5, 12, 4, 7);
    let (mut g, _) = mlp(&dims, &mut common::init(3), Optimizer::sgd(0.1), 1, 3).unwrap();
    let cfg = RunConfig { max_active_keys: mak, ..RunConfig::default() };
    run(&mut g, Arc::new(data.clone()), (0..data.len()).collect(), &cfg).unwrap();
    g.staleness()
        .into_iter()
        .map(|(_, kind, h)| {
            assert_eq!(kind, "Linear");
            h
        })
        .collect()
}

#[test]
fn synchronous_training_has_no_staleness() {
    let hs = staleness(1);
    assert_eq!(hs.len(), 3);
    for h in hs {
        assert_eq!(h.count(), 40, "one gradient per instance");
        assert_eq!(h.max(), 0);
    }
}

#[test]
fn asynchrony_is_stale_within_the_mak_bound() {
    let hs = staleness(4);
    // The first layer sees every other in-flight instance's update between its forward and its
    // backward once the pipeline is full.
    assert!(hs[0].max() > 0, "no stale gradient at mak 4: {:?}", hs[0]);
    for h in hs {
        assert_eq!(h.count(), 40);
        assert!(h.max() <= 3, "staleness {} above mak − 1", h.max());
    }
}
