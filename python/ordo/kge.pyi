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
