"""The PyTorch step through ordo `oac` against the same step in the plain PyTorch loop.

The step is torch_kge.py's ComplEx step on UMLS (its batches, its model, its options). Rounds
alternate a plain loop run and an oac run on the same batches, so both see the same machine
load; each round's oac/plain throughput ratio is printed and their median is the result. For
oac it also prints, from the sessions' reports:

* busy: the fraction of the pipeline's wall time the device thread spent in the step (the
  Python callable plus the crossing into it); the rest it waited for rows or stamped and
  validated;
* crossing: the crossing's share of that step time (waiting for the interpreter lock, lending
  the rows as numpy, checking them after), and the lock wait's share alone;
* in the plain loop, the share of its time inside the step itself (the rest: building batches,
  gathering and scattering rows);
* step x: the time of the same steps inside oac over their time in the plain loop, where they
  run with no other thread of the run beside them (above 1: the pipeline's threads, and
  anything else on the machine, take the cores from the step);
* cpu: the process's CPU time in oac over the plain loop's (all threads; the pipeline's
  readers, writers and waiting threads included), and (Linux, from /proc/self/task/*/schedstat)
  that CPU time split by thread, each part over the plain loop's CPU time: the caller (building
  and submitting batches), the device thread (the step and the stamping and validation
  around it), and the session's other threads (readers and writers).

With `--prebuilt`, every batch is built before the clock starts, for both loops: the caller's
thread then only submits, which shows what building batches in Python costs the pipeline.

    python python/benches/torch_step.py --rounds 5 --epochs 5
"""

import argparse
import os
import pathlib
import statistics
import sys
import threading
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import ordo  # noqa: E402
import ordo.kge  # noqa: E402
from torch_kge import Batches, ComplEx, initial_rows  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="umls")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--negatives", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch threads inside the step")
    p.add_argument("--readers", type=int, default=2, help="engine reader (and writer) threads")
    p.add_argument("--prebuilt", action="store_true", help="build every batch before timing")
    args = p.parse_args()
    args.lr, args.init_scale, args.seed = 0.1, 0.1, 0
    return args


class Timed:
    """A step that sums the wall time of its calls."""

    def __init__(self, step):
        self.step, self.seconds = step, 0.0

    def __call__(self, *a):
        t = time.perf_counter()
        self.step(*a)
        self.seconds += time.perf_counter() - t


def thread_cpu():
    """CPU seconds of each thread of this process by native thread id (Linux; empty elsewhere):
    the scheduler's run time in nanoseconds (`schedstat`), exact also for a thread that runs
    in bursts shorter than a clock tick, which `stat`'s tick-sampled times miss."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) * 1e-9
        except OSError:
            continue  # the thread ended
    return out


class OnThread(Timed):
    """A timed step that records the native id of the thread it runs on."""

    def __call__(self, *a):
        self.thread = threading.get_native_id()
        super().__call__(*a)


def plain(init, total, batch_of, model):
    """torch_kge.py's plain loop (equivalence.plain_loop), timed; the share inside the step."""
    timed = Timed(model)
    table = torch.from_numpy(init.copy())
    cpu, start = time.process_time(), time.perf_counter()
    for batch_id in range(total):
        ids, payload = batch_of(batch_id)
        idx = torch.from_numpy(ids.astype(np.int64))
        rows = table[idx].contiguous()
        timed(batch_id, ids, rows.numpy(), payload)
        table[idx] = rows
    seconds = time.perf_counter() - start
    return seconds, timed.seconds, time.process_time() - cpu


def oac(init, total, per_epoch, batch_of, model, readers):
    """equivalence.through_ordo in oac, timed; the reports' sums."""
    table = ordo.Table(init.shape[0], init.shape[1], init=init)
    engine = ordo.Engine(table, mode="oac", readers=readers, writers=readers)
    sums = dict(elapsed=0.0, step_s=0.0, crossing_s=0.0, lock_wait_s=0.0)
    step, caller = OnThread(model), threading.get_native_id()
    threads = thread_cpu()
    cpu, start = time.process_time(), time.perf_counter()
    with engine.session(step) as s:
        for epoch in range(total // per_epoch):
            for b in range(epoch * per_epoch, (epoch + 1) * per_epoch):
                ids, payload = batch_of(b)
                s.submit(ids, payload, batch_id=b)
            r = s.finish()
            for k in sums:
                sums[k] += getattr(r, k)
        # Before the session's threads end: the CPU time of each since the session started.
        after = thread_cpu()
    sums["cpu_s"] = time.process_time() - cpu
    spent = {t: c - threads.get(t, 0.0) for t, c in after.items()}
    sums["caller_cpu_s"] = spent.pop(caller, 0.0)
    sums["device_cpu_s"] = spent.pop(step.thread, 0.0)
    sums["pipeline_cpu_s"] = sum(c for t, c in spent.items() if t not in threads)
    return time.perf_counter() - start, sums


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    data = ordo.kge.load_dataset(args.dataset)
    ne, nr = data["entities"], data["relations"]
    batches = Batches(data["train"], ne, args)
    total = batches.per_epoch * args.epochs
    init = initial_rows(ne, args)
    batch_of = batches
    if args.prebuilt:
        built = [batches(b) for b in range(total)]
        batch_of = built.__getitem__
    triples = len(data["train"]) * args.epochs
    print(f"{data['name']}: ComplEx dim {args.dim}, batch {args.batch_size}, {args.negatives} negatives, "
          f"{args.epochs} epochs of {batches.per_epoch} batches; torch threads {args.threads}, "
          f"{args.readers} readers + {args.readers} writers; batches "
          f"{'prebuilt' if args.prebuilt else 'built as submitted'}; {os.cpu_count()} CPUs")
    ratios, busy, crossing, lock_wait, plain_step, slower, cpu = [], [], [], [], [], [], []
    caller_cpu, device_cpu, pipeline_cpu = [], [], []
    for round in range(1, args.rounds + 1):
        p_s, p_step, p_cpu = plain(init, total, batch_of, ComplEx(nr, args))
        p_share = p_step / p_s
        o_s, sums = oac(init, total, batches.per_epoch, batch_of, ComplEx(nr, args), args.readers)
        stepping = sums["step_s"] + sums["crossing_s"]
        ratios.append(p_s / o_s)
        busy.append(stepping / sums["elapsed"])
        crossing.append(sums["crossing_s"] / stepping)
        lock_wait.append(sums["lock_wait_s"] / stepping)
        plain_step.append(p_share)
        slower.append(sums["step_s"] / p_step)
        cpu.append(sums["cpu_s"] / p_cpu)
        caller_cpu.append(sums["caller_cpu_s"] / p_cpu)
        device_cpu.append(sums["device_cpu_s"] / p_cpu)
        pipeline_cpu.append(sums["pipeline_cpu_s"] / p_cpu)
        print(f"round {round}: plain {triples / p_s:,.0f} triples/s, oac {triples / o_s:,.0f} triples/s, "
              f"oac/plain {ratios[-1]:.2f}; oac device busy {busy[-1]:.0%}, crossing {crossing[-1]:.1%} "
              f"of the step (lock wait {lock_wait[-1]:.1%}); plain loop in the step {p_share:.0%}; "
              f"step x {slower[-1]:.2f}; cpu x {cpu[-1]:.2f} (caller {caller_cpu[-1]:.2f}, "
              f"device {device_cpu[-1]:.2f}, readers+writers {pipeline_cpu[-1]:.2f})")
    med = statistics.median
    print(f"median of {args.rounds}: oac/plain {med(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); "
          f"oac device busy {med(busy):.0%}; crossing {med(crossing):.1%} of the step "
          f"(lock wait {med(lock_wait):.1%}); plain loop in the step {med(plain_step):.0%}; "
          f"step x {med(slower):.2f}; cpu x {med(cpu):.2f} (caller {med(caller_cpu):.2f}, "
          f"device {med(device_cpu):.2f}, readers+writers {med(pipeline_cpu):.2f})")


if __name__ == "__main__":
    main()
