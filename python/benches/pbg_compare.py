"""ordo against PyTorch-BigGraph 1.0 in PBG's own setting, alternated, on any KG directory.

Each round trains PyTorch-BigGraph (``torchbiggraph==1.0.0``, Hogwild workers) and then
``ordo-train kge`` with the same settings, and both models are ranked by the same filtered full
ranking (every entity a candidate, train/valid/test filtered: ``ordo.kge.evaluate``). PBG's
speed comes from its own per-bucket compute times; ordo's from its own report (training
epochs only, evaluation excluded, as PBG's). The settings are those of
``train/configs/wordnet30-complex-pbg.toml``: ComplEx dim 100 (PBG: ``complex_diagonal`` and
``dot``), batches of 1,000, 100 uniform negatives shared by chunks of 50 and 50 in-batch
negatives per positive and side, softmax loss, Adagrad at lr 0.1 (row-wise for the entities,
element-wise for the relations: PBG's ``RowAdagrad`` and torch's ``Adagrad``), 5 epochs.

PBG's model scores an edge (u, r, v) as dot(u, r * v) over [real | imaginary] rows, which is
ComplEx with r conjugated: its relations are handed to the evaluator conjugated, and the script
checks that on a sample of edges before ranking. Each entity's embedding is PBG's row plus its
global embedding of the entity type (PBG's default ``global_emb``), as PBG itself scores it.

    pip install --no-deps torchbiggraph==1.0.0 attrs h5py tqdm   # beside torch and ordo
    cargo build --release -p ordo-train
    python python/benches/pbg_compare.py --dataset ../shared/datasets/wordnet30 --rounds 3

Prints one line per run (filtered test MRR, and valid MRR after the last epoch, the split to
judge settings on) and the ratios of the rounds (oac triples/s over PBG's, MRR of each).
"""

import argparse
import logging
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import ordo


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="a directory of train/valid/test.txt (or umls, kinships, nations)")
    p.add_argument("--rounds", type=int, default=1, help="PBG then ordo, this many times")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--workers", type=int, default=2, help="PBG's Hogwild workers")
    p.add_argument("--config", default="train/configs/wordnet30-complex-pbg.toml", help="ordo's config")
    p.add_argument("--ordo", default="target/release/ordo-train", help="the ordo-train binary")
    p.add_argument("--mode", default="oac", help="ordo's mode")
    p.add_argument("--work", help="a scratch directory (default: a temporary one)")
    args = p.parse_args()
    if args.rounds < 1 or args.epochs < 1 or args.workers < 1:
        p.error("--rounds, --epochs and --workers must be >= 1")
    if not Path(args.ordo).is_file():
        p.error(f"--ordo {args.ordo}: no such binary (cargo build --release -p ordo-train)")
    return args


def pbg_config(work, data, epochs, workers):
    from torchbiggraph.config import ConfigSchema

    relations = [
        {"name": str(r), "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}
        for r in range(data["relations"])
    ]
    return ConfigSchema.from_dict(
        dict(
            entity_path=str(work / "entities"),
            edge_paths=[str(work / "edges")],
            checkpoint_path=str(work / "model"),
            entities={"all": {"num_partitions": 1}},
            relations=relations,
            dimension=100,
            comparator="dot",
            loss_fn="softmax",
            lr=0.1,
            num_epochs=epochs,
            batch_size=1000,
            num_uniform_negs=100,
            num_batch_negs=50,
            workers=workers,
            eval_fraction=0.0,
        )
    )


def write_pbg_input(config, data):
    """The training edges in PBG's storage, with ordo's own entity and relation ids."""
    from torchbiggraph.edgelist import EdgeList
    from torchbiggraph.entitylist import EntityList
    from torchbiggraph.graph_storages import EDGE_STORAGES, ENTITY_STORAGES

    entities = ENTITY_STORAGES.make_instance(config.entity_path)
    entities.prepare()
    entities.save_count("all", 0, data["entities"])
    edges = EDGE_STORAGES.make_instance(config.edge_paths[0])
    edges.prepare()
    train = torch.from_numpy(np.ascontiguousarray(data["train"]).astype(np.int64))
    edges.save_edges(
        0, 0, EdgeList(EntityList.from_tensor(train[:, 0]), EntityList.from_tensor(train[:, 2]), train[:, 1].contiguous())
    )


class BucketTimes(logging.Handler):
    """PBG's own compute time per bucket, from its log lines."""

    PATTERN = re.compile(r"Processed (\d+) edges in ([0-9.]+) s")

    def __init__(self):
        super().__init__()
        self.edges, self.seconds = 0, 0.0

    def emit(self, record):
        m = self.PATTERN.search(record.getMessage())
        if m:
            self.edges += int(m.group(1))
            self.seconds += float(m.group(2))


def run_pbg(args, data, work):
    from torchbiggraph.train import train
    from torchbiggraph.util import SubprocessInitializer, setup_logging

    config = pbg_config(work, data, args.epochs, args.workers)
    write_pbg_input(config, data)
    setup_logging()
    times = BucketTimes()
    logging.getLogger().addHandler(times)
    init = SubprocessInitializer()
    init.register(torch.set_num_threads, 1)
    try:
        train(config, subprocess_init=init)
    finally:
        logging.getLogger().removeHandler(times)
    return config, times


def pbg_tables(config, data):
    """PBG's entities, and its relations conjugated into ordo's ComplEx, checked on a sample."""
    import h5py

    model_dir = Path(config.checkpoint_path)
    version = int((model_dir / "checkpoint_version.txt").read_text().strip())
    with h5py.File(model_dir / f"embeddings_all_0.v{version}.h5", "r") as f:
        entities = f["embeddings"][...].astype(np.float32)
    with h5py.File(model_dir / f"model.v{version}.h5", "r") as f:
        params = {}
        f["model"].visititems(lambda k, v: params.__setitem__(k, v[...]) if isinstance(v, h5py.Dataset) else None)
    # PBG adds one vector common to all entities of a type to each of their embeddings.
    entities = entities + params.get("entities/all/global_embedding", 0.0)
    half = entities.shape[1] // 2
    relations = np.zeros((data["relations"], 2 * half), np.float32)
    for r in range(data["relations"]):
        found = {k.rsplit("/", 1)[-1]: v for k, v in params.items() if k.startswith(f"relations/{r}/operator/rhs/")}
        if not {"real", "imag"} <= found.keys():
            sys.exit(f"relation {r}'s operator is not in PBG's model file: {sorted(params)[:8]}")
        real, imag = found["real"], found["imag"]
        relations[r] = np.concatenate([real, -imag])
        # PBG's score: dot(u, r * v), r * v the complex product over [real | imaginary].
        sample = data["test"][data["test"][:, 1] == r][:5]
        for h, _, t in sample:
            u, v = entities[h], entities[t]
            rv = np.concatenate([v[:half] * real - v[half:] * imag, v[:half] * imag + v[half:] * real])
            ordo_score = np.sum(
                u[:half] * relations[r, :half] * v[:half]
                + u[half:] * relations[r, :half] * v[half:]
                + u[:half] * relations[r, half:] * v[half:]
                - u[half:] * relations[r, half:] * v[:half]
            )
            assert abs(float(u @ rv) - float(ordo_score)) < 1e-4 * (1 + abs(float(u @ rv))), "conjugation"
    return entities, relations


def run_ordo(args):
    """ordo's filtered test MRR, its last epoch's filtered valid MRR and its triples/s."""
    cmd = [args.ordo, "kge", "--config", args.config, "--dataset", args.dataset, "--mode", args.mode,
           "--epochs", str(args.epochs)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"test \([^)]*\): MRR ([0-9.]+).*\((\d+) triples/s\)", out)
    epochs = re.findall(rf"^\s*{args.epochs}\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)\s*$", out, re.M)
    if not m or not epochs:
        sys.exit(f"could not read ordo's result from:\n{out}")
    return float(m.group(1)), float(epochs[-1]), float(m.group(2))


def main():
    args = parse()
    data = ordo.kge.load_dataset(args.dataset)
    known = np.concatenate([data["train"], data["valid"], data["test"]])
    print(f"{args.dataset}: {data['entities']} entities, {data['relations']} relations, "
          f"{len(data['train'])} training triples; {args.epochs} epochs, PBG with {args.workers} workers")
    rows = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            start = time.perf_counter()
            config, times = run_pbg(args, data, Path(tmp))
            wall = time.perf_counter() - start
            entities, relations = pbg_tables(config, data)
        pbg_rate = times.edges / times.seconds
        pbg_mrr = ordo.kge.evaluate("complex", entities, relations, data["test"], known)["mrr"]
        pbg_valid = ordo.kge.evaluate("complex", entities, relations, data["valid"], known)["mrr"]
        print(f"round {r + 1}: PBG   MRR {pbg_mrr:.4f} (valid {pbg_valid:.4f})  {pbg_rate:,.0f} triples/s "
              f"({times.edges} edges in {times.seconds:.1f} s of its own compute, {wall:.1f} s wall)")
        ordo_mrr, ordo_valid, ordo_rate = run_ordo(args)
        print(f"round {r + 1}: ordo  MRR {ordo_mrr:.4f} (valid {ordo_valid:.4f})  {ordo_rate:,.0f} triples/s ({args.mode})")
        rows.append((ordo_rate / pbg_rate, pbg_mrr, ordo_mrr))
    ratios = sorted(x[0] for x in rows)
    print(f"ordo / PBG triples/s: median {ratios[len(ratios) // 2]:.2f}x of {', '.join(f'{x:.2f}' for x in ratios)}; "
          f"test MRR PBG {np.median([x[1] for x in rows]):.4f}, ordo {np.median([x[2] for x in rows]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
