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

Classes: `Table`, `Engine`, `Session`, `Report`; functions `unique_rows`, `replay`;
exceptions `OrdoError`, `StepFailed`, `InvalidBatch`, `SessionClosed`, `SessionBusy`. See each
one's docstring.
"""

from . import kge
from ._ordo import (
    Engine,
    InvalidBatch,
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
    "Engine",
    "InvalidBatch",
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
