"""Where the points of a sweep run: a local process pool, or a Ray cluster.

An executor takes tasks (a point index, the engine and the resolved config as a mapping; the
folder to keep the point's run in, with ``--keep-runs``; the rate search, for a spec with a
``search`` section), an iterable that it draws from only as workers free up (a large grid is
streamed, not held), and calls ``on_done(task, outcome)`` in the calling thread as each one
finishes, in completion order; the runner turns outcomes into rows. A task never raises:
:func:`run_point` returns an error outcome for an exception in the run, and the executors turn
a worker that dies (a crash, ``os._exit``, the OOM killer) into an error outcome for the point
that killed it.

An exception in the calling thread (``KeyboardInterrupt`` from Ctrl-C or, in ``specmd
sweep``, SIGTERM; an error raised by ``on_done``) stops the run: the points in flight are
abandoned, the workers stopped and the pool closed before it propagates, so nothing is left
running and no resource is leaked.

Local pool (:class:`LocalExecutor`): ``spawn``-started worker processes (no fork of a parent
that holds threads), each watching its parent and exiting if the parent dies (a ``kill -9`` of
the sweep leaves no orphans running). Workers ignore SIGINT and SIGTERM: a Ctrl-C or a SIGTERM
sent to the whole process group is the sweep's to handle (it stops them), and a worker killed
by it would be taken for a point that crashed its worker. When a worker dies, Python's pool is
broken and every point then in flight fails with it; those points are run again one at a time
in a new pool, so only the point that really kills its worker is recorded as an error.

Ray (:class:`RayExecutor`): one task per point (``max_retries=0``); a task whose worker dies
gives an error outcome for that point. Without an address a local Ray instance is started for
the sweep (``workers`` CPUs) and stopped afterwards; its workers inherit this process's
environment, so a plug-in module found through ``PYTHONPATH`` here is found there. With an
address the sweep joins that cluster, whose nodes must have specmd-sim (and the modules of
the sweep's ``plugins``) installed. A worker imports exactly the sweep's ``plugins`` before a
point, never a module a config names (docs/design.md, "Trust"). A kept run folder
(``--keep-runs``) is written by the worker, at the absolute path the task names: on a cluster
that path must be on a filesystem every node shares (the runner checks each folder it is told
was written, and records the point as failed when it cannot read it).
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict

from specmd_sim.errors import SpecmdError
from specmd_sim.policies.registry import plugin_origin


@dataclass(frozen=True)
class Task:
    index: int  # the point's index in the sweep
    engine: str  # "replay" or "simulate"
    config: dict[str, Any]  # resolved config (config_to_dict)
    plugins: tuple[str, ...] = ()  # modules the worker imports first (the sweep's --plugin)
    run_dir: str | None = None  # absolute run folder to write (--keep-runs), else none
    search: dict[str, Any] | None = None  # the spec's search (rate or smallest), else one run

    @property
    def args(self) -> tuple[Any, ...]:
        """The arguments of :func:`run_point` for this task."""
        return (self.engine, self.config, self.plugins, self.run_dir, self.search)


Outcome = dict[str, Any]  # {"status": "ok"|"error", "error": str|None, "result": dict|None}
# and, for a rate search that ran, "search": its columns (search_cells)
OnDone = Callable[[Task, Outcome], None]

WORKER_DIED = "worker process died while running this point (crash, os._exit or killed)"


def run_point(
    engine: str,
    config: dict[str, Any],
    plugins: tuple[str, ...] = (),
    run_dir: str | None = None,
    search: dict[str, Any] | None = None,
) -> Outcome:
    """Run one point (in a worker) after importing ``plugins``; never raises. The result is
    the ``result.json`` mapping: of the one run, or with ``search`` of the run at the rate
    found (:func:`specmd_sim.sweep.search.run_search`). With ``run_dir`` that run's folder is
    written there (:func:`specmd_sim.runs.write_run`) before the outcome is returned."""
    try:
        from specmd_sim.config import build_config
        from specmd_sim.engine.replay import replay
        from specmd_sim.engine.sim import simulate
        from specmd_sim.runs import write_run
        from specmd_sim.sweep.search import RateSearch, run_search, search_cells
        from specmd_sim.sweep.smallest import SmallestSearch, run_smallest, smallest_cells

        cells = None
        if search is None:
            run = simulate if engine == "simulate" else replay
            result = run(build_config(config, plugins=plugins))
        elif "smallest" in search:
            smallest = run_smallest(SmallestSearch.model_validate(search), config, engine, plugins)
            result, cells = smallest.best, smallest_cells(smallest)
        else:
            found = run_search(RateSearch.model_validate(search), config, plugins)
            result, cells = found.best, search_cells(found)
        if run_dir is not None:
            write_run(Path(run_dir), result)
        outcome = {"status": "ok", "error": None, "result": json.loads(result.to_json())}
        if cells is not None:
            outcome["search"] = cells
        return outcome
    except Exception as exc:  # any failure of one point is recorded, the sweep goes on
        return error_outcome(describe(exc))


def error_outcome(message: str) -> Outcome:
    return {"status": "error", "error": message, "result": None}


def describe(exc: BaseException) -> str:
    """One line: a user error's message as is, anything else with its type (and, where the
    user's plug-in code is on its traceback, where: :func:`plugin_origin`)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, SpecmdError):
        return text
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    origin = plugin_origin(exc)
    return line if origin is None else f"plug-in {origin}: {line}"


class Executor(Protocol):
    def run(self, tasks: Iterable[Task], on_done: OnDone) -> None:
        """Run every task, calling ``on_done`` as each finishes."""


# --- local process pool ----------------------------------------------------------------------


def _watch_parent(parent: int) -> None:
    """Worker initializer: leave SIGINT and SIGTERM to the sweep process, and exit when it is
    gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, name="specmd-parent-watch", daemon=True).start()


class LocalExecutor:
    """A pool of ``workers`` processes on this machine (default: one per core)."""

    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise SpecmdError(f"--workers: expected at least 1, got {workers}")
        self.workers = workers or os.cpu_count() or 1

    def _pool(self, workers: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_watch_parent,
            initargs=(os.getpid(),),
        )

    def run(self, tasks: Iterable[Task], on_done: OnDone) -> None:
        source = iter(tasks)
        pending: deque[Task] = deque(itertools.islice(source, self.workers))
        if not pending:
            return
        workers = min(self.workers, len(pending))
        suspects: deque[Task] = deque()  # in flight when a worker died: rerun one at a time
        inflight: dict[Future[Outcome], Task] = {}
        pool = self._pool(workers)
        try:
            while True:
                queue, limit = (suspects, 1) if suspects else (pending, workers)
                broken = False
                while len(inflight) < limit:
                    if queue is pending and not pending:
                        pending.extend(itertools.islice(source, 1))
                    if not queue:
                        break
                    task = queue.popleft()
                    try:
                        with _stops_held():
                            future = pool.submit(run_point, *task.args)
                        inflight[future] = task
                    except BrokenProcessPool:  # a worker died since the last wait
                        queue.appendleft(task)
                        broken = True
                        break
                if not inflight and not broken:
                    break
                if not broken:
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    broken = any(isinstance(f.exception(), BrokenProcessPool) for f in done)
                if broken:  # every future of a broken pool fails: collect them all
                    done, _ = wait(inflight)
                alone = len(inflight) == 1
                died = _collect(done, inflight, on_done)
                if broken:
                    pool.shutdown(wait=True, cancel_futures=True)
                    pool = self._pool(workers)
                    for task in died:  # alone, it killed its worker; else it may have
                        if alone:
                            on_done(task, error_outcome(WORKER_DIED))
                        else:
                            suspects.append(task)
        except BaseException:
            _stop_workers(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _stops_held() -> Iterator[None]:
    """SIGINT and SIGTERM held while the block runs, and delivered as it ends. A pool's
    ``submit`` may start its manager thread and its workers: a stop raised inside it (``specmd
    sweep`` raises SIGTERM as KeyboardInterrupt) would leave a thread that the pool's shutdown
    cannot join, or a worker spawned but never sent its start-up data (which then prints a
    traceback of its own), so the sweep would end in a traceback instead of stopping. Held at
    the handlers, not by a signal mask: the system may hand a process's signal to any thread
    that does not mask it (the pool's manager thread), and Python then runs the handler in the
    main thread all the same."""
    if threading.current_thread() is not threading.main_thread():  # handlers are the main one's
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: object) -> None:
        caught.append(signum)

    stops = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None]
    previous = {s: signal.signal(s, hold) for s in stops}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


def _collect(
    done: Iterable[Future[Outcome]], inflight: dict[Future[Outcome], Task], on_done: OnDone
) -> list[Task]:
    """Hand the finished futures' outcomes to ``on_done`` (in point order) and take them out of
    ``inflight``; the tasks lost with a broken pool are returned instead."""
    died: list[Task] = []
    for future in sorted(done, key=lambda f: inflight[f].index):
        task = inflight.pop(future)
        error = future.exception()
        if isinstance(error, BrokenProcessPool):
            died.append(task)
        elif error is not None:
            on_done(task, error_outcome(describe(error)))
        else:
            on_done(task, future.result())
    return died


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers (they ignore SIGTERM), abandoning the points they run, so that
    closing the pool does not wait for them. ``ProcessPoolExecutor`` has no public way to do
    this before Python 3.14 (``terminate_workers``)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.kill()


# --- Ray -------------------------------------------------------------------------------------


class _RayQuiet(TypedDict):
    """The options of ``ray.init`` that keep Ray's logs off the sweep's output."""

    log_to_driver: bool
    logging_level: int


class RayExecutor:
    """One Ray task per point, on a cluster at ``address`` or a local instance."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise SpecmdError(
                "--executor ray: expected Ray to be installed, got none "
                "(pip install 'specmd-sim[ray]')"
            ) from None
        if workers is not None and workers < 1:
            raise SpecmdError(f"--workers: expected at least 1, got {workers}")
        self.address = address
        self.workers = workers

    def _init(self) -> bool:
        """Connect (or start a local instance); True if this call started Ray."""
        import ray

        if ray.is_initialized():
            return False
        # (the level as ray.init types it; the name "WARNING" it also takes is this level)
        quiet: _RayQuiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if self.address is not None:
            ray.init(address=self.address, **quiet)
        else:
            cpus = self.workers or os.cpu_count() or 1
            ray.init(num_cpus=cpus, include_dashboard=False, **quiet)
        return True

    def run(self, tasks: Iterable[Task], on_done: OnDone) -> None:
        source = iter(tasks)
        first = next(source, None)
        if first is None:
            return
        import ray

        started = self._init()
        refs: dict[Any, Task] = {}
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
            # a few tasks per CPU of the cluster queued ahead: enough to keep it busy, and a
            # grid of any size is submitted as it runs, not all at once
            ahead = 4 * max(1, int(ray.cluster_resources().get("CPU", 1)))
            pending = itertools.chain([first], source)
            while True:
                for task in itertools.islice(pending, max(0, ahead - len(refs))):
                    refs[remote.remote(*task.args)] = task
                if not refs:
                    break
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    task = refs.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the worker died, or Ray failed
                        outcome = error_outcome(f"{WORKER_DIED}: {describe(exc)}")
                    on_done(task, outcome)
        except BaseException:
            for ref in refs:  # on a cluster, nothing else would stop them
                ray.cancel(ref, force=True)
            raise
        finally:
            if started:
                ray.shutdown()


def make_executor(kind: str, workers: int | None = None, address: str | None = None) -> Executor:
    """``local`` or ``ray``."""
    if kind == "local":
        if address is not None:
            raise SpecmdError("--address: expected only with --executor ray, got --executor local")
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise SpecmdError(f"--executor: expected local or ray, got {kind!r}")
