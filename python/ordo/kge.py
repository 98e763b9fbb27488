"""Knowledge-graph embeddings with ordo's own datasets and filtered evaluator.

``load_dataset("umls")`` (or ``kinships``, ``nations``, vendored in the package; or a
directory holding ``train.txt``, ``valid.txt``, ``test.txt``) and ``evaluate(score, entities,
relations, queries, known)`` run the code of the ``ordo-train kge`` command line on numpy
arrays, so a Python trainer is measured exactly as the CLI measures its own runs.
"""

from ._ordo import evaluate, load_dataset

__all__ = ["evaluate", "load_dataset"]
