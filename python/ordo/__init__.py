"""ordo: asynchronous training with the exact result of synchronous training.

Your own step (numpy or PyTorch) runs inside ordo's OAC pipeline: Rust reader and writer
threads move rows between the table and the step, and the step runs on one device thread in
the computation order. In ``oac`` mode the final table equals, bit for bit, the plain
sequential loop over the recorded order (``ordo.replay``).

    import numpy as np, ordo
    table = ordo.Table(1000, 8, init=np.random.default_rng(0).standard_normal((1000, 8), dtype=np.float32))
    engine = ordo.Engine(table, mode="oac")

    def step(batch_id, ids, rows, payload):
        rows *= 0.5           # rows: writable float32 array, yours only during the call

    with engine.session(step) as s:
        for b in range(100):
            s.submit(ordo.unique_rows([b % 1000, (7 * b) % 1000]))
    print(table.numpy())

A PyTorch step can take its rows as a tensor lent through DLPack (``rows="torch"``; no copy,
writable, valid only during the call). ``device="cuda"`` is checked at construction and
refused with an ``OrdoError`` naming what is missing; ordo's CUDA data path itself is not
built yet (see ``Engine``'s docstring and python/README.md).

Classes: `Table`, `Engine`, `Session`, `Report`, `LentRows`; functions `unique_rows`, `replay`;
exceptions `OrdoError`, `StepFailed`, `InvalidBatch`, `SessionClosed`, `SessionBusy`; the flag
`BUILT_WITH_CUDA`. See each one's docstring.
"""

from . import kge
from ._ordo import (
    BUILT_WITH_CUDA,
    Engine,
    InvalidBatch,
    LentRows,
    OrdoError,
    Report,
    Session,
    SessionBusy,
    SessionClosed,
    StepFailed,
    Table,
    replay,
    unique_rows,
)

__all__ = [
    "kge",
    "BUILT_WITH_CUDA",
    "Engine",
    "InvalidBatch",
    "LentRows",
    "OrdoError",
    "Report",
    "Session",
    "SessionBusy",
    "SessionClosed",
    "StepFailed",
    "Table",
    "replay",
    "unique_rows",
]
