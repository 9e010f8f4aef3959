"""Executors' choices and the worker function, in this process."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from specmd_sim.errors import SpecmdError
from specmd_sim.sweep.executors import (
    LocalExecutor,
    RayExecutor,
    Task,
    describe,
    make_executor,
    run_point,
)


def test_make_executor_checks_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_executor("local", 2), LocalExecutor)
    with pytest.raises(SpecmdError, match="--executor: expected local or ray, got 'dask'"):
        make_executor("dask")
    with pytest.raises(SpecmdError, match="--address: expected only with --executor ray"):
        make_executor("local", address="auto")
    with pytest.raises(SpecmdError, match="--workers: expected at least 1, got 0"):
        make_executor("local", 0)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(SpecmdError, match=r"pip install 'specmd-sim\[ray\]'"):
        RayExecutor()


def test_run_point_never_raises() -> None:
    bad = run_point("replay", {"trace": "mixtral-synthetic", "cache": {"capacity": "0.1GiB"}})
    assert bad["status"] == "error" and bad["result"] is None
    assert bad["error"].startswith("cache.capacity: expected room for at least one expert")
    invalid = run_point("replay", {"seed": -1})
    assert invalid["status"] == "error" and "seed" in invalid["error"]


def test_describe_is_one_line() -> None:
    assert describe(SpecmdError("trace: bad\nmore")) == "trace: bad"
    assert describe(ValueError("boom")) == "ValueError: boom"
    assert describe(MemoryError()) == "MemoryError"


def test_a_stop_while_the_pool_starts_is_delivered_once_it_has_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGTERM that comes while the pool's first ``submit`` starts its manager thread (here
    sent by that start itself, before the thread runs) stops the run once ``submit`` is done,
    as ``specmd sweep`` raises it (KeyboardInterrupt): delivered inside, it left a thread the
    pool's shutdown could not join, and the sweep ended in a traceback (exit 1) instead."""
    from concurrent.futures import process

    start = process._ExecutorManagerThread.start

    def signalled(self: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        start(self)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(process._ExecutorManagerThread, "start", signalled)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            LocalExecutor(1).run([Task(0, "replay", {"seed": 0})], lambda task, outcome: None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGTERM) is previous  # nothing left held


def test_a_stop_the_system_hands_to_another_thread_is_held_too() -> None:
    """A signal the system delivers to a thread other than the main one (one that does not mask
    it, such as a pool's manager thread) runs its handler in the main thread all the same: held
    at the handlers, it comes only once the block has ended."""
    from specmd_sim.sweep.executors import _stops_held

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    reached = False
    try:
        with pytest.raises(KeyboardInterrupt), _stops_held():
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
            sender.start()
            sender.join()
            time.sleep(0.05)  # (an unheld handler runs here, in the main thread)
            reached = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert reached
