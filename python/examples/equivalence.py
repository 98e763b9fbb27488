"""The runs every example compares: the plain PyTorch loop over a dense tensor, and the same
step through an ordo engine session. In ``oac`` the engine's final table must equal the plain
loop run over the engine's recorded computation order, bit for bit (``same_bits``).

``batches(batch_id) -> (ids, payload)`` rebuilds a batch from its id alone (``ids``: sorted,
unique row ids as ``uint64``); ``batches.per_epoch`` is the number of batches of an epoch.
``model(batch_id, ids, rows, payload)`` updates ``rows`` (``len(ids) x width`` float32) in
place.
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
    """The plain PyTorch loop: a dense tensor, each batch's rows gathered, stepped, scattered."""
    table = torch.from_numpy(init.copy())
    for batch_id in order:
        ids, payload = batches(int(batch_id))
        idx = torch.from_numpy(ids.astype(np.int64))
        rows = table[idx].contiguous()
        model(int(batch_id), ids, rows.numpy(), payload)
        table[idx] = rows
    return table.numpy()


def through_ordo(mode, init, batches, model, total):
    """The batches `0..total` through an engine session in `mode`, one `finish` per epoch: the
    final table, the recorded computation order and each epoch's `ordo.Report`."""
    table = ordo.Table(init.shape[0], init.shape[1], init=init)
    order, reports = [], []
    with ordo.Engine(table, mode=mode).session(model) as s:
        for epoch in range(total // batches.per_epoch):
            for b in range(epoch * batches.per_epoch, (epoch + 1) * batches.per_epoch):
                ids, payload = batches(b)
                s.submit(ids, payload, batch_id=b)
            report = s.finish()
            order.extend(report.order.tolist())
            reports.append(report)
    return table.numpy(), order, reports


def same_bits(a, b):
    """Whether two float32 arrays or tensors hold the same bits (so -0.0 != 0.0, NaN == NaN)."""
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
