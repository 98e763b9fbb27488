"""Matrix factorization for rating prediction with a PyTorch autograd step inside ordo's OAC
engine.

A rating is predicted as mu + b_user + b_item + <p_user, q_item> (mu: the training mean). The
users and the items are two named tables of one engine (`ordo.Engine({"users": ..., "items":
...})`), each row `[factors | bias | Adagrad sums of factors and bias]`, so the optimizer state
travels with the row. The same batches are trained three ways:

1. a plain PyTorch loop over a dense tensor, batch after batch;
2. ordo `sync` (must equal 1 bit for bit: same order);
3. ordo `oac`, pipelined; its final table must equal the plain loop run over oac's recorded
   computation order, bit for bit (exit 1 if not).

Each prints the test RMSE. The ratings are generated (a hidden low-rank model plus noise,
items drawn with Zipf-like popularity, so batches share rows) from a numpy
`Generator(PCG64(seed))`, or read from a CSV file of `user,item,rating` lines (a header line
is skipped; user and item are any labels).

    python python/examples/recommender.py
    python python/examples/recommender.py --ratings ratings.csv --epochs 20
"""

import argparse
import csv
import sys
import time

import numpy as np
import torch

from equivalence import EpochBatches, first_difference, plain_loop, same_bits, through_ordo


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratings", help="a CSV file of user,item,rating lines (default: generate them)")
    p.add_argument("--users", type=int, default=1000, help="users to generate")
    p.add_argument("--items", type=int, default=1000, help="items to generate")
    p.add_argument("--count", type=int, default=100_000, help="ratings to generate")
    p.add_argument("--rank", type=int, default=16, help="factors per user and item")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--l2", type=float, default=0.05, help="weight of the factors' squared norm")
    p.add_argument("--init-scale", type=float, default=0.1)
    p.add_argument("--test-fraction", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads inside the step")
    args = p.parse_args()
    for name in ["users", "items", "count", "rank", "epochs", "batch_size"]:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if not 0 < args.test_fraction < 1:
        p.error("--test-fraction must be in (0, 1)")
    if args.lr <= 0 or args.l2 < 0 or args.init_scale < 0:
        p.error("--lr must be > 0, --l2 and --init-scale >= 0")
    return args


def generate(args):
    """`(users, items, ratings)`: ratings an `n x 3` float64 array of (user, item, rating) from a
    hidden rank-8 model plus noise, on the half-star scale 1..5; no (user, item) pair twice."""
    rng = np.random.Generator(np.random.PCG64(args.seed))
    hidden_u = rng.standard_normal((args.users, 8)) * 0.5
    hidden_i = rng.standard_normal((args.items, 8)) * 0.5
    popularity = 1.0 / np.arange(1, args.items + 1) ** 0.8
    user = rng.integers(0, args.users, size=args.count)
    item = rng.permutation(args.items)[rng.choice(args.items, size=args.count, p=popularity / popularity.sum())]
    _, first = np.unique(user.astype(np.int64) * args.items + item, return_index=True)
    user, item = user[np.sort(first)], item[np.sort(first)]
    value = 3.5 + (hidden_u[user] * hidden_i[item]).sum(1) + 0.3 * rng.standard_normal(len(user))
    value = np.clip(np.round(value * 2) / 2, 1.0, 5.0)
    return args.users, args.items, np.stack([user, item, value], axis=1)


def read_csv(path):
    """`(users, items, ratings)` from a CSV of user,item,rating (labels numbered in order of
    first sight). Raises `ValueError` naming the line of a malformed one."""
    users, items, rows = {}, {}, []
    with open(path, newline="", encoding="utf-8-sig") as f:
        for n, line in enumerate(csv.reader(f), start=1):
            if not line or all(not x.strip() for x in line):
                continue
            if len(line) != 3:
                raise ValueError(f"{path}:{n}: expected user,item,rating, got {len(line)} fields")
            user, item, value = (x.strip() for x in line)
            try:
                rating = float(value)
            except ValueError:
                if n == 1:
                    continue  # a header
                raise ValueError(f"{path}:{n}: the rating {value!r} is not a number") from None
            if not np.isfinite(rating):
                raise ValueError(f"{path}:{n}: the rating {value!r} is not finite")
            rows.append((users.setdefault(user, len(users)), items.setdefault(item, len(items)), rating))
    if len(rows) < 2:
        raise ValueError(f"{path}: {len(rows)} ratings; at least 2 are needed (train and test)")
    return len(users), len(items), np.array(rows, dtype=np.float64)


class Batches(EpochBatches):
    """Batch `b` of epoch `b // per_epoch`, rebuilt from its id alone (seeded generators): the
    sorted unique users and items it touches (`{"users": ..., "items": ...}`) and, as positions
    into those rows, its users, its items and their ratings."""

    def __init__(self, train, args):
        super().__init__(train, args.batch_size, args.seed)

    def __call__(self, batch_id):
        chosen = self.epoch_rows(batch_id)
        user, item = chosen[:, 0].astype(np.int64), chosen[:, 1].astype(np.int64)
        users, items = np.unique(user).astype(np.uint64), np.unique(item).astype(np.uint64)
        pos = lambda ids, x: torch.from_numpy(np.searchsorted(ids, x).astype(np.int64))
        rating = torch.from_numpy(chosen[:, 2].astype(np.float32))
        return {"users": users, "items": items}, (pos(users, user), pos(items, item), rating)


class MatrixFactorization:
    """The step: squared error plus L2 on the factors of the batch, Adagrad on every row it
    touches (state in the row)."""

    def __init__(self, mean, args):
        self.mean, self.rank, self.lr, self.l2 = float(mean), args.rank, args.lr, args.l2

    def __call__(self, batch_id, ids, rows, payload):
        user, item, rating = payload
        k = self.rank
        # Each table's rows of the batch, lent for this call only.
        tables = [torch.from_numpy(rows["users"]), torch.from_numpy(rows["items"])]
        params = [t[:, : k + 1].clone().requires_grad_(True) for t in tables]
        pu, qi = params[0][user], params[1][item]
        predicted = self.mean + pu[:, k] + qi[:, k] + (pu[:, :k] * qi[:, :k]).sum(1)
        loss = ((predicted - rating) ** 2).sum() + self.l2 * ((pu[:, :k] ** 2).sum() + (qi[:, :k] ** 2).sum())
        loss.backward()
        with torch.no_grad():
            for table, param in zip(tables, params):
                g = param.grad
                acc = table[:, k + 1 :]
                acc += g * g
                table[:, : k + 1] -= self.lr * g / (acc.sqrt() + 1e-10)


def initial_rows(users, items, args):
    """The two tables' initial rows: random factors (users' drawn first), zero bias and sums."""
    g = torch.Generator().manual_seed(args.seed)
    rows = torch.zeros(users + items, 2 * (args.rank + 1))
    rows[:, : args.rank] = torch.randn(users + items, args.rank, generator=g) * args.init_scale
    rows = rows.numpy()
    return {"users": rows[:users].copy(), "items": rows[users:].copy()}


def rmse(tables, test, mean, rank):
    p, q = tables["users"][test[:, 0].astype(np.int64)], tables["items"][test[:, 1].astype(np.int64)]
    predicted = mean + p[:, rank] + q[:, rank] + (p[:, :rank] * q[:, :rank]).sum(1)
    return float(np.sqrt(np.mean((predicted - test[:, 2]) ** 2)))


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    try:
        users, items, ratings = read_csv(args.ratings) if args.ratings else generate(args)
    except (OSError, ValueError) as e:
        print(f"error: --ratings: {e}", file=sys.stderr)
        return 2
    shuffled = np.random.Generator(np.random.PCG64([args.seed, 7])).permutation(len(ratings))
    n_test = max(1, int(len(ratings) * args.test_fraction))
    test, train = ratings[shuffled[:n_test]], ratings[shuffled[n_test:]]
    mean = np.float32(train[:, 2].mean())
    batches = Batches(train, args)
    total = batches.per_epoch * args.epochs
    init = initial_rows(users, items, args)
    print(f"{users} users, {items} items, {len(train)} training and {len(test)} test ratings; "
          f"rank {args.rank}, {args.epochs} epochs of {batches.per_epoch} batches; "
          f"test RMSE of the mean alone {np.sqrt(np.mean((mean - test[:, 2]) ** 2)):.4f}")

    def report(name, final, seconds):
        rate = len(train) * args.epochs / seconds
        print(f"{name:>6}: test RMSE {rmse(final, test, mean, args.rank):.4f}  "
              f"({seconds:.1f} s, {rate:,.0f} ratings/s)")

    start = time.perf_counter()
    plain = plain_loop(init, range(total), batches, MatrixFactorization(mean, args))
    report("plain", plain, time.perf_counter() - start)

    start = time.perf_counter()
    sync, _, _ = through_ordo("sync", init, batches, MatrixFactorization(mean, args), total)
    report("sync", sync, time.perf_counter() - start)

    start = time.perf_counter()
    oac, order, reports = through_ordo("oac", init, batches, MatrixFactorization(mean, args), total)
    report("oac", oac, time.perf_counter() - start)

    check = plain_loop(init, order, batches, MatrixFactorization(mean, args))
    same = same_bits(oac, check)
    in_order = order == list(range(total))
    print(f"oac: validation replaced {sum(r.rows_replaced for r in reports)} stale row reads")
    print(f"oac == plain loop over oac's order, bit for bit: {same} "
          f"(oac's order {'is' if in_order else 'differs from'} the submission order)")
    if not same:
        print(f"first difference: {first_difference(oac, check)} (is the step deterministic?)")
    print(f"sync == plain loop, bit for bit: {same_bits(sync, plain)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
