"""Type stubs of ordo's Rust extension (``ordo._ordo``)."""

from types import TracebackType
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np
import numpy.typing as npt

RowIds = Union[npt.NDArray[np.uint64], npt.NDArray[np.int64], Sequence[int]]
BatchIds = Union[RowIds, Mapping[str, RowIds]]
"""A batch's row ids: an array for an engine of one table; for an engine of several named
tables, a dict ``{name: ids}`` (each table's ids within it; a table may be left out)."""
Tables = Union["Table", Mapping[str, "Table"]]
"""One ``Table``, or several named ones (a dict, each table once; their order is the order the
step's dicts list them in)."""
Step = Callable[
    [
        int,
        Union[npt.NDArray[np.uint64], Dict[str, npt.NDArray[np.uint64]]],
        Union[npt.NDArray[np.float32], Dict[str, npt.NDArray[np.float32]]],
        Any,
    ],
    Any,
]
"""``step(batch_id, ids, rows, payload)``: updates ``rows`` (``len(ids) x width`` float32,
writable, the step's only during the call) in place, in the computation order.

``rows`` is a copy of the batch's rows, written back when the step returns: what the step keeps
of it (the array, a view, a memoryview, a tensor over it) is refused (``StepFailed``, naming the
batch) but never reaches the table. Its return value is ignored. Any exception it raises,
``BaseException`` included (``KeyboardInterrupt``, ``SystemExit``), stops the run as
``StepFailed`` with that exception as ``__cause__``; so does changing the array's dtype or size
in place (reshaping it in place to the same size is fine).

With several named tables, ``ids`` and ``rows`` are dicts with every table's name: each
table's row ids within it and its rows at its own width (``len(ids[name]) x width``, no rows
for a table the batch does not name), views of the one array lent for the call, so the same
rules hold.

With ``rows="torch"`` (an ``Engine``'s or ``replay``'s), ``rows`` is a ``torch.Tensor``: a view,
through DLPack, of a buffer ordo lends for the call (no copy between ordo and torch), written
back when the step returns; with ``rows="dlpack"`` it is that buffer as a ``LentRows``. Update
it in place (``rows.add_(...)``, ``rows[...] = ...``): writes to a copy (``rows.clone()``,
``rows + 1``, ``rows.numpy().copy()``, on a GPU ``rows.cpu()``) change nothing. Keeping the
tensor, a view, a numpy view or a DLPack capsule of it past the call is refused
(``StepFailed``, naming the batch): ordo takes the buffer back only once every export of it was
freed (its DLPack deleter ran), and leaves a kept one to its keeper, so it never reaches the
table."""

class OrdoError(Exception):
    """Any error of the ordo engine. A stopped run's error (this class, or ``StepFailed``)
    carries what the table holds in the attributes below; other errors carry none of them."""

    batch_id: int
    """The batch whose step (or stage) failed."""
    stamped: int
    """Batches stamped in the epoch (given their place in the computation order)."""
    drained: int
    """How many of them, the first ones, ``Session.drain_order`` had handed out."""
    order: list[int]
    """The ids of the rest (``stamped - drained`` of them), in computation order."""
    prefix: Optional[int]
    """In ``sync``, ``oac`` and ``bounded(1)``: how many batches of ``order`` the table holds.
    The table equals ``replay``, from the epoch's initial table, of the drained ids followed by
    ``order[:prefix]`` (the Rust error's ``order[..prefix]``). ``None`` in the other modes."""
    epoch_prefix: Optional[int]
    """The same count from the epoch's first batch, drained ones included:
    ``prefix == max(0, epoch_prefix - drained)``."""
    applied: list[int]
    """The ids of ``order`` the table holds: ``order[:prefix]``, or in the other modes those
    whose writes all landed."""

class StepFailed(OrdoError):
    """The run stopped: the step of batch ``batch_id`` raised (that exception is ``__cause__``).

    The table then holds exactly the drained batches and ``applied`` (in
    ``sync``/``oac``/``bounded(1)``): it equals ``replay`` of the order drained before the
    failure followed by ``applied`` (``order[:prefix]``). The session is closed.
    """

class SessionClosed(OrdoError):
    """A call on a closed session (by ``close()``, leaving its ``with`` block, Ctrl-C, or the
    error that stopped its run, raised once)."""

class SessionBusy(OrdoError):
    """A call on a session while another thread's call on it is in progress, or from inside
    the session's own step: refused at once, not queued (a step's call would wait for the
    pipeline that waits for the step). Nothing changed and the session goes on."""

class InvalidBatch(OrdoError):
    """A malformed batch (empty, duplicated or out-of-range row id), refused before
    it entered the pipeline; nothing changed."""

    batch_id: int
    position: int
    reason: str

class Table:
    """A table of ``rows`` rows of ``width`` float32 values (a parameter followed by its
    per-row optimizer state), shared by the engine's threads.

    ``init``: ``None`` (zeros), a float (every value), or a float32 array (native byte order,
    any memory layout, read-only too) of shape exactly ``(rows, width)``; its values are stored
    as given, NaN and infinities included. Anything else is a ``ValueError``, and so is a table
    too large to allocate.
    """

    def __init__(self, rows: int, width: int, init: Union[None, float, npt.NDArray[np.float32]] = None) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def width(self) -> int: ...
    def numpy(self) -> npt.NDArray[np.float32]:
        """A copy of the table, ``rows x width``."""

class Report:
    """An epoch's computation order (the batch ids not drained) and telemetry."""

    order: npt.NDArray[np.uint64]
    elapsed: float
    rows_validated: int
    rows_replaced: int
    cache_peak: int
    steps: int
    """Steps run in the epoch."""
    step_s: float
    """Seconds the device thread spent inside the step (the Python callable itself)."""
    crossing_s: float
    """Seconds the device thread spent crossing into and out of Python around the steps:
    waiting for the interpreter lock, lending the rows (numpy or DLPack), checking they were not
    kept. ``(step_s + crossing_s) / elapsed`` is the fraction of the epoch the device thread was busy
    stepping (the rest it waited for rows or stamped and validated)."""
    lock_wait_s: float
    """The part of ``crossing_s`` spent waiting for the interpreter lock, held meanwhile by
    another Python thread (e.g. the one building and submitting batches)."""

class Session:
    """A running pipeline; also a context manager (leaving the block finishes and closes it).
    Dropped by the garbage collector, it is closed (threads joined, stamped batches written).

    Once closed, every call but ``close`` and ``closed`` raises ``SessionClosed``. A session
    takes one call at a time: a call (``closed`` and ``close`` included) made while another
    thread's call on it is in progress, or from inside its own step, raises ``SessionBusy`` at
    once and changes nothing; share a session between threads behind a lock."""

    def submit(
        self,
        ids: BatchIds,
        payload: Any = None,
        batch_id: Optional[int] = None,
        *,
        inline: bool = False,
    ) -> int:
        """Feed one batch (``ids`` unique, in the order the step sees its rows; see
        ``unique_rows``); blocks without the
        interpreter lock while the pipeline is full. Returns the batch id. With ``inline``, the
        session's device thread reads, steps and writes the batch itself once every batch
        before it is written: the batch is stamped after every batch submitted before it and
        before every batch after it, and the reader and writer threads sit it out (less CPU
        where every core is busy with other work). Raises ``InvalidBatch`` for a bad batch,
        ``StepFailed`` once a step failed, ``KeyboardInterrupt`` on Ctrl-C (the session is then
        closed)."""
    def finish(self) -> Report:
        """Wait until every batch submitted is written; the epoch's ``Report``."""
    def drain_order(self) -> npt.NDArray[np.uint64]:
        """Batch ids stamped since the last call, in computation order."""
    @property
    def retained(self) -> int:
        """Records held for the caller (stamps not drained): flat when the order is drained."""
    @property
    def closed(self) -> bool: ...
    def close(self) -> None:
        """Stop and join the threads; stamped batches are written, the rest not applied."""
    def __enter__(self) -> "Session": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

BUILT_WITH_CUDA: bool
"""Whether this wheel was built with the ``cuda`` feature (``maturin build --features cuda``);
one built without it refuses ``device="cuda"``."""

class LentRows:
    """A step's rows lent through DLPack for its call (``rows="dlpack"``): pass it to any
    ``from_dlpack`` (``torch.from_dlpack(rows)``, ``numpy.from_dlpack(rows)``) for a writable
    view, no copy. Once the call is over it exports nothing (``BufferError``), and a step that
    keeps it, or anything exported from it, is refused (``StepFailed``)."""

    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def stream_order(self) -> Optional[str]:
        """How the last export ordered ordo's copies with its consumer's stream: ``"host"``
        (rows on the CPU: nothing to order); on a GPU ``"stream:S"`` (the consumer's stream S,
        e.g. torch's current stream, waits for the rows' upload, and the download waits for
        an event recorded on S after the step) or ``"host-wait"`` (``stream=-1``: ordo waits on
        the host). ``None`` before the first export."""
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class Engine:
    """The engine over one table, or over several named ones (``{"users": Table(...),
    "items": Table(...)}``, each of its own width: batches then name rows of each, and the step
    gets one array per table). ``mode``: ``"sync"``, ``"async"`` (last writer wins),
    ``"async-add"`` (writes add their delta), ``"bounded"`` (with ``bound=k``) or ``"oac"``
    (full pipelining with the result of the sequential loop).

    ``rows``: how the step receives its rows: ``"numpy"`` (the default on the CPU), ``"torch"``
    (a tensor lent through DLPack, the default on CUDA) or ``"dlpack"`` (a ``LentRows``); see
    ``Step``.

    ``device``: ``"cpu"`` (the default; the engine as it always was), ``"cuda"`` or ``"cuda:N"``
    (a GPU as torch numbers them). A CUDA engine is checked here, before anything runs, each
    failure an ``OrdoError``: a malformed device; torch not importable;
    ``torch.cuda.is_available()`` false; ``N >= torch.cuda.device_count()``; no ``batch_rows``
    (the most rows a batch has, over every table); device buffers for such batches not fitting
    in the GPU's free memory (refused with the estimate); a wheel built without CUDA
    (``BUILT_WITH_CUDA``); the CUDA driver or NVRTC not loadable. **The CUDA data path is not
    built yet** (rows gathered into pinned buffers by the readers, uploaded on a copy stream,
    the GPU validation cache): a CUDA engine that passes every check is refused saying so.
    Bit-equality on a GPU will need ``torch.use_deterministic_algorithms(True)`` and
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8``."""

    def __init__(
        self,
        table: Tables,
        mode: str = "oac",
        *,
        bound: Optional[int] = None,
        readers: int = 2,
        writers: int = 2,
        depth: int = 4,
        device: str = "cpu",
        rows: Optional[str] = None,
        batch_rows: Optional[int] = None,
    ) -> None: ...
    @property
    def mode(self) -> str: ...
    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda:N"``."""
    @property
    def rows(self) -> str:
        """``"numpy"``, ``"torch"`` or ``"dlpack"``."""
    @property
    def table(self) -> Table:
        """The one table (an engine of several raises ``OrdoError``: see ``tables``)."""
    @property
    def tables(self) -> Optional[Dict[str, Table]]:
        """The named tables, in order; ``None`` for an engine of one table."""
    def session(self, step: Step) -> Session:
        """Start a session running ``step`` on the engine's device thread."""
    def replay(
        self,
        order: Sequence[int],
        batch_of: Callable[[int], Optional[Tuple[BatchIds, Any]]],
        step: Step,
    ) -> None:
        """``replay(the engine's table or tables, order, batch_of, step)``."""

def unique_rows(ids: RowIds) -> npt.NDArray[np.uint64]:
    """Sorted, de-duplicated row ids: a batch's ids from any list of ids."""

def replay(
    table: Tables,
    order: Sequence[int],
    batch_of: Callable[[int], Optional[Tuple[BatchIds, Any]]],
    step: Step,
    *,
    device: str = "cpu",
    rows: Optional[str] = None,
    batch_rows: Optional[int] = None,
) -> None:
    """Run the batches of ``order`` one by one onto ``table`` (``batch_of(id) -> (ids,
    payload)``): on the run's initial table, the sequential result ``oac`` equals bit for bit.
    ``device``, ``rows`` and ``batch_rows`` are ``Engine``'s, checked the same way; replay with
    the run's ``rows``."""
