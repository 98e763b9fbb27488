"""`device=` and `rows=`: CUDA's checks at construction, before anything runs, and the rows
lent to a step through DLPack (`rows="torch"`, `rows="dlpack"`), on the CPU here.

The CUDA checks run on any machine: torch's answers (`torch.cuda.is_available`,
`device_count`, `mem_get_info`) are set by the tests where a machine's own would decide."""

import sys

import numpy as np
import pytest
import torch

import ordo
from conftest import WIDTH, batch_of, initial_table

ORDER = list(range(40))


def fake_gpus(monkeypatch, count=1, free=80 << 30):
    """Make torch report `count` CUDA devices with `free` bytes free each."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))


def engine_or_replay(how, device, **kw):
    """A CUDA engine, or a replay on that device, over a fresh table (both check the same)."""
    table = ordo.Table(64, WIDTH, init=initial_table())
    if how == "engine":
        return ordo.Engine(table, device=device, **kw)
    return ordo.replay(table, [0], batch_of, lambda *a: None, device=device, **kw)


# --- device=: parsing and the checks, in their order -----------------------------------------


def test_cpu_is_the_default_and_changes_nothing(init):
    a, b = ordo.Table(64, WIDTH, init=init), ordo.Table(64, WIDTH, init=init)
    default, cpu = ordo.Engine(a, mode="sync"), ordo.Engine(b, mode="sync", device="cpu")
    assert (default.device, default.rows) == ("cpu", "numpy")
    assert (cpu.device, cpu.rows) == ("cpu", "numpy")

    def step(batch_id, ids, rows, payload):
        assert isinstance(rows, np.ndarray)
        rows *= np.float32(0.5)

    for e in (default, cpu):
        with e.session(step) as s:
            for i in ORDER:
                s.submit(*batch_of(i))
    assert a.numpy().tobytes() == b.numpy().tobytes()
    assert repr(cpu) == repr(default) and "device" not in repr(cpu)


@pytest.mark.parametrize("how", ["engine", "replay"])
@pytest.mark.parametrize(
    "device", ["", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "cuda: 0", "cpu:0", "cuda:0:1", "cuda:99999999999"]
)
def test_a_malformed_device_is_an_ordo_error(how, device):
    with pytest.raises(ordo.OrdoError, match="is not a device"):
        engine_or_replay(how, device)


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_cuda_without_an_importable_torch_is_refused(how, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ordo.OrdoError, match="needs PyTorch"):
        engine_or_replay(how, "cuda", batch_rows=8)
    with pytest.raises(ordo.OrdoError, match="needs PyTorch"):
        engine_or_replay(how, "cpu", rows="torch")


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_cuda_where_torch_sees_no_gpu_is_refused(how, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ordo.OrdoError, match=r"torch sees no CUDA device \(torch.cuda.is_available\(\) is False"):
        engine_or_replay(how, "cuda", batch_rows=8)


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_cuda_n_beyond_the_device_count_is_refused(how, monkeypatch):
    fake_gpus(monkeypatch, count=2)
    for n in (2, 3, 17):
        with pytest.raises(ordo.OrdoError, match=r"torch sees 2 CUDA device\(s\)"):
            engine_or_replay(how, f"cuda:{n}", batch_rows=8)


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_cuda_without_batch_rows_is_refused(how, monkeypatch):
    fake_gpus(monkeypatch)
    with pytest.raises(ordo.OrdoError, match="needs batch_rows="):
        engine_or_replay(how, "cuda:0")


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_rows_that_do_not_fit_the_gpu_are_refused_with_the_estimate(how, monkeypatch):
    fake_gpus(monkeypatch, free=64 << 20)
    with pytest.raises(ordo.OrdoError, match=r"needs about \d+ MiB of device memory and 64 MiB are free \(batches of 4000000 rows"):
        engine_or_replay(how, "cuda", batch_rows=4_000_000)


def test_the_device_memory_estimate_is_the_pipelines_and_refuses_past_nine_tenths_of_free():
    # oac, depth 4, batches of 1,000 rows of 8 floats: 4 slots x 1,000 x (24 + 32) B of staging;
    # a cache for 3 x 4 + 2 = 14 batches, 32,768 slots x (16 + 32) B.
    need = 4 * 1000 * 56 + 32768 * 48
    assert ordo._ordo._device_memory("oac", 4, 1000, 8, 10 * need) == need
    assert ordo._ordo._device_memory("oac", 4, 1000, 8, 2_000_000) == need  # 1,800,000 kept
    with pytest.raises(ordo.OrdoError, match="staging slots 224000 B, validation cache 1572864 B"):
        ordo._ordo._device_memory("oac", 4, 1000, 8, 1_990_000)  # 1,791,000 < need
    # sync: one slot and no cache.
    assert ordo._ordo._device_memory("sync", 4, 1000, 8, 1 << 30) == 1000 * 56


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_cuda_that_passes_torchs_checks_is_refused_for_what_this_wheel_lacks(how, monkeypatch):
    fake_gpus(monkeypatch)
    if ordo.BUILT_WITH_CUDA:
        # This machine has no CUDA driver; a GPU machine's answer is the data path's absence.
        expected = "not loadable|not built yet"
    else:
        expected = r"built without CUDA support \(build it with `maturin build --features cuda`\)"
    with pytest.raises(ordo.OrdoError, match=expected):
        engine_or_replay(how, "cuda", batch_rows=8)


@pytest.mark.parametrize("how", ["engine", "replay"])
def test_numpy_rows_on_cuda_and_unknown_rows_are_refused(how, monkeypatch):
    fake_gpus(monkeypatch)
    with pytest.raises(ordo.OrdoError, match="rows='numpy' cannot hold rows on cuda:0"):
        engine_or_replay(how, "cuda", rows="numpy", batch_rows=8)
    with pytest.raises(ordo.OrdoError, match="is not a kind of rows"):
        engine_or_replay(how, "cpu", rows="tensor")


# --- rows lent through DLPack ----------------------------------------------------------------


def torch_step(batch_id, ids, rows, payload):
    """`conftest.make_step`'s Adagrad-like step in torch, in place on the lent tensor."""
    half = WIDTH // 2
    x, acc = rows[:, :half], rows[:, half:]
    p = torch.tensor(payload, dtype=torch.float32)
    grad = (x.sum(dim=0, keepdim=True) - p) * 0.1 + x * 0.01
    acc += grad * grad
    x -= 0.5 * grad / (acc.sqrt() + 1e-6)


def plain_torch_loop(init, order, step):
    """The plain PyTorch loop over `order`: gather the rows, step, scatter them back."""
    table = torch.from_numpy(init.copy())
    for batch_id in order:
        ids, payload = batch_of(int(batch_id))
        idx = torch.from_numpy(ids.astype(np.int64))
        rows = table[idx].clone()
        step(int(batch_id), ids, rows, payload)
        table[idx] = rows
    return table.numpy()


def test_a_torch_step_gets_a_writable_tensor_whose_writes_reach_the_table(init):
    table = ordo.Table(64, WIDTH, init=init)
    seen = []

    def step(batch_id, ids, rows, payload):
        seen.append((type(rows), rows.dtype, tuple(rows.shape), rows.device.type, rows.is_contiguous()))
        rows.mul_(2)
        rows[0, 0] = float(batch_id)

    engine = ordo.Engine(table, mode="sync", rows="torch")
    assert engine.rows == "torch"
    with engine.session(step) as s:
        for i in ORDER[:3]:
            s.submit(*batch_of(i))
    assert seen == [(torch.Tensor, torch.float32, (3, WIDTH), "cpu", True)] * 3
    expected = init.copy()
    for i in ORDER[:3]:
        ids = batch_of(i)[0].astype(np.int64)
        expected[ids] *= 2
        expected[ids[0], 0] = i
    assert table.numpy().tobytes() == expected.tobytes()


def test_oac_with_a_torch_step_on_the_lent_tensor_equals_its_replay_and_the_plain_loop_bit_for_bit(init):
    torch.use_deterministic_algorithms(True)
    try:
        order = list(range(300))
        table = ordo.Table(64, WIDTH, init=init)
        engine = ordo.Engine(table, mode="oac", rows="torch")
        with engine.session(torch_step) as s:
            for i in order:
                s.submit(*batch_of(i))
            report = s.finish()
        replayed = ordo.Table(64, WIDTH, init=init)
        ordo.replay(replayed, report.order.tolist(), batch_of, torch_step, rows="torch")
        assert table.numpy().tobytes() == replayed.numpy().tobytes()
        plain = plain_torch_loop(init, report.order.tolist(), torch_step)
        assert table.numpy().tobytes() == plain.tobytes()
        assert not np.array_equal(table.numpy(), init)
    finally:
        torch.use_deterministic_algorithms(False)


KEEPS = {
    "the tensor": lambda rows: rows,
    "a view": lambda rows: rows[1:, :2],
    "a capsule of the tensor": lambda rows: rows.__dlpack__(),
    "a numpy view of the tensor": lambda rows: rows.numpy(),
}


@pytest.mark.parametrize("how", list(KEEPS))
def test_a_torch_step_keeping_its_rows_is_caught_and_cannot_reach_the_table(init, how):
    kept = []

    def step(batch_id, ids, rows, payload):
        rows.add_(1)
        if batch_id == 5:
            kept.append(KEEPS[how](rows))

    table = ordo.Table(64, WIDTH, init=init)
    engine = ordo.Engine(table, mode="sync", rows="torch")
    s = engine.session(step)
    with pytest.raises(ordo.StepFailed) as caught:
        for i in ORDER:
            s.submit(*batch_of(i))
        s.finish()
    err = caught.value
    assert err.batch_id == 5
    assert "kept a reference to its rows" in str(err.__cause__)
    assert "DLPack deleter had not run" in str(err.__cause__)
    after = table.numpy()
    # Batches before 5 are in the table, 5 itself is not (its rows were not taken back).
    replayed = ordo.Table(64, WIDTH, init=init)
    ordo.replay(replayed, list(range(5)), batch_of, lambda b, i, r, p: np.add(r, 1, out=r))
    assert after.tobytes() == replayed.numpy().tobytes()
    # Writing through what the step kept changes nothing of the table.
    if how != "a capsule of the tensor":
        torch.from_dlpack(kept[0]).fill_(1e9) if how == "a numpy view of the tensor" else kept[0].fill_(1e9)
    assert table.numpy().tobytes() == after.tobytes()
    s.close()


@pytest.mark.parametrize("copy", ["clone", "numpy copy", "new tensor"])
def test_a_step_writing_to_a_copy_changes_nothing(init, copy):
    def step(batch_id, ids, rows, payload):
        if copy == "clone":
            rows.clone().add_(1)
        elif copy == "numpy copy":
            rows.numpy().copy()[:] = 7
        else:
            rows = rows + 1  # a new tensor; the lent one is untouched
            rows.mul_(3)

    table = ordo.Table(64, WIDTH, init=init)
    with ordo.Engine(table, mode="oac", rows="torch").session(step) as s:
        for i in ORDER:
            s.submit(*batch_of(i))
    assert table.numpy().tobytes() == init.tobytes()


def test_dlpack_rows_are_taken_by_any_from_dlpack_and_keeping_them_is_caught(init):
    orders, kept = [], []

    def step(batch_id, ids, rows, payload):
        assert rows.__dlpack_device__() == (1, 0) and rows.shape == (3, WIDTH)
        np.from_dlpack(rows)  # an export freed at once
        torch.from_dlpack(rows).add_(1)
        orders.append(rows.stream_order)  # as torch's from_dlpack asked
        if batch_id == 3:
            kept.append(rows.__dlpack__())  # ordo's own capsule, not consumed

    table = ordo.Table(64, WIDTH, init=init)
    s = ordo.Engine(table, mode="sync", rows="dlpack").session(step)
    with pytest.raises(ordo.StepFailed) as caught:
        for i in ORDER:
            s.submit(*batch_of(i))
        s.finish()
    assert caught.value.batch_id == 3
    assert "DLPack deleter had not run" in str(caught.value.__cause__)
    # torch passes no stream for CPU rows: nothing to order.
    assert orders == ["host"] * 4
    expected = init.copy()
    for i in range(3):
        expected[batch_of(i)[0].astype(np.int64)] += 1
    assert table.numpy().tobytes() == expected.tobytes()
    s.close()


def test_a_step_keeping_the_lent_object_is_caught_and_the_object_lends_nothing_after(init):
    kept = []

    def step(batch_id, ids, rows, payload):
        kept.append(rows)

    table = ordo.Table(64, WIDTH, init=init)
    with pytest.raises(ordo.StepFailed) as caught:
        ordo.replay(table, ORDER, batch_of, step, rows="dlpack")
    assert "the object lent for the call" in str(caught.value.__cause__)
    with pytest.raises(BufferError, match="only during its call"):
        kept[0].__dlpack__()
    assert table.numpy().tobytes() == init.tobytes()


def test_named_tables_give_a_torch_step_one_tensor_per_table(init):
    users = ordo.Table(10, 2, init=np.arange(20, dtype=np.float32).reshape(10, 2))
    items = ordo.Table(5, 4, init=np.zeros((5, 4), dtype=np.float32))
    seen = []

    def step(batch_id, ids, rows, payload):
        seen.append({k: tuple(v.shape) for k, v in rows.items()})
        rows["items"] += rows["users"].sum()

    engine = ordo.Engine({"users": users, "items": items}, mode="oac", rows="torch")
    with engine.session(step) as s:
        s.submit({"users": [1, 2], "items": [4]})
        s.submit({"users": [3]})
    assert seen == [{"users": (2, 2), "items": (1, 4)}, {"users": (1, 2), "items": (0, 4)}]
    assert items.numpy()[4].tolist() == [2 + 3 + 4 + 5] * 4
    assert users.numpy().tobytes() == np.arange(20, dtype=np.float32).tobytes()


# --- stream ordering (the decision, without a device) ----------------------------------------


class TorchLikeStream:
    __cuda_stream__ = 0xBEEF


@pytest.mark.parametrize(
    "stream, order",
    [(None, "stream:1"), (1, "stream:1"), (2, "stream:2"), (0xDEAD, "stream:57005"), (TorchLikeStream(), "stream:48879"), (-1, "host-wait")],
)
def test_cuda_rows_make_the_consumers_stream_wait_for_the_upload(stream, order):
    assert ordo._ordo._stream_order("cuda:0", stream) == order


def test_streams_the_protocol_refuses_are_refused():
    with pytest.raises(ValueError, match="ambiguous"):
        ordo._ordo._stream_order("cuda:0", 0)
    with pytest.raises(ValueError):
        ordo._ordo._stream_order("cuda:0", -5)
    assert ordo._ordo._stream_order("cpu") == "host"
    with pytest.raises(BufferError, match="take no stream"):
        ordo._ordo._stream_order("cpu", 5)
