"""The Python binding's device checks on a CUDA machine: `gpu/run-gpu-checks.sh run ... python`.

Not collected by pytest (it needs a GPU); run as a script, with the wheel built with
`--features cuda` on `PYTHONPATH` and torch with CUDA installed:

    ORDO_REQUIRE_GPU=1 python3 python/tests/gpu_device_checks.py

Every check must pass; without a CUDA device torch can see, the first fails (and the script
exits 1) rather than skipping. Prints `passed N of N` for the script to count.
"""

import os
import sys
import traceback

import numpy as np
import torch

import ordo

WIDTH = 8


def table():
    rng = np.random.default_rng(7)
    return ordo.Table(64, WIDTH, init=rng.standard_normal((64, WIDTH), dtype=np.float32))


def batch_of(batch_id):
    rng = np.random.default_rng(batch_id)
    return np.unique(rng.choice(64, size=3, replace=False)).astype(np.uint64), float(rng.standard_normal())


def refused(match, **kw):
    """`ordo.Engine(table(), **kw)` raises an `OrdoError` whose message contains `match`."""
    try:
        ordo.Engine(table(), **kw)
    except ordo.OrdoError as e:
        assert match in str(e), f"expected {match!r} in: {e}"
        return str(e)
    raise AssertionError(f"Engine({kw}) was not refused")


def check_torch_sees_a_gpu():
    assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA device (built for CUDA {torch.version.cuda})"
    assert torch.cuda.device_count() >= 1


def check_the_wheel_has_cuda():
    assert ordo.BUILT_WITH_CUDA, "this ordo wheel was built without --features cuda"


def check_cuda_n_beyond_the_count_is_refused():
    n = torch.cuda.device_count()
    refused(f"torch sees {n} CUDA device(s)", device=f"cuda:{n}", batch_rows=8)


def check_batches_beyond_the_free_memory_are_refused_with_the_estimate():
    free, _ = torch.cuda.mem_get_info(0)
    # One staging slot of this many rows alone exceeds the free memory.
    rows = free // (24 + 4 * WIDTH) + 1
    msg = refused("of device memory and", device="cuda:0", mode="sync", batch_rows=int(rows))
    print(f"    refused: {msg}")


def check_an_engine_that_fits_passes_every_check_and_meets_the_missing_data_path():
    # The driver and NVRTC load (ordo-gpu's gate), the estimate fits: what stops it is the CUDA
    # data path, not built yet. When it lands, this check becomes a run.
    refused("passed every check", device="cuda", batch_rows=1000)


def check_a_torch_step_on_lent_cpu_rows_equals_its_replay_with_this_torch():
    torch.use_deterministic_algorithms(True)

    def step(batch_id, ids, rows, payload):
        x, acc = rows[:, : WIDTH // 2], rows[:, WIDTH // 2 :]
        grad = (x.sum(dim=0, keepdim=True) - payload) * 0.1 + x * 0.01
        acc += grad * grad
        x -= 0.5 * grad / (acc.sqrt() + 1e-6)

    a, b = table(), table()
    with ordo.Engine(a, mode="oac", rows="torch").session(step) as s:
        for i in range(200):
            s.submit(*batch_of(i))
        report = s.finish()
    ordo.replay(b, report.order.tolist(), batch_of, step, rows="torch")
    assert a.numpy().tobytes() == b.numpy().tobytes(), "oac != replay"


def check_torchs_current_stream_is_the_one_ordo_would_order_with():
    stream = torch.cuda.current_stream(0).cuda_stream
    assert ordo._ordo._stream_order("cuda:0", stream) == f"stream:{stream}"
    side = torch.cuda.Stream(0)
    assert ordo._ordo._stream_order("cuda:0", side.cuda_stream) == f"stream:{side.cuda_stream}"


CHECKS = [v for k, v in list(globals().items()) if k.startswith("check_")]


def main():
    if os.environ.get("ORDO_REQUIRE_GPU") != "1":
        print("set ORDO_REQUIRE_GPU=1: these checks need a CUDA device and fail without one")
        return 2
    passed = 0
    for check in CHECKS:
        try:
            check()
        except Exception:
            print(f"FAILED {check.__name__}")
            traceback.print_exc()
            continue
        passed += 1
        print(f"ok {check.__name__}")
    print(f"passed {passed} of {len(CHECKS)}")
    return 0 if passed == len(CHECKS) else 1


if __name__ == "__main__":
    sys.exit(main())
