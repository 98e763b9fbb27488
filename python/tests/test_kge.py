"""ordo.kge: the command line's trainer, options, saves and evaluator from Python."""

import numpy as np
import pytest

import ordo.kge
from conftest import interrupt


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


def test_an_option_for_another_kind_of_run_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="--pm"):
        ordo.kge.train(epochs=1, dim=8, pm="adapm", progress=False)


def test_a_misspelt_option_is_the_command_line_s_error():
    with pytest.raises(ValueError, match="--dimm"):
        ordo.kge.train(dimm=10, progress=False)
    with pytest.raises(ValueError, match="--dim"):
        ordo.kge.train(dim=0, progress=False)


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


# A partitioned run as the command line's
#   ordo-train kge --dataset umls --storage disk --storage-dir parts --partitions 4 --buffer 2 \
#     --dim 16 --epochs 2 --batch-size 512 --mode sync --quiet --save emb
# runs it: its test MRR (printed 0.4835) and the CRC-32 of the entities.npy it saves.
PARTS = dict(partitions=4, buffer=2, dim=16, epochs=2, batch_size=512, mode="sync", progress=False, quiet=True)
CLI_ENTITIES_CRC32 = 3821798297


def test_a_partitioned_run_is_the_command_line_s_bit_for_bit(tmp_path):
    import json

    seen = []
    disk = ordo.kge.train(**PARTS, storage="disk", storage_dir=tmp_path / "parts", save=tmp_path / "emb", callback=seen.append)
    assert disk.mode == "sync" and [h["epoch"] for h in disk.history] == [1, 2] and seen == disk.history
    assert all(h["loss"] is None and h["valid_mrr"] > 0 for h in disk.history)
    assert round(disk.test["mrr"], 4) == 0.4835
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["files"]["entities.npy"] == CLI_ENTITIES_CRC32, "the command line's table"
    entities, relations = ordo.kge.load(tmp_path / "emb", "umls")
    assert np.array_equal(bits(entities), bits(disk.entities))
    assert np.array_equal(bits(relations), bits(disk.relations))
    # The in-memory twin (the same partitions and order, no files) trains the same table.
    twin = ordo.kge.train(**PARTS, storage="memory")
    assert np.array_equal(bits(twin.entities), bits(disk.entities))
    assert [o.tolist() for o in twin.order] == [o.tolist() for o in disk.order]
    # The folder checkpoints each epoch: a second call resumes there, with nothing left to train.
    again = ordo.kge.train(**PARTS, storage="disk", storage_dir=tmp_path / "parts")
    assert again.order == [] and np.array_equal(bits(again.entities), bits(disk.entities))
    assert again.test == disk.test


def test_a_partitioned_run_is_refused_before_work_starts_as_the_command_line_refuses_it(tmp_path):
    parts = tmp_path / "parts"
    # Bad input is a ValueError (the command line's exit status 2), naming what to change.
    with pytest.raises(ValueError, match="--memory-limit"):
        ordo.kge.train(**PARTS, storage="disk", storage_dir=parts, memory_limit="64K")
    assert not parts.exists() or not any(parts.iterdir()), "nothing written"
    with pytest.raises(ValueError, match="--storage-dir"):
        ordo.kge.train(**PARTS, storage="disk")
    with pytest.raises(ValueError, match="--checkpoint"):
        ordo.kge.train(**PARTS, storage="memory", checkpoint=tmp_path / "ck")
    # A folder of another run (another seed) is refused by its run id; the folder is kept.
    ordo.kge.train(**{**PARTS, "epochs": 1}, storage="disk", storage_dir=parts)
    kept = sorted(p.name for p in parts.iterdir())
    with pytest.raises(ValueError, match="run"):
        ordo.kge.train(**PARTS, storage="disk", storage_dir=parts, seed=7)
    assert sorted(p.name for p in parts.iterdir()) == kept


def test_a_resumed_run_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    opts = dict(epochs=4, dim=16, batch_size=512, mode="sync", progress=False, quiet=True)
    whole = ordo.kge.train(**opts, out=tmp_path / "out")
    # --out as the command line writes it: the CSV and plots, COMPLETE (the run id) last.
    assert (tmp_path / "out" / "metrics.csv").is_file() and (tmp_path / "out" / "COMPLETE").is_file()

    first = ordo.kge.train(**{**opts, "epochs": 2}, checkpoint=tmp_path / "ck", checkpoint_every=1)
    assert (tmp_path / "ck" / "latest").read_text().strip() == "epoch-000002"
    rest = ordo.kge.train(**opts, resume=tmp_path / "ck", checkpoint=tmp_path / "ck")
    assert (tmp_path / "ck" / "latest").read_text().strip() == "epoch-000004"
    assert not np.array_equal(first.entities, whole.entities), "the first half alone is not the run"
    assert np.array_equal(bits(rest.entities), bits(whole.entities))
    assert np.array_equal(bits(rest.relations), bits(whole.relations))
    assert [h["loss"] for h in rest.history] == [h["loss"] for h in whole.history]
    # Resumed, not retrained: its first two epochs are the checkpoint's records (their wall
    # times included), the last two its own.
    assert [h["epoch"] for h in rest.history] == [1, 2, 3, 4]
    assert rest.history[:2] == first.history and rest.history[2:] != whole.history[2:]

    # A checkpoint of another run is refused before training, as the command line refuses it.
    with pytest.raises(ValueError, match="checkpoint"):
        ordo.kge.train(**{**opts, "dim": 20}, resume=tmp_path / "ck")


SIGINT_SCRIPT = """
import sys, ordo.kge
ck, out = sys.argv[1], sys.argv[2]
def started(entry):
    if entry["epoch"] == 1:
        print("training", flush=True)
try:
    ordo.kge.train(epochs=1_000_000, dim=16, batch_size=256, mode="oac", checkpoint=ck,
                   checkpoint_every=1, out=out, callback=started, progress=False, quiet=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_sigint_stops_kge_train_within_a_second_with_nothing_half_written(tmp_path):
    ck, out = tmp_path / "ck", tmp_path / "out"
    returncode, rest, took = interrupt(SIGINT_SCRIPT, [str(ck), str(out)], "training", wait=1.0, timeout=20)
    assert returncode == 3 and "interrupted" in rest, rest
    assert took < 1.0, f"stopped {took:.2f} s after SIGINT"
    # Nothing half-written: no temporary left, --out not marked complete, and the last
    # checkpoint resumes (it is checked file by file against its manifest).
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    assert not (out / "COMPLETE").exists()
    epoch = int((ck / "latest").read_text().strip().split("-")[1])
    assert epoch >= 1
    run = ordo.kge.train(epochs=epoch + 1, dim=16, batch_size=256, mode="oac", resume=ck, progress=False, quiet=True)
    assert [h["epoch"] for h in run.history][-1] == epoch + 1
