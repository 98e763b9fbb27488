"""Knowledge-graph embeddings: the ``ordo-train kge`` trainer, its datasets and its evaluator.

* ``train(config=None, **options)`` runs the command line's trainer: ``options`` are its flags
  (``dim=200`` is ``--dim 200``, ``batch_size`` is ``--batch-size``, ``reciprocal=True`` is
  ``--reciprocal``), parsed and checked by the command line's own option struct, so a
  misspelt option is its error (a ``ValueError`` naming it). ``config`` is a TOML or JSON file
  of the same options; keyword arguments override it. Returns a ``Run``. ``save``,
  ``checkpoint`` (with ``checkpoint_every``), ``resume`` and ``out`` are the command line's
  output directories, locked, checked and written by its own code. Ctrl-C stops a run within
  about a second with ``KeyboardInterrupt``: the batches in flight are written, the threads
  joined, the epoch in progress neither checkpointed nor saved (resume from the last
  checkpoint).
  ``storage="disk"`` (with ``storage_dir``, ``partitions``, ``buffer``) keeps the entity table
  in a partition buffer as ``--storage disk`` does, with its checks (free disk, the buffer's
  memory against ``memory_limit``); the folder checkpoints every epoch and a run started on it
  again resumes there (``checkpoint``, ``resume`` and ``out`` are refused). ``storage="memory"``
  is its in-memory twin. A partitioned run takes Ctrl-C and a callback's exception when it ends.
* ``evaluate(score, entities, relations, queries, known)``: filtered link prediction on numpy
  arrays, as the command line evaluates.
* ``load_dataset(name_or_path)``: ``umls``, ``kinships``, ``nations`` (vendored) or a directory
  of ``train.txt``, ``valid.txt``, ``test.txt``.
* ``load(dir, dataset)``: embeddings saved by ``Run.save`` or ``--save``.
"""

from ._ordo import KgeRun as Run
from ._ordo import evaluate, kge_load, kge_train, load_dataset

__all__ = ["Run", "evaluate", "load", "load_dataset", "train"]


def _flags(config, options):
    flags = [] if config is None else ["--config", str(config)]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if value is True:
            flags.append(flag)
        elif value is False:
            flags += [flag, "false"]
        else:
            flags += [flag, str(value)]
    return flags


def train(config=None, *, callback=None, progress=True, **options):
    """Train as ``ordo-train kge`` does (one mode, ``mode="oac"`` by default) and return the
    ``Run``: ``entities``, ``relations`` (numpy), ``history`` (per epoch: ``loss``,
    ``valid_mrr``, ``wall_s``), ``test`` metrics, ``order`` (batch ids per epoch), ``save(dir)``.

    ``callback(entry)`` is called after each epoch with its ``history`` entry (an exception it
    raises stops the run and is raised). ``progress`` shows a tqdm bar over the batches when
    tqdm is installed. Bad options or inputs are a ``ValueError`` (the command line's exit
    status 2), other failures an ``ordo.OrdoError``; Ctrl-C is ``KeyboardInterrupt``.

        run = ordo.kge.train(epochs=20, checkpoint="ck", checkpoint_every=5)
        run = ordo.kge.train(epochs=40, resume="ck", checkpoint="ck", out="plots")
    """
    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None

    def on_event(kind, *args):
        nonlocal bar
        if kind == "epoch_start" and progress and tqdm is not None:
            if bar is not None:
                bar.close()
            bar = tqdm(total=args[1], desc=f"epoch {args[0]}", leave=False)
        elif kind == "batches" and bar is not None:
            bar.update(args[0])
        elif kind == "epoch_end" and callback is not None:
            callback(args[0])

    try:
        return kge_train(_flags(config, options), on_event)
    finally:
        if bar is not None:
            bar.close()


def load(dir, dataset="umls"):
    """``(entities, relations)`` saved in ``dir`` by ``Run.save`` or the command line's
    ``--save``, checked against ``dataset``'s names and the manifest's checksums."""
    return kge_load(str(dir), dataset)
