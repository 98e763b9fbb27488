"""Shared fixtures: a small contended workload whose batches are rebuilt from their ids."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

ROWS, WIDTH = 64, 4


def batch_of(batch_id):
    """The batch `batch_id`: 3 distinct rows of a small table (so batches conflict often) and
    a float payload, rebuilt from the id alone (a seeded generator per id)."""
    rng = np.random.default_rng(batch_id)
    ids = np.unique(rng.choice(ROWS, size=3, replace=False)).astype(np.uint64)
    return ids, np.float32(rng.standard_normal())


def make_step(dense=None):
    """A deterministic float32 step: Adagrad-like update of the first half of each row, with
    its accumulator in the second half; `dense` (a 1-element array) is a dense parameter
    updated in order inside the step."""

    half = WIDTH // 2

    def step(batch_id, ids, rows, payload):
        x, acc = rows[:, :half], rows[:, half:]
        grad = (x.sum(axis=0, keepdims=True) - payload) * np.float32(0.1) + x * np.float32(0.01)
        if dense is not None:
            grad = grad + dense[0]
            dense[0] = dense[0] * np.float32(0.99) + np.float32(0.001) * payload
        acc += grad * grad
        x -= np.float32(0.5) * grad / (np.sqrt(acc) + np.float32(1e-6))

    return step


def initial_table():
    rng = np.random.default_rng(12345)
    init = np.zeros((ROWS, WIDTH), dtype=np.float32)
    init[:, : WIDTH // 2] = rng.standard_normal((ROWS, WIDTH // 2), dtype=np.float32)
    return init


def plain_loop(init, order, step):
    """The plain numpy loop over `order`: gather the rows, step, scatter them back."""
    table = init.copy()
    for batch_id in order:
        ids, payload = batch_of(int(batch_id))
        idx = ids.astype(np.int64)
        rows = table[idx].copy()
        step(int(batch_id), ids, rows, payload)
        table[idx] = rows
    return table


@pytest.fixture
def init():
    return initial_table()


def interrupt(script, args, ready, wait, timeout):
    """Run `script` in a fresh interpreter with `args`, wait until its first line is `ready`,
    then `wait` seconds more, and send it SIGINT: its exit status, the rest of its output and
    the seconds from the signal to its exit (it is killed after `timeout`)."""
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == ready
    time.sleep(wait)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    return proc.returncode, rest, time.monotonic() - sent
