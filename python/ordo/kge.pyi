from typing import Any, Dict

import numpy as np
import numpy.typing as npt

def load_dataset(name_or_path: str) -> Dict[str, Any]:
    """``umls``, ``kinships``, ``nations`` or a directory of ``train/valid/test.txt``: a dict of
    ``name``, ``entities`` and ``relations`` (counts), ``train``, ``valid``, ``test`` (``n x 3``
    int64 ``(head, relation, tail)`` ids)."""

def evaluate(
    score: str,
    entities: npt.NDArray[np.float32],
    relations: npt.NDArray[np.float32],
    queries: npt.NDArray[np.int64],
    known: npt.NDArray[np.int64],
    reciprocal: bool = False,
) -> Dict[str, float]:
    """Filtered link prediction (both directions), as the CLI evaluates: ``mrr``, ``hits1``,
    ``hits3``, ``hits10``, ``queries``. ``score``: ``distmult``, ``complex`` (rows ``[real |
    imaginary]``), ``transe-l1``, ``transe-l2``, ``rotate``."""

from typing import Callable, List, Optional, Tuple

class Run:
    """A finished ``train`` run."""

    @property
    def entities(self) -> npt.NDArray[np.float32]: ...
    @property
    def relations(self) -> npt.NDArray[np.float32]: ...
    @property
    def history(self) -> List[Dict[str, Any]]:
        """Per epoch: ``epoch``, ``loss`` (``None`` with ``storage``), ``valid_mrr``, ``wall_s``,
        ``epoch_s``."""
    @property
    def test(self) -> Dict[str, float]: ...
    @property
    def order(self) -> List[npt.NDArray[np.uint64]]:
        """The computation order, batch ids per epoch."""
    @property
    def mode(self) -> str: ...
    def save(self, dir: str) -> None:
        """The command line's ``--save`` layout, locked and moved into place whole."""

def train(
    config: Optional[str] = None,
    *,
    callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    progress: bool = True,
    **options: Any,
) -> Run:
    """Train as ``ordo-train kge`` does; ``options`` are its flags (``batch_size=1024``,
    ``checkpoint="ck"``, ``checkpoint_every=5``, ``resume="ck"``, ``out="plots"``,
    ``save="emb"``). Ctrl-C stops it within about a second with ``KeyboardInterrupt`` (the
    epoch in progress neither checkpointed nor saved)."""

def load(dir: str, dataset: str = "umls") -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]: ...
