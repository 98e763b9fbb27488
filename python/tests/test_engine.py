"""ordo's Python binding: equivalence, errors, signals and memory of the owned session."""

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ordo
from conftest import ROWS, WIDTH, batch_of, initial_table, interrupt, make_step, plain_loop

EPOCHS, PER_EPOCH = 3, 400


def run(mode, init, dense=None, drain_every=None, inline_every=None, wrap=None):
    """Train EPOCHS epochs of PER_EPOCH batches in `mode` (every `inline_every`-th batch of an
    epoch inline); the table, the recorded order (drained part first) and the rows replaced.
    `wrap(step, table)`, if given, wraps the step."""
    table = ordo.Table(ROWS, WIDTH, init=init)
    engine = ordo.Engine(table, mode=mode)
    order, replaced = [], 0
    step = make_step(dense)
    with engine.session(wrap(step, table) if wrap else step) as s:
        for epoch in range(EPOCHS):
            for k in range(PER_EPOCH):
                batch_id = epoch * PER_EPOCH + k
                ids, payload = batch_of(batch_id)
                inline = bool(inline_every) and k % inline_every == inline_every - 1
                s.submit(ids, payload, batch_id=batch_id, inline=inline)
                if drain_every and k % drain_every == 0:
                    order.extend(s.drain_order().tolist())
            report = s.finish()
            order.extend(report.order.tolist())
            replaced += report.rows_replaced
    return table.numpy(), order, replaced


def test_oac_equals_replay_and_the_plain_loop_bit_for_bit(init):
    dense = np.zeros(1, dtype=np.float32)
    final, order, replaced = run("oac", init, dense, drain_every=50)
    assert sorted(order) == list(range(EPOCHS * PER_EPOCH))
    # The run overlapped batches that share rows: validation repaired stale reads.
    assert replaced > 0, "no conflict was repaired: the check would be vacuous"

    replayed = ordo.Table(ROWS, WIDTH, init=init)
    replay_dense = np.zeros(1, dtype=np.float32)
    ordo.replay(replayed, order, batch_of, make_step(replay_dense))
    assert np.array_equal(final.view(np.uint32), replayed.numpy().view(np.uint32))
    assert replay_dense.view(np.uint32)[0] == dense.view(np.uint32)[0]

    loop_dense = np.zeros(1, dtype=np.float32)
    looped = plain_loop(init, order, make_step(loop_dense))
    assert np.array_equal(final.view(np.uint32), looped.view(np.uint32))
    assert loop_dense.view(np.uint32)[0] == dense.view(np.uint32)[0]


def test_rows_come_in_the_order_the_batch_names_them(init):
    """A batch's ids need not be sorted (only unique): the step gets its rows in the order the
    batch names them, and oac still equals the replay of its order over the same batches."""

    def any_order(batch_id):
        ids, payload = batch_of(batch_id)
        return (ids[::-1].copy() if batch_id % 2 else ids), payload

    base, kept = make_step(), []

    def step(batch_id, ids, rows, payload):
        kept.append(np.array_equal(ids, any_order(batch_id)[0]))
        base(batch_id, ids, rows, payload)

    table = ordo.Table(ROWS, WIDTH, init=init)
    with ordo.Engine(table, mode="oac").session(step) as s:
        for batch_id in range(PER_EPOCH):
            s.submit(*any_order(batch_id), batch_id=batch_id)
        report = s.finish()
    assert len(kept) == PER_EPOCH and all(kept)
    assert report.rows_replaced > 0, "no conflict was repaired: the check would be vacuous"
    replayed = ordo.Table(ROWS, WIDTH, init=init)
    ordo.replay(replayed, report.order.tolist(), any_order, make_step())
    assert np.array_equal(table.numpy().view(np.uint32), replayed.numpy().view(np.uint32))


def test_inline_batches_keep_their_place_and_the_replay(init):
    dense = np.zeros(1, dtype=np.float32)
    every = 7
    # An inline batch is read once every batch before it is written: the rows its step gets
    # are the table's rows as they stand (a pipelined batch may get newer rows, from
    # validation, than the table holds yet).
    ahead = []

    def check(step, table):
        def checked(batch_id, ids, rows, payload):
            if batch_id % PER_EPOCH % every == every - 1:
                stored = table.numpy()[ids.astype(np.int64)]
                if not np.array_equal(stored.view(np.uint32), rows.view(np.uint32)):
                    ahead.append(batch_id)
            step(batch_id, ids, rows, payload)

        return checked

    final, order, replaced = run("oac", init, dense, inline_every=every, wrap=check)
    assert ahead == [], f"inline batches stepped on rows the table did not hold yet: {ahead}"
    assert replaced > 0, "the pipelined batches still overlapped"
    # An inline batch splits its epoch's order: every batch submitted before it, then it.
    for epoch in range(EPOCHS):
        stamped = order[epoch * PER_EPOCH : (epoch + 1) * PER_EPOCH]
        for k in range(every - 1, PER_EPOCH, every):
            batch_id = epoch * PER_EPOCH + k
            at = stamped.index(batch_id)
            assert sorted(stamped[:at]) == list(range(epoch * PER_EPOCH, batch_id)), batch_id
    replayed = ordo.Table(ROWS, WIDTH, init=init)
    replay_dense = np.zeros(1, dtype=np.float32)
    ordo.replay(replayed, order, batch_of, make_step(replay_dense))
    assert np.array_equal(final.view(np.uint32), replayed.numpy().view(np.uint32))
    assert replay_dense.view(np.uint32)[0] == dense.view(np.uint32)[0]


def test_async_differs_from_its_plain_loop(init):
    final, order, _ = run("async", init)
    looped = plain_loop(init, sorted(order), make_step())
    # Lost updates: the last writer wins, so async is not the sequential result.
    assert not np.array_equal(final, looped)


def test_a_step_raising_at_its_1000th_call_stops_the_run_with_the_prefix_applied(init):
    calls, raised_at = [0], []

    def step(batch_id, ids, rows, payload):
        calls[0] += 1
        if calls[0] == 1000:
            raised_at.append(batch_id)
            raise ValueError("step 1000 fails")
        make_step()(batch_id, ids, rows, payload)

    table = ordo.Table(ROWS, WIDTH, init=init)
    engine = ordo.Engine(table, mode="oac")
    s = engine.session(step)
    with pytest.raises(ordo.StepFailed) as info:
        for batch_id in range(5000):
            s.submit(*batch_of(batch_id), batch_id=batch_id)
        s.finish()
    err = info.value
    assert err.batch_id == raised_at[0]
    assert isinstance(err.__cause__, ValueError)
    assert err.stamped == 999 and err.prefix is not None
    assert len(err.applied) == err.prefix
    assert s.closed
    # The table holds exactly the applied batches: the replay of them on the initial table.
    replayed = ordo.Table(ROWS, WIDTH, init=init)
    ordo.replay(replayed, err.applied, batch_of, make_step())
    assert np.array_equal(table.numpy().view(np.uint32), replayed.numpy().view(np.uint32))


def test_a_bad_row_id_is_invalid_batch_naming_the_batch(init):
    table = ordo.Table(ROWS, WIDTH, init=init)
    engine = ordo.Engine(table, mode="oac")
    with engine.session(make_step()) as s:
        s.submit(*batch_of(0), batch_id=0)
        with pytest.raises(ordo.InvalidBatch) as info:
            s.submit(np.array([1, ROWS], dtype=np.uint64), np.float32(0), batch_id=77)
        assert info.value.batch_id == 77 and "out of range" in info.value.reason
        with pytest.raises(ordo.InvalidBatch, match="appears twice"):
            s.submit([5, 2, 5], np.float32(0), batch_id=78)
        s.submit(*batch_of(1), batch_id=1)
        report = s.finish()
    assert sorted(report.order.tolist()) == [0, 1]


@pytest.mark.parametrize("phase", ["submit", "finish"])
def test_sigint_stops_a_run_within_a_second(phase):
    """Ctrl-C while the caller waits on the pipeline (a full pipeline in `submit`, the end of
    the epoch in `finish`: seconds of queued steps) stops the run promptly, the session
    closed. The step sleeps without the interpreter lock, as a long PyTorch step does."""
    script = textwrap.dedent(
        """
        import sys, time, numpy as np, ordo
        table = ordo.Table(16, 2)
        def step(batch_id, ids, rows, payload):
            time.sleep(0.2)
            rows += 1.0
        try:
            with ordo.Engine(table, mode="oac", depth=8).session(step) as s:
                if sys.argv[1] == "submit":
                    print("waiting", flush=True)
                    for i in range(10**9):
                        s.submit([i % 16], None)
                for i in range(12):
                    s.submit([i % 16], None)
                print("waiting", flush=True)
                s.finish()
                print("finished", flush=True)
        except KeyboardInterrupt:
            print("interrupted closed=%s" % s.closed, flush=True)
            sys.exit(3)
        """
    )
    returncode, out, took = interrupt(script, [phase], "waiting", wait=0.5, timeout=10)
    assert returncode == 3, out
    assert "interrupted closed=True" in out
    # The check every 50 ms, then the join: the step in progress (0.2 s) ends first.
    assert took < 1.0, f"stopped {took:.2f} s after SIGINT"


def test_a_million_tiny_batches_keep_the_session_flat():
    table = ordo.Table(1024, 1)

    def step(batch_id, ids, rows, payload):
        rows += 1.0

    peak, drained = 0, 0
    with ordo.Engine(table, mode="oac").session(step) as s:
        for i in range(1_000_000):
            s.submit([i % 1024])
            if i % 10_000 == 9_999:
                peak = max(peak, s.retained)
                assert peak < 20_000, f"the session retained {peak} records after {i + 1} batches"
                drained += len(s.drain_order())
        drained += len(s.finish().order)
    assert drained == 1_000_000
    assert np.all(table.numpy() == np.float32(1_000_000 // 1024 + 0.0) + (np.arange(1024) < 1_000_000 % 1024)[:, None])


def test_reading_the_session_between_submits_never_deadlocks_the_step():
    """The caller holds the interpreter lock while it reads `retained` and `drain_order`, and
    the step needs that lock on the device thread: the session must never make one wait for
    the other. In a fresh interpreter, so a deadlock fails the test (killed after two minutes)
    instead of hanging the suite; the loop takes a few seconds."""
    script = textwrap.dedent(
        """
        import ordo
        table = ordo.Table(16, 1)

        def step(batch_id, ids, rows, payload):
            rows += 1.0

        stamped = 0
        with ordo.Engine(table, mode="oac").session(step) as s:
            for i in range(50_000):
                s.submit([i % 16])
                s.retained
                stamped += len(s.drain_order())
            stamped += len(s.finish().order)
        print(stamped, int(table.numpy().sum()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["50000", "50000"], "every batch stamped and written once"


def test_the_report_times_the_step_and_the_crossing_into_it():
    """A step that sleeps 20 ms (without the interpreter lock, as a PyTorch step computes):
    the report's step time covers the sleeps, and the step and the crossing around it fit in
    the epoch's wall time."""
    table = ordo.Table(16, 2)

    def step(batch_id, ids, rows, payload):
        time.sleep(0.02)
        rows += 1.0

    with ordo.Engine(table, mode="oac").session(step) as s:
        for i in range(10):
            s.submit([i], None)
        first = s.finish()
        s.submit([0], None)
        second = s.finish()
    assert first.steps == 10 and second.steps == 1, "each report counts its own epoch's steps"
    assert 10 * 0.02 <= first.step_s < first.elapsed
    assert 0 < first.crossing_s and first.step_s + first.crossing_s <= first.elapsed
    assert 0 <= first.lock_wait_s <= first.crossing_s
    assert 0.02 <= second.step_s < 10 * 0.02, "reset by each finish"
