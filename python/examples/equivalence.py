"""The runs every example compares: the plain PyTorch loop over a dense tensor, and the same
step through an ordo engine session. In ``oac`` the engine's final table must equal the plain
loop run over the engine's recorded computation order, bit for bit (``same_bits``).

``batches(batch_id) -> (ids, payload)`` rebuilds a batch from its id alone (``ids``: sorted,
unique row ids as ``uint64``); ``batches.per_epoch`` is the number of batches of an epoch.
``model(batch_id, ids, rows, payload)`` updates ``rows`` (``len(ids) x width`` float32) in
place.

The table may also be several named tables: ``init`` a dict of arrays (each its own width),
``ids`` and ``rows`` dicts by table name, as ``ordo.Engine`` takes and lends them.
"""

import numpy as np
import torch

import ordo


class EpochBatches:
    """Batches of ``batch_size`` rows of ``train`` (the last one of an epoch may be short), in a
    fresh order each epoch: epoch ``e`` permutes ``train`` with numpy's
    ``Generator(PCG64([seed, e]))``, so batch ``b`` (of epoch ``b // per_epoch``) is rebuilt from
    its id alone. Subclasses turn ``epoch_rows(b)`` into ``(ids, payload)``."""

    def __init__(self, train, batch_size, seed):
        self.train, self.batch_size, self.seed = train, batch_size, seed
        self.per_epoch = (len(train) + batch_size - 1) // batch_size
        self._perm = {}

    def epoch_rows(self, batch_id):
        """The rows of ``train`` in batch ``batch_id``."""
        epoch, k = divmod(batch_id, self.per_epoch)
        if epoch not in self._perm:
            rng = np.random.Generator(np.random.PCG64([self.seed, epoch]))
            self._perm = {epoch: rng.permutation(len(self.train))}
        return self.train[self._perm[epoch][k * self.batch_size : (k + 1) * self.batch_size]]


def plain_loop(init, order, batches, model):
    """The plain PyTorch loop: a dense tensor (one per table), each batch's rows gathered,
    stepped, scattered."""
    if isinstance(init, dict):
        return plain_loop_named(init, order, batches, model)
    table = torch.from_numpy(init.copy())
    for batch_id in order:
        ids, payload = batches(int(batch_id))
        idx = torch.from_numpy(ids.astype(np.int64))
        rows = table[idx].contiguous()
        model(int(batch_id), ids, rows.numpy(), payload)
        table[idx] = rows
    return table.numpy()


def plain_loop_named(init, order, batches, model):
    """`plain_loop` over several named tables: every table's rows of the batch gathered (none
    for a table the batch does not name), the step given dicts, each table scattered back."""
    tables = {name: torch.from_numpy(a.copy()) for name, a in init.items()}
    for batch_id in order:
        ids, payload = batches(int(batch_id))
        ids = {n: np.asarray(ids.get(n, []), dtype=np.uint64) for n in tables}
        idx = {n: torch.from_numpy(ids[n].astype(np.int64)) for n in tables}
        rows = {n: tables[n][idx[n]].contiguous() for n in tables}
        model(int(batch_id), ids, {n: r.numpy() for n, r in rows.items()}, payload)
        for n in tables:
            tables[n][idx[n]] = rows[n]
    return {n: t.numpy() for n, t in tables.items()}


def through_ordo(mode, init, batches, model, total, **engine):
    """The batches `0..total` through an engine session in `mode`, one `finish` per epoch: the
    final table, the recorded computation order and each epoch's `ordo.Report`. `engine`: more
    of `ordo.Engine`'s arguments (`device`, `rows`, `batch_rows`)."""
    named = isinstance(init, dict)
    tables = {n: ordo.Table(a.shape[0], a.shape[1], init=a) for n, a in (init if named else {"": init}).items()}
    order, reports = [], []
    with ordo.Engine(tables if named else tables[""], mode=mode, **engine).session(model) as s:
        for epoch in range(total // batches.per_epoch):
            for b in range(epoch * batches.per_epoch, (epoch + 1) * batches.per_epoch):
                ids, payload = batches(b)
                s.submit(ids, payload, batch_id=b)
            report = s.finish()
            order.extend(report.order.tolist())
            reports.append(report)
    final = {n: t.numpy() for n, t in tables.items()}
    return (final if named else final[""]), order, reports


def first_difference(a, b):
    """Where two tables (float32 arrays or tensors, or dicts of them) first differ, by bits:
    ``"row R"`` (``"table 'name' row R"`` for dicts), a shape or name mismatch, or None when
    they hold the same bits. What a bit-for-bit check prints when a step is not deterministic."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
            return "different tables"
        for n in a:
            d = first_difference(a[n], b[n])
            if d is not None:
                return f"table {n!r} {d}"
        return None
    a, b = np.atleast_1d(np.asarray(a, dtype=np.float32)), np.atleast_1d(np.asarray(b, dtype=np.float32))
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    rows = np.nonzero((a.view(np.uint32) != b.view(np.uint32)).reshape(len(a), -1).any(axis=1))[0]
    return f"row {rows[0]}" if len(rows) else None


def same_bits(a, b):
    """Whether two float32 arrays or tensors (or dicts of them) hold the same bits (so
    -0.0 != 0.0, NaN == NaN)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            same_bits(a[n], b[n]) for n in a)
    return first_difference(a, b) is None
