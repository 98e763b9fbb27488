"""ComplEx link prediction with a PyTorch autograd step inside ordo's OAC engine.

The entity embeddings and their Adagrad sums are the rows of an `ordo.Table` (one row:
`[embedding | Adagrad sum]`); the relation embeddings are a dense PyTorch tensor updated
inside the step, in order. The same batches are trained three ways:

1. a plain PyTorch loop over a dense tensor, batch after batch;
2. ordo `sync` (must equal 1 bit for bit: same order);
3. ordo `oac`, pipelined; its final embeddings must equal the plain loop run over oac's
   recorded computation order, bit for bit (exit 1 if not).

Each prints the filtered test MRR from ordo's evaluator (`ordo.kge.evaluate`).

    python python/examples/torch_kge.py --dataset umls
    python python/examples/torch_kge.py --dataset ../shared/datasets/wordnet30 --epochs 5
    python python/examples/torch_kge.py --dataset umls --rows torch   # rows as lent tensors

`--device cuda` (or `cuda:N`) is checked before anything trains and refused with ordo's
`OrdoError` saying what is missing (exit 2): ordo's CUDA data path is not built yet. A GPU run
will need `torch.use_deterministic_algorithms(True)` and `CUBLAS_WORKSPACE_CONFIG=:4096:8` for
oac to equal the plain loop bit for bit; this example sets both.
"""

import os

# Before torch loads cuBLAS: a deterministic workspace, so a GPU step repeats bit for bit.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import ordo
import ordo.kge
from equivalence import EpochBatches, first_difference, plain_loop, same_bits, through_ordo


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="umls", help="umls, kinships, nations, wordnet30, or a directory")
    p.add_argument("--dim", type=int, default=100, help="real floats per embedding (dim/2 complex)")
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--negatives", type=int, default=64, help="corrupted entities per side, shared by a batch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--init-scale", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads inside the step")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (CUDA is checked, then refused: not built yet)")
    p.add_argument("--rows", choices=["numpy", "torch"], default=None,
                   help="how the step gets its rows: a numpy array, or a torch tensor lent through DLPack "
                        "(default: numpy on the CPU, torch on CUDA)")
    return p.parse_args()


class Batches(EpochBatches):
    """Batch `b` of epoch `b // per_epoch`, rebuilt from its id alone (seeded generators): its
    triples and, per side, negatives shared by the batch."""

    def __init__(self, train, entities, args):
        super().__init__(train, args.batch_size, args.seed)
        self.entities, self.args = entities, args

    def __call__(self, batch_id):
        a = self.args
        triples = self.epoch_rows(batch_id)
        rng = np.random.default_rng([a.seed, 1_000_003, batch_id])
        neg = rng.integers(0, self.entities, size=(2, a.negatives))
        ids = np.unique(np.concatenate([triples[:, 0], triples[:, 2], neg.ravel()])).astype(np.uint64)
        pos = lambda x: torch.from_numpy(np.searchsorted(ids, x).astype(np.int64))
        payload = (pos(triples[:, 0]), torch.from_numpy(triples[:, 1].copy()), pos(triples[:, 2]), pos(neg[0]), pos(neg[1]))
        return ids, payload


class ComplEx:
    """The step: softplus loss on positives and shared negatives, Adagrad on the rows (state
    in the row) and on the dense relation tensor (state in this object)."""

    def __init__(self, relations, args):
        d = args.dim
        g = torch.Generator().manual_seed(args.seed + 1)
        self.rel = (torch.randn(relations, d, generator=g) * args.init_scale).float()
        self.rel_acc = torch.zeros(relations, d)
        self.dim, self.lr = d, args.lr

    def __call__(self, batch_id, ids, rows, payload):
        h, r, t, nh, nt = payload
        d, k = self.dim, self.dim // 2
        # The batch's rows, lent for this call only: a tensor (rows="torch") or a numpy array
        # that torch views without a copy. Only writes into it reach the table.
        table = rows if isinstance(rows, torch.Tensor) else torch.from_numpy(rows)
        emb = table[:, :d].clone().requires_grad_(True)
        rel = self.rel[r].clone().requires_grad_(True)

        def cplx(x):
            return x[..., :k], x[..., k:]

        (hr, hi), (rr, ri), (tr, ti) = cplx(emb[h]), cplx(rel), cplx(emb[t])
        pos = (hr * rr * tr + hi * rr * ti + hr * ri * ti - hi * ri * tr).sum(-1)
        # Tail corruption: (h * r) . conj(t'); head corruption: h' . (r * conj(t)).
        qr, qi = hr * rr - hi * ri, hr * ri + hi * rr
        (ntr, nti), (nhr, nhi) = cplx(emb[nt]), cplx(emb[nh])
        s_tail = qr @ ntr.T + qi @ nti.T
        pr, pi = rr * tr + ri * ti, rr * ti - ri * tr
        s_head = pr @ nhr.T + pi @ nhi.T
        loss = (F.softplus(-pos) + F.softplus(s_tail).mean(1) + F.softplus(s_head).mean(1)).sum()
        loss.backward()
        with torch.no_grad():
            g = emb.grad
            acc = table[:, d:]
            acc += g * g
            table[:, :d] -= self.lr * g / (acc.sqrt() + 1e-10)
            # Dense relations, in order: sum the gradient per relation, then Adagrad.
            grel = torch.zeros_like(self.rel).index_add_(0, r, rel.grad)
            touched = torch.unique(r)
            self.rel_acc[touched] += grel[touched] ** 2
            self.rel[touched] -= self.lr * grel[touched] / (self.rel_acc[touched].sqrt() + 1e-10)


def initial_rows(entities, args):
    g = torch.Generator().manual_seed(args.seed)
    rows = torch.zeros(entities, 2 * args.dim)
    rows[:, : args.dim] = torch.randn(entities, args.dim, generator=g) * args.init_scale
    return rows.numpy()


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    data = ordo.kge.load_dataset(args.dataset)
    ne, nr = data["entities"], data["relations"]
    known = np.concatenate([data["train"], data["valid"], data["test"]])
    batches = Batches(data["train"], ne, args)
    total = batches.per_epoch * args.epochs
    init = initial_rows(ne, args)
    # The engine's device and rows, checked before anything trains (a batch names at most both
    # sides of its triples and its negatives).
    engine = dict(device=args.device, rows=args.rows, batch_rows=2 * (args.batch_size + args.negatives))
    try:
        ordo.Engine(ordo.Table(1, 2 * args.dim), **engine)
    except ordo.OrdoError as e:
        print(f"torch_kge: {e}", file=sys.stderr)
        return 2
    print(f"{data['name']}: {ne} entities, {nr} relations, {len(data['train'])} training triples; "
          f"ComplEx dim {args.dim}, {args.epochs} epochs of {batches.per_epoch} batches")

    def report(name, final, model, seconds):
        m = ordo.kge.evaluate("complex", np.ascontiguousarray(final[:, : args.dim]), model.rel.numpy(),
                              data["test"], known)
        rate = len(data["train"]) * args.epochs / seconds
        print(f"{name:>6}: filtered test MRR {m['mrr']:.4f}  Hits@10 {m['hits10']:.4f}  "
              f"({seconds:.1f} s, {rate:,.0f} triples/s)")
        return m

    start = time.perf_counter()
    plain_model = ComplEx(nr, args)
    plain = plain_loop(init, range(total), batches, plain_model)
    report("plain", plain, plain_model, time.perf_counter() - start)

    start = time.perf_counter()
    sync_model = ComplEx(nr, args)
    sync, _, _ = through_ordo("sync", init, batches, sync_model, total, **engine)
    report("sync", sync, sync_model, time.perf_counter() - start)

    start = time.perf_counter()
    oac_model = ComplEx(nr, args)
    oac, order, _ = through_ordo("oac", init, batches, oac_model, total, **engine)
    metrics = report("oac", oac, oac_model, time.perf_counter() - start)

    check_model = ComplEx(nr, args)
    check = plain_loop(init, order, batches, check_model)
    same = same_bits(oac, check) and same_bits(oac_model.rel, check_model.rel)
    in_order = order == list(range(total))
    print(f"oac == plain loop over oac's order, bit for bit: {same} "
          f"(oac's order {'is' if in_order else 'differs from'} the submission order)")
    if not same:
        where = first_difference({"entities": oac, "relations": oac_model.rel},
                                 {"entities": check, "relations": check_model.rel})
        print(f"first difference: {where} (is the step deterministic?)")
    print(f"sync == plain loop, bit for bit: {same_bits(sync, plain)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
