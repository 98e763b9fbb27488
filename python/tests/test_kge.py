"""ordo.kge: the command line's trainer, options, saves and evaluator from Python."""

import numpy as np
import pytest

import ordo.kge


def test_train_returns_the_run_and_its_save_loads_back(tmp_path):
    seen = []
    run = ordo.kge.train(epochs=2, dim=20, batch_size=256, callback=seen.append, progress=False, quiet=True)
    assert run.mode == "oac"
    assert [h["epoch"] for h in run.history] == [1, 2]
    assert seen == run.history
    data = ordo.kge.load_dataset("umls")
    per_epoch = -(-len(data["train"]) // 256)
    assert [len(o) for o in run.order] == [per_epoch, per_epoch]
    for o in run.order:  # every batch of the epoch once
        assert sorted((o - o.min()).tolist()) == list(range(per_epoch))
    assert run.entities.shape == (data["entities"], 20)
    # Trained well above random ranking (MRR ~0.04 on 135 entities), and the evaluator on the
    # returned arrays agrees with the run's own test metrics.
    assert run.test["mrr"] > 0.3
    known = np.concatenate([data["train"], data["valid"], data["test"]])
    again = ordo.kge.evaluate("complex", run.entities, run.relations, data["test"], known)
    assert again["mrr"] == pytest.approx(run.test["mrr"], abs=1e-12)

    run.save(tmp_path / "emb")
    entities, relations = ordo.kge.load(tmp_path / "emb", "umls")
    assert np.array_equal(entities, run.entities) and np.array_equal(relations, run.relations)


def test_a_misspelt_option_is_the_command_line_s_error():
    with pytest.raises(ValueError, match="--dimm"):
        ordo.kge.train(dimm=10, progress=False)
    with pytest.raises(ValueError, match="--dim"):
        ordo.kge.train(dim=0, progress=False)
