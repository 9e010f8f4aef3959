"""Where the real executor's copies slow its compute thread (``specmd validate real --backend
cuda`` measured expert calls 77% slower beside a copy worker; ``specmd calibrate`` reports it as
``copy_interference``).

An expert call on one token (OLMoE / 4, float32, synchronised as the executor does) is timed
alone and beside background work of one kind at a time, to separate the causes:

- ``copy worker``: the executor's copy path before #40 on a second thread (copy on its own
  stream, then wait for the stream), back to back;
- ``async copies``: the same copies issued by the compute thread itself, one before each call,
  never waited for (the copy engine's traffic alone, no second host thread: the executor's
  path since #40);
- ``python thread``: a second thread running Python only (the interpreter lock alone);
- ``sync thread``: a second thread waiting on an idle stream in a loop (driver calls with the
  interpreter lock released).

Prints microseconds per call (median of ``--repeats`` rounds of 256 calls; 8 beside the Python
thread, where a call can wait the interpreter's whole switch interval, 5 ms, at each release of
its lock) and the ratio to the call alone, each case as it is measured. ``--device torch-cpu``
runs the same code on this CPU (to check the script; its figures say nothing about a GPU).

    python benchmarks/copy_interference.py [--device cuda] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specmd_sim.execute import scaled_model
from specmd_sim.execute.device import TorchDevice
from specmd_sim.execute.model import TorchOps, Weights

CALLS = 256


def _calls(dev: TorchDevice, ops: TorchOps, experts: Any, x: Any, before: Callable[[], None],
           calls: int) -> float:  # fmt: skip
    start = time.perf_counter()
    for i in range(calls):
        before()
        ops.expert(experts[i % experts.shape[0]], x)
        dev.sync()
    return (time.perf_counter() - start) / calls


def _beside(work: Callable[[threading.Event], None], measure: Callable[[], float],
            repeats: int) -> float:  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=work, args=(stop,), daemon=True)
    thread.start()
    try:
        return statistics.median(measure() for _ in range(repeats))
    finally:
        stop.set()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "torch-cpu"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dev = TorchDevice(args.device)
    torch = dev.torch
    model = scaled_model("olmoe-1b-7b", 4)
    weights = dev.place(Weights(model, 0))
    ops = TorchOps(weights, torch)
    experts = dev.resident(weights.slow[:256])
    x = dev.array(np.ones((1, model.hidden_size), np.float32))
    slow, n = weights.slow, weights.slow.shape[0]
    dst = dev.zeros(weights.expert_size)
    side = torch.cuda.Stream(dev.device) if dev.cuda else None
    idle = torch.cuda.Stream(dev.device) if dev.cuda else None
    worker = torch.cuda.Stream(dev.device) if dev.cuda else None
    k = [0]

    def nothing() -> None:
        pass

    def issue_async() -> None:  # one copy on a side stream, never waited for
        k[0] += 1
        if side is None:
            dst.copy_(slow[k[0] % n])
            return
        with torch.cuda.stream(side):
            dst.copy_(slow[k[0] % n], non_blocking=True)

    def copies(stop: threading.Event) -> None:  # a copy worker: its stream, then a wait for it
        i = 0
        while not stop.is_set():
            if worker is None:
                dst.copy_(slow[i % n])
            else:
                with torch.cuda.stream(worker):
                    dst.copy_(slow[i % n], non_blocking=True)
                worker.synchronize()
            i += 1

    def python(stop: threading.Event) -> None:
        while not stop.is_set():
            sum(range(200))

    def syncs(stop: threading.Event) -> None:
        while not stop.is_set():
            if idle is not None:
                idle.synchronize()
            else:
                time.sleep(0)

    def measure(before: Callable[[], None] = nothing, calls: int = CALLS) -> float:
        return _calls(dev, ops, experts, x, before, calls)

    where = dev.gpu_name or "this CPU (torch)"
    print(f"expert call on one token, {model.id}, on {where}; median of {args.repeats} rounds",
          flush=True)  # fmt: skip
    measure()  # warm-up
    alone = statistics.median(measure() for _ in range(args.repeats))
    cases: dict[str, Callable[[], float]] = {
        "alone": lambda: alone,
        "copy worker": lambda: _beside(copies, measure, args.repeats),
        "async copies": lambda: statistics.median(
            measure(issue_async) for _ in range(args.repeats)
        ),
        "sync thread": lambda: _beside(syncs, measure, args.repeats),
        "python thread": lambda: _beside(python, lambda: measure(calls=8), args.repeats),
    }
    for name, case in cases.items():
        t = case()
        print(f"{name:14} {t * 1e6:10.1f} us  x{t / alone:6.2f}", flush=True)


if __name__ == "__main__":
    main()
